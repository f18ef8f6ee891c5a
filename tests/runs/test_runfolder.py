"""The run-folder object (spherepde.runs.runfolder.RunFolder): creating, locking, writing and
reading a run folder back; its documented LAYOUT against the folders finished runs leave; and
the one reader of diagnostics tables (read_diagnostics), used by the runner, Monte-Carlo,
compare, the figures, the NetCDF export and sweeps."""

from __future__ import annotations

import json
import logging
import os

import numpy as np
import pytest

from spherepde.runs.config import default_config
from spherepde.runs.montecarlo import monte_carlo
from spherepde.runs.runfolder import (
    CONDITIONS,
    LAYOUT,
    LOCK_FILE,
    MARKER,
    RUN_KINDS,
    DiagnosticsError,
    RunExistsError,
    RunFolder,
    RunFolderError,
    load_snapshots,
    read_diagnostics,
    run_kind,
)
from spherepde.runs.runner import run

GOOD = "t,energy,G2\n0.0,0.1,0.30000000000000004\n0.1,0.2,1e-300\n"


def test_values_are_the_floats_written_bit_for_bit(tmp_path):
    p = tmp_path / "diagnostics.csv"
    p.write_text(GOOD + "0.2,nan,inf\n")
    d = read_diagnostics(p)
    assert list(d) == ["t", "energy", "G2"]
    assert d["G2"][0] == 0.1 + 0.2 and d["G2"][1] == 1e-300 and d["G2"].dtype == np.float64
    assert np.isnan(d["energy"][2]) and d["G2"][2] == np.inf
    head = tmp_path / "head.csv"
    head.write_text("t,energy\n")
    assert {k: v.shape for k, v in read_diagnostics(head).items()} == {"t": (0,), "energy": (0,)}


@pytest.mark.parametrize("malformed", ["raise", "last", "skip"])
def test_an_unfinished_last_line_of_a_run_still_writing(tmp_path, malformed, caplog):
    p = tmp_path / "diagnostics.csv"
    p.write_text(GOOD + "0.2,0.3")  # no line end: the run is writing it
    if malformed == "raise":
        with pytest.raises(DiagnosticsError, match=r"diagnostics.csv: row 4: 2 fields for 3 columns"):
            read_diagnostics(p, malformed=malformed)
        return
    with caplog.at_level(logging.WARNING):
        d = read_diagnostics(p, malformed=malformed)
    assert d["t"].tolist() == [0.0, 0.1]
    assert ("skipping a malformed row" in caplog.text) == (malformed == "skip")


def test_a_complete_garbage_row_names_the_file_and_row_unless_skipped(tmp_path, caplog):
    p = tmp_path / "diagnostics.csv"
    p.write_text("t,energy,G2\n0.0,0.1,0.2\nabc,0.2,0.3\n0.2,0.3,0.4\n")
    for mode in ("raise", "last"):
        with pytest.raises(DiagnosticsError) as err:
            read_diagnostics(p, malformed=mode)
        assert str(err.value) == f"{p}: row 3: column 't' holds 'abc', not a number; the run folder is damaged"
    with caplog.at_level(logging.WARNING):
        assert read_diagnostics(p, malformed="skip")["t"].tolist() == [0.0, 0.2]
    assert "skipping a malformed row" in caplog.text


@pytest.mark.parametrize("content, words", [
    (b"", "is empty: the run has recorded nothing yet"),
    (b"energy,G2\n0.1,0.2\n", "row 1 is not a diagnostics header (no column 't')"),
    (b"t,energy\n\xff\xfe,1\n", "cannot be read as a diagnostics table"),
])
def test_what_is_no_diagnostics_table_is_one_line_naming_the_file(tmp_path, content, words):
    p = tmp_path / "diagnostics.csv"
    p.write_bytes(content)
    with pytest.raises(DiagnosticsError) as err:
        read_diagnostics(p)
    assert words in str(err.value) and str(p) in str(err.value) and "\n" not in str(err.value)
    assert isinstance(err.value, ValueError)
    with pytest.raises(ValueError, match="malformed='sometimes'"):
        read_diagnostics(p, malformed="sometimes")


# ------------------------------------------------------------------------- the folder object
class _Tokens:
    """The least a solver offers RunFolder.write_snapshot: ``snapshot()``."""

    def __init__(self, X):
        self.X = X

    def snapshot(self):
        return {"X": self.X.copy()}


def test_create_write_reopen_read_back(tmp_path):
    cfg = default_config()
    folder = tmp_path / "runs" / "one"
    rf = RunFolder(folder)
    assert rf.check_new() is False and not folder.exists()  # nothing written
    rf.create(cfg, kind="run", replace=False)
    assert sorted(p.name for p in folder.iterdir()) == [MARKER, LOCK_FILE]
    assert rf.marker_kind() == "run" and rf.marker_problem() is None
    assert json.loads((folder / LOCK_FILE).read_text())["pid"] == os.getpid()  # another process is refused meanwhile
    (folder / "config.toml").write_text("[run]\nsolver = \"particles\"\n")
    rng = np.random.default_rng(0)
    X = [rng.normal(size=(5, 3)) for _ in range(3)]
    with open(rf.csv, "w") as fh:
        fh.write("t,energy\n")
        for i in range(3):
            rf.write_snapshot(i, 0.5 * i, _Tokens(X[i]), None)
            fh.write(f"{0.5 * i!r},{0.1 * i!r}\n")
    rf.write_checkpoint({"X": X[-1], "t": 1.0}, {"record": 2, "t": 1.0})
    rf.write_checkpoint({"X": X[-1], "t": 1.0}, {"record": 2, "t": 1.0})
    rf.finalise_snapshots(cfg.with_overrides({"output.vtk": False}))
    rf.release()
    assert not (folder / LOCK_FILE).exists()

    again = RunFolder(folder)
    again.check_layout()
    with pytest.raises(RunExistsError, match="exists already"):
        again.check_new()
    assert again.check_new(force=True) is True  # a run folder: --force may replace it
    assert again.kind() == run_kind(folder) == "particles" and again.config() == {"run": {"solver": "particles"}}
    assert {k: v.tolist() for k, v in again.read_diagnostics().items()} == {"t": [0.0, 0.5, 1.0], "energy": [0.0, 0.1, 0.2]}
    snaps = again.load_snapshots()
    assert snaps.complete and snaps.t.tolist() == [0.0, 0.5, 1.0] and snaps.rho is None
    np.testing.assert_array_equal(snaps.X, np.stack(X))
    assert [p.name for p in again.snapshot_files()] == ["000000.npz", "000001.npz", "000002.npz"]
    assert again.has_checkpoint() and all(p.is_file() for p in again.checkpoint_paths())
    state, meta = again.read_checkpoint()
    assert meta == {"record": 2, "t": 1.0}
    np.testing.assert_array_equal(state["X"], X[-1])
    assert again.read_summary() == {} and again.monte_carlo_paths() == []

    again.acquire()
    (folder / "snapshots" / ".000003.npz.123.tmp").write_text("cut short")
    again.remove_stale_temporaries()
    assert not (folder / "snapshots" / ".000003.npz.123.tmp").exists()
    again.clear_generated()
    again.release()
    assert sorted(p.name for p in folder.iterdir()) == [MARKER, "checkpoint.npz", "checkpoint.prev.npz", "config.toml"]


def test_a_damaged_part_is_refused_naming_it(tmp_path):
    (tmp_path / "snapshots").write_text("not a folder")
    rf = RunFolder(tmp_path)
    with pytest.raises(RunFolderError, match=r"cannot resume .*: snapshots is not a folder; the run folder is damaged"):
        rf.check_layout()
    with pytest.raises(RunFolderError, match=r"weights.npz is missing; the run folder is damaged"):
        rf.load_part("weights.npz", np.load)


def _entries(folder):
    """The names in a folder, with a Monte-Carlo folder's path-000, path-001, ... as path-NNN."""
    return {"path-NNN/" if p.name.startswith("path-") else p.name + "/" * p.is_dir() for p in folder.iterdir()}


def _expected(kind: str) -> set[str]:
    """What LAYOUT says a completed run of ``kind`` with output.vtk and two checkpoints holds."""
    finished = {"completed", "output.vtk", "two checkpoints"}
    return {e.path for e in LAYOUT if kind in e.kinds and set(e.when) <= finished}


def test_layout_is_what_finished_runs_hold(tmp_path):
    assert {k for e in LAYOUT for k in e.kinds} == set(RUN_KINDS)
    assert {c for e in LAYOUT for c in e.when} <= set(CONDITIONS)
    assert len({e.path for e in LAYOUT}) == len(LAYOUT)
    small = {"model.H": 1, "initial.n": 12, "mesh.level": 2, "solver.T": 0.1, "output.record_dt": 0.05,
             "output.snapshot_dt": 0.05, "output.checkpoint_every": 1, "output.vtk": True}
    for kind in ("particles", "mesh", "both"):
        res = run(default_config().with_overrides({**small, "run.solver": kind}), out=tmp_path / kind, progress=False)
        assert res.status == "completed"
        assert _entries(res.folder) == _expected(kind), kind
        vtk = {p.name.split("_")[0] for p in (res.folder / "vtk").iterdir()}
        assert vtk == {"particles": {"tokens"}, "mesh": {"density"}, "both": {"density", "tokens"}}[kind]
    mc = monte_carlo(default_config().with_overrides({**small, "run.solver": "particles"}), paths=2, out=tmp_path / "mc", progress=False)
    assert mc.status == "completed"
    assert _entries(mc.folder) == _expected("monte-carlo")
    assert RunFolder(mc.folder).marker_kind() == "monte-carlo" and run_kind(mc.folder) == "monte-carlo"
    for p in RunFolder(mc.folder).monte_carlo_paths():
        assert _entries(p) == _expected("particles")
        assert load_snapshots(p).complete


def test_run_folder_file_names_and_kinds_spelled_once():
    """Each run-folder file name and the Monte-Carlo kind are spelled once in the package
    (runfolder.py); every other module names them through its constants."""
    from pathlib import Path

    import spherepde
    from spherepde.runs import runfolder as rf

    names = [rf.DIAGNOSTICS_FILE, rf.SUMMARY_FILE, rf.WEIGHTS_FILE, rf.MESH_FILE, rf.SNAPSHOTS_FILE, rf.LOG_FILE,
             rf.CHECKPOINT_FILE, rf.MONTE_CARLO, *rf.MC_TABLES.values()]
    pkg = Path(spherepde.__file__).parent
    texts = {p: p.read_text() for p in pkg.rglob("*.py")}
    for name in names:
        where = [f"{p.relative_to(pkg)}" for p, text in texts.items() for _ in range(text.count(f'"{name}"'))]
        assert len(where) <= 1, (name, where)
    assert {e.name for e in rf.LAYOUT} >= {rf.DIAGNOSTICS_FILE, rf.SUMMARY_FILE, rf.CONFIG_FILE, *rf.MC_TABLES.values()}
    assert rf.RUN_KINDS[-1] == rf.MONTE_CARLO and rf.MONTE_CARLO in rf.MARKER_KINDS
