"""The fused energy-rate kernel (spherepde.model.fused) against its NumPy reference, and the
mesh solver's fused route, per-block degrees and diagnostics tolerance against the NumPy
route and direct summation (issue 18: every optimisation keeps the results)."""

import numba
import numpy as np
import pytest
from conftest import sym_matrices, unit_vectors

from spherepde.attention import attention_moments
from spherepde.attention import harmonic as fs
from spherepde.attention._reference import attention_moments_reference
from spherepde.geometry import densities as dens
from spherepde.geometry.meshfiles import icosphere
from spherepde.model.energy import martingale_increment, state_rates
from spherepde.model.fused import fused_rates, martingale_from_moments
from spherepde.model.velocity import HeadFields, velocity_from_fields
from spherepde.model.weights import OUProcess, generate_weight_path
from spherepde.solvers import fv
from spherepde.solvers.mesh import MeshSolver


def _sym(rng, H, scale):
    return sym_matrices(rng, H, 3, scale / 2)


@pytest.mark.parametrize("sigma", [0.0, 1.3])
def test_fused_rates_match_the_numpy_reference(sigma):
    rng = np.random.default_rng(1)
    n, H = 157, 5
    X = unit_vectors(rng, n)
    w = rng.random(n)
    w /= w.sum()
    D = _sym(rng, H, 2.0)
    f = _sym(rng, H, 1.0)
    dM = _sym(rng, H, 0.1)
    Z, Y, Q = attention_moments_reference(X, X, w, D, want_q=True)
    F = HeadFields(Z, Y, Q)
    v = velocity_from_fields(X, F, -D)
    ref = state_rates(X, w, F, D, f, sigma, v)
    got = fused_rates(X, w, np.log(Z), Y / Z[..., None], Q / Z, -D, f, sigma)
    for k in ("energy", "dEdt_partial", "G2"):
        assert got[k] == pytest.approx(ref[k], rel=1e-12), k
    np.testing.assert_allclose(got["xi"], ref["xi"], rtol=1e-13)
    np.testing.assert_allclose(got["Phi"], np.log(Z).mean(axis=1), rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(got["M"], np.einsum("i,id,ihe->hde", w, X, Y), rtol=1e-12, atol=1e-15)
    assert martingale_from_moments(got["M"], dM) == pytest.approx(martingale_increment(X, w, F, dM), rel=1e-12)


def test_fused_rates_errors_and_thread_independence():
    rng = np.random.default_rng(2)
    X = unit_vectors(rng, 300)
    w = np.full(300, 1 / 300)
    D = _sym(rng, 3, 2.0)
    Z, Y, Q = attention_moments_reference(X, X, w, D, want_q=True)
    args = (X, w, np.log(Z), Y / Z[..., None], Q / Z, -D, D)
    with pytest.raises(ValueError, match="Qbar"):
        fused_rates(X, w, np.log(Z), Y / Z[..., None], None, -D, D, 1.0)
    with pytest.raises(ValueError, match="inconsistent shapes"):
        fused_rates(X[:10], w, *args[2:], 1.0)
    n0 = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        a = fused_rates(*args, 1.0)
    finally:
        numba.set_num_threads(n0)
    b = fused_rates(*args, 1.0)
    for k in ("energy", "dEdt_partial", "G2"):
        assert a[k] == b[k]
    np.testing.assert_array_equal(a["M"], b["M"])


def _case(level=6, H=4, T=0.1):
    mesh = icosphere(level)
    f = lambda x: 1.0 + 0.6 * x[..., 0] * x[..., 2] + 0.3 * x[..., 1] ** 3
    rho0 = dens.normalise(mesh, dens.cell_average(mesh, f))
    path = generate_weight_path(OUProcess(), H=H, d=3, T=T, dt=0.01, seed=4)
    return mesh, rho0, path


def _run(solver, n=4):
    rows = []
    for _ in range(n):
        solver.step(solver.path.T)
        rows.append(solver.record())
    return solver.rho.copy(), rows


def test_mesh_fused_route_equals_the_numpy_route():
    """The fused kernel changes nothing but round-off: same density, same diagnostics,
    martingale included (OU weights, sigma > 0)."""
    mesh, rho0, path = _case()
    out = {}
    for numpy_route in (False, True):
        s = MeshSolver(mesh, rho0, path, order=2, integrator="ssprk2", summation="direct")
        s._numpy_rates = numpy_route
        out[numpy_route] = _run(s)
    (r0, rows0), (r1, rows1) = out[False], out[True]
    np.testing.assert_allclose(r0, r1, rtol=1e-12, atol=1e-14)
    for a, b in zip(rows0, rows1):
        for k in ("energy", "G2", "dEdt_partial", "transport", "martingale", "int_G2", "edi_exact", "edi_paper"):
            assert a[k] == pytest.approx(b[k], rel=1e-10, abs=1e-13), k


@pytest.mark.parametrize("diag_tol", [1e-10, 1e-6, 1e-3])
def test_diagnostics_tol_keeps_the_density_and_bounds_the_diagnostics(diag_tol):
    """A looser diagnostics tolerance leaves the density at the summation tolerance of
    the direct sums and moves G2, d_tE within that looser tolerance (a scheme that let
    it reach the velocity, or ignored it, would fail one of the two)."""
    mesh, rho0, path = _case(level=12, H=3)
    ref = MeshSolver(mesh, rho0, path, order=2, integrator="euler", summation="direct")
    fast = MeshSolver(mesh, rho0, path, order=2, integrator="euler", summation="fast", summation_tol=1e-10, diagnostics_tol=diag_tol)
    (rr, rowr), (rf, rowf) = _run(ref, 3), _run(fast, 3)
    assert np.max(np.abs(rf - rr)) <= 1e-9 * np.max(rr)
    for a, b in zip(rowr, rowf):
        for k in ("G2", "dEdt_partial"):
            assert abs(b[k] - a[k]) <= 20 * diag_tol * abs(a[k]) + 1e-13, (k, a[k], b[k])
        assert b["energy"] == pytest.approx(a["energy"], rel=1e-9)


def test_diagnostics_tol_lowers_the_degree_of_the_moments_only():
    rng = np.random.default_rng(5)
    g = fv.fv_geometry(icosphere(10))
    X = np.ascontiguousarray(g.nodes)
    w = g.areas / g.areas.sum()
    A = _sym(rng, 2, 2.5)
    Zr, Mr, Qr = attention_moments_reference(X, X, w, A, want_q=True)
    lz1, m1, q1 = attention_moments(X, X, w, A, want_q=True, log=True, summation="fast", tol=1e-10)
    lz2, m2, q2 = attention_moments(X, X, w, A, want_q=True, log=True, summation="fast", tol=1e-10, tol_moments=1e-4)
    for lz in (lz1, lz2):
        assert np.max(np.abs(lz - np.log(Zr))) <= 1e-10
    e1 = max(np.max(np.abs(m1 - Mr / Zr[..., None])), np.max(np.abs(q1 - Qr / Zr)))
    e2 = max(np.max(np.abs(m2 - Mr / Zr[..., None])), np.max(np.abs(q2 - Qr / Zr)))
    assert e1 <= 1e-10 and e2 <= 1e-4
    assert e2 > 100 * e1  # the moments really were truncated earlier
    deg_z, _ = fs.degree_table(3.0, 1e-10)
    deg_m, _ = fs.degree_table(3.0, 1e-4)
    assert np.all(deg_m <= deg_z) and deg_m[-1] < deg_z[-1]


def test_degree_table_is_monotone_and_matches_choose_degree():
    deg, tail = fs.degree_table(6.0, 1e-10)
    assert len(deg) == 6 * 64 + 1
    assert np.all(np.diff(deg) >= 0)
    for kq in (0, 17, 200, 384):
        assert deg[kq] == fs.choose_degree(kq / 64, 1e-10)
        assert tail[kq] == pytest.approx(fs.tail_bound(kq / 64, int(deg[kq])))


def test_per_block_degrees_meet_the_tolerance_for_anisotropic_heads():
    """Heads with very different eigenvalues (kappa = |A^T x| from 0.2 to 6 across the
    sphere): blocks far from the top eigenvector use lower degrees and still meet tol."""
    g = fv.fv_geometry(icosphere(16))
    X = np.ascontiguousarray(g.nodes)
    rho = np.exp(2.0 * X[:, 2])
    w = rho * g.areas / np.sum(rho * g.areas)
    A = np.stack([np.diag([6.0, 0.2, -1.0]), np.diag([-0.5, 4.0, 0.3])])
    Zr, Mr, _ = attention_moments_reference(X, X, w, A)
    lz, mb, _ = attention_moments(X, X, w, A, log=True, summation="fast", tol=1e-10)
    assert np.max(np.abs(lz - np.log(Zr))) <= 1e-10
    assert np.max(np.abs(mb - Mr / Zr[..., None])) <= 1e-10
