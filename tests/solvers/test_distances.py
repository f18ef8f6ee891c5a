"""Mesh-versus-particle distances and the coupled (run.solver = "both") mode."""

import numpy as np
import pytest

from spherepde.geometry import densities
from spherepde.geometry.meshfiles import icosphere
from spherepde.solvers.distances import l1_to_particles, particle_density, sample_from_density, wasserstein_sphere


@pytest.fixture(scope="module")
def mesh():
    return icosphere(8)


def test_sampling_reproduces_cell_masses(mesh):
    rho = densities.vmf_mixture(mesh, [[0, 0, 1.0], [1.0, 0, 0]], [8.0, 3.0])
    X = sample_from_density(mesh, rho, 200_000, seed=1)
    assert np.allclose(np.linalg.norm(X, axis=1), 1.0)
    counts = np.bincount(densities.locate_cells(mesh, X), minlength=mesh.n_cells) / len(X)
    m = rho * mesh.areas
    # each sample lands in the cell it was drawn for: the histogram is multinomial around m
    assert np.abs(counts - m).sum() < 0.05
    assert np.array_equal(X, sample_from_density(mesh, rho, 200_000, seed=1))  # seeded


def test_w1_exact_against_independent_point_masses(mesh):
    """W1 between the mesh measure and tokens equals POT's emd on the same cost, and it is
    zero when the tokens sit exactly at the mesh's masses' locations with those masses."""
    rho = densities.uniform(mesh)
    w = rho * mesh.areas
    d0 = wasserstein_sphere(mesh, rho, mesh.centers, weights=w, method="exact")
    assert d0 < 1e-7  # network simplex round-off
    # a rotation by angle a moves every point by geodesic distance <= a: W1 <= a
    a = 0.05
    R = np.array([[np.cos(a), -np.sin(a), 0], [np.sin(a), np.cos(a), 0], [0, 0, 1]])
    d = wasserstein_sphere(mesh, rho, mesh.centers @ R.T, weights=w, method="exact")
    assert 0 < d <= a + 1e-12


def test_w1_decreases_with_token_count(mesh):
    rho = densities.vmf_mixture(mesh, [[0, 0, 1.0]], [4.0])
    ds = [np.mean([wasserstein_sphere(mesh, rho, sample_from_density(mesh, rho, n, seed=s), method="exact") for s in range(3)]) for n in (100, 400, 1600)]
    assert ds[0] > ds[1] > ds[2]
    rate = np.polyfit(np.log([100, 400, 1600]), np.log(ds), 1)[0]
    assert -0.75 < rate < -0.3  # Monte-Carlo rate ~ n^{-1/2}


def test_sliced_distance_is_small_for_same_law_and_large_for_different(mesh):
    rho = densities.vmf_mixture(mesh, [[0, 0, 1.0]], [6.0])
    same = wasserstein_sphere(mesh, rho, sample_from_density(mesh, rho, 3000, seed=0), method="sliced", p=1)
    other = wasserstein_sphere(mesh, rho, sample_from_density(mesh, densities.vmf_mixture(mesh, [[0, 0, -1.0]], [6.0]), 3000, seed=0), method="sliced", p=1)
    assert other > 10 * same


def test_l1_to_particles(mesh):
    rho = densities.vmf_mixture(mesh, [[0, 0, 1.0]], [3.0])
    hat = particle_density(mesh, sample_from_density(mesh, rho, 50_000, seed=2))
    assert np.isclose(np.sum(hat * mesh.areas), 1.0)
    near = l1_to_particles(mesh, rho, sample_from_density(mesh, rho, 50_000, seed=2))
    far = l1_to_particles(mesh, rho, sample_from_density(mesh, densities.uniform(mesh), 50_000, seed=2))
    assert near < 0.25 < far


def test_bad_density_is_rejected(mesh):
    with pytest.raises(ValueError, match="shape"):
        wasserstein_sphere(mesh, np.ones(3), mesh.centers)
    rho = densities.uniform(mesh).copy()
    rho[0] = -1.0
    with pytest.raises(ValueError, match="non-negative"):
        l1_to_particles(mesh, rho, mesh.centers)


def test_coupled_run_records_both_solvers(tmp_path):
    from spherepde.runs.config import default_config
    from spherepde.runs.runfolder import read_diagnostics
    from spherepde.runs.runner import run

    cfg = default_config().with_overrides(
        {"run.solver": "both", "mesh.level": 6, "model.H": 1, "weights.process": "frozen", "weights.init": "beta",
         "weights.beta": 2.0, "initial.kind": "vmf", "initial.kappas": [4.0], "initial.n": 3000, "solver.T": 0.2, "output.snapshot_dt": 0.1}
    )
    res = run(cfg, out=tmp_path / "both", progress=False)
    d = read_diagnostics(res.folder / "diagnostics.csv")
    for col in ("energy", "p_energy", "w1_sliced", "l1_hist", "p_edi_exact", "mass"):
        assert col in d and np.all(np.isfinite(d[col]))
    # the two solvers describe the same flow: energies agree to the sampling/discretisation error
    assert np.max(np.abs(d["energy"] - d["p_energy"]) / d["energy"]) < 0.03
    snaps = np.load(res.folder / "snapshots.npz")
    assert snaps["rho"].shape[0] == snaps["X"].shape[0] == len(snaps["t"])
