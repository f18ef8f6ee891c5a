"""Every Python block of every Markdown file in the repository runs as written, so the docs
cannot drift from the code (README.md, meshes/README.md, validation/, docs/, ...).

The blocks of one file run in order in one namespace (later blocks use names defined by
earlier ones, as a reader pasting them into one session would), in a temporary working
folder so that nothing is written into the checkout; the folders of the checkout that the
blocks read from (``meshes/``, ``examples/``, ...) are linked into it, as a reader running
them from the repository root sees them.
"""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Folders that hold no documentation of the repository (build outputs, caches, runs).
NOT_DOCS = {"_build", "reference", "runs", "out", "build", "dist", "node_modules"}
#: Folders of the checkout a block may read through a path relative to the repository root.
READ_FROM = ("meshes", "examples", "validation", "benchmarks")
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def markdown_files() -> list[Path]:
    out = []
    for path in sorted(ROOT.rglob("*.md")):
        rel = path.relative_to(ROOT)
        if any(part.startswith(".") or part.endswith(".egg-info") or part in NOT_DOCS for part in rel.parts[:-1]):
            continue
        out.append(path)
    return out


DOCS = markdown_files()


def python_blocks(path: Path) -> list[str]:
    return BLOCK.findall(path.read_text(encoding="utf-8"))


def test_markdown_files_found():
    # guards the extraction itself: README's examples are Python blocks, and the Markdown
    # files below the top level are scanned too
    names = {p.relative_to(ROOT).as_posix() for p in DOCS}
    assert {"README.md", "meshes/README.md", "validation/README.md", "docs/model.md", "docs/index.md"} <= names
    assert len(python_blocks(ROOT / "README.md")) >= 2
    assert python_blocks(ROOT / "meshes" / "README.md")


@pytest.mark.parametrize("doc", [d for d in DOCS if python_blocks(d)], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_python_blocks_run(doc, tmp_path, monkeypatch):
    for name in READ_FROM:
        if (ROOT / name).is_dir():
            (tmp_path / name).symlink_to(ROOT / name, target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    rel = doc.relative_to(ROOT).as_posix()
    # the blocks run as one module, registered as a reader's session would be (dataclasses need it)
    module = types.ModuleType("__readme__")
    monkeypatch.setitem(sys.modules, "__readme__", module)
    namespace: dict = module.__dict__
    for i, code in enumerate(python_blocks(doc)):
        try:
            exec(compile(code, f"{rel}[python block {i + 1}]", "exec"), namespace)
        except Exception as exc:  # name the block that failed
            raise AssertionError(f"{rel}, Python block {i + 1} failed: {exc!r}\n{code}") from exc


# ------------------------------------------------------------------ issue 37: the guide's links where the guide is read
#: The folders the documentation build generates (docs/conf.py); the README names each one.
GENERATED = ("results", "reference", "gallery")
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)|\{doc\}`(?:[^`<]*<)?([^`>]+)>?`")


def test_the_guides_links_resolve_where_read_or_go_to_the_generated_pages_the_readme_names():
    readme = (ROOT / "README.md").read_text()
    claim = readme[readme.index("The guide's Markdown pages"):]
    claim = claim[: claim.index("\n\n")]
    generated = 0
    for page in sorted((ROOT / "docs" / "guide").glob("*.md")):
        for m in LINK.finditer(page.read_text()):
            target = m.group(1) or m.group(2)
            if "://" in target or target.startswith("mailto:"):
                continue
            path = (page.parent / target).resolve()
            if m.group(2) is not None and not path.suffix:
                path = path.with_suffix(".md")
            rel = path.relative_to(ROOT / "docs") if path.is_relative_to(ROOT / "docs") else None
            if rel is not None and rel.parts[0] in GENERATED:  # a page the site build writes, built yet or not
                assert f"`docs/{rel.parts[0]}/`" in claim, f"the README's claim does not name docs/{rel.parts[0]}/"
                generated += 1
                continue
            assert path.exists(), f"{page.name}: the link {target!r} resolves nowhere"
    assert generated >= 20  # the issue counted 15 results links and 7 {doc} roles into generated pages
