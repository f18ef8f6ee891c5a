"""The reference pages of the documentation site are generated from the code, and hold all of it.

``docs/_ext/spherepde_reference.py`` (run by ``docs/conf.py`` before every Sphinx build)
writes the pages; here it writes them into a temporary folder and each page is compared with
what it documents: every configuration key (default, allowed values, description), every
registered diagnostics column (long name, units, writers), every subcommand of the command
line with its options, and every name of ``spherepde.__all__``. The user-guide pages point
to README sections by title; those titles must exist.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
from dataclasses import fields
from pathlib import Path

import pytest

import spherepde
from spherepde.cli.main import build_parser
from spherepde.model import columns as C
from spherepde.runs.config import SECTIONS, choices_of

ROOT = Path(__file__).resolve().parents[1]


def _generator():
    spec = importlib.util.spec_from_file_location("spherepde_reference", ROOT / "docs" / "_ext" / "spherepde_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    gen = _generator()
    folder = tmp_path_factory.mktemp("reference")
    paths = gen.write_reference(folder)
    assert sorted(p.name for p in paths) == sorted(f"{p}.md" for p in gen.PAGES)
    return gen, {p.stem: p.read_text(encoding="utf-8") for p in paths}


def _rows(text: str) -> dict[str, str]:
    """Table rows of a page by the code span in their first cell."""
    return {m.group(1): m.group(0) for m in re.finditer(r"^\| `([^`]+)` \|.*$", text, re.M)}


def test_every_config_key_with_default_range_and_description(pages):
    gen, text = pages
    rows = _rows(text["config"])
    keys = {f"{s}.{f.name}" for s, factory in SECTIONS.items() for f in fields(factory())}
    assert set(rows) == keys  # no key missing, none that the code does not have
    for section, factory in SECTIONS.items():
        inst = factory()
        for f in fields(inst):
            row = rows[f"{section}.{f.name}"]
            assert gen._code(gen._toml(getattr(inst, f.name))) in row
            assert gen._md(f.metadata["doc"]) in row
            for choice in choices_of(f.metadata) or ():
                assert gen._code(gen._toml(choice)) in row
            for check, sign in (("min", "≥"), ("gt", ">"), ("max", "≤")):
                if check in f.metadata:
                    assert f"{sign} {f.metadata[check]}" in row


def test_every_column_with_long_name_units_and_writers(pages):
    gen, text = pages
    rows = _rows(text["columns"])
    assert set(C.COLUMNS) <= set(rows)
    for name, col in C.COLUMNS.items():
        row = rows[name]
        assert gen._md(col.long_name) in row and gen._code(col.units) in row
        assert C.writers(name), name  # every registered column is written by some solver
        for solver in C.SOLVERS:
            written_by = re.split(r"(?<!\\)\|", row)[4]  # cells split at the unescaped bars
            assert (f"`{solver}`" in written_by) == (solver in C.writers(name))
    for mode in C.DISTANCE_MODES:
        assert ", ".join(f"`{c}`" for c in C.solver_columns("both", mode)) in text["columns"]
    for legacy in C.LEGACY_COLUMNS:
        assert f"`{legacy}`" in text["columns"]


def _walk(parser: argparse.ArgumentParser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield sub
                yield from _walk(sub)


def test_every_subcommand_and_option(pages):
    _, text = pages
    subs = list(_walk(build_parser()))
    assert len(subs) >= 10
    for sub in subs:
        assert f"# `{sub.prog}`" in text["cli"], sub.prog
        section = text["cli"].split(f"# `{sub.prog}`", 1)[1]
        for action in sub._actions:
            for option in action.option_strings:
                assert option in section, (sub.prog, option)


def test_every_public_name(pages):
    _, text = pages
    listed = re.findall(r"^   (\w+)$", text["api"], re.M)  # the autosummary entries
    assert listed == [n for n in spherepde.__all__ if not n.startswith("__")]
    for name in spherepde.__all__:
        assert name in text["api"]
        assert getattr(spherepde, name) is not None


def test_pages_rewritten_only_when_changed(tmp_path):
    gen = _generator()
    first = {p: p.stat().st_mtime_ns for p in gen.write_reference(tmp_path)}
    (tmp_path / "cli.md").write_text("stale", encoding="utf-8")
    gen.write_reference(tmp_path)
    assert (tmp_path / "cli.md").read_text(encoding="utf-8") != "stale"
    assert all(p.stat().st_mtime_ns == t for p, t in first.items() if p.name != "cli.md")


def test_every_run_folder_entry(pages):
    from spherepde.runs import runfolder

    _, text = pages
    rows = _rows(text["run-folder"])
    assert [e.path for e in runfolder.LAYOUT] == list(rows)  # every entry, in the table's order, and nothing else
    for e in runfolder.LAYOUT:
        assert all(f"`{k}`" in rows[e.path] for k in e.kinds)


def test_guide_pages_are_in_the_site_and_readme_links_resolve():
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    guide = sorted((ROOT / "docs" / "guide").glob("*.md"))
    assert len(guide) >= 12
    assert not [p.stem for p in guide if f"guide/{p.stem}\n" not in index], "a guide page missing from docs/index.md's toctree"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(((?:docs|validation|examples|benchmarks)/[^)#]*)\)", readme) + ["LICENSE"]
    assert links and not [u for u in links if not (ROOT / u).exists()]


def test_every_registered_name_is_on_the_config_page(pages):
    """The registries (weight processes, summation modes, attention kinds, ...) are listed with their entries."""
    from spherepde._registry import REGISTRIES

    gen, text = pages
    section = text["config"].split("## Registered names", 1)[1]
    assert REGISTRIES
    for reg in REGISTRIES.values():
        assert f"### {gen._md(reg.kind)}" in section
        for e in reg.entries():
            assert f"- {gen._code(e.name)}" in section and gen._md(e.about) in section
