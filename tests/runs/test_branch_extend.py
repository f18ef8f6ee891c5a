"""Runs you can continue and branch (issue 14): branch from another run's snapshot,
extend a finished run to a later time, default run names that carry the overrides."""

from __future__ import annotations

import numpy as np
import pytest

from spherepde.geometry.meshfiles import icosphere
from spherepde.runs import runner
from spherepde.runs.branch import branch_point, initial_density_from_run, initial_tokens_from_run
from spherepde.runs.config import default_config
from spherepde.runs.runfolder import read_diagnostics

TINY_MESH = {"mesh.level": 4, "model.H": 1, "solver.T": 0.2, "output.record_dt": 0.05, "output.snapshot_dt": 0.05,
             "weights.dt": 0.01}
TINY_TOKENS = {**TINY_MESH, "run.solver": "particles", "initial.n": 40}


@pytest.fixture(scope="module")
def mesh_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("src") / "mesh"
    runner.run(default_config().with_overrides(TINY_MESH), out=out, progress=False)
    return out


@pytest.fixture(scope="module")
def token_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("src") / "tokens"
    runner.run(default_config().with_overrides(TINY_TOKENS), out=out, progress=False)
    return out


def test_branch_point_is_the_nearest_snapshot(mesh_run):
    bp = branch_point(mesh_run, 0.12)
    assert bp.time == pytest.approx(0.1) and bp.requested_time == 0.12 and bp.kind == "mesh"
    assert "nearest" in bp.describe()
    assert "nearest" not in branch_point(mesh_run, 0.15).describe()


def test_density_from_a_mesh_run_is_its_snapshot(mesh_run):
    rho, bp = initial_density_from_run(mesh_run, 0.1, icosphere(4))
    with np.load(mesh_run / "snapshots.npz") as z:
        k = int(np.argmin(np.abs(z["t"] - 0.1)))
        np.testing.assert_array_equal(rho, z["rho"][k])
    assert bp.index == k


def test_density_on_another_mesh_is_refused(mesh_run):
    with pytest.raises(ValueError, match="mesh.file"):
        initial_density_from_run(mesh_run, 0.1, icosphere(5))


def test_tokens_from_a_token_run_and_from_a_mesh_run(token_run, mesh_run):
    X, bp = initial_tokens_from_run(token_run, 0.2, 40)
    with np.load(token_run / "snapshots.npz") as z:
        np.testing.assert_array_equal(X, z["X"][-1])
    with pytest.raises(ValueError, match="initial.n = 40"):
        initial_tokens_from_run(token_run, 0.2, 30)
    Y, _ = initial_tokens_from_run(mesh_run, 0.2, 500, seed=3)
    assert Y.shape == (500, 3) and np.allclose(np.linalg.norm(Y, axis=1), 1.0)
    Y2, _ = initial_tokens_from_run(mesh_run, 0.2, 500, seed=3)
    np.testing.assert_array_equal(Y, Y2)  # deterministic for a seed


def test_density_from_a_token_run_has_mass_one(token_run):
    mesh = icosphere(4)
    rho, _ = initial_density_from_run(token_run, 0.0, mesh)
    assert rho.min() >= 0 and float(rho @ mesh.areas) == pytest.approx(1.0)


def test_missing_source_is_reported(tmp_path):
    with pytest.raises(FileNotFoundError, match="initial.run"):
        initial_density_from_run(tmp_path / "nope", 0.0, icosphere(4))


# ---------------------------------------------------------------- run names
def test_run_names_carry_the_overrides():
    from spherepde.cli.common import example_path
    from spherepde.runs.config import load_config
    from spherepde.runs.names import run_name

    ov = {"model.H": 100, "montecarlo.paths": 10}
    assert run_name(load_config(example_path("paper-ou-particles"), ov), ov) == "paper-ou-particles-H100-paths10"
    ov = {"weights.phase": "in-phase"}
    assert run_name(load_config(example_path("paper-oscillating-particles"), ov), ov) == "paper-oscillating-particles-phase-in-phase"
    assert run_name(load_config(example_path("paper-ou-particles")), {}) == "paper-ou-particles"
    # the default name already spells out solver, process, H and seed
    ov = {"solver.T": 2.0, "weights.seed": 7, "model.H": 2}
    assert run_name(default_config().with_overrides(ov), ov) == "mesh-ou-H2-seed7-T2"
    # an explicit run.name wins
    ov = {"run.name": "mine", "model.H": 3}
    assert run_name(default_config().with_overrides(ov), ov) == "mine"


# ---------------------------------------------------------------- extend
def _csv(folder):
    return (folder / "diagnostics.csv").read_text()


@pytest.mark.parametrize("solver", ["mesh", "particles"])
def test_extend_is_bit_identical_to_a_run_made_to_the_later_time(tmp_path, solver):
    base = {**(TINY_MESH if solver == "mesh" else TINY_TOKENS), "solver.T": 0.1}
    short, full = tmp_path / "short", tmp_path / "full"
    runner.run(default_config().with_overrides(base), out=short, progress=False)
    runner.run(default_config().with_overrides({**base, "solver.T": 0.2}), out=full, progress=False)
    assert _csv(short) != _csv(full)
    res = runner.resume(short, overrides={"solver.T": 0.2}, progress=False)
    assert res.status == "completed"
    assert _csv(short) == _csv(full)  # every row, every digit
    with np.load(short / "snapshots.npz") as a, np.load(full / "snapshots.npz") as b:
        assert sorted(a.files) == sorted(b.files)
        for k in a.files:
            np.testing.assert_array_equal(a[k], b[k])
    with np.load(short / "weights.npz") as a, np.load(full / "weights.npz") as b:
        for k in ("A", "V", "dM"):
            np.testing.assert_array_equal(a[k], b[k])
    from spherepde.runs.config import load_config

    assert load_config(short / "config.toml").solver.T == 0.2
    # extending again works (the edited-config check knows the new end time)
    runner.resume(short, overrides={"solver.T": 0.25}, progress=False)
    assert read_diagnostics(short / "diagnostics.csv")["t"][-1] == pytest.approx(0.25)


def test_extend_refuses_other_keys_and_earlier_times(tmp_path):
    folder = tmp_path / "r"
    runner.run(default_config().with_overrides({**TINY_MESH, "solver.T": 0.1}), out=folder, progress=False)
    before = _csv(folder)
    with pytest.raises(runner.RunFolderError, match="initial.kind"):
        runner.resume(folder, overrides={"model.H": 3}, progress=False)
    with pytest.raises(runner.RunFolderError, match="later time"):
        runner.resume(folder, overrides={"solver.T": 0.05}, progress=False)
    assert _csv(folder) == before


def test_cli_resume_set_extends_and_run_set_names_the_folder(tmp_path, monkeypatch, capsys):
    from spherepde.cli.main import main

    monkeypatch.chdir(tmp_path)
    sets = ["--set", "mesh.level=4", "--set", "model.H=1", "--set", "solver.T=0.1", "--set", "output.record_dt=0.05",
            "--set", "output.snapshot_dt=0.05", "--set", "run.name=base"]
    assert main(["run", *sets, "-q"]) == 0
    assert main(["resume", "runs/base", "--set", "solver.T=0.2", "-q"]) == 0
    assert read_diagnostics(tmp_path / "runs/base/diagnostics.csv")["t"][-1] == pytest.approx(0.2)
    assert main(["resume", "runs/base", "--set", "model.H=2"]) == 2
    assert "solver.T" in capsys.readouterr().err
    # the README's order: an example run twice with other --set values lands in two folders
    ex = ["run", "--example", "paper-ou-particles", "--set", "solver.T=0.05", "--set", "output.record_dt=0.05",
          "--set", "output.snapshot_dt=0.05", "-q"]
    assert main([*ex, "--set", "model.H=1"]) == 0
    assert main([*ex, "--set", "model.H=2"]) == 0
    assert (tmp_path / "runs/paper-ou-particles-T0.05-record_dt0.05-snapshot_dt0.05-H1").is_dir()
    assert (tmp_path / "runs/paper-ou-particles-T0.05-record_dt0.05-snapshot_dt0.05-H2").is_dir()


# ---------------------------------------------------------------- branch as a config
def test_branch_run_starts_from_the_snapshot_and_says_which(mesh_run, tmp_path, capsys):
    import json

    from spherepde.cli.main import main

    out = tmp_path / "branch"
    rc = main(["run", "--set", "mesh.level=4", "--set", "model.H=3", "--set", "solver.T=0.1", "--set", "output.record_dt=0.05",
               "--set", "output.snapshot_dt=0.05", "--set", "initial.kind=run", "--set", f"initial.run={mesh_run}",
               "--set", "initial.time=0.12", "--set", "weights.process=frozen", "--out", str(out), "-q"])
    assert rc == 0
    err = capsys.readouterr().err
    assert "t = 0.1" in err and "nearest" in err  # which snapshot was used
    with np.load(out / "snapshots.npz") as z, np.load(mesh_run / "snapshots.npz") as src:
        np.testing.assert_array_equal(z["rho"][0], src["rho"][np.argmin(np.abs(src["t"] - 0.1))])
    info = json.loads((out / "summary.json").read_text())["initial_from_run"]
    assert info["time"] == pytest.approx(0.1) and info["requested_time"] == 0.12


def test_branch_config_errors_are_one_line(tmp_path, capsys):
    from spherepde.cli.main import main

    assert main(["run", "--set", "initial.kind=run", "--out", str(tmp_path / "x")]) == 2
    assert "initial.run" in capsys.readouterr().err
    assert main(["run", "--set", "initial.kind=run", "--set", f"initial.run={tmp_path}", "--out", str(tmp_path / "y")]) == 2
    assert "not a spherepde run folder" in capsys.readouterr().err
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_extend_from_a_time_that_is_not_a_binary_multiple(tmp_path):
    """T = 0.3 with record_dt = 0.1 (3 * 0.1 = 0.30000000000000004 in floating point)."""
    base = {**TINY_TOKENS, "output.record_dt": 0.1, "output.snapshot_dt": 0.1}
    short, full = tmp_path / "short", tmp_path / "full"
    runner.run(default_config().with_overrides({**base, "solver.T": 0.3}), out=short, progress=False)
    runner.run(default_config().with_overrides({**base, "solver.T": 0.5}), out=full, progress=False)
    runner.resume(short, overrides={"solver.T": 0.5}, progress=False)
    assert _csv(short) == _csv(full)
    assert read_diagnostics(full / "diagnostics.csv")["t"][3] == 0.3  # a round time, not 0.30000000000000004


def test_resume_removes_temporaries_left_by_a_hard_kill(tmp_path):
    folder = tmp_path / "r"
    runner.run(default_config().with_overrides({**TINY_TOKENS, "solver.T": 0.1}), out=folder, progress=False)
    stale = [folder / "snapshots" / ".000002.npz.99999.tmp", folder / ".diagnostics.csv.99999.tmp", folder / "checkpoint.tmp.npz"]
    for f in stale:
        f.write_bytes(b"PK half a file")
    runner.resume(folder, overrides={"solver.T": 0.15}, progress=False)
    assert not [f for f in stale if f.exists()]
    assert not [p for p in folder.rglob("*") if ".tmp" in p.name]


def test_resume_of_a_complete_run_says_so_and_changes_nothing(tmp_path, capsys):
    from spherepde.cli.main import main

    folder = tmp_path / "done"
    runner.run(default_config().with_overrides({**TINY_TOKENS, "solver.T": 0.1}), out=folder, progress=False)
    before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir() if p.is_file()}
    assert main(["resume", str(folder), "-q"]) == 0
    assert "nothing to resume" in capsys.readouterr().err
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir() if p.is_file()} == before


def test_nan_and_inf_in_any_spelling_are_not_finite(capsys, tmp_path):
    from spherepde.cli.main import main

    for value in ("NaN", "nan", "Inf", "-inf", "Infinity"):
        assert main(["run", "--set", f"weights.sigma={value}", "--out", str(tmp_path / "x")]) == 2
        err = capsys.readouterr().err
        assert "finite" in err, (value, err)
    assert not (tmp_path / "x").exists()
