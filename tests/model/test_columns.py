"""The registry of diagnostics columns (spherepde.model.columns, issue 25): every column a
solver writes is registered, in the order of diagnostics.csv, and every registered column
is written by some solver and documented in the user guide's column table, docs/guide/results-as-data.md (and vice versa)."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import numpy as np
import pytest

from spherepde.model.columns import (
    COLUMNS,
    DISTANCE_MODES,
    LEGACY_COLUMNS,
    PARTICLE_PREFIX,
    SOLVERS,
    TOKEN_COLUMNS,
    attributes,
    compared,
    solver_columns,
    undefined_without_energy,
    writers,
)
from spherepde.runs.config import default_config
from spherepde.runs.runner import run

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "results-as-data.md"  # the user guide's column table

TINY = {"mesh.level": 2, "model.H": 1, "initial.n": 20, "solver.T": 0.02, "output.record_dt": 0.01, "output.snapshot_dt": 0.02, "output.vtk": False}


def _header(folder: Path) -> tuple[str, ...]:
    with open(folder / "diagnostics.csv", newline="") as fh:
        return tuple(next(csv.reader(fh)))


@pytest.mark.parametrize(
    "solver, extra, distances",
    [
        ("particles", {}, "cheap"),
        ("particles", {"model.noise": 0.2}, "cheap"),
        ("both", {"model.noise": 0.1}, "cheap"),
        ("mesh", {}, "cheap"),
        ("mesh", {"solver.integrator": "implicit", "solver.atoms": True}, "cheap"),
        ("mesh", {"model.noise": 0.1}, "cheap"),
        ("mesh", {"model.noise": 0.1, "model.heads": "general", "solver.velocity": "midpoint", "solver.order": 2}, "cheap"),
        ("mesh", {"model.noise": 0.1, "model.attention": "unnormalised", "solver.integrator": "implicit"}, "cheap"),
        ("both", {}, "cheap"),
        ("both", {"output.distances": "all"}, "all"),
        ("both", {"output.distances": "none"}, "none"),
    ],
)
def test_every_column_a_solver_writes_is_registered_in_order(tmp_path, solver, extra, distances):
    res = run(default_config().with_overrides({**TINY, "run.solver": solver, **extra}), out=tmp_path / "r", progress=False)
    assert res.status == "completed"
    assert _header(res.folder) == solver_columns(solver, distances, noise="model.noise" in extra)


def test_every_registered_column_is_written_by_a_solver():
    written = set().union(*(solver_columns(s, d, noise=nz) for s in SOLVERS for d in DISTANCE_MODES for nz in (False, True)))
    assert written == set(COLUMNS)
    assert all(writers(c) for c in COLUMNS) and not writers("w_sphere")
    assert writers("w1_sliced") == ("both",) and writers("p_G2") == ("both",) and writers("speed_rms") == ("particles",)
    assert writers("n_clusters") == SOLVERS and writers("rho_min") == ("mesh", "both")
    assert writers("entropy") == SOLVERS and writers("p_entropy") == ("both",)  # with noise (model.noise > 0)
    assert solver_columns("particles", noise=True) == solver_columns("particles") + ("entropy",)
    for s in SOLVERS:
        cols = solver_columns(s, "all")
        assert len(set(cols)) == len(cols) and cols[:2] == ("t", "step")
    with pytest.raises(ValueError, match="output.distances"):
        solver_columns("both", "some")


def test_registry_metadata():
    assert attributes("w1_sliced") == (COLUMNS["w1_sliced"].long_name, "rad")
    assert attributes("p_G2")[0] == "tokens: " + COLUMNS["G2"].long_name
    assert attributes("p_speed_rms")[0] == "tokens: " + COLUMNS["speed_rms"].long_name  # a token column this release does not write
    assert attributes("something_else") == ("something_else", "1")
    assert {"G2_scheme", "int_G2_scheme", "p_energy", "energy"} <= undefined_without_energy()
    assert not {"mean_resultant", "p_mean_resultant", "mass", "n_clusters"} & undefined_without_energy()
    assert not any(compared(c) for c in ("t", "step", "dt_last", "l1_hist", "w1_sliced", "w1_exact", *LEGACY_COLUMNS))
    assert compared("G2") and compared("n_clusters") and compared("an_unknown_column")


@pytest.mark.parametrize("solver", ["mesh", "both"])
def test_mesh_run_with_general_heads_completes_with_nan_energy_columns(tmp_path, solver):
    """G2_scheme and int_G2_scheme are energy columns (NaN for general heads): the run loop
    must not take them for a blow-up (it refused every general-heads mesh run before)."""
    cfg = default_config().with_overrides({**TINY, "run.solver": solver, "model.heads": "general", "solver.velocity": "midpoint"})
    res = run(cfg, out=tmp_path / "g", progress=False)
    assert res.status == "completed"
    d = res.diagnostics
    for c in solver_columns(solver):
        if c in DISTANCE_MODES["all"]:
            continue
        finite = np.all(np.isfinite(d[c]))
        assert finite != COLUMNS[c].energy, c


def _readme_column_section() -> str:
    text = GUIDE.read_text()
    start = text.index("## Columns of diagnostics.csv")
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]


#: Backticked words of the guide's column section that are not columns.
_NOT_COLUMNS = set(SOLVERS) | {"compare"}


def test_guide_documents_exactly_the_registered_columns():
    section = _readme_column_section()
    named = {w for w in re.findall(r"`([^`\s]+)`", section) if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", w)} - _NOT_COLUMNS
    assert set(COLUMNS) - named == set(), "registered but not in the guide's column table"
    assert named - set(COLUMNS) - set(LEGACY_COLUMNS) == set(), "in the guide's column table but not registered"
    assert set(LEGACY_COLUMNS) <= named  # the older runs' columns are explained there
    # the token row of both runs lists the token columns in the order of diagnostics.csv
    row = next(line for line in section.splitlines() if line.startswith("| `p_"))
    assert tuple(re.findall(r"`(p_\w+)`", row)) == tuple(PARTICLE_PREFIX + c for c in TOKEN_COLUMNS)
    # the units of the registry agree with the table where it gives radians or sr^-1
    for c, col in COLUMNS.items():
        if col.units == "rad":
            assert re.search(rf"\| `{c}` \|.*\| rad \|", section), c


def test_config_choices_agree_with_the_registry():
    """run.solver and output.distances accept exactly the solvers and distance settings the registry knows."""
    from dataclasses import fields

    from spherepde.runs.config import OutputSection, RunSection, choices_of

    choices = {f.name: choices_of(f.metadata) for cls in (RunSection, OutputSection) for f in fields(cls)}
    assert set(choices["solver"]) == set(SOLVERS) and set(choices["distances"]) == set(DISTANCE_MODES)


def test_headline_columns_defined_once():
    """The headline subset is spelled only in model/columns.py; compare, sweeps and the run summary use it."""
    import spherepde
    from spherepde.model.columns import HEADLINE_COLUMNS
    from spherepde.runs.sweep import SUMMARY_COLUMNS

    assert SUMMARY_COLUMNS == HEADLINE_COLUMNS
    literal = repr(HEADLINE_COLUMNS).replace("'", '"')
    pkg = Path(spherepde.__file__).parent
    where = [str(p.relative_to(pkg)) for p in pkg.rglob("*.py") if literal in p.read_text()]
    assert where == ["model/columns.py"], where
