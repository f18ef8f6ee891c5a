"""Cluster diagnostics (model.clusters): one definition of a cluster for both solvers, in the
diagnostics and in the snapshots' cluster tables."""

import numpy as np
import pytest

import spherepde as sp
from spherepde.model.clusters import weighted_clusters

NORTH, EAST = [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]


# ----------------------------------------------------------------- cluster diagnostics
def test_weighted_clusters_one_definition():
    rng = np.random.default_rng(4)
    centres = np.array([NORTH, EAST, [0.0, 1.0, 0.0]])
    X = np.concatenate([c + 0.01 * rng.normal(size=(20, 3)) for c in centres] + [rng.normal(size=(5, 3))])
    X /= np.linalg.norm(X, axis=1)[:, None]
    w = np.concatenate([np.full(20, 0.03), np.full(20, 0.015), np.full(20, 0.001), np.full(5, 0.0016)])
    labels, masses, cent = weighted_clusters(X, w, radius=0.1, min_mass=0.01)
    assert masses == pytest.approx([0.6, 0.3, 0.02])  # ordered by mass; the scattered points are in none
    assert np.allclose(cent[0], NORTH, atol=0.01) and np.allclose(cent[1], EAST, atol=0.01)
    assert np.sum(labels == -1) >= 5


def test_cluster_tables_in_snapshots_one_definition_for_both_solvers(tmp_path):
    """Masses and centres of the clusters at every snapshot, tokens and mesh alike (snapshots.npz key ``clusters``)."""
    from spherepde.runs.runner import run

    over = {"initial.kind": "vmf", "initial.means": [NORTH, EAST], "initial.kappas": [200.0, 200.0], "initial.weights": [0.7, 0.3],
            "model.sign": 1, "weights.process": "frozen", "weights.init": "beta", "weights.beta": 8.0, "solver.T": 0.5,
            "output.record_dt": 0.25, "output.snapshot_dt": 0.25, "output.vtk": False, "mesh.level": 8, "initial.n": 400}
    tables = {}
    for solver, extra in (("particles", {}), ("mesh", {"solver.integrator": "implicit", "solver.atoms": True})):
        cfg = sp.default_config().with_overrides({**over, "run.solver": solver, **extra})
        folder = tmp_path / solver
        run(cfg, out=folder, progress=False)
        with np.load(folder / "snapshots.npz") as z:
            tables[solver] = np.array(z["clusters"])
    for solver, tab in tables.items():
        assert tab.shape == (3, 16, 4), solver
        last = tab[-1]
        k = int(np.sum(np.isfinite(last[:, 0])))
        assert k == 2, solver
        assert last[0, 0] == pytest.approx(0.7, abs=0.06) and last[1, 0] == pytest.approx(0.3, abs=0.06)
        assert np.allclose(last[0, 1:], NORTH, atol=0.05) and np.allclose(last[1, 1:], EAST, atol=0.05)
