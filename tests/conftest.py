"""Helpers and fixtures shared by the test files (one copy each).

Fixtures (requested by name): ``wrong_sign_flux`` and ``order2_runs_first_order``, the two
deliberately wrong mesh schemes the validation studies must catch. Plain helpers are
imported with ``from conftest import cli, one_line_error, ...`` (``tests/`` is on
``sys.path`` under pytest's default import mode).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest


# ------------------------------------------------------------------ the command line
def cli(capsys, *args) -> tuple[int, str, str]:
    """Run ``spherepde ARGS`` in process: (exit code, stdout, stderr)."""
    from spherepde.cli.main import main

    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(err: str) -> str:
    """The single line of a refused command's stderr (fails unless it is one ``spherepde: error:`` line, no traceback)."""
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"expected a one-line error, got {err!r}"
    assert lines[0].startswith("spherepde: error: "), err
    assert "Traceback" not in err, err
    return lines[0]


# ------------------------------------------------------------------ folders and files
def folder_state(folder: Path) -> dict:
    """Every file under a folder: relative path -> (bytes, mtime_ns)."""
    return {str(f.relative_to(folder)): (f.read_bytes(), f.stat().st_mtime_ns) for f in sorted(folder.rglob("*")) if f.is_file()}


def tree(folder: Path) -> set:
    """The relative paths of everything under a folder."""
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def csv_rows(path: Path) -> list[list[str]]:
    """The rows of a CSV file as strings, header included."""
    with open(path, newline="") as fh:
        return list(csv.reader(fh))


def evil_npy(path: Path, marker: Path) -> None:
    """An object-array ``.npy`` whose unpickling would create ``marker`` (a reader must refuse it unread)."""

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    np.save(path, np.array([Evil(), 1.0], dtype=object), allow_pickle=True)


# ------------------------------------------------------------------ runs killed mid-way
class HardKill(BaseException):
    """Stands in for SIGKILL: not an Exception, so no handler of the runner sees it."""


def killed_run(cfg, folder: Path, monkeypatch, *, kill_at_call: int) -> None:
    """Run until the kill_at_call-th checkpoint write and die just before it (rows past the last checkpoint exist)."""
    from spherepde.runs import runner
    from spherepde.runs.runfolder import RunFolder

    calls = {"n": 0}
    original = RunFolder.write_checkpoint

    def write_checkpoint(self, state, meta):
        calls["n"] += 1
        if calls["n"] == kill_at_call:
            raise HardKill
        return original(self, state, meta)

    with monkeypatch.context() as m:
        m.setattr(RunFolder, "write_checkpoint", write_checkpoint)
        with pytest.raises(HardKill):
            runner.run(cfg, out=folder, progress=False)


# ------------------------------------------------------------------ validation studies
def assert_check_consistent(name, c):
    """A solver check records measured, target and tolerance, and ``passed`` is the band test on them."""
    assert set(c) >= {"passed", "measured", "expected", "lo", "hi", "tolerance"}, (name, c)
    assert isinstance(c["passed"], bool) and c["tolerance"], (name, c)
    m = c["measured"]
    assert c["lo"] is not None or c["hi"] is not None, (name, c)
    inside = m is not None and np.isfinite(m) and (c["lo"] is None or m >= c["lo"]) and (c["hi"] is None or m <= c["hi"])
    assert c["passed"] == inside, (name, c)


def assert_study_protocol(mod, res, *, checks: bool = True, min_summary: int = 100) -> None:
    """What every validation study's ``run`` returns (spherepde.studies.report): its module names itself
    and its three sizes, the result names the study, has a summary, checks that are their own band tests
    (and the summary's closing line counts them), claims whose verdict is the interval rule (said in the
    summary), rectangular tables, and it is JSON-serialisable."""
    from spherepde.studies.common import claim_sentence, to_jsonable

    assert isinstance(mod.NAME, str) and mod.NAME and isinstance(mod.TITLE, str) and mod.TITLE
    assert set(mod.SIZES) == {"smoke", "quick", "full"}
    assert res["name"] == mod.NAME
    assert isinstance(res["summary"], str) and len(res["summary"]) > min_summary
    assert isinstance(res["checks"], dict) and bool(res["checks"]) == checks
    for k, c in res["checks"].items():
        assert_check_consistent(k, c)
    if res["checks"]:
        n_ok = sum(c["passed"] for c in res["checks"].values())
        assert f"Solver checks: {n_ok}/{len(res['checks'])} pass" in res["summary"]
    for k, c in res.get("claims", {}).items():
        lo, hi = c["interval"]
        assert c["reproduced"] == (lo is not None and hi is not None and lo <= c["paper_value"] <= hi), (k, c)
        assert claim_sentence(c) in res["summary"], k  # the text says what the claim says
    for t in res.get("tables", []):
        assert t["rows"] and all(len(r) == len(t["headers"]) for r in t["rows"]), t["title"]
    json.dumps(to_jsonable(res))


def unit_vectors(rng: np.random.Generator, n: int, d: int = 3) -> np.ndarray:
    """n points drawn uniformly on S^{d-1} (normalised Gaussians), shape (n, d)."""
    x = rng.standard_normal((n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def sym_matrices(rng: np.random.Generator, H: int, d: int = 3, scale: float = 1.0) -> np.ndarray:
    """H random symmetric matrices scale * (G + G^T), G standard Gaussian, shape (H, d, d)."""
    G = rng.standard_normal((H, d, d))
    return scale * (G + np.swapaxes(G, 1, 2))


@pytest.fixture
def rng() -> np.random.Generator:
    """A seeded generator (seed 0): tests are deterministic."""
    return np.random.default_rng(0)


def assert_plots(mod, res, tmp_path):
    """A study's ``plot`` writes at least one non-trivial figure."""
    paths = mod.plot(res, tmp_path)
    assert paths
    for p in paths:
        assert p.exists() and p.stat().st_size > 1000


@pytest.fixture
def wrong_sign_flux(monkeypatch):
    """The mesh solver with the finite-volume flux of the wrong sign (the edge velocity negated)."""
    import spherepde.solvers.mesh as mesh_solver
    from spherepde.solvers.fv import fv_rhs

    monkeypatch.setattr(mesh_solver, "fv_rhs", lambda geom, faces, u, **kw: fv_rhs(geom, faces, -u, **kw))


@pytest.fixture
def order2_runs_first_order(monkeypatch):
    """The mesh solver's ``order=2`` silently running the first-order reconstruction."""
    import spherepde.solvers.mesh as mesh_solver
    from spherepde.solvers.fv import face_values

    monkeypatch.setattr(mesh_solver, "face_values", lambda geom, rho, order: face_values(geom, rho, 1))
