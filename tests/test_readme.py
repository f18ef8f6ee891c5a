"""Every Python block of README.md (and docs/*.md) runs as written, so the docs cannot drift from the code.

The blocks of one file run in order in one namespace (later blocks use names defined by
earlier ones, as a reader pasting them into one session would), in a temporary working
folder so that nothing is written into the checkout.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks(path: Path) -> list[str]:
    return BLOCK.findall(path.read_text(encoding="utf-8"))


def test_readme_has_python_blocks():
    # guards the extraction itself: README's examples are Python blocks
    assert len(python_blocks(ROOT / "README.md")) >= 2


@pytest.mark.parametrize("doc", [d for d in DOCS if python_blocks(d)], ids=lambda p: p.name)
def test_python_blocks_run(doc, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__readme__"}
    for i, code in enumerate(python_blocks(doc)):
        try:
            exec(compile(code, f"{doc.name}[python block {i + 1}]", "exec"), namespace)
        except Exception as exc:  # name the block that failed
            raise AssertionError(f"{doc.name}, Python block {i + 1} failed: {exc!r}\n{code}") from exc
