"""The seams (issue 33, docs/guide/development.md "Adding things"): every kind of named thing has one
registry, owned by one module, and nothing else in the package spells a table of its names.

The tests that run a toy entry of each kind end to end live with the code they extend:
tests/model/test_extend_process.py, tests/solvers/test_extend_scheme.py and
tests/geometry/test_extend_geometry.py.
"""

from __future__ import annotations

import ast
import re
from dataclasses import fields
from pathlib import Path

import pytest

import spherepde.cli.main  # noqa: F401  (imports every module that owns a registry)
from spherepde._registry import REGISTRIES
from spherepde.runs.config import SECTIONS, choices_of

PKG = Path(__file__).resolve().parents[1] / "spherepde"

#: kind -> (owner module, config key or None)
SEAMS = {
    "weight process": ("model/weights.py", "weights.process"),
    "time stepper": ("solvers/integrators.py", "solver.integrator"),
    "geometry": ("geometry/protocol.py", "mesh.kind"),
    "summation mode": ("attention/sums.py", "solver.summation"),
    "attention kind": ("model/velocity.py", "model.attention"),
}


def _field(key: str):
    section, name = key.split(".")
    return next(f for f in fields(SECTIONS[section]) if f.name == name)


def test_every_seam_has_one_registry_owned_by_one_module():
    assert set(SEAMS) <= set(REGISTRIES), sorted(REGISTRIES)
    for kind, (owner, key) in SEAMS.items():
        reg = REGISTRIES[kind]
        assert len(reg) >= 1 and reg.key == (key or "")
        made = [p for p in PKG.rglob("*.py") if re.search(rf"""Registry\(\s*["']{kind}["']""", p.read_text(encoding="utf-8"))]
        assert [p.relative_to(PKG).as_posix() for p in made] == [owner], (kind, made)


@pytest.mark.parametrize("kind", [k for k, (_, key) in SEAMS.items() if key])
def test_config_choices_are_asked_from_the_registry(kind):
    """The config field names no value itself: its choices are a callable reading the registry (live)."""
    reg = REGISTRIES[kind]
    f = _field(reg.key)
    assert callable(f.metadata["choices"]), reg.key
    configurable = reg.names(aliases=True, where=lambda e: e.info.get("config", True))  # e.g. 'drift' is library-only
    assert set(choices_of(f.metadata)) - {""} == set(configurable)


def _name_tables(path: Path, names: set[str]) -> list[int]:
    """Lines of a file that spell a table of registered names: a dict keyed by two or more of them (a
    name -> class or name -> anything table), or a ``choices=`` list of two or more of them and
    nothing else (a copy of the registry). A study's own vocabulary or a list of schemes to run is not one."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Dict):
            keys = [k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
            if len(set(keys) & names) >= 2:
                out.append(node.lineno)
        elif isinstance(node, ast.keyword) and node.arg == "choices" and isinstance(node.value, (ast.Tuple, ast.List, ast.Set)):
            consts = {e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)} - {""}
            if len(consts) >= 2 and consts <= names:
                out.append(node.value.lineno)
    return out


MULTI = [k for k in SEAMS if len(REGISTRIES[k]) >= 2]  # a table needs two names


@pytest.mark.parametrize("kind", MULTI)
def test_no_other_table_of_registered_names(kind):
    """No dict keyed by a registry's names and no ``choices=`` copy of them outside the owner module."""
    owner, _ = SEAMS[kind]
    names = set(REGISTRIES[kind].names(aliases=True))
    tables = [f"{p.relative_to(PKG)}:{line}" for p in sorted(PKG.rglob("*.py")) if p.relative_to(PKG).as_posix() != owner
              for line in _name_tables(p, names)]
    assert not tables, tables


def test_the_table_finder_finds_tables(tmp_path):
    """The check above can fail: a planted name -> class table and a planted choices copy are found."""
    planted = tmp_path / "planted.py"
    planted.write_text('T = {"ou": 1, "frozen": 2}\nf(choices=("ou", "frozen"))\nok = {"ou": 1}\ng(choices=("ou", "other"))\n')
    assert _name_tables(planted, {"ou", "frozen", "oscillating"}) == [1, 2]


def test_run_folder_file_names_are_spelled_once():
    """'diagnostics.csv' and its siblings are spelled in the run-folder module only (its LAYOUT names them)."""
    for name in ("diagnostics.csv", "summary.json", "snapshots.npz", "weights.npz", "run.log"):
        hits = [f"{p.relative_to(PKG)}:{i}" for p in sorted(PKG.rglob("*.py")) for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
                if f'"{name}"' in line or f"'{name}'" in line]
        assert len(hits) == 1 and hits[0].startswith("runs/runfolder.py"), (name, hits)


def test_functions_are_short_and_the_mesh_solver_stays_split():
    """No function of the package is longer than 100 lines, and solvers/mesh.py (state, record, advance;
    steppers and point masses live in their own modules) stays below 400 lines."""
    long = [f"{p.relative_to(PKG)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for p in sorted(PKG.rglob("*.py")) for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 100]
    assert not long, long
    assert len((PKG / "solvers" / "mesh.py").read_text(encoding="utf-8").splitlines()) < 400
