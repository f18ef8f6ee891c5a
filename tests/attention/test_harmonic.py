"""Fast (spherical-harmonic) summation of the attention sums: spherepde.attention.harmonic.

Accuracy only -- speed is measured by ``spherepde bench`` and never asserted here.
"""

from __future__ import annotations

import itertools
import logging
import math

import numba
import numpy as np
import pytest
from conftest import unit_vectors
from scipy.special import eval_legendre, ive

from spherepde.attention import attention_moments
from spherepde.attention import harmonic as fs
from spherepde.attention._reference import attention_moments_reference, real_sph_harm_reference
from spherepde.attention.direct import direct_scaled as _direct_scaled
from spherepde.geometry import densities as dens
from spherepde.geometry.meshfiles import icosphere
from spherepde.model.weights import OUProcess, generate_weight_path
from spherepde.runs.config import ConfigError, default_config
from spherepde.solvers import fv
from spherepde.solvers.mesh import MeshSolver


def _rand_A(rng, H, norms):
    A = rng.standard_normal((H, 3, 3))
    return A * (np.broadcast_to(norms, (H,)) / np.linalg.norm(A, ord=2, axis=(1, 2)))[:, None, None]


def _density(rng, X, kind):
    if kind == "uniform":
        return np.ones(len(X))
    if kind == "random":
        return rng.random(len(X))
    if kind == "vmf":  # two bumps plus a floor
        mu = unit_vectors(rng, 2)
        return np.exp(8.0 * (X @ mu[0] - 1)) + 0.5 * np.exp(20.0 * (X @ mu[1] - 1)) + 1e-3
    if kind == "point":  # almost all mass in a few cells
        mu = unit_vectors(rng, 1)[0]
        return np.exp(400.0 * (X @ mu - 1))
    raise ValueError(kind)


def _errors(X, Y, w, A, tol, want_q=True):
    """Max relative error of Z, max error of Mom/Z and Q/Z of summation='fast' vs the
    direct sums (themselves exact to ~1e-14)."""
    Zd, Md, Qd = attention_moments(X, Y, w, A, want_q=want_q, summation="direct")
    Zf, Mf, Qf = attention_moments(X, Y, w, A, want_q=want_q, summation="fast", tol=tol)
    ez = np.max(np.abs(Zf / Zd - 1))
    ev = np.max(np.linalg.norm(Mf / Zf[..., None] - Md / Zd[..., None], axis=-1))
    eq = np.max(np.abs(Qf / Zf - Qd / Zd)) if want_q else 0.0
    return ez, ev, eq


@pytest.fixture(autouse=True)
def _fresh_log_once():
    fs._LOGGED.clear()
    yield
    fs._LOGGED.clear()


# ---------------------------------------------------------------- building blocks
@pytest.mark.parametrize("L", [0, 1, 7, 40])
def test_real_harmonics_match_scipy(L):
    rng = np.random.default_rng(L)
    P = np.vstack([unit_vectors(rng, 37), [[0, 0, 1.0], [0, 0, -1.0], [1.0, 0, 0]]])
    Y = fs.real_sph_harm(P, L)
    Yr = real_sph_harm_reference(P, L)
    assert Y.shape == (len(P), (L + 1) ** 2)
    np.testing.assert_allclose(Y, Yr, rtol=0, atol=2e-14 * max(1, L))


def test_real_harmonics_are_orthonormal():
    """Quadrature on a fine icosphere: int Y_k Y_k' = delta_kk' (to the quadrature error)."""
    m = icosphere(24)
    Y = fs.real_sph_harm(fv.fv_geometry(m).nodes, 6)
    G = (Y * m.areas[:, None]).T @ Y
    np.testing.assert_allclose(G, np.eye(49), atol=2e-3)


@pytest.mark.parametrize("kappa", [0.0, 1e-9, 1e-3, 0.05, 0.5, 6.0, 30.0, 100.0])
@pytest.mark.parametrize("L", [0, 1, 10, 64])
@pytest.mark.parametrize("kernel", ["cf", "block"])
def test_bessel_coefficients(kappa, L, kernel):
    """Both the continued fraction and the block kernel (Miller's recurrence for
    kappa >= 0.05, else the continued fraction) against SciPy."""
    cl = np.empty((L + 1, fs._P))
    rr = np.empty(fs._P)
    k = np.full(fs._P, kappa)
    if kernel == "cf":
        fs._bessel_cf(k, fs._P, L, L + 16 + int(kappa), cl, rr)
    else:
        fs._bessel_block(k, kappa, L, L + 16 + int(kappa), cl, rr)
    ref = 4 * math.pi * ive(np.arange(L + 1) + 0.5, kappa) * math.sqrt(math.pi / (2 * kappa)) if kappa > 0 else 4 * math.pi * (np.arange(L + 1) == 0)
    big = ref > 1e-250
    np.testing.assert_allclose(cl[:, 0][big], ref[big], rtol=2e-13)
    assert np.all(np.abs(cl[:, 0][~big]) < 1e-240)


@pytest.mark.parametrize("kappa", [0.3, 2.0, 6.0, 15.0])
@pytest.mark.parametrize("L", [2, 10, 25])
def test_tail_bound_bounds_the_truncation_error(kappa, L):
    """T_L(kappa) >= max_t |exp(kappa t) - sum_{l<=L} (2l+1) i_l(kappa) P_l(t)|, with
    equality at t = 1 (P_l(1) = 1); checked in 40-digit arithmetic."""
    import mpmath as mp
    mp.mp.dps = 40
    T = fs.tail_bound(kappa, L)
    kap = mp.mpf(kappa)
    il = [mp.sqrt(mp.pi / (2 * kap)) * mp.besseli(l + mp.mpf(1) / 2, kap) for l in range(L + 121)]
    exact_tail = sum((2 * l + 1) * il[l] for l in range(L + 1, L + 121))  # the terms decay super-exponentially
    assert abs(mp.exp(kap) - sum((2 * l + 1) * il[l] for l in range(L + 121))) < mp.mpf(10) ** -30 * mp.exp(kap)
    assert T >= float(exact_tail) * (1 - 1e-12)
    assert T <= float(exact_tail) * (1 + 1e-8)
    t = np.linspace(-1, 1, 201)
    trunc = sum((2 * l + 1) * float(il[l]) * eval_legendre(l, t) for l in range(L + 1))
    err = np.abs(np.exp(kappa * t) - trunc)
    assert np.all(err <= T * (1 + 1e-6) + 1e-15 * np.exp(kappa))


def test_choose_degree():
    Ls = [fs.choose_degree(k, 1e-10) for k in (0.0, 1.0, 3.0, 6.0, 10.0, 20.0)]
    assert Ls[0] == 0 and all(a <= b for a, b in itertools.pairwise(Ls))
    assert fs.choose_degree(6.0, 1e-6) < fs.choose_degree(6.0, 1e-10) < fs.choose_degree(6.0, 1e-13)
    assert fs.choose_degree(30.0, 1e-10) == -1  # needs L > L_MAX = 64
    for k in (1.0, 6.0, 12.0):
        L = fs.choose_degree(k, 1e-10)
        assert math.exp(k) * fs.tail_bound(k, L) <= 1e-10 / 6
        assert math.exp(k) * fs.tail_bound(k, L - 1) > 1e-10 / 6
    with pytest.raises(ValueError):
        fs.choose_degree(1.0, 0.0)


def test_source_moments_match_harmonics():
    rng = np.random.default_rng(1)
    Y = unit_vectors(rng, 3001)  # not a multiple of the block size
    w = rng.random(3001)
    L = 9
    S = fs.source_moments(Y, w, L, want_q=True)
    Yh = fs.real_sph_harm(Y, L)
    # internal layout -> column index of real_sph_harm
    idx = np.concatenate([[l * l + l + m for m in range(l + 1)] + [l * l + l - m for m in range(1, l + 1)] for l in range(L + 1)])
    F = fs._source_functions(Y, w, True)
    np.testing.assert_allclose(S, F @ Yh[:, idx], rtol=0, atol=1e-13 * w.sum())


# -------------------------------------------------------------- fast vs direct
@pytest.mark.parametrize("kind", ["uniform", "random", "vmf", "point"])
@pytest.mark.parametrize("tol", [1e-6, 1e-10])
def test_fast_matches_direct_on_mesh(kind, tol):
    """Mesh nodes as targets and sources, random A with ||A||_2 up to 6 (several heads)."""
    rng = np.random.default_rng(hash((kind, tol)) % 2**32)
    g = fv.fv_geometry(icosphere(12))
    X = np.ascontiguousarray(g.nodes)
    w = g.areas * _density(rng, X, kind)
    A = _rand_A(rng, 4, [0.5, 2.0, 4.0, 6.0])
    ez, ev, eq = _errors(X, X, w / w.sum(), A, tol)
    assert ez <= tol and ev <= tol and eq <= tol


@pytest.mark.parametrize("seed", range(4))
def test_fast_matches_direct_random_points(seed):
    """Different targets and sources, unnormalised weights, general (non-symmetric) A."""
    rng = np.random.default_rng(10 + seed)
    X = unit_vectors(rng, 700)
    Y = unit_vectors(rng, 2500)
    w = rng.random(2500) * 3.0
    A = _rand_A(rng, 3, rng.uniform(0.0, 6.0, 3))
    for tol in (1e-8, 1e-11):
        ez, ev, eq = _errors(X, Y, w, A, tol)
        assert ez <= tol and ev <= tol and eq <= tol


def test_fast_log_form_and_zero_matrix():
    rng = np.random.default_rng(3)
    X = unit_vectors(rng, 300)
    w = rng.random(300)
    A = np.stack([np.zeros((3, 3)), 5.0 * np.eye(3), -5.0 * np.eye(3)])
    Zr, Mr, Qr = attention_moments_reference(X, X, w, A, want_q=True)
    lZ, Mb, Qb = attention_moments(X, X, w, A, want_q=True, log=True, summation="fast", tol=1e-10)
    assert np.max(np.abs(lZ - np.log(Zr))) <= 1e-10
    assert np.max(np.abs(Mb - Mr / Zr[..., None])) <= 1e-10
    assert np.max(np.abs(Qb - Qr / Zr)) <= 1e-10
    np.testing.assert_allclose(np.exp(lZ[:, 0]), w.sum(), rtol=1e-14)  # A = 0: Z = sum w


@pytest.mark.parametrize("beta", [6.0, 10.0])
def test_concentrated_mass_far_targets_are_rechecked(beta):
    """All mass near one point and targets at its antipode: Z ~ exp(-2 beta) of the
    expansion's scale, so the a-posteriori check sends those targets to the direct sums
    and the tolerance still holds."""
    g = fv.fv_geometry(icosphere(12))
    X = np.ascontiguousarray(g.nodes)
    w = g.areas * np.exp(100.0 * (X @ np.array([0.0, 0.6, 0.8]) - 1))
    w /= w.sum()
    A = beta * np.eye(3)[None]
    C, Z, M, Q, info = fs.moments(X, X, w, A, want_q=True, tol=1e-10)
    assert info.path == "fast" and info.n_rechecked > 0
    Cd, Zd, Md, Qd = _direct_scaled(X, X, w, A, True, True)
    r = np.exp(C - Cd)
    assert np.max(np.abs(Z * r / Zd - 1)) <= 1e-10
    assert np.max(np.abs(M / Z[..., None] - Md / Zd[..., None])) <= 1e-10
    assert np.max(np.abs(Q / Z - Qd / Zd)) <= 1e-10


def test_round_off_allowance_against_extended_precision():
    """The round-off allowance rho(n) of the a-posteriori check bounds the measured error
    of the scaled sums (vs long double sums) with a safety factor of at least 2."""
    rng = np.random.default_rng(7)
    g = fv.fv_geometry(icosphere(12))
    X = np.ascontiguousarray(g.nodes)
    n = len(X)
    u = fs._round_allowance(n)
    Xl = X.astype(np.longdouble)
    worst = 0.0
    for conc in (0.0, 30.0, 1e3, 1e5):
        mu = unit_vectors(rng, 1)[0]
        w = g.areas * np.exp(conc * (X @ mu - 1))
        w /= w.sum()
        wl = w.astype(np.longdouble)
        for L in (36, 64):  # truncation error < 1e-21 at kappa <= 5: what is left is round-off
            A = _rand_A(rng, 2, 5.0)
            S = fs.source_moments(X, w, L, want_q=True)
            C, Z, M, Q = fs.target_expansion(X, A, [L, L], S, want_q=True)
            idx = np.concatenate([rng.choice(n, 15, replace=False), np.argsort(X @ mu)[:5]])
            for h in range(2):
                for i in idx:
                    e = wl * np.exp(Xl[i] @ A[h].astype(np.longdouble) @ Xl.T - np.longdouble(C[i, h]))
                    ref = [e.sum(), *(e @ Xl), e @ (Xl @ Xl[i]) ** 2]
                    got = [Z[i, h], *M[i, h], Q[i, h]]
                    worst = max(worst, max(abs(float(g_ - r_)) for g_, r_ in zip(got, ref)))
    assert worst <= u / 2, (worst, u)


def test_thread_count_does_not_change_the_result():
    rng = np.random.default_rng(11)
    X = unit_vectors(rng, 1500)
    w = rng.random(1500)
    A = _rand_A(rng, 2, 4.0)
    n0 = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        a = fs.moments(X, X, w, A, want_q=True)
        numba.set_num_threads(n0)
        b = fs.moments(X, X, w, A, want_q=True)
    finally:
        numba.set_num_threads(n0)
    for u, v in zip(a[:4], b[:4]):
        np.testing.assert_array_equal(u, v)


# ------------------------------------------------------------ fallbacks, selection
def test_large_kappa_falls_back_to_direct_with_log(caplog):
    rng = np.random.default_rng(5)
    X = unit_vectors(rng, 400)
    w = rng.random(400)
    A = np.stack([3.0 * np.eye(3), 40.0 * np.eye(3)])  # kappa = 40 needs L > 64
    with caplog.at_level(logging.WARNING, logger="spherepde.attention.harmonic"):
        _, Z, _, _, info = fs.moments(X, X, w, A, want_q=False, tol=1e-10)
    assert info.path == "mixed" and info.degrees[1] == -1 and info.degrees[0] > 0
    assert any("too large" in r.getMessage() for r in caplog.records)
    _, Zd, _, _ = _direct_scaled(X, X, w, A[1:], False, True)
    np.testing.assert_array_equal(Z[:, 1], Zd[:, 0])
    # all heads too large: everything direct, bit for bit
    Zf, _, _ = attention_moments(X, X, w, 2.0 * A[1:], summation="fast")
    Zd2, _, _ = attention_moments(X, X, w, 2.0 * A[1:], summation="direct")
    np.testing.assert_array_equal(Zf, Zd2)


def test_auto_selection(caplog):
    rng = np.random.default_rng(6)
    # small problems: direct, bit for bit
    X = unit_vectors(rng, 300)
    w = rng.random(300)
    A = _rand_A(rng, 2, 3.0)
    for a, b in zip(attention_moments(X, X, w, A, summation="auto"), attention_moments(X, X, w, A, summation="direct")):
        if a is not None:
            np.testing.assert_array_equal(a, b)
    # large enough and moderate kappa: fast
    X = unit_vectors(rng, 6000)
    w = rng.random(6000)
    *_, info = fs.moments(X, X, w, _rand_A(rng, 1, 4.0), mode="auto")
    assert info.path == "fast" and info.predicted_speedup > fs._AUTO_MARGIN
    # tolerance cannot be met: direct, with an INFO record
    with caplog.at_level(logging.INFO, logger="spherepde.attention.harmonic"):
        attention_moments(X, X, w, 35.0 * np.eye(3)[None], summation="auto")
    assert any(r.levelno == logging.INFO and "too large" in r.getMessage() for r in caplog.records)
    # cost model: few targets against many sources -> direct
    *_, info = fs.moments(X[:20], X, w, _rand_A(rng, 1, 4.0), mode="auto")
    assert info.path == "direct"


def test_auto_takes_the_fast_sums_from_a_few_thousand_points(monkeypatch):
    """2,000 tokens (or cells) with one head: "auto" passes the size filter, the cost model picks
    the fast sums (measured 2.0x faster on the idle machine, bench entry b_auto_crossover), and the result agrees
    with direct sums to the tolerance."""
    from spherepde.attention import sums

    rng = np.random.default_rng(7)
    n = 2000
    X = unit_vectors(rng, n)
    w = np.full(n, 1.0 / n)
    G = rng.standard_normal((1, 3, 3))
    A = G + G.transpose(0, 2, 1)
    assert n * n >= sums._AUTO_MIN_WORK
    *_, info = fs.moments(X, X, w, A, want_q=True, mode="auto", log_form=True)
    assert info.path == "fast" and info.predicted_speedup >= fs._AUTO_MARGIN
    calls = []
    real = fs.moments
    monkeypatch.setattr(fs, "moments", lambda *a, **k: calls.append(k.get("mode")) or real(*a, **k))
    la, Ma, Qa = attention_moments(X, X, w, A, want_q=True, log=True, summation="auto")
    assert calls == ["auto"]
    ld, Md, Qd = attention_moments(X, X, w, A, want_q=True, log=True, summation="direct")
    assert np.max(np.abs(la - ld)) < 1e-9 and np.max(np.abs(Ma - Md)) < 1e-9 and np.max(np.abs(Qa - Qd)) < 1e-9
    assert np.max(np.abs(la - ld)) > 0  # it did not sum directly


def test_negative_weights_and_bad_arguments(caplog):
    rng = np.random.default_rng(8)
    X = unit_vectors(rng, 100)
    w = rng.standard_normal(100)
    A = _rand_A(rng, 1, 2.0)
    with caplog.at_level(logging.WARNING, logger="spherepde.attention.harmonic"):
        Zf, _, _ = attention_moments(X, X, w, A, summation="fast")
    assert any("non-negative" in r.getMessage() for r in caplog.records)
    np.testing.assert_array_equal(Zf, attention_moments(X, X, w, A, summation="direct")[0])
    with pytest.raises(ValueError, match="summation"):
        attention_moments(X, X, np.abs(w), A, summation="exact")
    with pytest.raises(ValueError, match="tol"):
        attention_moments(X, X, np.abs(w), A, summation="fast", tol=0.0)
    # d != 3 and H = 0 go to the direct kernels silently
    X4 = rng.standard_normal((50, 4))
    X4 /= np.linalg.norm(X4, axis=1, keepdims=True)
    Z4, _, _ = attention_moments(X4, X4, np.ones(50), np.eye(4)[None], summation="fast")
    np.testing.assert_allclose(Z4, attention_moments_reference(X4, X4, np.ones(50), np.eye(4)[None])[0], rtol=1e-13)
    Z0, M0, _ = attention_moments(X, X, np.abs(w), np.zeros((0, 3, 3)), summation="fast")
    assert Z0.shape == (100, 0) and M0.shape == (100, 0, 3)


# ------------------------------------------------------------------ mesh solver
def _mesh_case():
    mesh = icosphere(10)
    f = lambda X: dens.vmf_density(X, [0.0, 0.0, 1.0], 6.0) + 0.5 * dens.vmf_density(X, [1.0, 0.0, 0.0], 10.0)
    rho0 = dens.normalise(mesh, dens.cell_average(mesh, f))
    path = generate_weight_path(OUProcess(), H=3, d=3, T=0.2, dt=0.01, seed=3)
    return mesh, rho0, path


@pytest.mark.parametrize("velocity", ["potential", "midpoint"])
def test_meshsolver_fast_agrees_with_direct(velocity):
    mesh, rho0, path = _mesh_case()
    runs = {}
    for s in ("direct", "fast"):
        solver = MeshSolver(mesh, rho0, path, velocity=velocity, integrator="ssprk2", summation=s, summation_tol=1e-11)
        rows = []
        for _ in range(3):
            solver.step(0.2)
            rows.append(solver.record())
        runs[s] = (solver.rho.copy(), rows)
    (rd, rowd), (rf, rowf) = runs["direct"], runs["fast"]
    assert np.max(np.abs(rf - rd)) <= 1e-9 * np.max(rd)
    for a, b in zip(rowd, rowf):
        for k in ("energy", "G2", "dEdt_partial", "transport"):
            assert b[k] == pytest.approx(a[k], rel=1e-9, abs=1e-12)


def test_meshsolver_summation_arguments():
    mesh, rho0, path = _mesh_case()
    with pytest.raises(ValueError, match="summation"):
        MeshSolver(mesh, rho0, path, summation="exact")
    with pytest.raises(ValueError, match="summation_tol"):
        MeshSolver(mesh, rho0, path, summation_tol=-1.0)
    s = MeshSolver(mesh, rho0, path)
    assert s.summation == "auto" and s.summation_tol == 1e-10


def test_config_keys_reach_the_solver():
    from spherepde.runs.runner import build_solver, build_weight_path

    cfg = default_config()
    assert cfg.solver.summation == "auto" and cfg.solver.summation_tol == 1e-10
    cfg = cfg.with_overrides({"solver.summation": "fast", "solver.summation_tol": 1e-8, "mesh.level": 4, "solver.T": 0.02})
    solver = build_solver(cfg, build_weight_path(cfg))
    assert solver.summation == "fast" and solver.summation_tol == 1e-8
    with pytest.raises(ConfigError, match="summation"):
        default_config().with_overrides({"solver.summation": "exact"})
    with pytest.raises(ConfigError, match="summation_tol"):
        default_config().with_overrides({"solver.summation_tol": 0.0})


@pytest.mark.parametrize("log_form", [False, True])
def test_far_head_between_expanded_heads(log_form):
    """A head too large for the expansion, between two expanded ones: only the expanded
    heads go through the target kernel, the far one is summed directly, and every head
    lands in its own column (scaled and log forms)."""
    rng = np.random.default_rng(12)
    X = unit_vectors(rng, 3000)
    w = rng.random(3000)
    A = np.stack([2.0 * np.eye(3), 40.0 * np.eye(3), np.diag([1.0, 3.0, -2.0])])
    C, Z, M, Q, info = fs.moments(X, X, w, A, want_q=True, log_form=log_form)
    assert info.path == "mixed" and info.degrees[1] == -1 and min(info.degrees[0], info.degrees[2]) > 0
    Zr, Mr, Qr = attention_moments_reference(X, X, w, A, want_q=True)
    if log_form:
        lz, mb, qb = Z, M, Q
    else:
        lz, mb, qb = np.log(Z) + C, M / Z[..., None], Q / Z
    assert np.max(np.abs(lz - np.log(Zr))) <= 1e-10
    assert np.max(np.abs(mb - Mr / Zr[..., None])) <= 1e-10
    assert np.max(np.abs(qb - Qr / Zr)) <= 1e-10


@pytest.mark.parametrize("m,H", [(50, 1), (5120, 4), (20480, 100)])
def test_kappa_max_serial_equals_parallel_bitwise(m, H):
    """kappa_max runs on one thread for small work (serial_below): the same bits as the parallel kernel, and the plain
    NumPy max of |A_h^T x_i| to round-off."""
    import numba

    from spherepde.attention.harmonic import _kappa_max_kernel, kappa_max

    rng = np.random.default_rng(m + H)
    X = rng.standard_normal((m, 3))
    X /= np.linalg.norm(X, axis=1)[:, None]
    A = rng.standard_normal((H, 3, 3)) * 4.0
    got = kappa_max(X, A)
    par = np.empty(H)
    _kappa_max_kernel(X, A, par)  # on the pool's threads
    n = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        ser = np.empty(H)
        _kappa_max_kernel(X, A, ser)
    finally:
        numba.set_num_threads(n)
    assert np.array_equal(got, par) and np.array_equal(got, ser)
    ref = np.linalg.norm(np.einsum("hji,mj->mhi", A, X), axis=2).max(axis=0)
    assert np.allclose(got, ref, rtol=1e-14, atol=0)
