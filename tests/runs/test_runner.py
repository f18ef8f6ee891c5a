"""Run folders, checkpoints, resume (bit for bit), Monte-Carlo, safe file reading.

All runs use the particle solver with OU weight noise (sigma > 0) and a handful of tokens.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import csv_rows, evil_npy, folder_state, killed_run

import spherepde as sp
from spherepde import __version__
from spherepde.model.weights import WeightPath
from spherepde.runs import montecarlo, runner
from spherepde.runs.config import ConfigError, load_config
from spherepde.runs.runfolder import RunFolder, read_diagnostics

BASE = """
[run]
solver = "particles"
[model]
d = 3
H = 2
[weights]
process = "ou"
sigma = 1.4142135623730951
seed = 3
dt = 0.005
[initial]
kind = "octahedral"
n = {n}
seed = 1
[solver]
T = {T}
integrator = "{integrator}"
[output]
record_dt = 0.025
snapshot_dt = 0.05
checkpoint_every = {every}
"""


def make_config(tmp_path: Path, *, n=24, T=0.2, integrator="euler", every=2, extra="", name="cfg.toml"):
    p = tmp_path / name
    p.write_text(BASE.format(n=n, T=T, integrator=integrator, every=every) + extra)
    return p, load_config(p)


def assert_same_run(a: Path, b: Path) -> None:
    """Two completed run folders hold bit-identical numbers."""
    assert (a / "diagnostics.csv").read_text() == (b / "diagnostics.csv").read_text()
    da, db = read_diagnostics(a / "diagnostics.csv"), read_diagnostics(b / "diagnostics.csv")
    assert da.keys() == db.keys()
    for k in da:
        np.testing.assert_array_equal(da[k], db[k], err_msg=k)
    with np.load(a / "snapshots.npz", allow_pickle=False) as za, np.load(b / "snapshots.npz", allow_pickle=False) as zb:
        assert sorted(za.files) == sorted(zb.files)
        for k in za.files:
            assert za[k].dtype == zb[k].dtype
            np.testing.assert_array_equal(za[k], zb[k], err_msg=k)
    snaps_a = sorted(p.name for p in (a / "snapshots").iterdir())
    assert snaps_a == sorted(p.name for p in (b / "snapshots").iterdir())
    for name in snaps_a:
        with np.load(a / "snapshots" / name) as za, np.load(b / "snapshots" / name) as zb:
            np.testing.assert_array_equal(za["X"], zb["X"])
            assert float(za["t"]) == float(zb["t"])
    sa, sb = (json.loads((f / "summary.json").read_text()) for f in (a, b))
    assert sa["status"] == sb["status"] == "completed"
    assert sa["final"] == sb["final"]
    assert sa["records"] == sb["records"]


# --------------------------------------------------------------------------- folders
def test_run_folder_contents(tmp_path):
    _, cfg = make_config(tmp_path, integrator="heun")
    assert cfg.weights.sigma > 0
    folder = tmp_path / "run"
    res = runner.run(cfg, out=folder, progress=False)
    assert res.status == "completed" and res.folder == folder

    names = {p.name for p in folder.iterdir()}
    assert {"config.toml", "summary.json", "diagnostics.csv", "weights.npz", "snapshots", "snapshots.npz", "run.log", "checkpoint.npz"} <= names
    assert not [p for p in folder.rglob("*") if ".tmp" in p.name], "temporary files left behind"

    # the resolved configuration, loadable on its own
    assert load_config(folder / "config.toml") == cfg

    # diagnostics: one row per record, t = 0, 0.025, ..., T
    diag = read_diagnostics(folder / "diagnostics.csv")
    header = csv_rows(folder / "diagnostics.csv")[0]
    for col in ("t", "step", "energy", "G2", "martingale", "edi_paper", "edi_exact", "mean_resultant"):
        assert col in header
    np.testing.assert_allclose(diag["t"], np.arange(9) * 0.025, atol=1e-12)
    np.testing.assert_array_equal(diag["step"], np.arange(9) * 5)
    assert np.all(np.isfinite(diag["energy"]))
    assert np.any(diag["martingale"] != 0)  # the OU noise drives the run
    for k in diag:
        np.testing.assert_array_equal(res.diagnostics[k], diag[k])

    # summary: status, versions, seed, wall time, final diagnostics (= the last CSV row)
    s = json.loads((folder / "summary.json").read_text())
    assert s["status"] == "completed"
    assert s["seed"] == cfg.weights.seed == 3
    assert s["solver"] == "particles"
    assert isinstance(s["wall_time_s"], float) and s["wall_time_s"] > 0
    assert s["versions"]["spherepde"] == __version__
    assert s["versions"]["numpy"] == np.__version__
    for key in ("python", "numba", "scipy"):
        assert s["versions"][key]
    assert s["records"] == 9
    assert s["final"] == {k: float(v[-1]) for k, v in diag.items()}

    # the weight path that drove the run
    wp = WeightPath.load(folder / "weights.npz")
    ref = runner.build_weight_path(cfg)
    assert (wp.H, wp.d) == (2, 3) and wp.T >= cfg.solver.T - 1e-12 and wp.sigma == cfg.weights.sigma
    np.testing.assert_array_equal(wp.A, ref.A)
    np.testing.assert_array_equal(wp.dM, ref.dM)

    # snapshots every snapshot_dt, gathered in snapshots.npz
    assert sorted(p.name for p in (folder / "snapshots").iterdir()) == [f"{i:06d}.npz" for i in range(5)]
    with np.load(folder / "snapshots.npz", allow_pickle=False) as z:
        np.testing.assert_allclose(z["t"], [0, 0.05, 0.1, 0.15, 0.2], atol=1e-12)
        X = z["X"]
    assert X.shape == (5, 24, 3)
    np.testing.assert_allclose(np.linalg.norm(X, axis=-1), 1.0, atol=1e-12)
    np.testing.assert_allclose(X[0], runner.build_initial_tokens(cfg), rtol=0, atol=1e-15)
    with np.load(folder / "snapshots" / "000004.npz") as z:
        np.testing.assert_array_equal(z["X"], X[-1])
        assert float(z["t"]) == pytest.approx(0.2)

    log = (folder / "run.log").read_text()
    assert "completed" in log


def test_run_is_deterministic_and_seed_override(tmp_path):
    _, cfg = make_config(tmp_path)
    a = runner.run(cfg, out=tmp_path / "a", progress=False)
    b = runner.run(cfg, out=tmp_path / "b", progress=False)
    assert_same_run(a.folder, b.folder)
    c = runner.run(cfg, out=tmp_path / "c", progress=False, seed=4)
    assert json.loads((c.folder / "summary.json").read_text())["seed"] == 4
    assert load_config(c.folder / "config.toml").weights.seed == 4
    assert not np.array_equal(a.diagnostics["energy"], c.diagnostics["energy"])


def test_default_folder_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _, cfg = make_config(tmp_path, T=0.05)
    res = runner.run(cfg, progress=False)
    assert res.folder == Path("runs") / "particles-ou-H2-seed3"
    assert (tmp_path / "runs" / "particles-ou-H2-seed3" / "summary.json").is_file()


def test_last_record_is_at_T(tmp_path):
    """T = 0.21 is not a multiple of record_dt = 0.025: the last row is still at T."""
    _, cfg = make_config(tmp_path, T=0.21, extra="")
    res = runner.run(cfg, out=tmp_path / "r", progress=False)
    t = res.diagnostics["t"]
    assert t[-1] == pytest.approx(0.21) and res.diagnostics["step"][-1] == 42
    np.testing.assert_allclose(t[:-1], np.arange(9) * 0.025, atol=1e-12)


def test_existing_folder_is_refused_unless_force(tmp_path):
    _, cfg = make_config(tmp_path, T=0.05)
    folder = tmp_path / "run"
    runner.run(cfg, out=folder, progress=False)
    before = folder_state(folder)
    with pytest.raises(runner.RunExistsError, match="exists"):
        runner.run(cfg, out=folder, progress=False)
    assert folder_state(folder) == before
    (folder / "extra.txt").write_text("stale")
    res = runner.run(cfg, out=folder, progress=False, force=True)
    assert res.status == "completed"
    assert not (folder / "extra.txt").exists()
    # an empty folder is not a run
    (tmp_path / "empty").mkdir()
    assert runner.run(cfg, out=tmp_path / "empty", progress=False).status == "completed"


def test_force_with_bad_input_leaves_old_run_untouched(tmp_path):
    _, cfg = make_config(tmp_path, T=0.05)
    folder = tmp_path / "run"
    runner.run(cfg, out=folder, progress=False)
    before = folder_state(folder)
    np.save(tmp_path / "bad.npy", np.ones((5, 4)))  # tokens of the wrong dimension
    bad = cfg.with_overrides({"initial.kind": "file", "initial.file": str(tmp_path / "bad.npy")})
    with pytest.raises(ValueError, match="initial.file"):
        runner.run(bad, out=folder, progress=False, force=True)
    assert folder_state(folder) == before


# ------------------------------------------------------------------------ checkpoints
@pytest.mark.parametrize("integrator", ["euler", "heun"])
def test_resume_after_hard_kill_is_bit_for_bit(tmp_path, monkeypatch, integrator):
    _, cfg = make_config(tmp_path, integrator=integrator, every=2)
    assert cfg.weights.sigma > 0 and cfg.integrator == integrator
    ref = runner.run(cfg, out=tmp_path / "ref", progress=False)

    folder = tmp_path / "killed"
    killed_run(cfg, folder, monkeypatch, kill_at_call=3)  # checkpoints at records 2, 4; dies at 6
    assert json.loads((folder / "summary.json").read_text())["status"] == "running"
    assert not (folder / "snapshots.npz").exists()
    assert len(csv_rows(folder / "diagnostics.csv")) == 1 + 7  # rows for records 0..6
    _, meta = RunFolder(folder).read_checkpoint()
    assert meta["record"] == 4

    res = runner.resume(folder, progress=False)
    assert res.status == "completed"
    assert_same_run(ref.folder, folder)
    for k in ref.diagnostics:
        np.testing.assert_array_equal(res.diagnostics[k], ref.diagnostics[k])


@pytest.mark.parametrize("integrator", ["euler", "heun"])
def test_truncated_checkpoint_falls_back_to_previous(tmp_path, monkeypatch, caplog, integrator):
    _, cfg = make_config(tmp_path, integrator=integrator, every=2)
    ref = runner.run(cfg, out=tmp_path / "ref", progress=False)
    folder = tmp_path / "killed"
    killed_run(cfg, folder, monkeypatch, kill_at_call=4)  # checkpoint at 6, previous at 4; dies at 8
    rf = RunFolder(folder)
    cur, _ = rf.checkpoint_paths()
    assert RunFolder(folder).read_checkpoint()[1]["record"] == 6
    data = cur.read_bytes()
    cur.write_bytes(data[: len(data) // 2])  # a checkpoint cut short
    _, meta = rf.read_checkpoint()
    assert meta["record"] == 4
    assert "unreadable" in caplog.text

    res = runner.resume(folder, progress=False)
    assert res.status == "completed"
    assert_same_run(ref.folder, folder)


def test_no_usable_checkpoint(tmp_path, monkeypatch):
    _, cfg = make_config(tmp_path, every=2)
    folder = tmp_path / "killed"
    killed_run(cfg, folder, monkeypatch, kill_at_call=3)
    cur, prev = RunFolder(folder).checkpoint_paths()
    cur.write_bytes(b"")
    prev.write_bytes(prev.read_bytes()[:100])
    with pytest.raises(FileNotFoundError, match="no usable checkpoint"):
        runner.resume(folder, progress=False)
    with pytest.raises(FileNotFoundError, match="nowhere does not exist"):
        runner.resume(tmp_path / "nowhere", progress=False)


def test_checkpoint_write_is_atomic(tmp_path, monkeypatch):
    rf = RunFolder(tmp_path)
    rf.write_checkpoint({"X": np.arange(6.0).reshape(2, 3), "step_count": 1}, {"record": 1})
    rf.write_checkpoint({"X": np.ones((2, 3)), "step_count": 2}, {"record": 2})
    state, meta = rf.read_checkpoint()
    assert meta["record"] == 2 and int(state["step_count"]) == 2
    with np.load(tmp_path / "checkpoint.prev.npz") as z:
        assert json.loads(str(z["meta"]))["record"] == 1
    good = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    def dying_savez(fh, **arrays):  # the process dies half-way through writing
        fh.write(b"PK\x03\x04 half a zip file")
        raise OSError("disk full")

    monkeypatch.setattr(runner.np, "savez", dying_savez)
    with pytest.raises(OSError):
        rf.write_checkpoint({"X": np.zeros((2, 3)), "step_count": 3}, {"record": 3})
    monkeypatch.undo()
    # the existing checkpoints are untouched and still read
    for name, data in good.items():
        assert (tmp_path / name).read_bytes() == data
    state, meta = rf.read_checkpoint()
    assert meta["record"] == 2
    np.testing.assert_array_equal(state["X"], np.ones((2, 3)))


def test_resume_of_completed_run_changes_nothing(tmp_path):
    _, cfg = make_config(tmp_path, T=0.05)
    res = runner.run(cfg, out=tmp_path / "r", progress=False)
    text = (res.folder / "diagnostics.csv").read_text()
    again = runner.resume(res.folder, progress=False)
    assert again.status == "completed"
    assert (res.folder / "diagnostics.csv").read_text() == text


def test_sigkill_mid_run_then_resume(tmp_path):
    """A real hard kill: SIGKILL a `spherepde run` subprocess after a checkpoint, then resume."""
    cfg_path, cfg = make_config(tmp_path, n=300, T=1.0, every=4)
    folder = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "spherepde", "run", str(cfg_path), "--out", str(folder), "-q"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            ck = folder / "checkpoint.npz"
            if ck.exists() and (folder / "diagnostics.csv").exists() and len(csv_rows(folder / "diagnostics.csv")) > 10:
                break
            if proc.poll() is not None:
                pytest.fail(f"the run ended before it could be killed: {proc.stderr.read().decode()}")
            time.sleep(0.02)
        else:
            pytest.fail("no checkpoint appeared")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert json.loads((folder / "summary.json").read_text())["status"] == "running"
    n_rows = len(csv_rows(folder / "diagnostics.csv"))
    assert n_rows < 1 + 41, "the run was not interrupted"

    res = runner.resume(folder, progress=False)
    assert res.status == "completed"
    ref = runner.run(cfg, out=tmp_path / "ref", progress=False)
    assert_same_run(ref.folder, folder)


# ------------------------------------------------------------------------ Monte-Carlo
@pytest.fixture(scope="module")
def mc_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mc")
    _, cfg = make_config(tmp, T=0.1, extra="[montecarlo]\npaths = 3\n")
    res = montecarlo.monte_carlo(cfg, out=tmp / "mc", progress=False)
    return cfg, res


def test_monte_carlo_sits_above_the_single_run(mc_run):
    # runner never imports montecarlo: its resume refuses a Monte-Carlo folder, montecarlo.resume (spherepde.resume) continues it
    cfg, res = mc_run
    with pytest.raises(runner.RunFolderError, match="Monte-Carlo folder; continue it with spherepde.resume"):
        runner.resume(res.folder, progress=False)
    with pytest.raises(runner.RunFolderError, match="extend its path-NNN runs one by one"):
        montecarlo.resume(res.folder, overrides={"solver.T": 0.2}, progress=False)
    assert montecarlo.resume(res.folder, progress=False).status == "completed"
    assert sp.resume is montecarlo.resume and sp.monte_carlo is montecarlo.monte_carlo and sp.run is runner.run


def test_monte_carlo_folders_and_aggregates(mc_run):
    cfg, res = mc_run
    folder = res.folder
    assert res.status == "completed"
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == ["path-000", "path-001", "path-002"]
    per_path = []
    for i in range(3):
        sub = folder / f"path-{i:03d}"
        s = json.loads((sub / "summary.json").read_text())
        assert s["status"] == "completed" and s["seed"] == cfg.weights.seed + i
        assert (sub / "snapshots.npz").is_file()
        per_path.append(read_diagnostics(sub / "diagnostics.csv"))
    # the paths really differ (different noise seeds), with the same initial tokens
    assert not np.array_equal(per_path[0]["energy"], per_path[1]["energy"])
    mean = read_diagnostics(folder / "diagnostics_mean.csv")
    std = read_diagnostics(folder / "diagnostics_std.csv")
    assert list(mean) == list(per_path[0]) == list(std)
    for col in mean:
        stack = np.stack([p[col] for p in per_path])
        np.testing.assert_allclose(mean[col], stack.mean(axis=0), rtol=1e-13, atol=1e-15, err_msg=col)
        np.testing.assert_allclose(std[col], stack.std(axis=0, ddof=1), rtol=1e-12, atol=1e-15, err_msg=col)
    assert np.all(std["energy"][1:] > 0)
    np.testing.assert_allclose(std["t"], 0.0, atol=1e-15)
    s = json.loads((folder / "summary.json").read_text())
    assert s["status"] == "completed" and s["paths"] == 3 and s["seeds"] == [3, 4, 5]
    assert s["final_mean"]["energy"] == pytest.approx(mean["energy"][-1], rel=1e-15)
    assert load_config(folder / "config.toml") == cfg


def test_monte_carlo_refuses_existing_folder(mc_run):
    cfg, res = mc_run
    before = folder_state(res.folder)
    with pytest.raises(runner.RunExistsError):
        montecarlo.monte_carlo(cfg, out=res.folder, progress=False)
    assert folder_state(res.folder) == before


def test_monte_carlo_interrupted_then_resumed(mc_run, tmp_path, monkeypatch):
    cfg, ref = mc_run
    n_guards = {"n": 0}
    original_enter = runner._SigintGuard.__enter__

    def enter(self):  # Ctrl-C during the second path
        out = original_enter(self)
        n_guards["n"] += 1
        if n_guards["n"] == 2:
            self.flag = True
        return out

    monkeypatch.setattr(runner._SigintGuard, "__enter__", enter)
    folder = tmp_path / "mc"
    res = montecarlo.monte_carlo(cfg, out=folder, progress=False)
    monkeypatch.undo()
    assert res.status == "interrupted"
    assert json.loads((folder / "summary.json").read_text())["status"] == "interrupted"
    assert json.loads((folder / "path-001" / "summary.json").read_text())["status"] == "interrupted"
    assert (folder / "path-001" / "checkpoint.npz").is_file()
    assert not (folder / "path-002").exists()
    assert not (folder / "diagnostics_mean.csv").exists()

    done = montecarlo.resume(folder, progress=False)
    assert done.status == "completed"
    for name in ("diagnostics_mean.csv", "diagnostics_std.csv"):
        assert (folder / name).read_text() == (ref.folder / name).read_text()
    for i in range(3):
        assert (folder / f"path-{i:03d}" / "diagnostics.csv").read_text() == (ref.folder / f"path-{i:03d}" / "diagnostics.csv").read_text()


# ---------------------------------------------------------------------- safe reading
@pytest.mark.parametrize(
    "overrides, key",
    [
        ({"initial.kind": "file", "initial.file": "{evil}"}, "initial.file"),
        ({"weights.init": "file", "weights.init_file": "{evil}"}, "weights.init_file"),
    ],
)
def test_object_arrays_are_not_unpickled(tmp_path, overrides, key):
    evil, marker = tmp_path / "evil.npy", tmp_path / "PWNED"
    evil_npy(evil, marker)
    _, cfg = make_config(tmp_path, T=0.05)
    cfg = cfg.with_overrides({k: v.format(evil=evil) for k, v in overrides.items()})
    folder = tmp_path / "run"
    with pytest.raises(ValueError) as info:
        runner.run(cfg, out=folder, progress=False)
    msg = str(info.value)
    assert key in msg and "evil.npy" in msg
    assert "\n" not in msg
    assert not marker.exists(), "a pickle in the file was executed"
    assert not folder.exists()


def test_monte_carlo_bad_input_writes_nothing(tmp_path):
    evil, marker = tmp_path / "evil.npy", tmp_path / "PWNED"
    evil_npy(evil, marker)
    _, cfg = make_config(tmp_path, T=0.05, extra="[montecarlo]\npaths = 2\n")
    cfg = cfg.with_overrides({"initial.kind": "file", "initial.file": str(evil)})
    with pytest.raises(ValueError, match="initial.file"):
        montecarlo.monte_carlo(cfg, out=tmp_path / "mc", progress=False)
    assert not (tmp_path / "mc").exists() and not marker.exists()


def test_token_file_run(tmp_path):
    X = np.random.default_rng(0).standard_normal((7, 3))
    np.save(tmp_path / "X.npy", X)
    _, cfg = make_config(tmp_path, T=0.05)
    cfg = cfg.with_overrides({"initial.kind": "file", "initial.file": str(tmp_path / "X.npy")})
    res = runner.run(cfg, out=tmp_path / "r", progress=False)
    with np.load(res.folder / "snapshots.npz") as z:
        np.testing.assert_allclose(z["X"][0], X / np.linalg.norm(X, axis=1, keepdims=True))


def test_bad_config_error_type():
    # a ConfigError is a ValueError, so callers may catch either
    assert issubclass(ConfigError, ValueError)


# ----------------------------------------------------------------------- mesh solver
def test_small_mesh_run(tmp_path):
    p = tmp_path / "mesh.toml"
    p.write_text(
        '[run]\nsolver = "mesh"\n[model]\nH = 1\n[weights]\nprocess = "ou"\nseed = 0\n[initial]\nkind = "octahedral"\n'
        "[mesh]\nlevel = 4\n[solver]\nT = 0.02\n[output]\nrecord_dt = 0.01\nsnapshot_dt = 0.02\nvtk = false\n"
    )
    cfg = load_config(p)
    res = runner.run(cfg, out=tmp_path / "m", progress=False)
    assert res.status == "completed"
    assert (res.folder / "mesh.npz").is_file()
    with np.load(res.folder / "snapshots.npz") as z:
        rho = z["rho"]
    assert rho.shape == (2, 320)
    assert np.all(np.isfinite(rho))
    s = json.loads((res.folder / "summary.json").read_text())
    assert s["status"] == "completed" and s["solver"] == "mesh"
