"""The Examples sections of the package's docstrings run as written (doctest)."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "spherepde"
WITH_EXAMPLES = sorted(
    ".".join(("spherepde", *p.relative_to(PKG).with_suffix("").parts)).removesuffix(".__init__")
    for p in PKG.rglob("*.py") if ">>> " in p.read_text(encoding="utf-8")
)


def test_examples_found():
    assert {"spherepde.geometry.meshfiles", "spherepde.solvers.protocol"} <= set(WITH_EXAMPLES)


@pytest.mark.parametrize("name", WITH_EXAMPLES)
def test_docstring_examples_run(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing an example writes lands in the checkout
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0, result
