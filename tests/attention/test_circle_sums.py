"""Attention sums on the circle (d = 2): spherepde.attention.circle (Bessel series and FFT).

References: long double direct sums (independent of the series), a plain NumPy version of the
series, and the direct Numba kernels. Accuracy only -- speed is reported by ``spherepde bench``.
"""

from __future__ import annotations

import logging
import math

import mpmath
import numba
import numpy as np
import pytest
from scipy.special import ive

from spherepde.attention import attention_moments, circle

U = 2.0**-53


@pytest.fixture(autouse=True)
def _fresh_log_once():
    circle._LOGGED.clear()
    yield
    circle._LOGGED.clear()


def _pts(theta):
    theta = np.asarray(theta, dtype=float)
    return np.ascontiguousarray(np.stack([np.cos(theta), np.sin(theta)], axis=1))


def _iso(r, phi):
    """r (cos phi I + sin phi J): x^T A y = r cos(t - p - phi)."""
    c, s = r * math.cos(phi), r * math.sin(phi)
    return np.array([[c, -s], [s, c]])


def _reference(X, Y, w, A):
    """(log Z, Mom/Z, Q/Z) by direct sums in long double (an extended-precision reference,
    independent of the series): shapes (m, H), (m, H, 2), (m, H)."""
    ld = np.longdouble
    Xl, Yl, wl = X.astype(ld), Y.astype(ld), w.astype(ld)
    xy = Xl @ Yl.T
    out = []
    for Ah in A:
        E = np.einsum("ik,kl,jl->ij", Xl, Ah.astype(ld), Yl)
        c = E.max(axis=1, keepdims=True)
        ew = np.exp(E - c) * wl
        Z = ew.sum(axis=1)
        out.append((np.log(Z) + c[:, 0], (ew @ Yl) / Z[:, None], (ew * xy**2).sum(axis=1) / Z))
    return (np.stack([o[0] for o in out], 1).astype(float), np.stack([o[1] for o in out], 1).astype(float),
            np.stack([o[2] for o in out], 1).astype(float))


def _assert_within(res, ref, tol):
    """log Z to tol (the relative error of Z), the softmax averages Y/Z and Q/Z to tol."""
    (lz, m, q), (lzr, mr, qr) = res, ref
    assert np.max(np.abs(lz - lzr)) <= tol, np.max(np.abs(lz - lzr))
    assert np.max(np.linalg.norm(m - mr, axis=-1)) <= tol, np.max(np.linalg.norm(m - mr, axis=-1))
    assert np.max(np.abs(q - qr)) <= tol, np.max(np.abs(q - qr))


def _series_numpy(t, p, w, r, phi, K, s):
    """W_s(t) = sum_{|k| <= K} e^{-r} I_k(r) e^{ik(t - phi)} mu_{k+s}, mu_k = sum_j w_j e^{-ik p_j} (plain NumPy)."""
    k = np.arange(-K, K + 1)
    mu = np.exp(-1j * np.outer(k + s, p)) @ w
    return (np.exp(1j * np.outer(t - phi, k)) * ive(np.abs(k), r)) @ mu


# ---------------------------------------------------------------- the Bessel tail
@pytest.mark.parametrize("r", [0.1, 1.0, 5.0, 30.0, 200.0])
def test_tail_bound_is_the_tail(r):
    """T_K(r) = 2 sum_{k > K} e^{-r} I_k(r) against 30-digit Bessel values: an upper bound, tight to 1e-9."""
    mpmath.mp.dps = 30
    for K in sorted({1, 3, int(r), circle.choose_order(r, 1e-10)}):
        # the terms beyond K + r + 150 are below 1e-60 of the tail
        exact = float(2 * mpmath.fsum(mpmath.besseli(k, r) * mpmath.exp(-r) for k in range(K + 1, K + int(r) + 150)))
        T = circle.tail_bound(r, K)
        assert exact <= T <= exact * (1 + 1e-9) + 1e-300, (K, exact, T)


def test_choose_order():
    for r in (0.1, 1.0, 5.0, 30.0, 200.0):
        for tol in (1e-4, 1e-10, 1e-14):
            K = circle.choose_order(r, tol)
            target = max(tol * math.exp(-2 * r), U) / 6
            assert circle.tail_bound(r, K) <= target and (K == 0 or circle.tail_bound(r, K - 1) > target)
    assert circle.choose_order(0.0, 1e-10) == 0
    assert circle.choose_order(1e6, 1e-10) == -1  # beyond K_MAX: summed directly
    with pytest.raises(ValueError, match="tol must be positive"):
        circle.choose_order(1.0, 0.0)


def test_isotropic_parts():
    A = np.stack([_iso(3.0, 0.4), 2.0 * np.eye(2), np.array([[1.0, 0.5], [0.5, -1.0]]), np.array([[2.0, -1.0], [3.0, 0.0]])])
    r, phi, delta = circle.isotropic_parts(A)
    np.testing.assert_allclose(r[:2], [3.0, 2.0])
    np.testing.assert_allclose(phi[:2], [0.4, 0.0], atol=1e-15)
    np.testing.assert_allclose(delta, [0.0, 0.0, math.hypot(1.0, 0.5), np.linalg.norm(A[3] - [[1, -2], [2, 1]], 2)], atol=1e-15)
    # x^T (a I + b J) y = r cos(t - p - phi)
    t, p = 0.3, 2.1
    assert abs(_pts([t])[0] @ A[0] @ _pts([p])[0] - 3.0 * math.cos(t - p - 0.4)) < 1e-14


# ---------------------------------------------------------------- series kernel
def test_series_kernel_matches_numpy_series():
    """The compiled series (Z = W_0, Y = W_{-1}, Q = Z/2 + Re(e^{2it} W_2)/2) against the plain NumPy series."""
    rng = np.random.default_rng(0)
    t, p, w = rng.uniform(-np.pi, np.pi, 50), rng.uniform(0, 2 * np.pi, 70), rng.random(70)
    r, phi, K = 7.0, 0.9, 20
    Z, M, Q, _ = circle._series_sums(_pts(t), _pts(p), w, np.array([r]), np.array([phi]), [K], np.zeros(1), 1e-10, True)
    W0, W1, W2 = (_series_numpy(t, p, w, r, phi, K, s) for s in (0, -1, 2))
    np.testing.assert_allclose(Z[:, 0], W0.real, rtol=0, atol=1e-14 * w.sum())
    np.testing.assert_allclose(M[:, 0, 0] + 1j * M[:, 0, 1], W1, rtol=0, atol=1e-14 * w.sum())
    np.testing.assert_allclose(Q[:, 0], 0.5 * W0.real + 0.5 * (np.exp(2j * t) * W2).real, rtol=0, atol=1e-14 * w.sum())
    assert np.max(np.abs(W0.imag)) < 1e-14 * w.sum()


@pytest.mark.parametrize("r", [1.0, 5.0, 20.0])
def test_truncation_bound_holds_and_is_attained(r):
    """For every order K the series errs by at most sum w (T_K + rho) + rho_rel Z (all moments),
    and for a point mass at the target's own angle the bound is attained (so a too small bound fails)."""
    th = np.linspace(0, 2 * np.pi, 60, endpoint=False)
    X, Y = _pts(th), _pts([0.0, 2.0])
    w = np.array([1.0, 1e-9])
    ld = np.longdouble
    E = ld(r) * (X.astype(ld) @ Y.T.astype(ld)) - ld(r)
    ew = np.exp(E) * w.astype(ld)
    Zr, Mr, Qr = (ew.sum(1), ew @ Y.astype(ld), (ew * (X.astype(ld) @ Y.T.astype(ld)) ** 2).sum(1))
    for K in (2, 5, 10, circle.choose_order(r, 1e-10)):
        Z, M, Q, _ = circle._series_sums(X, Y, w, np.array([r]), np.zeros(1), [K], np.zeros(1), 1e-10, True)
        rho, rho_rel = circle._round_allowance(2, r, False)
        T = circle.tail_bound(r, K)
        eta = w.sum() * (T + rho) + rho_rel * np.abs(Z[:, 0])
        err = np.maximum.reduce([np.abs(Z[:, 0] - Zr.astype(float)), np.linalg.norm(M[:, 0] - Mr.astype(float), axis=1),
                                 np.abs(Q[:, 0] - Qr.astype(float))])
        assert np.all(err <= eta), (K, np.max(err / eta))
        if T > 1e-12:
            assert abs(Z[0, 0] - float(Zr[0])) >= 0.5 * T  # the target at the mass: error ~ T itself


@pytest.mark.parametrize("fft", [False, True])
def test_round_off_allowance_against_extended_precision(fft):
    """Beyond the truncation bound, the series and the FFT err by at most a third of their round-off
    allowance (sum w rho + rho_rel Z~): point masses (the hardest case) and two clusters, r = 0.5 to 200,
    every moment, against long double direct sums."""
    rng = np.random.default_rng(13)
    n = 1024
    worst = 0.0
    for dens in ("point", "two"):
        for r in (0.5, 5.0, 50.0, 200.0):
            th = ((np.arange(n) + 0.25) * 2 * np.pi / n)[rng.permutation(n)] if fft else rng.uniform(0, 2 * np.pi, n)
            Y = _pts(th)
            X = Y if fft else _pts(rng.uniform(0, 2 * np.pi, 200))
            if dens == "point":
                w = np.full(n, 1e-12)
                w[0] = 1.0
            else:
                w = np.exp(8 * (np.cos(th - 1) - 1)) + np.exp(30 * (np.cos(th + 2) - 1)) + 1e-3
            phi = rng.uniform(-np.pi, np.pi)
            rr, ph = np.array([r]), np.array([phi])
            K = circle.choose_order(r, 1e-10)
            if fft:
                Z, M, Q = circle._fft_sums(X, Y, w, rr, ph, (circle.uniform_grid(X), circle.uniform_grid(Y)), True)
                T = 0.0
            else:
                Z, M, Q, _ = circle._series_sums(X, Y, w, rr, ph, [K], np.zeros(1), 1e-10, True)
                T = circle.tail_bound(r, K)
            sel = np.arange(0, len(X), max(1, len(X) // 200))
            ld = np.longdouble
            Xl, Yl = X[sel].astype(ld), Y.astype(ld)
            a, b = ld(r) * np.cos(ld(phi)), ld(r) * np.sin(ld(phi))
            E = a * (Xl @ Yl.T) + b * (Xl[:, 1:2] * Yl[:, 0] - Xl[:, 0:1] * Yl[:, 1]) - ld(r)
            ew = np.exp(E) * w.astype(ld)
            Zr, Mr, Qr = ew.sum(1), ew @ Yl, (ew * (Xl @ Yl.T) ** 2).sum(1)
            z = Z[sel, 0]
            err = np.maximum.reduce([np.abs(z - Zr.astype(float)), np.linalg.norm(M[sel, 0] - Mr.astype(float), axis=1),
                                     np.abs(Q[sel, 0] - Qr.astype(float))])
            rho, rho_rel = circle._round_allowance(n, r, fft)
            worst = max(worst, float(np.max(np.maximum(err - T * w.sum(), 0) / (w.sum() * rho + rho_rel * np.abs(z)))))
    assert worst <= 1 / 3, worst


# ---------------------------------------------------------------- fast vs references
@pytest.mark.parametrize("r", [0.1, 1.0, 5.0, 30.0, 200.0])
@pytest.mark.parametrize("tol", [1e-4, 1e-8, 1e-12])
def test_fast_matches_extended_precision_random_points(r, tol):
    """Non-uniform targets and sources, random weights and a clustered density: error below tol."""
    rng = np.random.default_rng(int(r * 10) + int(-math.log10(tol)))
    p = rng.uniform(0, 2 * np.pi, 300)
    X, Y = _pts(rng.uniform(-np.pi, np.pi, 120)), _pts(p)
    A = _iso(r, rng.uniform(-np.pi, np.pi))[None]
    for w in (rng.random(300), np.exp(6 * (np.cos(p - 1) - 1)) + 1e-3):
        res = attention_moments(X, Y, w, A, want_q=True, log=True, summation="fast", tol=tol)
        _assert_within(res, _reference(X, Y, w, A), tol)


def test_mixed_heads_isotropic_and_anisotropic():
    """H = 5 heads, two anisotropic (summed directly, counted and logged), three in span{I, J}."""
    rng = np.random.default_rng(3)
    X, Y, w = _pts(rng.uniform(0, 7, 90)), _pts(rng.uniform(0, 7, 200)), rng.random(200)
    A = np.stack([_iso(4.0, 0.3), np.array([[2.0, 1.0], [1.0, -0.5]]), 8.0 * np.eye(2), rng.standard_normal((2, 2)), _iso(0.5, -2.0)])
    C, Z, M, Q, info = circle.moments(X, Y, w, A, want_q=True, tol=1e-10, log_form=True)
    assert info.n_anisotropic == 2 and info.path == "mixed"
    assert [K < 0 for K in info.orders] == [False, True, False, True, False]
    _assert_within((Z, M, Q), _reference(X, Y, w, A), 1e-10)
    raw = attention_moments(X, Y, w, A, want_q=True, summation="fast")
    direct = attention_moments(X, Y, w, A, want_q=True, summation="direct")
    for h in (1, 3):  # the anisotropic heads are the direct kernel's, bit for bit
        assert np.array_equal(raw[0][:, h], direct[0][:, h]) and np.array_equal(raw[1][:, h], direct[1][:, h])


def test_anisotropic_heads_are_logged(caplog):
    rng = np.random.default_rng(4)
    X = _pts(rng.uniform(0, 7, 30))
    with caplog.at_level(logging.WARNING, logger="spherepde.attention.circle"):
        circle.moments(X, X, np.ones(30), np.array([[[1.0, 0.0], [0.0, 2.0]]]), mode="fast")
    assert "anisotropic" in caplog.text and "summing those heads directly" in caplog.text


@pytest.mark.parametrize("shift", [0.0, 0.5])
def test_uniform_grid_fft_matches_direct(shift):
    """Sources on a uniform grid in shuffled order; targets the same grid (shift 0) or the midpoints
    between its points (shift 1/2): the FFT path against the direct sums and the series path."""
    rng = np.random.default_rng(5)
    n = 512
    th = (np.arange(n) + 0.25) * 2 * np.pi / n
    perm = rng.permutation(n)
    Y = _pts(th[perm])
    X = _pts(th[rng.permutation(n)] + shift * 2 * np.pi / n)
    w = np.exp(4 * (np.cos(th[perm] + 1) - 1)) + 0.05
    A = np.stack([_iso(3.0, 0.2), _iso(40.0, -1.0), 2.0 * np.eye(2)])
    C, Z, M, Q, info = circle.moments(X, Y, w, A, want_q=True, tol=1e-10, log_form=True)
    assert info.fft_heads == [0, 1, 2]
    _assert_within((Z, M, Q), _reference(X, Y, w, A), 1e-10)
    # the same points off the grid by 1e-6 rad: the series, no FFT
    C2, Z2, M2, Q2, info2 = circle.moments(_pts(th[perm] + 1e-6 * rng.standard_normal(n)), Y, w, A, want_q=True, log_form=True)
    assert info2.fft_heads == [] and info2.path == "fast"


def test_uniform_grid_detection():
    n = 64
    th = 0.1 + 2 * np.pi * np.arange(n) / n
    perm = np.random.default_rng(6).permutation(n)
    t0, idx, dev = circle.uniform_grid(_pts(th[perm]))
    assert dev < 1e-14 and np.array_equal(np.sort(idx), np.arange(n))
    assert np.allclose(np.mod(t0 + 2 * np.pi * idx / n - th[perm] + 1, 2 * np.pi), 1)
    assert circle.uniform_grid(_pts(th[:-1])) is None  # 63 of 64 points
    assert circle.uniform_grid(_pts(np.r_[th[:-1], th[0]])) is None  # a point twice
    assert circle.uniform_grid(_pts(th + 1e-7 * np.arange(n))) is None


def test_log_form_and_raw_and_large_r():
    rng = np.random.default_rng(7)
    X, Y, w = _pts(rng.uniform(0, 7, 60)), _pts(rng.uniform(0, 7, 150)), rng.random(150)
    A = np.stack([_iso(3.0, 0.5), _iso(30.0, 2.0)])
    Z, M, Q = attention_moments(X, Y, w, A, want_q=True, summation="fast")
    lz, Mz, Qz = attention_moments(X, Y, w, A, want_q=True, log=True, summation="fast")
    np.testing.assert_allclose(np.log(Z), lz, rtol=0, atol=1e-13)
    np.testing.assert_allclose(M / Z[..., None], Mz, rtol=0, atol=1e-13)
    np.testing.assert_allclose(Q / Z, Qz, rtol=0, atol=1e-13)
    # r = 900: e^{900} overflows the raw sums, the log form is finite and right
    A = _iso(900.0, 0.1)[None]
    with np.errstate(over="ignore"):
        assert not np.all(np.isfinite(attention_moments(X, Y, w, A, summation="fast")[0]))
    res = attention_moments(X, Y, w, A, want_q=True, log=True, summation="fast")
    assert all(np.all(np.isfinite(a)) for a in res)
    _assert_within(res, _reference(X, Y, w, A), 1e-10)


def test_concentrated_mass_far_targets_are_rechecked():
    """A point mass and r = 60: far targets' Z is below the round-off of the largest terms; they are
    recomputed directly and the result still meets tol."""
    th = np.linspace(0, 2 * np.pi, 400, endpoint=False)
    X = Y = _pts(th)
    w = np.full(400, 1e-14)
    w[7] = 1.0
    A = _iso(60.0, 0.0)[None]
    C, Z, M, Q, info = circle.moments(X, Y, w, A, want_q=True, tol=1e-10, log_form=True)
    assert 0 < info.n_rechecked < 400
    _assert_within((Z, M, Q), _reference(X, Y, w, A), 1e-10)


def test_thread_count_does_not_change_the_result():
    """Large enough for both kernels' parallel regions (circle._PARALLEL_MIN_WORK)."""
    rng = np.random.default_rng(8)
    X, Y, w = _pts(rng.uniform(0, 7, 8000)), _pts(rng.uniform(0, 7, 9000)), rng.random(9000)
    A = np.stack([_iso(50.0, 0.1), _iso(200.0, 1.0)])
    assert 8000 * (circle.choose_order(50.0, 1e-10) + circle.choose_order(200.0, 1e-10)) >= circle._PARALLEL_MIN_WORK
    assert 9000 * circle.choose_order(200.0, 1e-10) >= circle._PARALLEL_MIN_WORK
    nt = numba.get_num_threads()
    a = attention_moments(X, Y, w, A, want_q=True, summation="fast")
    numba.set_num_threads(1)
    try:
        b = attention_moments(X, Y, w, A, want_q=True, summation="fast")
    finally:
        numba.set_num_threads(nt)
    assert all(np.array_equal(u, v) for u, v in zip(a, b))


def test_a_wrong_sum_fails_the_checks():
    """The checks above can fail: the moment series without the shift mu_{k-1} (i.e. Z's
    coefficients for Y), or Q without its e^{2it} factor, misses the reference by far more than tol."""
    rng = np.random.default_rng(9)
    t, p, w = rng.uniform(-np.pi, np.pi, 40), rng.uniform(0, 2 * np.pi, 100), rng.random(100)
    r, phi = 5.0, 0.3
    K = circle.choose_order(r, 1e-10)
    X, Y, A = _pts(t), _pts(p), _iso(r, phi)[None]
    W0, W1, W2 = (_series_numpy(t, p, w, r, phi, K, s) for s in (0, -1, 2))
    right = (np.log(W0.real)[:, None] + r, np.stack([W1.real, W1.imag], -1)[:, None] / W0.real[:, None, None],
             (0.5 + 0.5 * (np.exp(2j * t) * W2).real / W0.real)[:, None])
    ref = _reference(X, Y, w, A)
    _assert_within(right, ref, 1e-10)  # the NumPy series itself is right
    no_shift = (right[0], np.stack([W0.real, W0.imag], -1)[:, None] / W0.real[:, None, None], right[2])
    no_phase = (right[0], right[1], (0.5 + 0.5 * W2.real / W0.real)[:, None])
    for wrong in (no_shift, no_phase):
        with pytest.raises(AssertionError):
            _assert_within(wrong, ref, 1e-10)


# ---------------------------------------------------------------- dispatch, shapes, errors
def test_direct_mode_and_small_auto_problems_are_the_direct_kernel():
    """summation='direct' never uses the circle sums; 'auto' keeps small problems (the d = 2 token runs)
    on the direct kernel, bit for bit."""
    rng = np.random.default_rng(10)
    X = _pts(rng.uniform(0, 7, 40))
    A = np.tile(2.0 * np.eye(2), (10, 1, 1))
    w = np.full(40, 1 / 40)
    d = attention_moments(X, X, w, A, want_q=True, summation="direct")
    a = attention_moments(X, X, w, A, want_q=True, summation="auto")
    assert all(np.array_equal(u, v) for u, v in zip(d, a))
    f = attention_moments(X, X, w, A, want_q=True, summation="fast")
    assert not np.array_equal(d[0], f[0]) and np.allclose(d[0], f[0], rtol=1e-12)


def test_auto_uses_the_series_on_large_problems():
    rng = np.random.default_rng(11)
    n = 2000
    X = _pts(rng.uniform(0, 7, n))
    w = rng.random(n)
    A = _iso(5.0, 0.0)[None]
    *_, info = circle.moments(X, X, w, A, mode="auto")
    assert info.path == "fast" and info.predicted_speedup >= circle._AUTO_MARGIN
    *_, info = circle.moments(X[:50], X, w, A, mode="auto")  # 50 targets: direct is cheaper
    assert info.path == "direct" and info.orders == [-1]


def test_negative_weights_bad_shapes_and_tol(caplog):
    rng = np.random.default_rng(12)
    X = _pts(rng.uniform(0, 7, 20))
    w = rng.random(20) - 0.3
    A = 2.0 * np.eye(2)[None]
    with caplog.at_level(logging.WARNING, logger="spherepde.attention.circle"):
        res = attention_moments(X, X, w, A, summation="fast")
    assert "non-negative" in caplog.text
    assert all(np.array_equal(u, v) for u, v in zip(res[:2], attention_moments(X, X, w, A, summation="direct")[:2]))
    with pytest.raises(ValueError, match="inconsistent shapes"):
        attention_moments(X, X, w, np.eye(3)[None], summation="fast")
    with pytest.raises(ValueError, match="tolerance must be positive"):
        attention_moments(X, X, np.ones(20), A, summation="fast", tol=0.0)
    with pytest.raises(ValueError, match="d = 2"):
        circle.moments(np.ones((3, 3)), np.ones((3, 3)), np.ones(3), np.eye(3)[None])
    # no heads, no targets
    Z, M, Q = attention_moments(X, X, np.ones(20), np.zeros((0, 2, 2)), summation="fast")
    assert Z.shape == (20, 0) and M.shape == (20, 0, 2)
    Z, M, Q = attention_moments(X[:0], X, np.ones(20), A, want_q=True, summation="fast")
    assert Z.shape == (0, 1) and M.shape == (0, 1, 2) and Q.shape == (0, 1)


def test_bench_entry_reports_both_paths_and_their_errors():
    """``spherepde bench`` entry (f) at a tiny size: both layouts, both paths timed, errors below tol
    (speed itself is never asserted here)."""
    from spherepde.studies.benchmarks import bench_circle

    rows = bench_circle(True, sizes=(400,))
    assert [(x["N"], x["layout"], x["path"]) for x in rows] == [(400, "random", "series"), (400, "grid", "fft")]
    for x in rows:
        assert x["t_direct_s"] > 0 and x["t_circle_s"] > 0 and x["speedup"] == x["t_direct_s"] / x["t_circle_s"]
        assert x["max_err_logZ"] <= 1e-10 and x["max_err_v"] <= 1e-10 and x["order"] == circle.choose_order(5.0, 1e-10)


def test_auto_takes_the_circle_sums_on_a_mesh_sized_grid_and_direct_sums_below():
    """The d = 2 threshold of summation = "auto" (sums._AUTO_MIN_WORK_CIRCLE): 512 cell nodes of a uniform
    circle mesh (one head, A = 5 I) go by the fast sums (equal to the direct ones to 1e-12, not bit for bit);
    64 go by the direct kernel, bit for bit."""
    from spherepde.attention import attention_moments

    for n, fast in ((512, True), (64, False)):
        th = (np.arange(n) + 0.5) * 2 * np.pi / n
        X = np.stack([np.cos(th), np.sin(th)], axis=1)
        w = np.random.default_rng(n).random(n)
        w /= w.sum()
        A = np.array([5.0 * np.eye(2)])
        auto = attention_moments(X, X, w, A, log=True, summation="auto")
        direct = attention_moments(X, X, w, A, log=True, summation="direct")
        np.testing.assert_allclose(auto[0], direct[0], rtol=0, atol=1e-12)
        np.testing.assert_allclose(auto[1], direct[1], rtol=0, atol=1e-12)
        assert np.array_equal(auto[0], direct[0]) is (not fast)
