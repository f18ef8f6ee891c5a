"""Attention sums (spherepde.attention.direct) and the energy diagnostics (spherepde.model.energy).

Everything is checked against plain NumPy written here straight from docs/model.md
(sections 1 and 4): pairwise exponential matrices K_h[i, j] = exp(x_i^T D_h x_j).
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import sym_matrices, unit_vectors

from spherepde.attention import attention_moments
from spherepde.attention._reference import attention_moments_reference
from spherepde.model.clusters import weighted_clusters
from spherepde.model.energy import (
    EnergyBalance,
    martingale_increment,
    mean_resultant_length,
    state_rates,
)
from spherepde.model.velocity import head_fields, velocity_from_fields


def _fibonacci_sphere(n):
    """Quasi-uniform points on S^2 (for the known value Z = sinh(beta)/beta)."""
    k = np.arange(n) + 0.5
    z = 1 - 2 * k / n
    phi = np.pi * (1 + 5**0.5) * k
    r = np.sqrt(1 - z**2)
    return np.column_stack([r * np.cos(phi), r * np.sin(phi), z])


# --------------------------------------------------------------------------- kernels
@pytest.mark.parametrize("d,H,m,n", [(2, 1, 7, 11), (3, 4, 13, 5), (5, 3, 9, 17), (3, 2, 1, 1)])
def test_attention_moments_matches_reference(d, H, m, n):
    rng = np.random.default_rng(100 * d + H)
    X, Y = unit_vectors(rng, m, d), unit_vectors(rng, n, d)
    w = rng.random(n)
    A = 1.5 * rng.standard_normal((H, d, d))  # general (non-symmetric) matrices
    Z, M, Q = attention_moments(X, Y, w, A, want_q=True)
    Zr, Mr, Qr = attention_moments_reference(X, Y, w, A, want_q=True)
    assert Z.shape == (m, H) and M.shape == (m, H, d) and Q.shape == (m, H)
    np.testing.assert_allclose(Z, Zr, rtol=1e-13, atol=0)
    np.testing.assert_allclose(M, Mr, rtol=1e-12, atol=1e-14 * np.abs(Zr).max())
    np.testing.assert_allclose(Q, Qr, rtol=1e-13, atol=0)
    # without Q
    Z2, M2, Q2 = attention_moments(X, Y, w, A)
    assert Q2 is None
    np.testing.assert_allclose(Z2, Zr, rtol=1e-13)
    np.testing.assert_allclose(M2, Mr, rtol=1e-12, atol=1e-14 * np.abs(Zr).max())
    # log form: log Z and the moments divided by Z
    lZ, Mb, Qb = attention_moments(X, Y, w, A, want_q=True, log=True)
    np.testing.assert_allclose(lZ, np.log(Zr), rtol=0, atol=1e-13)
    np.testing.assert_allclose(Mb, Mr / Zr[:, :, None], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(Qb, Qr / Zr, rtol=1e-12)


def test_reference_is_the_definition():
    """The reference itself, for one target and one head, by an explicit double loop."""
    rng = np.random.default_rng(1)
    X, Y = unit_vectors(rng, 3, 3), unit_vectors(rng, 4, 3)
    w = rng.random(4)
    A = rng.standard_normal((2, 3, 3))
    Z, M, Q = attention_moments_reference(X, Y, w, A, want_q=True)
    for i in range(3):
        for h in range(2):
            e = np.array([w[j] * np.exp(X[i] @ A[h] @ Y[j]) for j in range(4)])
            assert Z[i, h] == pytest.approx(e.sum(), rel=1e-14)
            np.testing.assert_allclose(M[i, h], e @ Y, rtol=1e-13)
            assert Q[i, h] == pytest.approx(np.sum(e * (Y @ X[i]) ** 2), rel=1e-13)


def test_serial_and_parallel_paths_bit_identical():
    """Per-target gathers: a target's sums do not depend on the other targets nor on
    whether the threaded (large problem) or the serial (small problem) kernel ran."""
    from spherepde.attention import direct as _kernels

    rng = np.random.default_rng(9)
    Y = unit_vectors(rng, 4000, 3)
    w = rng.random(4000)
    A = sym_matrices(rng, 2, 3)
    X = unit_vectors(rng, 300, 3)
    assert 300 * 4000 * 2 >= _kernels._PARALLEL_MIN_WORK > 3 * 4000 * 2
    Z, M, Q = attention_moments(X, Y, w, A, want_q=True)
    Zs, Ms, Qs = attention_moments(X[[0, 17, 299]], Y, w, A, want_q=True)
    assert np.array_equal(Z[[0, 17, 299]], Zs) and np.array_equal(M[[0, 17, 299]], Ms) and np.array_equal(Q[[0, 17, 299]], Qs)


def test_zero_weight_sources_are_ignored():
    rng = np.random.default_rng(2)
    X, Y = unit_vectors(rng, 6, 3), unit_vectors(rng, 8, 3)
    w = rng.random(8)
    w[[1, 5]] = 0.0
    A = sym_matrices(rng, 2, 3)
    Z, M, _ = attention_moments(X, Y, w, A)
    keep = w > 0
    Zk, Mk, _ = attention_moments(X, Y[keep], w[keep], A)
    np.testing.assert_allclose(Z, Zk, rtol=1e-14)
    np.testing.assert_allclose(M, Mk, rtol=1e-13, atol=1e-15)
    # a massless source must not set the exponent shift either: with A = -500 I the
    # empty antipode has exponent +500, the real sources -500 (e^{-1000} underflows)
    pole = np.array([0.0, 0.0, 1.0])
    Yc = np.vstack([pole + 0.01 * rng.standard_normal((5, 3)), -pole])
    Yc /= np.linalg.norm(Yc, axis=1, keepdims=True)
    wc = np.array([0.2] * 5 + [0.0])
    lZ, Mb, _ = attention_moments(pole[None], Yc, wc, -500.0 * np.eye(3)[None], log=True)
    e = -500.0 * Yc[:5] @ pole
    assert lZ[0, 0] == pytest.approx(e.max() + np.log(np.sum(0.2 * np.exp(e - e.max()))), rel=1e-13)
    assert np.all(np.isfinite(Mb))


@pytest.mark.parametrize("scale", [300.0, -300.0, 1000.0, -1000.0])
def test_log_form_large_norm_no_overflow(scale):
    """||A|| = 300 .. 1000, clustered and spread points: log Z finite and equal to a
    direct log-sum-exp; raw exp(300) would still fit, exp(+-1000) would not."""
    rng = np.random.default_rng(3)
    d = 3
    pole = np.array([0.0, 0.0, 1.0])
    cluster = pole + 0.02 * rng.standard_normal((15, d))
    cluster /= np.linalg.norm(cluster, axis=1, keepdims=True)
    for Y in (cluster, unit_vectors(rng, 25, d)):
        n = Y.shape[0]
        w = np.full(n, 1.0 / n)
        A = scale * np.eye(d)[None] + 0.1 * scale * sym_matrices(rng, 1, d) / 10
        X = Y[:7]
        lZ, Mb, Qb = attention_moments(X, Y, w, A, want_q=True, log=True)
        assert np.all(np.isfinite(lZ)) and np.all(np.isfinite(Mb)) and np.all(np.isfinite(Qb))
        e = np.einsum("ik,kl,jl->ij", X, A[0], Y) + np.log(w)[None]
        emax = e.max(axis=1, keepdims=True)
        p = np.exp(e - emax)
        lse = emax[:, 0] + np.log(p.sum(axis=1))
        np.testing.assert_allclose(lZ[:, 0], lse, rtol=1e-13, atol=1e-10)
        np.testing.assert_allclose(Mb[:, 0], (p @ Y) / p.sum(axis=1, keepdims=True), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(Qb[:, 0], np.sum(p * (X @ Y.T) ** 2, axis=1) / p.sum(axis=1), rtol=1e-10)
        # the softmax average is a convex combination of unit vectors
        assert np.all(np.linalg.norm(Mb, axis=-1) <= 1 + 1e-12)


def test_raw_form_large_positive_norm_matches_log_form():
    rng = np.random.default_rng(4)
    Y = unit_vectors(rng, 20, 3)
    w = np.full(20, 0.05)
    A = 300.0 * np.eye(3)[None]
    Z, M, _ = attention_moments(Y, Y, w, A)
    lZ, Mb, _ = attention_moments(Y, Y, w, A, log=True)
    assert np.all(np.isfinite(Z)) and Z.min() > 1e100
    np.testing.assert_allclose(np.log(Z), lZ, rtol=1e-14)
    np.testing.assert_allclose(M / Z[:, :, None], Mb, rtol=1e-12, atol=1e-14)


def test_known_value_uniform_measure():
    """docs/model.md §3: uniform mu on S^2 with D = beta I has Z = sinh(beta)/beta."""
    beta = 2.0
    Y = _fibonacci_sphere(4000)
    w = np.full(len(Y), 1.0 / len(Y))
    targets = unit_vectors(np.random.default_rng(5), 10, 3)
    Z, M, _ = attention_moments(targets, Y, w, beta * np.eye(3)[None])
    np.testing.assert_allclose(Z[:, 0], np.sinh(beta) / beta, rtol=2e-3)
    # and grad Z = D Y points along x with |grad Z| = beta d/dbeta(sinh b / b) ... radial only
    tang = M[:, 0] - np.sum(M[:, 0] * targets, axis=1, keepdims=True) * targets
    assert np.abs(tang).max() < 2e-3 * np.abs(M).max()


@pytest.mark.parametrize(
    "X,Y,w,A",
    [
        (np.ones((4, 3)), np.ones((5, 2)), np.ones(5), np.ones((1, 3, 3))),  # d mismatch X/Y
        (np.ones((4, 3)), np.ones((5, 3)), np.ones(4), np.ones((1, 3, 3))),  # w length
        (np.ones((4, 3)), np.ones((5, 3)), np.ones(5), np.ones((3, 3))),  # A not (H, d, d)
        (np.ones((4, 3)), np.ones((5, 3)), np.ones(5), np.ones((1, 2, 2))),  # A wrong d
        (np.ones(3), np.ones((5, 3)), np.ones(5), np.ones((1, 3, 3))),  # X 1-D
        (np.ones((4, 3)), np.ones((5, 3)), np.ones((5, 1)), np.ones((1, 3, 3))),  # w 2-D
    ],
)
def test_attention_moments_shape_errors(X, Y, w, A):
    with pytest.raises(ValueError, match="shape"):
        attention_moments(X, Y, w, A)


# ----------------------------------------------------- diagnostics vs plain NumPy
def _numpy_quantities(X, w, D, V, f, sigma, dM):
    """docs/model.md §1 and §3 written with pairwise exp matrices."""
    n, d = X.shape
    H = D.shape[0]
    P = np.eye(d)[None] - X[:, :, None] * X[:, None, :]  # (n, d, d)
    xy = X @ X.T
    v = np.zeros((n, d))
    E = dEdt = mart = 0.0
    gradZ = np.zeros((H, n, d))
    Z = np.zeros((n, H))
    for h in range(H):
        K = np.exp(X @ D[h] @ X.T)  # K[i, j] = exp(x_i^T D_h x_j)
        Zh = K @ w
        Yh = K @ (w[:, None] * X)
        Z[:, h] = Zh
        a = (Yh @ V[h].T) / Zh[:, None]  # V_h Y_h / Z_h
        v += np.einsum("ikl,il->ik", P, a) / H
        E += w @ K @ w / (2 * H)
        xfy = X @ f[h] @ X.T
        dEdt += np.sum(np.outer(w, w) * K * (xfy + sigma**2 / 4 * (1 + xy**2))) / (2 * H)
        mart += np.sum(np.outer(w, w) * K * (X @ dM[h] @ X.T)) / (2 * H)
        gradZ[h] = Yh @ D[h].T  # grad_x Z_h = D_h Y_h (D symmetric)
    grad_xi = np.einsum("ikl,il->ik", P, gradZ.mean(axis=0))
    transport = float(np.sum(w * np.sum(grad_xi * v, axis=1)))
    mob = np.mean(1.0 / Z, axis=1)
    G2 = float(np.sum(w * np.sum(v**2, axis=1) / mob))
    return {"v": v, "energy": E, "dEdt_partial": dEdt, "martingale": mart, "transport": transport, "G2": G2, "Z": Z}


def _energy_np(X, w, D):
    H = D.shape[0]
    return sum(w @ np.exp(X @ D[h] @ X.T) @ w for h in range(H)) / (2 * H)


@pytest.mark.parametrize("d,H,s,sigma", [(3, 1, -1.0, 0.0), (3, 4, -1.0, 1.3), (2, 3, 1.0, 0.7), (5, 2, -1.0, 2.0)])
def test_diagnostics_match_numpy(d, H, s, sigma):
    rng = np.random.default_rng(10 * d + H)
    n = 23
    X = unit_vectors(rng, n, d)
    w = rng.random(n)
    w /= w.sum()
    D = sym_matrices(rng, H, d, 0.7)
    V = s * D
    f = sym_matrices(rng, H, d)
    dM = sym_matrices(rng, H, d, 0.1)
    ref = _numpy_quantities(X, w, D, V, f, sigma, dM)
    F = head_fields(X, w, D, want_q=sigma > 0)
    v = velocity_from_fields(X, F, V)
    np.testing.assert_allclose(v, ref["v"], rtol=1e-12, atol=1e-13)
    assert np.abs(np.sum(v * X, axis=1)).max() < 1e-13  # tangent
    r = state_rates(X, w, F, D, f, sigma, v)
    for key in ("energy", "dEdt_partial", "transport", "G2"):
        assert r[key] == pytest.approx(ref[key], rel=1e-12, abs=1e-13), key
    np.testing.assert_allclose(r["xi"], ref["Z"].mean(axis=1), rtol=1e-13)
    assert martingale_increment(X, w, F, dM) == pytest.approx(ref["martingale"], rel=1e-11, abs=1e-14)
    # transport = s * int |grad_S Phi|^2 ... for H = 1: s * int |grad_S Z|^2 / Z
    if H == 1:
        gz = F.Y[:, 0] @ D[0].T
        gz -= np.sum(gz * X, axis=1, keepdims=True) * X
        assert r["transport"] == pytest.approx(s * np.sum(w * np.sum(gz**2, axis=1) / F.Z[:, 0]), rel=1e-12)
        assert r["G2"] == pytest.approx(np.sum(w * np.sum(gz**2, axis=1) / F.Z[:, 0]), rel=1e-12)


def test_state_rates_sigma_needs_q():
    rng = np.random.default_rng(0)
    X = unit_vectors(rng, 5, 3)
    w = np.full(5, 0.2)
    D = sym_matrices(rng, 1, 3)
    F = head_fields(X, w, D)
    with pytest.raises(ValueError, match="Q"):
        state_rates(X, w, F, D, D, 1.0, velocity_from_fields(X, F, -D))


def test_ito_term_from_the_symmetrised_noise():
    """(sigma^2/4)(1 + (x.y)^2) = (sigma^2/2) Var(x^T dW^sym y)/dt, with dW^sym = (G + G^T)/2:
    the variance is the explicit sum over the independent entries of G, and the whole
    Ito term is d/dh E_S[E(D + sigma sqrt(h) S)] at h = 0 (Gaussian moment generating
    function, central difference in h)."""
    rng = np.random.default_rng(7)
    d, n, H, sigma = 3, 9, 2, 1.1
    X = unit_vectors(rng, n, d)
    w = np.full(n, 1.0 / n)
    D = sym_matrices(rng, H, d, 0.5)
    # variance of x^T S y by summing over entries of G
    x, y = X[0], X[1]
    coef = 0.5 * (np.outer(x, y) + np.outer(y, x))  # x^T S y = sum_kl G_kl coef_kl
    assert np.sum(coef**2) == pytest.approx(0.5 * (1 + (x @ y) ** 2), rel=1e-14)
    var = 0.5 * (1 + (X @ X.T) ** 2)

    def expected_energy(hh):
        return sum(w @ (np.exp(X @ D[k] @ X.T) * np.exp(0.5 * sigma**2 * hh * var)) @ w for k in range(H)) / (2 * H)

    eps = 1e-4
    ito = (expected_energy(eps) - expected_energy(-eps)) / (2 * eps)
    F = head_fields(X, w, D, want_q=True)
    r = state_rates(X, w, F, D, np.zeros_like(D), sigma, velocity_from_fields(X, F, -D))
    assert r["dEdt_partial"] == pytest.approx(ito, rel=1e-7)
    # and the sigma = 0 value without drift is exactly zero
    r0 = state_rates(X, w, F, D, np.zeros_like(D), 0.0, velocity_from_fields(X, F, -D))
    assert r0["dEdt_partial"] == 0.0


@pytest.mark.parametrize("H,s", [(1, -1.0), (3, 1.0)])
def test_chain_rule_finite_differences(H, s):
    """d/de E(x_i + e xdot_i) at 0 equals `transport`; d/de E(D + e f) equals the drift part."""
    rng = np.random.default_rng(20 + H)
    d, n = 3, 17
    X = unit_vectors(rng, n, d)
    w = rng.random(n)
    w /= w.sum()
    D = sym_matrices(rng, H, d, 0.6)
    f = sym_matrices(rng, H, d)
    F = head_fields(X, w, D)
    v = velocity_from_fields(X, F, s * D)
    r = state_rates(X, w, F, D, f, 0.0, v)
    eps = 1e-5
    dE_x = (_energy_np(X + eps * v, w, D) - _energy_np(X - eps * v, w, D)) / (2 * eps)
    assert r["transport"] == pytest.approx(dE_x, rel=1e-7, abs=1e-10)
    dE_D = (_energy_np(X, w, D + eps * f) - _energy_np(X, w, D - eps * f)) / (2 * eps)
    assert r["dEdt_partial"] == pytest.approx(dE_D, rel=1e-7, abs=1e-10)
    # sign of the flow: s * transport >= 0 for H = 1 (dissipation / ascent)
    if H == 1:
        assert s * r["transport"] > 0


def test_G2_harmonic_mobility_is_not_arithmetic():
    """G2 uses 1 / mean_h(1/Z_h) (harmonic mean of Z), not mean_h Z_h."""
    rng = np.random.default_rng(30)
    X = unit_vectors(rng, 12, 3)
    w = np.full(12, 1 / 12)
    D = np.stack([0.2 * np.eye(3), 3.0 * np.eye(3) + sym_matrices(rng, 1, 3, 0.3)[0]])
    F = head_fields(X, w, D)
    v = velocity_from_fields(X, F, -D)
    r = state_rates(X, w, F, D, np.zeros_like(D), 0.0, v)
    harm = 1.0 / np.mean(1.0 / F.Z, axis=1)
    arith = F.Z.mean(axis=1)
    assert r["G2"] == pytest.approx(np.sum(w * np.sum(v**2, axis=1) * harm), rel=1e-13)
    assert abs(r["G2"] - np.sum(w * np.sum(v**2, axis=1) * arith)) > 0.1 * r["G2"]


def test_energy_balance_bookkeeping():
    b = EnergyBalance(sign=-1.0, E0=2.0)
    b.add_stages(0.1, (0.5, 0.5), [{"dEdt_partial": 1.0, "transport": -2.0, "G2": 2.0}, {"dEdt_partial": 3.0, "transport": -4.0, "G2": 4.0}])
    b.add_martingale(0.05)
    assert (b.int_dEdt, b.int_transport, b.int_G2, b.martingale) == pytest.approx((0.2, -0.3, 0.3, 0.05))
    paper, exact = b.residuals(2.5)
    assert paper == pytest.approx(0.5 - 0.2 + 0.3 - 0.05)
    assert exact == pytest.approx(0.5 - 0.2 + 0.3 - 0.05)
    b2 = EnergyBalance(sign=-1.0)
    b2.restore(b.state())
    assert b2.state() == b.state()


def test_mean_resultant_and_clusters():
    X = np.array([[1.0, 0, 0], [1.0, 0, 0], [-1.0, 0, 0], [0, 1.0, 0]])
    w = np.full(4, 0.25)
    assert mean_resultant_length(X, w) == pytest.approx(np.sqrt(2) / 4)
    assert mean_resultant_length(X[:2], np.full(2, 0.5)) == pytest.approx(1.0)
    assert len(weighted_clusters(X, w, 0.1, min_mass=0.0)[1]) == 3
    assert len(weighted_clusters(X, w, 0.1, min_mass=0.5)[1]) == 1
    assert len(weighted_clusters(X, w, 2.5)[1]) == 1


# ------------------------------------------------------ the vectorised d = 3 path
@pytest.mark.parametrize("scale", [0.0, 0.05, 1.0, 5.0, 30.0, 64.0])
@pytest.mark.parametrize("want_q", [False, True])
def test_simd_path_matches_scalar_and_reference(scale, want_q):
    """The polynomial-exp SIMD kernel (d = 3, ||A|| <= 64) agrees with the scalar
    online-log-sum-exp kernel and the NumPy reference to ~1e-13 relative."""
    from spherepde.attention import attention_moments
    from spherepde.attention._reference import attention_moments_reference

    rng = np.random.default_rng(int(scale * 10) + want_q)
    X = rng.normal(size=(37, 3))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    Y = rng.normal(size=(600, 3))  # more than one chunk of 256 sources
    Y /= np.linalg.norm(Y, axis=1, keepdims=True)
    w = rng.random(600)
    G = rng.normal(size=(3, 3, 3))
    A = G + np.swapaxes(G, 1, 2)
    if scale > 0:
        A *= scale / np.linalg.norm(A, ord=2, axis=(1, 2))[:, None, None]
    else:
        A[:] = 0.0
    Z, M, Q = attention_moments(X, Y, w, A, want_q=want_q)
    Zs, Ms, Qs = attention_moments(X, Y, w, A, want_q=want_q, simd=False)
    Zr, Mr, Qr = attention_moments_reference(X, Y, w, A, want_q=want_q)
    np.testing.assert_allclose(Z, Zs, rtol=1e-13)
    np.testing.assert_allclose(Z, Zr, rtol=1e-12)
    np.testing.assert_allclose(M, Ms, rtol=1e-12, atol=1e-13 * np.abs(Ms).max())
    if want_q:
        np.testing.assert_allclose(Q, Qs, rtol=1e-12)
    # log form, too
    lZ, Mn, _ = attention_moments(X, Y, w, A, log=True)
    np.testing.assert_allclose(lZ, np.log(Zr), rtol=1e-13, atol=1e-13)


def test_simd_path_serial_equals_parallel():
    from spherepde.attention import direct as _kernels

    rng = np.random.default_rng(5)
    X = rng.normal(size=(64, 3))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    w = rng.random(64)
    A = np.stack([2.0 * np.eye(3), -1.5 * np.eye(3)])
    a = _kernels._simd3(X, X, w, A, True, parallel=True)
    b = _kernels._simd3(X, X, w, A, True, parallel=False)
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v)
