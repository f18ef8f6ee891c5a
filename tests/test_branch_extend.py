"""Runs you can continue and branch (issue 14): branch from another run's snapshot,
extend a finished run to a later time, default run names that carry the overrides."""

from __future__ import annotations

import numpy as np
import pytest

from spherepde.geometry.meshio import icosphere
from spherepde.runs import runner
from spherepde.runs.branch import branch_point, initial_density_from_run, initial_tokens_from_run
from spherepde.runs.config import default_config

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
