"""Initial densities (spherepde.geometry.densities): normalisation, sub-cell quadrature, errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from spherepde.geometry import densities as dens
from spherepde.geometry.meshfiles import icosphere


def _mass(mesh, rho):
    return float(np.sum(rho * mesh.areas))


def test_uniform():
    m = icosphere(4)
    rho = dens.uniform(m)
    np.testing.assert_allclose(rho, 1 / (4 * np.pi), rtol=1e-13)
    assert _mass(m, rho) == pytest.approx(1.0, abs=1e-14)


@pytest.mark.parametrize(
    "make",
    [
        lambda m: dens.vmf_mixture(m, [[0, 0, 1], [1, 1, 0]], [4.0, 50.0], [0.3, 0.7]),
        lambda m: dens.octahedral(m, sigma=0.05),
        lambda m: dens.spherical_harmonic(m, 3, -2, 0.5),
        lambda m: dens.uniform(m),
    ],
)
def test_constructors_are_normalised_and_nonnegative(make):
    m = icosphere(5)
    rho = make(m)
    assert rho.shape == (m.n_cells,)
    assert np.all(np.isfinite(rho)) and rho.min() >= 0
    assert _mass(m, rho) == pytest.approx(1.0, abs=1e-13)


def test_subcell_quadrature_keeps_the_mass_of_narrow_clusters():
    """A vMF bump of width 0.05 on cells of size 0.33: the raw cell averages still carry mass 1."""
    m = icosphere(4)
    f = lambda X: dens.vmf_density(X, [0.3, 0.1, 1.0], 400.0)
    crude = _mass(m, dens.cell_average(m, f, subdivisions=0))
    auto = _mass(m, dens.cell_average(m, f, scale=0.05))
    assert abs(crude - 1) > 0.1  # one point per sub-triangle misses the bump
    assert abs(auto - 1) < 1e-5
    # and the normalised mixture puts its mass into the few cells around the mean
    rho = dens.vmf_mixture(m, [[0.3, 0.1, 1.0]], [400.0])
    near = np.arccos(np.clip(m.centers @ (np.array([0.3, 0.1, 1.0]) / np.linalg.norm([0.3, 0.1, 1.0])), -1, 1)) < 0.5
    assert _mass(m, np.where(near, rho, 0.0)) > 0.999


def test_cell_average_integrates_exactly_on_the_sphere():
    m = icosphere(3)
    for k in (0, 1, 2):
        avg = dens.cell_average(m, lambda X: np.ones(len(X)), subdivisions=k)
        np.testing.assert_allclose(avg, 1.0, rtol=1e-12)
    # int x_3^2 dsigma = 4 pi / 3
    val = _mass(m, dens.cell_average(m, lambda X: X[:, 2] ** 2, subdivisions=3))
    assert val == pytest.approx(4 * np.pi / 3, rel=1e-4)


def test_vmf_density_normalised_and_stable():
    from scipy.integrate import quad

    for kappa in (0.0, 1e-9, 3.0, 800.0):
        f = lambda t, kappa=kappa: 2 * np.pi * dens.vmf_density(np.array([[math.sqrt(1 - t * t), 0.0, t]]), [0, 0, 1], kappa)[0]
        total = quad(f, -1, 1, points=[1 - 10 / max(kappa, 1)], limit=200)[0]
        assert total == pytest.approx(1.0, rel=1e-7)
    assert np.all(np.isfinite(dens.vmf_density(np.eye(3), [1, 0, 0], 1e5)))
    with pytest.raises(ValueError, match=">= 0"):
        dens.vmf_density(np.eye(3), [1, 0, 0], -1.0)


def test_projected_normal_density_is_exact():
    """Integrates to 1, and matches a histogram of sampled normalised Gaussian points."""
    from scipy.integrate import quad

    for sigma in (0.05, 0.5, 2.0):
        f = lambda t, sigma=sigma: 2 * np.pi * dens.projected_normal_density(np.array([[math.sqrt(1 - t * t), 0.0, t]]), [0, 0, 1], sigma)[0]
        assert quad(f, -1, 1, limit=200, points=[0.9, 0.99])[0] == pytest.approx(1.0, rel=1e-8)
    m = icosphere(6)
    rng = np.random.default_rng(0)
    sigma = 0.3
    n = 400_000
    mean = np.array([0.0, 0.6, 0.8])
    X = mean + sigma * rng.standard_normal((n, 3))
    hist = dens.from_particles(m, X)
    exact = dens.normalise(m, dens.cell_average(m, lambda Y: dens.projected_normal_density(Y, mean, sigma), subdivisions=2))
    l1 = np.sum(np.abs(hist - exact) * m.areas)
    assert l1 < 0.05  # sampling noise ~ sqrt(nc / n) = 0.04
    # a vMF with kappa = 1/sigma^2 is a different law (it would fail the same comparison by far)
    vmf = dens.vmf_mixture(m, [mean], [1 / sigma**2])
    assert np.sum(np.abs(vmf - exact) * m.areas) > 2 * l1


def test_octahedral_is_symmetric():
    m = icosphere(6)
    rho = dens.octahedral(m, sigma=0.05)
    mass = rho * m.areas
    for v in np.concatenate([np.eye(3), -np.eye(3)]):
        assert np.sum(mass[m.centers @ v > 0.8]) == pytest.approx(1 / 6, abs=2e-3)
    with pytest.raises(ValueError, match="sigma"):
        dens.octahedral(m, sigma=0.0)


def test_real_spherical_harmonics_are_orthonormal():
    m = icosphere(6)
    lm = [(0, 0), (1, -1), (1, 0), (1, 1), (2, -2), (2, 1), (3, 3), (4, -3)]
    gram = np.array(
        [
            [_mass(m, dens.cell_average(m, lambda X, a=a, b=b: dens.real_sph_harm(*a, X) * dens.real_sph_harm(*b, X), subdivisions=1)) for b in lm]
            for a in lm
        ]
    )
    np.testing.assert_allclose(gram, np.eye(len(lm)), atol=1e-4)
    # Y_10 = sqrt(3 / (4 pi)) z
    X = m.centers
    np.testing.assert_allclose(dens.real_sph_harm(1, 0, X), math.sqrt(3 / (4 * math.pi)) * X[:, 2], atol=1e-13)
    with pytest.raises(ValueError, match="-l <= m <= l"):
        dens.real_sph_harm(2, 3, X)


def test_spherical_harmonic_density_and_negativity_error():
    m = icosphere(6)
    rho = dens.spherical_harmonic(m, 2, 1, 0.8, subdivisions=2)
    Y = dens.cell_average(m, lambda X: dens.real_sph_harm(2, 1, X), subdivisions=2)
    np.testing.assert_allclose(rho, (1 + 0.8 * Y) / (4 * np.pi) / _mass(m, (1 + 0.8 * Y) / (4 * np.pi)), rtol=1e-12)
    with pytest.raises(ValueError, match="negative.*use \\|eps\\| <="):
        dens.spherical_harmonic(m, 2, 1, 5.0)


def test_locate_cells_and_from_particles():
    m = icosphere(5)
    rng = np.random.default_rng(3)
    X = rng.standard_normal((3000, 3))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    # include vertices and edge midpoints (points on the boundary of cells)
    X = np.concatenate([X, m.points[:50], m.edge_midpoints[:50]])
    cells = dens.locate_cells(m, X)
    p = m.points[m.cells[cells]]
    for k in range(3):
        assert np.all(np.einsum("ij,ij->i", np.cross(p[:, k], p[:, (k + 1) % 3]), X) >= -1e-12)
    w = rng.random(len(X))
    rho = dens.from_particles(m, X, w)
    np.testing.assert_allclose(rho * m.areas, np.bincount(cells, weights=w / w.sum(), minlength=m.n_cells), atol=1e-15)
    with pytest.raises(ValueError, match="shape"):
        dens.from_particles(m, X[:, :2])
    with pytest.raises(ValueError, match="NaN"):
        dens.from_particles(m, np.full((2, 3), np.nan))


def test_from_file(tmp_path):
    m = icosphere(3)
    rho = dens.vmf_mixture(m, [[1, 0, 0]], [3.0])
    f = tmp_path / "rho.npy"
    np.save(f, 5 * rho)
    np.testing.assert_allclose(dens.from_file(m, f), rho, rtol=1e-13)
    np.save(tmp_path / "bad.npy", rho[:-1])
    with pytest.raises(ValueError, match="cells"):
        dens.from_file(m, tmp_path / "bad.npy")
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="cannot read"):
        dens.from_file(m, tmp_path / "obj.npy")
    with pytest.raises(FileNotFoundError):
        dens.from_file(m, tmp_path / "missing.npy")


def test_normalise_errors():
    m = icosphere(3)
    good = np.ones(m.n_cells)
    assert _mass(m, dens.normalise(m, good)) == pytest.approx(1.0)
    bad = good.copy()
    bad[3] = -1e-3
    with pytest.raises(ValueError, match="non-negative"):
        dens.normalise(m, bad)
    bad = good.copy()
    bad[3] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        dens.normalise(m, bad)
    bad[3] = np.inf
    with pytest.raises(ValueError, match="NaN/inf"):
        dens.normalise(m, bad)
    with pytest.raises(ValueError, match="zero total mass"):
        dens.normalise(m, np.zeros(m.n_cells))
    with pytest.raises(ValueError, match="expected"):
        dens.normalise(m, good[:-1])


def test_normalise_of_values_near_the_float_limit():
    m = icosphere(3)
    rng = np.random.default_rng(0)
    shape = rng.uniform(0.5, 1.0, m.n_cells)
    got = dens.normalise(m, 1e308 * shape)  # the sum overflows: was 0 everywhere, then "zero mass"
    np.testing.assert_allclose(got, dens.normalise(m, shape), rtol=1e-14)
    assert _mass(m, got) == pytest.approx(1.0, rel=1e-14)
    with pytest.raises(ValueError, match="weights"):
        dens.vmf_mixture(m, [[1, 0, 0]], [1.0], [-1.0])
