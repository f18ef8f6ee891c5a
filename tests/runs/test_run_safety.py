"""Run safety (issue 14): nothing outside a run folder is touched, folders are locked,
resume checks what it continues, every run progresses or stops with a reason, and every
answer is one line (exit 2: bad input, nothing written; exit 1: failed while running;
130: interrupted).
"""

from __future__ import annotations

import csv
import errno
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import HardKill, cli, csv_rows, folder_state, killed_run, one_line_error

from spherepde import __version__
from spherepde.runs import runfolder, runner
from spherepde.runs.config import load_config
from spherepde.solvers.mesh import MeshSolver, SolverError
from spherepde.solvers.particles import ParticleSolver

PARTICLES = """
[run]
solver = "particles"
[model]
H = 2
[weights]
process = "ou"
seed = 3
dt = 0.005
[initial]
n = {n}
seed = 1
[solver]
T = {T}
integrator = "heun"
[output]
record_dt = {record_dt}
snapshot_dt = {snapshot_dt}
checkpoint_every = {every}
"""

#: A small mesh run (80 cells).
MESH = ["--set", "run.solver=mesh", "--set", "mesh.level=2", "--set", "solver.T=0.05", "--set", "model.H=1", "--set", "output.vtk=false"]


def particles_config(tmp_path: Path, *, n=12, T=0.1, record_dt=0.025, snapshot_dt=0.05, every=2, name="cfg.toml") -> Path:
    p = tmp_path / name
    p.write_text(PARTICLES.format(n=n, T=T, record_dt=record_dt, snapshot_dt=snapshot_dt, every=every))
    return p


def summary(folder: Path) -> dict:
    return json.loads((folder / "summary.json").read_text())


def assert_same_numbers(a: Path, b: Path) -> None:
    """Two completed run folders hold bit-identical diagnostics and snapshots."""
    assert (a / "diagnostics.csv").read_text() == (b / "diagnostics.csv").read_text()
    with np.load(a / "snapshots.npz") as za, np.load(b / "snapshots.npz") as zb:
        assert sorted(za.files) == sorted(zb.files)
        for k in za.files:
            np.testing.assert_array_equal(za[k], zb[k], err_msg=k)
    assert summary(a)["status"] == summary(b)["status"] == "completed"
    assert summary(a)["final"] == summary(b)["final"]


def enospc():
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


# ============================================================ files: --force and the marker
def test_force_never_deletes_a_folder_that_is_not_a_run(capsys, tmp_path):
    """The issue's scenario: mkdir -p B/sub; echo x > B/precious.txt; spherepde run cfg --out B --force."""
    cfg = particles_config(tmp_path)
    b = tmp_path / "B"
    (b / "sub").mkdir(parents=True)
    (b / "precious.txt").write_text("x\n")
    before = folder_state(b)
    code, out, err = cli(capsys, "run", cfg, "--out", b, "--force", "-q")
    assert code == 2 and out == ""
    line = one_line_error(err)
    assert "not a spherepde run folder" in line and "nothing was deleted" in line
    assert (b / "precious.txt").read_text() == "x\n" and (b / "sub").is_dir()
    assert folder_state(b) == before and sorted(p.name for p in b.iterdir()) == ["precious.txt", "sub"]
    # without --force the answer does not suggest --force
    code, _, err = cli(capsys, "run", cfg, "--out", b, "-q")
    assert code == 2 and "--force replaces only run folders" in one_line_error(err)
    with pytest.raises(runner.RunExistsError):
        runner.run(load_config(cfg), out=b, force=True, progress=False)
    assert folder_state(b) == before


def test_run_folder_marker_and_force_replaces_only_run_folders(capsys, tmp_path):
    cfg = particles_config(tmp_path, T=0.05)
    folder = tmp_path / "r"
    assert cli(capsys, "run", cfg, "--out", folder, "-q")[0] == 0
    marker = json.loads((folder / runner.MARKER).read_text())
    assert marker["spherepde"] == __version__ and marker["kind"] == "run" and "T" in marker["created"]
    assert marker["config_toml"] == (folder / "config.toml").read_text()
    assert not (folder / runner.LOCK_FILE).exists()  # released at the end
    (folder / "notes.txt").write_text("inside the run folder")
    code, _, err = cli(capsys, "run", cfg, "--out", folder, "--force", "-q")
    assert code == 0, err
    assert not (folder / "notes.txt").exists() and (folder / runner.MARKER).is_file()
    # an empty folder is fine too, and gets the marker
    (tmp_path / "empty").mkdir()
    assert cli(capsys, "run", cfg, "--out", tmp_path / "empty", "-q")[0] == 0
    assert (tmp_path / "empty" / runner.MARKER).is_file()


def test_monte_carlo_folder_has_the_marker_and_force_respects_it(capsys, tmp_path):
    cfg = particles_config(tmp_path, T=0.05)
    mc = tmp_path / "mc"
    code, _, err = cli(capsys, "run", cfg, "--set", "montecarlo.paths=2", "--out", mc, "-q")
    assert code == 0, err
    assert json.loads((mc / runner.MARKER).read_text())["kind"] == "monte-carlo"
    assert (mc / "path-000" / runner.MARKER).is_file() and (mc / "path-001" / runner.MARKER).is_file()
    other = tmp_path / "other"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    code, _, err = cli(capsys, "run", cfg, "--set", "montecarlo.paths=2", "--out", other, "--force", "-q")
    assert code == 2 and "not a spherepde run folder" in one_line_error(err)
    assert sorted(p.name for p in other.iterdir()) == ["keep.txt"]
    code, _, err = cli(capsys, "run", cfg, "--set", "montecarlo.paths=2", "--out", mc, "--force", "-q")
    assert code == 0, err


# ================================================================================ locks
def write_lock(folder: Path, pid: int) -> None:
    (folder / runner.LOCK_FILE).write_text(json.dumps({"pid": pid, "host": socket.gethostname()}))


@pytest.fixture
def live_pid():
    proc = subprocess.Popen(["sleep", "30"])
    yield proc.pid
    proc.kill()
    proc.wait()


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def interrupted_folder(tmp_path: Path, monkeypatch, *, T=0.1, every=2, kill_at_call=2, name="killed") -> tuple[Path, Path]:
    """A run killed (hard) before its kill_at_call-th checkpoint; returns (config file, folder)."""
    cfg_path = particles_config(tmp_path, T=T, every=every)
    folder = tmp_path / name
    killed_run(load_config(cfg_path), folder, monkeypatch, kill_at_call=kill_at_call)
    return cfg_path, folder


def test_locked_folder_is_refused_naming_the_holder(capsys, tmp_path, monkeypatch, live_pid):
    cfg_path, folder = interrupted_folder(tmp_path, monkeypatch)
    write_lock(folder, live_pid)
    before = folder_state(folder)
    code, _, err = cli(capsys, "resume", folder, "-q")
    assert code == 2
    line = one_line_error(err)
    assert f"pid {live_pid}" in line and "another spherepde process" in line
    code, _, err = cli(capsys, "run", cfg_path, "--out", folder, "--force", "-q")
    assert code == 2 and f"pid {live_pid}" in one_line_error(err)
    assert folder_state(folder) == before  # nothing deleted, nothing written
    with pytest.raises(runner.RunLockedError):
        runner.resume(folder, progress=False)


def test_stale_lock_of_a_dead_process_is_recovered(capsys, tmp_path, monkeypatch):
    _, folder = interrupted_folder(tmp_path, monkeypatch)
    write_lock(folder, dead_pid())
    code, _, err = cli(capsys, "resume", folder, "-q")
    assert code == 0, err
    assert summary(folder)["status"] == "completed"
    assert not (folder / runner.LOCK_FILE).exists()


def test_the_lock_is_held_while_running(tmp_path, monkeypatch):
    seen = []
    original = ParticleSolver.record

    def record(self):
        seen.append(json.loads((tmp_path / "r" / runner.LOCK_FILE).read_text()))
        return original(self)

    monkeypatch.setattr(ParticleSolver, "record", record)
    runner.run(load_config(particles_config(tmp_path, T=0.05)), out=tmp_path / "r", progress=False)
    assert seen and all(s == {"pid": os.getpid(), "host": socket.gethostname()} for s in seen)
    assert not (tmp_path / "r" / runner.LOCK_FILE).exists()


# ====================================================== resume: config, checkpoint, csv agree
def test_resume_refuses_a_config_edited_after_the_start(capsys, tmp_path, monkeypatch):
    _, folder = interrupted_folder(tmp_path, monkeypatch)
    text = (folder / "config.toml").read_text()
    edited = text.replace("T = 0.1", "T = 0.3", 1).replace("seed = 3", "seed = 4", 1)
    assert edited != text
    (folder / "config.toml").write_text(edited)
    before = folder_state(folder)
    code, _, err = cli(capsys, "resume", folder, "-q")
    assert code == 2
    line = one_line_error(err)
    assert "edited after the run started" in line and "solver.T: 0.1 -> 0.3" in line and "weights.seed: 3 -> 4" in line
    assert folder_state(folder) == before
    # comments and layout may change freely
    (folder / "config.toml").write_text("# my notes\n" + text)
    assert cli(capsys, "resume", folder, "-q")[0] == 0


def test_resume_drops_rows_beyond_the_checkpoint_atomically(tmp_path, monkeypatch):
    cfg_path = particles_config(tmp_path, T=0.2, every=2)
    cfg = load_config(cfg_path)
    ref = runner.run(cfg, out=tmp_path / "ref", progress=False)
    folder = tmp_path / "killed"
    killed_run(cfg, folder, monkeypatch, kill_at_call=3)  # checkpoints at records 2, 4; rows up to 6
    assert len(csv_rows(folder / "diagnostics.csv")) == 1 + 7
    with open(folder / "diagnostics.csv", "a") as fh:
        fh.write("0.175,35,0.9")  # a row cut short by the kill
    written = []
    original = runner.atomic_write_text

    def spy(path, text):
        written.append(Path(path).name)
        return original(path, text)

    monkeypatch.setattr(runner, "atomic_write_text", spy)
    res = runner.resume(folder, progress=False)
    assert res.status == "completed" and "diagnostics.csv" in written
    assert_same_numbers(ref.folder, folder)


def test_resume_refuses_diagnostics_that_disagree_with_the_checkpoint(capsys, tmp_path, monkeypatch):
    _, folder = interrupted_folder(tmp_path, monkeypatch, T=0.2, kill_at_call=3)  # checkpoint at record 4
    rows = csv_rows(folder / "diagnostics.csv")
    with open(folder / "diagnostics.csv", "w", newline="") as fh:
        csv.writer(fh).writerows(rows[:4])  # records 0..2 only
    before = folder_state(folder)
    code, _, err = cli(capsys, "resume", folder, "-q")
    assert code == 2 and "diagnostics.csv holds 3 records, but the checkpoint is at record 4" in one_line_error(err)
    assert folder_state(folder) == before


# ================================================ a run killed before its first checkpoint
def test_resume_before_the_first_checkpoint_starts_from_zero(capsys, tmp_path, monkeypatch):
    cfg_path = particles_config(tmp_path, T=0.1, every=3)
    cfg = load_config(cfg_path)
    ref = runner.run(cfg, out=tmp_path / "ref", progress=False)
    folder = tmp_path / "early"
    killed_run(cfg, folder, monkeypatch, kill_at_call=1)  # died at the first checkpoint (record 3)
    assert not (folder / "checkpoint.npz").exists() and len(csv_rows(folder / "diagnostics.csv")) == 1 + 4
    assert (folder / "snapshots" / "000000.npz").is_file()
    code, _, err = cli(capsys, "run", cfg_path, "--out", folder, "-q")
    assert code == 2 and "resume" in one_line_error(err)
    code, _, err = cli(capsys, "resume", folder, "-q")
    assert code == 0, err
    assert "starting it again from t = 0" in err
    assert_same_numbers(ref.folder, folder)
    assert sorted(p.name for p in (folder / "snapshots").iterdir()) == sorted(p.name for p in (ref.folder / "snapshots").iterdir())


def test_resume_of_a_folder_with_only_its_config(capsys, tmp_path, monkeypatch):
    """Killed right after the folder was created: config.toml (and the marker) only."""
    cfg_path = particles_config(tmp_path, T=0.05)
    cfg = load_config(cfg_path)
    ref = runner.run(cfg, out=tmp_path / "ref", progress=False)

    def die(self, path):
        raise HardKill

    with monkeypatch.context() as m:
        m.setattr(runner.WeightPath, "save", die)
        with pytest.raises(HardKill):
            runner.run(cfg, out=tmp_path / "bare", progress=False)
    folder = tmp_path / "bare"
    assert {p.name for p in folder.iterdir()} <= {"config.toml", runner.MARKER, "run.log", runner.LOCK_FILE}
    code, _, err = cli(capsys, "resume", folder, "-q")
    assert code == 0, err
    assert_same_numbers(ref.folder, folder)


# ============================================================================ disk full
def test_disk_full_without_vtk(capsys, tmp_path, monkeypatch):
    cfg_path = particles_config(tmp_path, T=0.1, every=1)
    folder = tmp_path / "full"
    calls = {"n": 0}
    original = runfolder.atomic_savez  # snapshots are written by spherepde.runs.runfolder

    def savez(path, **arrays):
        if Path(path).parent.name == "snapshots":  # checkpoints go through atomic_savez too
            calls["n"] += 1
            if calls["n"] == 2:  # the second snapshot
                raise enospc()
        return original(path, **arrays)

    monkeypatch.setattr(runfolder, "atomic_savez", savez)
    code, out, err = cli(capsys, "run", cfg_path, "--out", folder, "-q")
    assert code == 1 and out == ""
    line = one_line_error(err)
    assert "disk full while writing" in line and "000001.npz" in line and "keeps what was written" in line
    assert "spherepde resume" in line
    s = summary(folder)
    assert s["status"] == "failed" and "disk full" in s["error"]
    assert len(csv_rows(folder / "diagnostics.csv")) == 1 + 3  # records 0, 1, 2 were written
    assert (folder / "snapshots" / "000000.npz").is_file() and (folder / "checkpoint.npz").is_file()
    assert "Traceback" in (folder / "run.log").read_text()
    assert not [p for p in folder.rglob("*") if ".tmp" in p.name]
    # space freed: resume finishes it exactly
    monkeypatch.setattr(runfolder, "atomic_savez", original)
    ref = runner.run(load_config(cfg_path), out=tmp_path / "ref", progress=False)
    assert cli(capsys, "resume", folder, "-q")[0] == 0
    assert_same_numbers(ref.folder, folder)


def test_disk_full_everywhere_still_one_line(capsys, tmp_path, monkeypatch):
    """The CSV write fails, and so does the summary afterwards: still exit 1 and one line."""
    cfg_path = particles_config(tmp_path, T=0.1, every=1)
    folder = tmp_path / "full"
    state = {"rows": 0, "full": False}
    original_record = ParticleSolver.record
    original_write = runner.atomic_write_text

    def record(self):
        state["rows"] += 1
        if state["rows"] == 3:
            state["full"] = True
            raise enospc()
        return original_record(self)

    def write_text(path, text):
        if state["full"]:
            raise enospc()
        return original_write(path, text)

    monkeypatch.setattr(ParticleSolver, "record", record)
    monkeypatch.setattr(runner, "atomic_write_text", write_text)
    code, _, err = cli(capsys, "run", cfg_path, "--out", folder, "-q")
    assert code == 1
    assert "disk full" in one_line_error(err)
    assert summary(folder)["status"] == "running"  # could not be rewritten; the rows stay
    assert len(csv_rows(folder / "diagnostics.csv")) == 1 + 2


def test_disk_full_with_vtk_output_never_reaches_the_vtk_writer(capsys, tmp_path, monkeypatch):
    import spherepde.geometry.vtk as vtk

    folder = tmp_path / "vtkfull"
    written = []
    original_vtp = vtk.write_density_vtp
    original_usage = runfolder.shutil.disk_usage

    def write_vtp(mesh, rho, path, *, t=None):
        written.append(Path(path).name)
        return original_vtp(mesh, rho, path, t=t)

    def usage(path):
        u = original_usage(path)
        return type(u)(u.total, u.used, 0 if written else u.free)  # full after the first .vtp

    monkeypatch.setattr(vtk, "write_density_vtp", write_vtp)
    monkeypatch.setattr(runfolder.shutil, "disk_usage", usage)
    args = [*MESH[:-2], "--set", "output.vtk=true", "--set", "output.record_dt=0.01", "--set", "output.snapshot_dt=0.02"]
    code, _, err = cli(capsys, "run", *args, "--out", folder, "-q")
    assert code == 1
    line = one_line_error(err)
    assert "disk full while writing" in line and "density_000001.vtp" in line
    assert written == ["density_000000.vtp"]  # VTK was never asked to write on a full disk
    assert (folder / "vtk" / "density_000000.vtp").is_file() and not (folder / "vtk" / "density_000001.vtp").exists()
    assert summary(folder)["status"] == "failed"
    assert len(csv_rows(folder / "diagnostics.csv")) == 1 + 3


# ========================================================== unusable output and damaged folders
def test_output_under_a_regular_file(capsys, tmp_path):
    cfg = particles_config(tmp_path)
    (tmp_path / "somefile").write_text("x")
    code, out, err = cli(capsys, "run", cfg, "--out", tmp_path / "somefile" / "x")
    assert code == 2 and out == ""
    assert "somefile is a file" in one_line_error(err)
    code, _, err = cli(capsys, "run", cfg, "--out", tmp_path / "somefile")
    assert code == 2 and "it is a file" in one_line_error(err)
    assert (tmp_path / "somefile").read_text() == "x"


def test_read_only_output_folder(capsys, tmp_path, monkeypatch):
    cfg = particles_config(tmp_path)
    ro = tmp_path / "ro"
    ro.mkdir()
    if os.geteuid() != 0:  # a real read-only folder
        ro.chmod(0o555)
        try:
            code, _, err = cli(capsys, "run", cfg, "--out", ro / "x")
            assert code == 2 and "not writable" in one_line_error(err)
        finally:
            ro.chmod(0o755)
    monkeypatch.setattr(runfolder.os, "access", lambda path, mode: False)
    code, _, err = cli(capsys, "run", cfg, "--out", ro / "x")
    assert code == 2 and "not writable" in one_line_error(err)
    code, _, err = cli(capsys, "run", cfg, "--out", ro)
    assert code == 2 and "permission denied" in one_line_error(err)
    monkeypatch.undo()

    # the folder refuses writes only when they happen (e.g. a read-only file system)
    def mkdir(self, *a, **k):
        raise PermissionError(errno.EROFS, os.strerror(errno.EROFS), str(self))

    monkeypatch.setattr(Path, "mkdir", mkdir)
    code, _, err = cli(capsys, "run", cfg, "--out", ro / "y")
    assert code == 2 and "cannot create the run folder" in one_line_error(err)
    monkeypatch.undo()
    assert list(ro.iterdir()) == []


def _garbage_config(f: Path):
    (f / "config.toml").write_bytes(b"\x00\xff\xfe garbage [[[")


def _truncated_checkpoint(f: Path):
    (f / "checkpoint.prev.npz").unlink(missing_ok=True)
    data = (f / "checkpoint.npz").read_bytes()
    (f / "checkpoint.npz").write_bytes(data[: len(data) // 3])


def _garbage_checkpoint(f: Path):
    (f / "checkpoint.prev.npz").unlink(missing_ok=True)
    (f / "checkpoint.npz").write_bytes(b"not a zip file at all")


def _replace_by_dir(name):
    def damage(f: Path):
        (f / name).unlink()
        (f / name).mkdir()

    return damage


def _remove(name):
    return lambda f: (f / name).unlink()


def _snapshots_is_a_file(f: Path):
    import shutil

    shutil.rmtree(f / "snapshots")
    (f / "snapshots").write_text("x")


def _checkpoint_of_another_run(f: Path):
    (f / "checkpoint.prev.npz").unlink(missing_ok=True)
    np.savez(f / "checkpoint.npz", state_X=np.ones((3, 3)), meta=np.array(json.dumps({"record": 2})))


@pytest.mark.parametrize(
    "damage, words",
    [
        (_garbage_config, "config.toml cannot be read"),
        (_truncated_checkpoint, "no usable checkpoint"),
        (_garbage_checkpoint, "no usable checkpoint"),
        (_checkpoint_of_another_run, "the checkpoint does not fit the run"),
        (_remove("weights.npz"), "weights.npz is missing"),
        (_remove("diagnostics.csv"), "diagnostics.csv is missing"),
        (_replace_by_dir("config.toml"), "config.toml is not a file"),
        (_replace_by_dir("weights.npz"), "weights.npz is not a file"),
        (_replace_by_dir("checkpoint.npz"), "checkpoint.npz is not a file"),
        (_snapshots_is_a_file, "snapshots is not a folder"),
    ],
)
def test_damaged_run_folders_on_resume(capsys, tmp_path, monkeypatch, damage, words):
    _, folder = interrupted_folder(tmp_path, monkeypatch, T=0.1, kill_at_call=2)
    damage(folder)
    before = folder_state(folder)
    code, out, err = cli(capsys, "resume", folder)
    assert code == 2 and out == ""
    assert words in one_line_error(err)
    assert folder_state(folder) == before


# ==================================================== Ctrl-C / SIGTERM between two steps
def interrupt_after(monkeypatch, cls, k: int, sig=signal.SIGINT) -> None:
    """Deliver a real signal to this process after the k-th step of solver class ``cls``."""
    original = cls.step
    count = {"n": 0}

    def step(self, *a, **kw):
        out = original(self, *a, **kw)
        count["n"] += 1
        if count["n"] == k:
            signal.raise_signal(sig)
        return out

    monkeypatch.setattr(cls, "step", step)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_between_steps_with_record_dt_T_resumes_bit_for_bit(tmp_path, monkeypatch, sig):
    """record_dt = T: a single record interval; the interrupt is still seen (after 7 of 20 steps)."""
    cfg = load_config(particles_config(tmp_path, T=0.1, record_dt=0.1, snapshot_dt=0.1, every=1))
    ref = runner.run(cfg, out=tmp_path / "ref", progress=False)
    assert ref.diagnostics["step"][-1] == 20
    folder = tmp_path / "int"
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}  # what the test process had (SIG_IGN when started in the background)
    with monkeypatch.context() as m:
        interrupt_after(m, ParticleSolver, 7, sig)
        res = runner.run(cfg, out=folder, progress=False)
    assert res.status == "interrupted" and summary(folder)["status"] == "interrupted"
    state, meta = runfolder.RunFolder(folder).read_checkpoint()
    assert meta["record"] == 0 and meta["partial"] and int(state["step_count"]) == 7
    assert meta["t"] == pytest.approx(0.035)
    assert len(csv_rows(folder / "diagnostics.csv")) == 1 + 1
    assert {s: signal.getsignal(s) for s in before} == before  # the run gives the handlers back as it found them
    again = runner.resume(folder, progress=False)
    assert again.status == "completed"
    assert_same_numbers(ref.folder, folder)


@pytest.mark.parametrize("solver, cls", [("mesh", MeshSolver), ("both", MeshSolver), ("both", ParticleSolver)])
def test_interrupt_between_steps_mesh_and_coupled(tmp_path, monkeypatch, solver, cls):
    overrides = {"run.solver": solver, "mesh.level": 2, "model.H": 1, "solver.T": 0.04, "output.record_dt": 0.04,
                 "output.snapshot_dt": 0.04, "output.vtk": False, "initial.n": 10, "weights.dt": 0.01, "solver.integrator": ""}
    cfg = load_config(particles_config(tmp_path)).with_overrides(overrides)
    ref = runner.run(cfg, out=tmp_path / "ref", progress=False)
    folder = tmp_path / "int"
    with monkeypatch.context() as m:
        interrupt_after(m, cls, 3)
        assert runner.run(cfg, out=folder, progress=False).status == "interrupted"
    _, meta = runfolder.RunFolder(folder).read_checkpoint()
    assert meta["partial"] and 0 < meta["t"] <= 0.04
    assert runner.resume(folder, progress=False).status == "completed"
    assert_same_numbers(ref.folder, folder)


def test_ctrl_c_during_start_up_says_nothing_to_resume(capsys, tmp_path, monkeypatch):
    cfg = particles_config(tmp_path)

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "build_weight_path", interrupted)
    code, out, err = cli(capsys, "run", cfg, "--out", tmp_path / "r")
    assert code == 130
    line = one_line_error(err)
    assert "interrupted before the run started; nothing to resume" in line and "second" not in line
    assert not (tmp_path / "r").exists()


def test_second_ctrl_c_aborts_and_the_run_can_be_resumed(capsys, tmp_path, monkeypatch):
    cfg_path = particles_config(tmp_path, T=0.1, every=1)
    folder = tmp_path / "r"
    original = ParticleSolver.record
    count = {"n": 0}

    def record(self):
        count["n"] += 1
        if count["n"] == 3:
            raise KeyboardInterrupt  # what the guard raises on a second Ctrl-C
        return original(self)

    with monkeypatch.context() as m:
        m.setattr(ParticleSolver, "record", record)
        code, _, err = cli(capsys, "run", cfg_path, "--out", folder, "-q")
    assert code == 130
    assert f"spherepde resume {folder}" in one_line_error(err)
    assert summary(folder)["status"] == "interrupted" and not (folder / runner.LOCK_FILE).exists()
    assert cli(capsys, "resume", folder, "-q")[0] == 0
    ref = runner.run(load_config(cfg_path), out=tmp_path / "ref", progress=False)
    assert_same_numbers(ref.folder, folder)


def test_sigterm_a_real_run_with_record_dt_T(tmp_path):
    """SIGTERM a `spherepde run` whose only record interval is the whole run: it stops promptly (130) and resumes exactly."""
    cfg_path = particles_config(tmp_path, n=400, T=3.0, record_dt=3.0, snapshot_dt=3.0, every=1)
    folder = tmp_path / "term"
    proc = subprocess.Popen([sys.executable, "-m", "spherepde", "run", str(cfg_path), "--out", str(folder), "-q"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if (folder / "diagnostics.csv").is_file() and len(csv_rows(folder / "diagnostics.csv")) >= 2:
                break
            if proc.poll() is not None:
                pytest.fail(f"the run ended before SIGTERM: {proc.communicate()}")
            time.sleep(0.02)
        else:
            pytest.fail("the run did not start")
        time.sleep(0.3)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        stopped_after = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert stopped_after < 10 and "resume" in err and "Traceback" not in err
    _, meta = runfolder.RunFolder(folder).read_checkpoint()
    assert meta["partial"] and 0 < meta["t"] < 3.0
    assert summary(folder)["status"] == "interrupted"


# ============================================================== a collapsing time step
def test_mesh_solver_time_step_floor():
    from spherepde.geometry.meshfiles import icosphere
    from spherepde.model.weights import FrozenProcess, generate_weight_path

    mesh = icosphere(2)
    path = generate_weight_path(FrozenProcess(), H=1, d=3, T=0.1, dt=0.01, seed=0, init="beta", beta=5.0)
    rho = np.ones(mesh.n_cells) / (4 * np.pi)
    rho[0] *= 3
    s = MeshSolver(mesh, rho / np.sum(rho * mesh.areas), path)
    s.dt_min = 1.0
    with pytest.raises(SolverError, match="collapsed to dt = .* below the floor 1"):
        s.advance(0.1)


def test_dt_floor_stops_the_run(capsys, tmp_path, monkeypatch):
    """weights.kappa = 1e6 makes dt collapse (~4e-6); with the floor at 1e-3 T the run stops at once."""
    monkeypatch.setattr(runner, "DT_FLOOR", 1e-3)
    folder = tmp_path / "k"
    t0 = time.monotonic()
    code, out, err = cli(capsys, "run", *MESH, "--set", "weights.kappa=1e6", "--out", folder, "-q")
    assert code == 1 and out == ""
    line = one_line_error(err)
    assert "collapsed to dt = " in line and "below the floor 5e-05" in line and "weights.kappa" in line
    assert time.monotonic() - t0 < 30
    s = summary(folder)
    assert s["status"] == "failed" and "collapsed" in s["error"]
    assert (folder / "config.toml").is_file() and len(csv_rows(folder / "diagnostics.csv")) == 1 + 1


@pytest.mark.parametrize("key", ["weights.kappa=1e6", "weights.sigma=1e6"])
def test_projected_step_count_stops_a_crawling_run(capsys, tmp_path, key):
    """The issue's configs with the default floor: the projection (steps / t * T >> estimate) stops them."""
    folder = tmp_path / "crawl"
    t0 = time.monotonic()
    code, _, err = cli(capsys, "run", *MESH, "--set", key, "--out", folder, "-q")
    assert code == 1
    line = one_line_error(err)
    assert "the time step collapsed" in line and "estimated at the start" in line
    assert time.monotonic() - t0 < 60
    assert summary(folder)["status"] == "failed"


def test_step_limit(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "MAX_STEPS", 50)
    monkeypatch.setattr(runner, "MIN_STEPS_CHECKED", 5)
    code, _, err = cli(capsys, "run", *MESH, "--set", "weights.dt=0.001", "--out", tmp_path / "lim", "-q")
    assert code == 1 and "more than the limit of 50" in one_line_error(err)


# ======================================================================= non-finite values
def test_non_finite_diagnostic_fails_the_run(capsys, tmp_path):
    """The issue's example "completed" with energy = inf and G2 = NaN."""
    folder = tmp_path / "inf"
    args = [*MESH, "--set", "model.sign=1", "--set", "weights.init=beta", "--set", "weights.beta=800", "--set", "weights.process=frozen"]
    code, out, err = cli(capsys, "run", *args, "--out", folder)
    assert code == 1 and out == ""
    line = one_line_error(err)
    assert "diagnostic energy = inf at t = 0 (record 0)" in line and "G2" in line
    s = summary(folder)
    assert s["status"] == "failed" and "energy = inf" in s["error"]
    assert len(csv_rows(folder / "diagnostics.csv")) == 2  # the offending row is kept


def test_general_heads_with_undefined_energy_still_complete(tmp_path):
    cfg = load_config(particles_config(tmp_path, T=0.05)).with_overrides({"model.heads": "general"})
    res = runner.run(cfg, out=tmp_path / "g", progress=False)
    assert res.status == "completed" and np.all(np.isnan(res.diagnostics["energy"]))


# ======================================================= errors while running: exit 1, one line
def test_error_while_running_exits_1_with_the_traceback_in_run_log(capsys, tmp_path, monkeypatch):
    cfg_path = particles_config(tmp_path, T=0.1)
    original = ParticleSolver.step
    count = {"n": 0}

    def step(self):
        count["n"] += 1
        if count["n"] == 6:
            raise np.linalg.LinAlgError("SVD did not converge")
        return original(self)

    monkeypatch.setattr(ParticleSolver, "step", step)
    folder = tmp_path / "r"
    code, out, err = cli(capsys, "run", cfg_path, "--out", folder, "-q")
    assert code == 1 and out == ""
    line = one_line_error(err)
    assert line.startswith("spherepde: error: run failed at t = 0.025: SVD did not converge")
    assert "run.log" in line
    s = summary(folder)
    assert s["status"] == "failed" and "SVD did not converge" in s["error"]
    log = (folder / "run.log").read_text()
    assert "Traceback" in log and "SVD did not converge" in log
    assert len(csv_rows(folder / "diagnostics.csv")) == 1 + 2
    # with -v the traceback is on screen too
    count["n"] = 0
    code, _, err = cli(capsys, "run", cfg_path, "--out", tmp_path / "v", "-v")
    assert code == 1 and "Traceback" in err and err.strip().splitlines()[-1].startswith("spherepde: error: run failed")


def test_value_error_while_running_is_not_bad_input(capsys, tmp_path, monkeypatch):
    def record(self):
        raise ValueError("something odd in the weights")

    monkeypatch.setattr(ParticleSolver, "record", record)
    code, _, err = cli(capsys, "run", particles_config(tmp_path), "--out", tmp_path / "r", "-q")
    assert code == 1 and "run failed at t = 0: something odd in the weights" in one_line_error(err)
    with pytest.raises(runner.RunFailedError) as info:
        runner.run(load_config(particles_config(tmp_path)), out=tmp_path / "r2", progress=False)
    assert isinstance(info.value.__cause__, ValueError) and info.value.folder == tmp_path / "r2"


def test_cfl_violation_is_one_line_exit_1(capsys, tmp_path):
    folder = tmp_path / "cfl"
    args = [*MESH, "--set", "mesh.level=16", "--set", "solver.dt=0.01"]
    code, _, err = cli(capsys, "run", *args, "--out", folder, "-q")
    assert code == 1
    line = one_line_error(err)
    assert "fixed dt = 0.01 exceeds cfl * bound" in line
    assert summary(folder)["status"] == "failed" and "Traceback" in (folder / "run.log").read_text()


# ============================================= issue 28: branching, impossible checkpoints, plot
def _set_checkpoint(folder: Path, *, meta_changes=None, state_changes=None) -> None:
    """Rewrite checkpoint.npz (and drop the previous one) with some values changed."""
    with np.load(folder / "checkpoint.npz", allow_pickle=False) as z:
        arrays = {k: np.array(z[k]) for k in z.files}
    meta = json.loads(str(arrays["meta"]))
    meta.update(meta_changes or {})
    arrays["meta"] = np.array(json.dumps(meta))
    for k, v in (state_changes or {}).items():
        arrays["state_" + k] = np.asarray(v)
    (folder / "checkpoint.prev.npz").unlink(missing_ok=True)
    np.savez(folder / "checkpoint.npz", **arrays)


@pytest.mark.parametrize("state_changes,meta_changes,words", [
    ({"step_count": -7}, None, "step count is -7"),
    ({"step_count": 2.5}, None, "step count is 2.5"),
    ({"step_count": np.nan}, None, "step count is nan"),
    (None, {"record": -3}, "record number is -3"),
    (None, {"record": 1.5}, "record number is 1.5"),
    (None, {"step": -7}, "step number is -7"),
])
def test_resume_refuses_an_impossible_step_count(capsys, tmp_path, monkeypatch, state_changes, meta_changes, words):
    _, folder = interrupted_folder(tmp_path, monkeypatch, T=0.1, every=1, kill_at_call=3)
    _set_checkpoint(folder, meta_changes=meta_changes, state_changes=state_changes)
    before = folder_state(folder)
    code, out, err = cli(capsys, "resume", folder, "-q")
    line = one_line_error(err)
    assert code == 2 and out == "" and words in line and "not a whole number >= 0" in line, line
    assert folder_state(folder) == before


@pytest.fixture
def source_run(tmp_path) -> Path:
    """A finished particle run (snapshots at t = 0, 0.05, 0.1) with integrator heun."""
    folder = tmp_path / "src"
    runner.run(load_config(particles_config(tmp_path, T=0.1)), out=folder, progress=False)
    return folder


def branch_args(src: Path, out: Path, *extra) -> list:
    return ["run", "--set", "run.solver=particles", "--set", "initial.n=12", "--set", "initial.kind=run", "--set", f"initial.run={src}",
            "--set", "solver.T=0.05", "--set", "weights.dt=0.005", "--set", "output.record_dt=0.025", "--set", "output.snapshot_dt=0.05",
            "--set", "output.vtk=false", *extra, "--out", out, "-q"]


@pytest.mark.parametrize("t", [5.0, 0.1 + 1e-3])
def test_branch_from_a_time_outside_the_source_run_is_refused(capsys, tmp_path, source_run, t):
    out = tmp_path / "b"
    code, _, err = cli(capsys, *branch_args(source_run, out, "--set", f"initial.time={t}"))
    line = one_line_error(err)
    assert code == 2 and "outside the run" in line and "t = 0 to 0.1" in line, line
    assert not out.exists()
    assert cli(capsys, *branch_args(source_run, out, "--set", "initial.time=0.1"))[0] == 0  # the end itself is a state


def test_branch_from_a_snapshot_that_cannot_be_read_is_refused(capsys, tmp_path, source_run):
    files = sorted((source_run / "snapshots").glob("[0-9]*.npz"))
    assert len(files) == 3
    (source_run / "snapshots.npz").write_bytes((source_run / "snapshots.npz").read_bytes()[:100])  # truncated
    code, _, err = cli(capsys, *branch_args(source_run, tmp_path / "b1", "--set", "initial.time=0.05"))
    line = one_line_error(err)
    assert code == 2 and "snapshots.npz cannot be read" in line, line
    (source_run / "snapshots.npz").unlink()  # as in a run that was stopped: the snapshot files alone
    files[1].write_bytes(b"garbage")
    code, _, err = cli(capsys, *branch_args(source_run, tmp_path / "b2", "--set", "initial.time=0.1"))
    line = one_line_error(err)
    assert code == 2 and f"{files[1]} cannot be read" in line, line  # not: start from another snapshot
    assert not (tmp_path / "b1").exists() and not (tmp_path / "b2").exists()


def test_a_branch_inherits_the_source_discretisation_unless_set(capsys, tmp_path):
    src = tmp_path / "src"
    assert cli(capsys, "run", *MESH, "--set", "solver.order=2", "--set", "solver.integrator=euler", "--set", "solver.cfl=0.3",
               "--out", src, "-q")[0] == 0
    child_args = [*MESH, "--set", "initial.kind=run", "--set", f"initial.run={src}", "--set", "initial.time=0.05"]
    assert cli(capsys, "run", *child_args, "--out", tmp_path / "child", "-q")[0] == 0
    child = load_config(tmp_path / "child" / "config.toml").solver
    assert (child.order, child.integrator, child.cfl) == (2, "euler", 0.3)
    # explicit keys win, the others are still inherited
    assert cli(capsys, "run", *child_args, "--set", "solver.order=1", "--out", tmp_path / "own", "-q")[0] == 0
    own = load_config(tmp_path / "own" / "config.toml").solver
    assert (own.order, own.integrator, own.cfl) == (1, "euler", 0.3)
    # in a configuration file too
    cfg = tmp_path / "branch.toml"
    cfg.write_text(f'[run]\nsolver = "mesh"\n[initial]\nkind = "run"\nrun = "{src}"\ntime = 0.05\n[solver]\nintegrator = "ssprk2"\n')
    c = load_config(cfg)
    assert (c.solver.order, c.solver.integrator, c.solver.cfl) == (2, "ssprk2", 0.3)
    assert c.with_overrides({"model.H": 1}).solver.order == 2 and c.with_overrides({"solver.order": 1}).solver.order == 1


def _object_array(name: str):
    def damage(f: Path):
        with np.load(f / name, allow_pickle=False) as z:
            arrays = {k: np.array(z[k]) for k in z.files}
        arrays[sorted(arrays)[0]] = np.array([{"a": 1}, None], dtype=object)
        np.savez(f / name, **arrays)
    return damage


def _truncate(name: str):
    return lambda f: (f / name).write_bytes((f / name).read_bytes()[:200])


@pytest.mark.parametrize("damage,name", [(_object_array("snapshots.npz"), "snapshots.npz"), (_object_array("mesh.npz"), "mesh.npz"),
                                         (_truncate("snapshots.npz"), "snapshots.npz"), (_truncate("mesh.npz"), "mesh.npz")])
def test_plot_refuses_a_damaged_run_before_writing_any_figure(capsys, tmp_path, damage, name):
    folder = tmp_path / "r"
    assert cli(capsys, "run", *MESH, "--out", folder, "-q")[0] == 0
    damage(folder)
    code, out, err = cli(capsys, "plot", folder, "-q")
    line = one_line_error(err)
    assert code == 2 and name in line, line
    assert not (folder / "figures").exists()


# ============================================= issue 28, second campaign: refusals that wrote first, --force, --out
def mesh_run(capsys, folder: Path) -> Path:
    """A completed 80-cell mesh run to T = 0.05 whose end lies on its snapshot grid (it can be extended)."""
    args = [*MESH, "--set", "output.record_dt=0.01", "--set", "output.snapshot_dt=0.05", "--set", "output.checkpoint_every=2"]
    code, _, err = cli(capsys, "run", *args, "--out", folder, "-q")
    assert code == 0, err
    return folder


def _set_both_checkpoints(folder: Path, **state) -> None:
    for name in ("checkpoint.npz", "checkpoint.prev.npz"):
        with np.load(folder / name, allow_pickle=False) as z:
            arrays = {k: np.array(z[k]) for k in z.files}
        arrays.update({"state_" + k: np.asarray(v) for k, v in state.items()})
        np.savez(folder / name, **arrays)


@pytest.mark.parametrize("state, words", [
    ({"t": np.nan}, "its time t is nan"),
    ({"rho": -np.ones(80)}, "its density rho holds 80 negative value(s)"),
    ({"rho": np.full(80, np.inf)}, "its array rho holds 80 NaN/inf value(s)"),
    # a clock that disagrees with the record: was a "completed" resume from the wrong time (t = 3), or a failed one (t = 100)
    ({"t": 3.0}, "its solver time t = 3 is not its record time"),
    ({"t": 100.0}, "its solver time t = 100 is not its record time"),
    ({"t": 0.049}, "its solver time t = 0.049 is not its record time"),
])
def test_resume_refuses_an_impossible_checkpoint_state_before_writing_anything(capsys, tmp_path, state, words):
    folder = mesh_run(capsys, tmp_path / "m")
    _set_both_checkpoints(folder, **state)
    before = folder_state(folder)
    for extra in (["--set", "solver.T=0.1"], []):
        code, out, err = cli(capsys, "resume", folder, *extra, "-q")
        line = one_line_error(err)
        assert code == 2 and words in line, line  # was exit 1 after rewriting config.toml, weights.npz, summary.json
        assert folder_state(folder) == before
    assert summary(folder)["status"] == "completed"  # a refused resume never marks a completed run failed


def test_an_unusable_checkpoint_with_a_good_previous_one_is_one_warning(capsys, tmp_path):
    folder = mesh_run(capsys, tmp_path / "m")
    data = (folder / "checkpoint.npz").read_bytes()
    (folder / "checkpoint.npz").write_bytes(data[: len(data) // 2])
    (folder / "checkpoint.prev.npz").write_bytes(data[: len(data) // 2])
    code, _, err = cli(capsys, "resume", folder, "--set", "solver.T=0.1", "-q")
    line = one_line_error(err)  # was a warning line first
    assert code == 2 and "not a complete .npz archive: truncated" in line, line


def test_a_checkpoint_whose_clock_disagrees_with_its_record_gives_way_to_the_previous_one(capsys, tmp_path):
    folder = mesh_run(capsys, tmp_path / "m")
    twin = tmp_path / "twin"
    shutil.copytree(folder, twin)
    with np.load(folder / "checkpoint.npz", allow_pickle=False) as z:
        arrays = {k: np.array(z[k]) for k in z.files}
    assert float(arrays["state_t"]) == json.loads(str(arrays["meta"]))["t"] == 0.05
    arrays["state_t"] = np.float64(0.03)  # the record (5, t = 0.05) untouched
    np.savez(folder / "checkpoint.npz", **arrays)
    (twin / "checkpoint.npz").unlink()  # the same run, continued from its previous checkpoint
    said = []
    for f in (folder, twin):
        code, _, err = cli(capsys, "resume", f, "--set", "solver.T=0.1", "-q")
        assert code == 0, err
        said.append(err)
    assert "damaged (its solver time t = 0.03 is not its record time t = 0.05); continuing from the previous one" in said[0], said[0]
    assert (folder / "diagnostics.csv").read_bytes() == (twin / "diagnostics.csv").read_bytes()


def _retime(f: Path):
    with np.load(f, allow_pickle=False) as z:
        arrays = {k: np.array(z[k]) for k in z.files}
    arrays["t"] = np.float64(0.02)
    np.savez(f, **arrays)


@pytest.mark.parametrize("damage, words", [
    (lambda f: f.unlink(), "snapshots/000001.npz, is missing"),  # was a silent gap in snapshots.npz
    (lambda f: f.write_bytes(f.read_bytes()[:100]), "snapshots/000001.npz, cannot be read"),  # was a failure after all the steps
    (_retime, "snapshots/000001.npz, holds t = 0.02, not the record's t = 0.05"),
])
def test_resume_refuses_a_missing_or_damaged_snapshot_before_any_step(capsys, tmp_path, damage, words):
    folder = mesh_run(capsys, tmp_path / "m")
    damage(folder / "snapshots" / "000001.npz")
    before = folder_state(folder)
    code, _, err = cli(capsys, "resume", folder, "--set", "solver.T=0.1", "-q")
    line = one_line_error(err)
    assert code == 2 and words in line and "restore the file, or start the run again with" in line, line
    assert folder_state(folder) == before


def test_force_replaces_only_a_folder_with_a_genuine_marker(capsys, tmp_path):
    cfg = particles_config(tmp_path, T=0.05)
    for marker in (b"\x00\xffgarbage", b"[1, 2]", b'{"kind": "run"}', b'{"spherepde": "0.1", "kind": "photos"}'):
        fake = tmp_path / "fake"
        fake.mkdir(exist_ok=True)
        (fake / runner.MARKER).write_bytes(marker)
        (fake / "precious.txt").write_text("keep me")
        before = folder_state(fake)
        code, _, err = cli(capsys, "run", cfg, "--out", fake, "--force", "-q")
        line = one_line_error(err)
        assert code == 2 and "not a spherepde run folder" in line and "nothing was deleted" in line, line
        assert folder_state(fake) == before


def test_a_new_run_never_goes_where_it_would_damage_a_run(capsys, tmp_path, source_run, monkeypatch):
    monkeypatch.chdir(tmp_path)
    before = folder_state(tmp_path)
    cases = [
        (["run", particles_config(tmp_path, name="c.toml"), "--out", source_run / "sub"], "lies inside the run folder"),
        (["run", tmp_path / "c.toml", "--out", ""], "--out is empty"),
        (branch_args(source_run, source_run, "--set", "initial.time=0.05", "--force"), "a branch cannot replace the run it starts from"),
        (["run", tmp_path / "c.toml", "--set", "run.name='a\nb'", "--set", f"run.out={tmp_path / 'runs'}"], "control characters"),
    ]
    before = folder_state(tmp_path)
    for args, words in cases:
        code, _, err = cli(capsys, *args, "-q")
        line = one_line_error(err)
        assert code == 2 and words in line, line
        assert folder_state(tmp_path) == before


def test_resume_on_a_full_disk_says_to_free_space(capsys, tmp_path, monkeypatch):
    folder = mesh_run(capsys, tmp_path / "m")

    def full(self, **kw):
        raise enospc()

    monkeypatch.setattr(runfolder.FolderLock, "acquire", full)
    code, _, err = cli(capsys, "resume", folder, "--set", "solver.T=0.1", "-q")
    line = one_line_error(err)
    assert code == 2 and "free some space" in line and "choose another --out" not in line, line


def test_branch_from_a_non_finite_state_is_one_line(capsys, tmp_path, source_run):
    with np.load(source_run / "snapshots.npz", allow_pickle=False) as z:
        arrays = {k: np.array(z[k]) for k in z.files}
    arrays["X"][:] = np.nan
    np.savez(source_run / "snapshots.npz", **arrays)
    code, _, err = cli(capsys, *branch_args(source_run, tmp_path / "b", "--set", "initial.time=0.05"))
    one_line_error(err)  # no 'initial state from run ...' warning before the error
    assert code == 2 and not (tmp_path / "b").exists()
