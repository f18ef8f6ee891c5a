"""Fast attention sums on the circle S^1 (d = 2): Bessel series and FFT, with error control.

Targets x = (cos t, sin t), sources y_j = (cos p_j, sin p_j) with weights w_j >= 0
(docs/model.md, "Attention sums on the circle"). A head whose matrix lies in the span of the
identity and the rotation J = [[0, -1], [1, 0]], A = a I + b J, has

    x^T A y = a cos(t - p) + b sin(t - p) = r cos(t - p - phi),   r = |(a, b)|, phi = atan2(b, a),

a kernel of the difference t - p alone. The generating function of the modified Bessel
functions, exp(r cos u) = sum_{k in Z} I_k(r) e^{iku}, turns the sums into Fourier series:
with c_k = e^{-r} I_k(r) (``scipy.special.ive``; c_k = c_{-k} >= 0 and sum_k c_k = 1, the
Skellam probabilities), u = t - phi and the source coefficients mu_k = sum_j w_j e^{-ik p_j}
(mu_{-k} = conj(mu_k)),

    e^{-r} Z(x)   = sum_k c_k e^{iku} mu_k                                    (= W_0),
    e^{-r} (Y_1 + i Y_2)(x) = sum_k c_k e^{iku} mu_{k-1}                       (= W_{-1}),
    e^{-r} Q(x)   = e^{-r} Z / 2 + Re(e^{2it} W_2) / 2,   W_2 = sum_k c_k e^{iku} mu_{k+2},

from y_j = (e^{ip_j} + e^{-ip_j}) / 2 (as a complex number, e^{ip_j}) and
(x . y_j)^2 = cos^2(t - p_j) = 1/2 + (e^{2i(t - p_j)} + e^{-2i(t - p_j)}) / 4. Everything is
evaluated scaled by e^{-r} (the shift C = r of :mod:`spherepde.attention.direct`'s convention:
true sums = e^C * scaled sums), so nothing overflows for any r.

Two evaluations, both O((m + n) K) or better per head instead of O(m n):

* **Bessel series** (any targets and sources): the |k| <= K terms; mu_k is computed once
  for all heads and targets (O(n K)), each (target, head) costs O(K).
* **FFT** (sources on a uniform grid p_j = p_0 + 2 pi j / n, in any order, and targets on a
  uniform grid of the same n, shifted by any offset s -- the cells and the cell boundaries of
  a uniform mesh): Z, Y, Q are circular convolutions of (w, w y_1, w y_2) with the sampled
  kernel g_q = exp(r cos(s + 2 pi q / n - phi) - r) (and g_q cos^2(s + 2 pi q / n) for Q),
  computed exactly up to round-off with ``numpy.fft`` in O(n log n) per head.

Error control (``tol``; w >= 0, else the sums are done directly)
----------------------------------------------------------------
Truncation (series). For every target |W_s - W_s^K| <= sum_{|k| > K} c_k |mu_{k+s}|
<= T_K(r) sum w with T_K(r) = 2 sum_{k > K} c_k (rigorous; :func:`tail_bound` sums the
terms and bounds the rest geometrically with I_{k+1}(r) / I_k(r) < r / (2k + 2)). The Q
combination errs by at most the same. K (:func:`choose_order`) is the smallest order with
T_K(r) <= max(tol e^{-2r}, u) / 6: since e^{-r} Z >= e^{-2r} sum w, the first bound makes
the relative error of Z at most tol / 6 for every density (a-priori); where e^{-2r} tol
is below the unit round-off u the truncation is kept below round-off and the a-posteriori
check decides.

Anisotropic heads. A - a I - b J = [[e, f], [f, -e]] changes every exponent by at most
delta = |(e, f)| (its 2-norm); a head is summed as isotropic only where expm1(delta) <=
tol / 16 (exactly zero for A = beta I), and the perturbation enters the check below. Other
heads are summed directly (counted in :class:`CircleSumInfo` and logged once).
The same term covers points off the unit circle and the FFT grid's deviation from the ideal
grid: (2 r + 4) times the largest deviation.

Check per target (a posteriori). With eta = sum w (T_K(r) + rho) + rho_rel Z~_s (the scaled
truncation bound plus round-off allowances calibrated against extended-precision sums with a
safety factor >= 3: :func:`_round_allowance`) and eta' = eta + expm1(delta) (Z~_s + eta), a
target is accepted when 3 eta' <= tol Z~_s; then the relative error of Z is <= tol / 2 and
the error of the softmax averages Y/Z and Q/Z (norm <= 1) is < tol, as for the sphere
(:mod:`spherepde.attention.harmonic`). Rejected targets -- far from concentrated mass at
large r, where Z is below the round-off of the largest terms -- are recomputed directly.

Selection (:func:`moments`): ``mode="fast"`` sums every isotropic head fast; ``"auto"``
also compares a cost model of both paths (:func:`predicted_costs`) and sums directly unless
the fast path is predicted :data:`_AUTO_MARGIN` times cheaper. The FFT is used for a head
where the grids allow it and it is predicted cheaper than the series.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

import numpy as np
from scipy.special import ive

from spherepde._base import log_once
from spherepde._numba import njit, prange, serial_below
from spherepde.attention.direct import direct_scaled

__all__ = ["CircleSumInfo", "K_MAX", "choose_order", "isotropic_parts", "moments", "predicted_costs", "tail_bound", "uniform_grid"]

log = logging.getLogger(__name__)

#: Largest series order; a head needing more (r beyond ~2 10^5 at tol = 1e-10) is summed directly.
K_MAX = 4096
_U = 2.0**-53
#: Heads are summed as isotropic (and points taken as on the grid) only while expm1(delta) <= tol / _DELTA_SHARE.
_DELTA_SHARE = 16.0
#: Largest angular deviation (radians) of a point from the ideal uniform grid for the FFT path.
_GRID_DEV = 1e-9
#: Phases e^{iku} are recomputed from cos / sin every this many powers (bounds the recurrence's growth of round-off).
_RESEED = 16
#: Kernel loops (sources x coefficients, targets x heads x coefficients) below this much work run on one
#: thread: their serial time (< ~1 ms) is not worth waking the thread pool (far more on a loaded machine).
_PARALLEL_MIN_WORK = 1_000_000
#: Source blocks whose partial coefficients are added in a fixed order (thread-count independent).
_SOURCE_BLOCKS = 32


def _round_allowance(n: int, r: float, fft: bool) -> tuple[float, float]:
    """Round-off allowances (rho relative to sum w, rho_rel relative to Z~_s) of the scaled sums.

    Measured against extended-precision (long double) sums in tests/attention/test_circle_sums.py
    and at more sizes while writing it (point masses, two clusters and spread densities,
    r = 0.1 to 200, n = 64 to 16,384): beyond the truncation bound, at most ~2.4 u sum w (series;
    the source coefficients are summed with compensation) and ~3 u sum w (FFT), plus a part
    proportional to Z -- the conditioning of exp(r cos(.)) in the angles (rounding t by u
    changes Z by r u Z), which the direct sums share. The allowances are >= 3 times the
    largest measured error."""
    rho_rel = (16.0 + 12.0 * r) * _U
    if fft:
        return (8.0 + math.log2(max(n, 2))) * _U, rho_rel
    return 8.0 * _U, rho_rel


# ----------------------------------------------------------------- Bessel tails
def _tails(r: float, top: int) -> np.ndarray:
    """tails[K] = T_K(r) = 2 sum_{k > K} e^{-r} I_k(r) for K = 0..top - 1 (rigorous: the terms
    beyond ``top`` are bounded geometrically with ratio r / (2 top + 2) < 1)."""
    k = np.arange(top + 1)
    c = ive(k, r)
    q = r / (2.0 * top + 2.0)
    rest = c[-1] * q / (1.0 - q)
    # tails[K] = 2 (sum_{K < k <= top} c_k + rest), summed from the small end
    suffix = np.cumsum(c[::-1])[::-1]  # suffix[k] = sum_{k' >= k} c_k'
    # ive is accurate to a few 1e-15 relative: 1e-10 of margin keeps the bound an upper bound
    return 2.0 * (suffix[1:] + rest) * (1.0 + 1e-10)


def tail_bound(r: float, K: int) -> float:
    """T_K(r) = 2 sum_{k > K} e^{-r} I_k(r): the truncation error of the scaled series at
    order K, relative to sum w (for every target and every moment)."""
    r = float(r)
    if r <= 0.0:
        return 0.0
    top = int(max(K, r)) + 64
    return float(_tails(r, top)[int(K)])


def choose_order(r: float, tol: float, k_max: int = K_MAX) -> int:
    """Smallest K with T_K(r) <= max(tol e^{-2r}, u) / 6, or -1 if K > k_max would be needed."""
    if not tol > 0:
        raise ValueError(f"tol must be positive, got {tol}")
    r = float(r)
    if r <= 0.0:
        return 0
    if r > 64.0 * k_max:  # T_K(r) ~ exp(-K^2 / 2r) > u for every K <= k_max
        return -1
    target = max(tol * math.exp(-2.0 * r), _U) / 6.0
    top = int(r + 40.0 * math.sqrt(r + 1.0)) + 64  # far below u long before top; r / (2 top + 2) < 1/2
    tails = _tails(r, top)
    ok = np.flatnonzero(tails[: k_max + 1] <= target)
    return int(ok[0]) if ok.size else -1


# ------------------------------------------------------------ heads and grids
def isotropic_parts(A):
    """(r, phi, delta) per head for A (H, 2, 2): A = a I + b J + E with J = [[0, -1], [1, 0]],
    r = |(a, b)|, phi = atan2(b, a) (x^T (a I + b J) y = r cos(t - p - phi)) and delta = ||E||_2
    (E = [[e, f], [f, -e]], ||E||_2 = |(e, f)|)."""
    A = np.asarray(A, dtype=float)
    a = 0.5 * (A[:, 0, 0] + A[:, 1, 1])
    b = 0.5 * (A[:, 1, 0] - A[:, 0, 1])
    e = 0.5 * (A[:, 0, 0] - A[:, 1, 1])
    f = 0.5 * (A[:, 0, 1] + A[:, 1, 0])
    return np.hypot(a, b), np.arctan2(b, a), np.hypot(e, f)


def uniform_grid(P):
    """(theta_0, index, deviation) if the points P (n, 2) are a uniform grid theta_0 + 2 pi k / n
    in any order (``index[i]`` = k of point i, a permutation), else None; ``deviation`` is the
    largest angular distance of a point from its ideal grid point."""
    n = P.shape[0]
    if n < 2:
        return None
    theta = np.arctan2(P[:, 1], P[:, 0])
    q = np.mod(theta - theta[0], 2.0 * np.pi) * (n / (2.0 * np.pi))
    k = np.rint(q)
    dev = float(np.max(np.abs(q - k))) * (2.0 * np.pi / n)
    k = k.astype(np.int64) % n
    if dev > _GRID_DEV or np.bincount(k, minlength=n).max() != 1:
        return None
    return float(theta[0]), k, dev


# ------------------------------------------------------------------ kernels
@njit
def _neumaier(s, c, k, j, x):  # pragma: no cover - compiled
    """s[k, j] += x with Neumaier's compensation kept in c[k, j] (error ~u |sum|, whatever the order)."""
    t = s[k, j] + x
    if abs(s[k, j]) >= abs(x):
        c[k, j] += (s[k, j] - t) + x
    else:
        c[k, j] += (x - t) + s[k, j]
    s[k, j] = t


@njit(parallel=True)
def _source_kernel(p, w, K2, bsize, out, comp):  # pragma: no cover - compiled
    """out[b, k] = sum over the sources j of block b of w_j e^{-ik p_j}, k = 0..K2 (as (re, im)),
    by compensated summation (the sum plus the compensation ``comp`` is returned in ``out``)."""
    nb = out.shape[0]
    n = p.shape[0]
    for b in prange(nb):
        s = out[b]
        c = comp[b]
        for k in range(K2 + 1):
            s[k, 0] = 0.0
            s[k, 1] = 0.0
            c[k, 0] = 0.0
            c[k, 1] = 0.0
        for j in range(b * bsize, min(n, (b + 1) * bsize)):
            zr = math.cos(p[j])
            zi = -math.sin(p[j])
            er = w[j]
            ei = 0.0
            for k in range(K2 + 1):
                if k % _RESEED == 0 and k > 0:
                    er = w[j] * math.cos(k * p[j])
                    ei = -w[j] * math.sin(k * p[j])
                _neumaier(s, c, k, 0, er)
                _neumaier(s, c, k, 1, ei)
                t = er * zr - ei * zi
                ei = er * zi + ei * zr
                er = t
        for k in range(K2 + 1):
            s[k, 0] += c[k, 0]
            s[k, 1] += c[k, 1]


@njit
def _mu(mu, k):  # pragma: no cover - compiled
    """(re, im) of mu_k for any integer k (mu_{-k} = conj(mu_k))."""
    if k >= 0:
        return mu[k, 0], mu[k, 1]
    return mu[-k, 0], -mu[-k, 1]


@njit
def _series(c, K, er, ei, mu, s):  # pragma: no cover - compiled
    """W_s = sum_{|k| <= K} c_|k| e^{iku} mu_{k+s} (re, im), from small terms to large; (er, ei)[k] = e^{iku}."""
    wr = 0.0
    wi = 0.0
    for k in range(K, 0, -1):
        ar, ai = _mu(mu, k + s)
        br, bi = _mu(mu, s - k)
        # e^{iku} mu_{k+s} + e^{-iku} mu_{s-k}
        tr = er[k] * (ar + br) - ei[k] * (ai - bi)
        ti = er[k] * (ai + bi) + ei[k] * (ar - br)
        wr += c[k] * tr
        wi += c[k] * ti
    ar, ai = _mu(mu, s)
    return wr + c[0] * ar, wi + c[0] * ai


@njit(parallel=True)
def _target_kernel(t, phi, order, coef, tails, emd, rho, rho_rel, mu, wsum, tol, want_q,
                   Z, M, Q, bad):  # pragma: no cover - compiled
    """Scaled series sums of the heads (phi, order, coef[h, :K+1] = c_k) at the target angles t,
    with the a-posteriori check (bad[i, h] = 1 where it fails; module docstring)."""
    m = t.shape[0]
    Hs = phi.shape[0]
    kmax = coef.shape[1]
    for i in prange(m):
        er = np.empty(kmax)
        ei = np.empty(kmax)
        for h in range(Hs):
            K = order[h]
            u = t[i] - phi[h]
            cr = 1.0
            ci = 0.0
            zr = math.cos(u)
            zi = math.sin(u)
            for k in range(K + 1):
                if k % _RESEED == 0 and k > 0:
                    cr = math.cos(k * u)
                    ci = math.sin(k * u)
                er[k] = cr
                ei[k] = ci
                tmp = cr * zr - ci * zi
                ci = cr * zi + ci * zr
                cr = tmp
            c = coef[h]
            z, _ = _series(c, K, er, ei, mu, 0)
            y1, y2 = _series(c, K, er, ei, mu, -1)
            Z[i, h] = z
            M[i, h, 0] = y1
            M[i, h, 1] = y2
            if want_q:
                qr, qi = _series(c, K, er, ei, mu, 2)
                Q[i, h] = 0.5 * z + 0.5 * (math.cos(2.0 * t[i]) * qr - math.sin(2.0 * t[i]) * qi)
            eta = wsum * (tails[h] + rho) + rho_rel[h] * abs(z)
            eta += emd[h] * (abs(z) + eta)
            bad[i, h] = 0 if 3.0 * eta <= tol * z else 1


def _work(work: int) -> int:
    """The work passed to :func:`spherepde._numba.serial_below`: 0 (serial) below :data:`_PARALLEL_MIN_WORK`."""
    return work if work >= _PARALLEL_MIN_WORK else 0


def source_coefficients(p, w, K2: int) -> np.ndarray:
    """mu_k = sum_j w_j e^{-ik p_j}, k = 0..K2, as an array (K2 + 1, 2) of (re, im); a fixed number
    of source blocks added in a fixed order (the result does not depend on the thread count)."""
    n = p.shape[0]
    nb = max(1, min(_SOURCE_BLOCKS, -(-n // 1024)))
    bsize = -(-n // nb)
    out = np.empty((nb, K2 + 1, 2))
    with serial_below(_work(n * (K2 + 1))):
        _source_kernel(np.ascontiguousarray(p, dtype=float), np.ascontiguousarray(w, dtype=float), int(K2), bsize, out,
                       np.empty_like(out))
    mu = out[0].copy()
    comp = np.zeros_like(mu)
    for b in range(1, nb):  # Neumaier over the blocks, in a fixed order
        t = mu + out[b]
        comp += np.where(np.abs(mu) >= np.abs(out[b]), (mu - t) + out[b], (out[b] - t) + mu)
        mu = t
    return mu + comp


# ------------------------------------------------------------------- driver
@dataclass
class CircleSumInfo:
    """What :func:`moments` did: ``path`` ("fast", "direct" or "mixed"), the series order K per
    head (-1: direct), the heads summed by FFT (their targets rejected by the check are tried
    with the series of order K, then directly), the number of anisotropic
    heads summed directly, of (target, head) pairs recomputed directly by the a-posteriori
    check, the predicted cost ratio direct/fast, and the reasons of fallbacks."""

    path: str = "direct"
    orders: list = field(default_factory=list)
    fft_heads: list = field(default_factory=list)
    n_anisotropic: int = 0
    n_rechecked: int = 0
    predicted_speedup: float = float("nan")
    reasons: list = field(default_factory=list)


_LOGGED: set = set()


def _log_once(level: int, key, msg: str, *args) -> None:
    log_once(log, _LOGGED, level, key, msg, *args)


#: Cost model, relative to one (target, source, head) term of the direct kernel: per
#: (source, coefficient), per (target, head, coefficient) with Z and Y (Q adds half), per
#: n log2 n of an FFT head, and a fixed cost (measured on 2 cores; ``spherepde bench``
#: entry b_circle reports the measured speed-ups).
_COST_SOURCE = 1.0
_COST_TARGET = 0.7
_COST_FFT = 0.25
_COST_FIXED = 2e4  # the fast path's set-up: ~180 us at 32 points against ~9 ns per direct term (idle 2-core machine)
#: "auto" takes the fast path only when it is predicted this many times cheaper.
_AUTO_MARGIN = 1.5


def predicted_costs(m: int, n: int, orders, fft, want_q: bool):
    """(direct, fast) cost estimates (arbitrary units) of the heads summed fast (order >= 0):
    ``fft[h]`` says whether head h goes by FFT."""
    fast_heads = [h for h, K in enumerate(orders) if K >= 0]
    if not fast_heads:
        return 0.0, 0.0
    q = 1.5 if want_q else 1.0
    series = [orders[h] for h in fast_heads if not fft[h]]
    nfft = sum(1 for h in fast_heads if fft[h])
    direct = m * n * len(fast_heads) * (1.1 if want_q else 1.0)
    fast = _COST_FIXED + _COST_FFT * nfft * q * n * math.log2(max(n, 2)) * 4
    if series:
        fast += _COST_SOURCE * n * (max(series) + 3) + _COST_TARGET * q * m * sum(K + 1 for K in series)
    return direct, fast


def _fft_kernels(tgrid, sgrid, n, r, phi):
    """The offsets s + 2 pi q / n of the two grids, the scaled kernels g_q = exp(r cos(s + 2 pi q / n - phi) - r)
    of the heads (r, phi), shape (Hs, n), and their real FFTs."""
    s = tgrid - sgrid
    ang = s + (2.0 * np.pi / n) * np.arange(n)
    g = np.exp(r[:, None] * (np.cos(ang[None, :] - phi[:, None]) - 1.0))  # (Hs, n)
    ghat = np.fft.rfft(g, axis=1)
    return ang, g, ghat


def _fft_sums(X, Y, w, r, phi, grids, want_q):
    """(Z, M, Q) scaled by e^{-r}, shapes (m, Hs), (m, Hs, 2), (m, Hs): the FFT path."""
    (t0, ti, _), (p0, pj, _) = grids
    n = Y.shape[0]
    src = np.zeros((3, n))
    src[0, pj] = w
    src[1, pj] = w * Y[:, 0]
    src[2, pj] = w * Y[:, 1]
    shat = np.fft.rfft(src, axis=1)  # (3, n//2 + 1)
    ang, g, ghat = _fft_kernels(t0, p0, n, r, phi)
    conv = np.fft.irfft(shat[None, :, :] * ghat[:, None, :], n, axis=2)  # (Hs, 3, n), target grid order
    Z = conv[:, 0, ti].T
    M = np.moveaxis(conv[:, 1:, ti], (0, 1, 2), (1, 2, 0))
    Q = None
    if want_q:
        gq = np.fft.rfft(g * np.cos(ang)[None, :] ** 2, axis=1)
        Q = np.fft.irfft(shat[None, 0, :] * gq, n, axis=1)[:, ti].T
    return np.ascontiguousarray(Z), np.ascontiguousarray(M), Q


def _fft_check(Z, wsum, r, n, emd, tol):
    """The a-posteriori check of the FFT sums Z (m, Hs): True where a target is rejected."""
    rho, _ = _round_allowance(n, 0.0, True)
    rho_rel = np.array([_round_allowance(n, float(rh), True)[1] for rh in r])
    eta = wsum * rho + rho_rel[None, :] * np.abs(Z)
    eta = eta + emd[None, :] * (np.abs(Z) + eta)
    return ~(3.0 * eta <= tol * Z)


def _series_sums(X, Y, w, r, phi, orders, emd, tol, want_q):
    """(Z, M, Q, bad) scaled by e^{-r}: the Bessel series path for the heads (r, phi, orders)."""
    m, n = X.shape[0], Y.shape[0]
    Hs = len(r)
    Kmax = int(max(orders))
    mu = source_coefficients(np.arctan2(Y[:, 1], Y[:, 0]), w, Kmax + 2)
    coef = np.zeros((Hs, Kmax + 1))
    tails = np.empty(Hs)
    rho_rel = np.empty(Hs)
    rho = 0.0
    for h in range(Hs):
        coef[h, : orders[h] + 1] = ive(np.arange(orders[h] + 1), r[h])
        tails[h] = tail_bound(r[h], orders[h])
        rho, rho_rel[h] = _round_allowance(n, float(r[h]), False)
    Z = np.empty((m, Hs))
    M = np.empty((m, Hs, 2))
    Q = np.empty((m, Hs) if want_q else (0, 0))
    bad = np.zeros((m, Hs), dtype=np.uint8)
    t = np.arctan2(X[:, 1], X[:, 0])
    with serial_below(_work(m * sum(K + 1 for K in orders))):
        _target_kernel(t, np.asarray(phi, float), np.asarray(orders, np.int64), coef, tails, np.asarray(emd, float), rho,
                       rho_rel, mu, float(np.sum(w)), float(tol), bool(want_q), Z, M, Q, bad)
    return Z, M, (Q if want_q else None), bad.astype(bool)


def _plan(X, Y, A, tol, mode, level, info):
    """Per head: (r, phi, (expm1 of the perturbation bound delta of the series, of the FFT), series order or -1,
    FFT or not, grids); logs and notes the heads summed directly."""
    H = A.shape[0]
    r, phi, delta = isotropic_parts(A)
    dev_pts = max(float(np.max(np.abs(np.hypot(X[:, 0], X[:, 1]) - 1.0))), float(np.max(np.abs(np.hypot(Y[:, 0], Y[:, 1]) - 1.0))))
    grids = None
    if X.shape[0] == Y.shape[0]:
        gs = uniform_grid(Y)
        gt = uniform_grid(X) if gs is not None else None
        grids = (gt, gs) if gt is not None else None
    dev_grid = 0.0 if grids is None else max(grids[0][2], grids[1][2])
    dpt = (2.0 * r + 4.0) * dev_pts
    iso = np.expm1(delta + dpt) <= tol / _DELTA_SHARE
    orders = [choose_order(r[h], tol) if iso[h] else -1 for h in range(H)]
    fft = [False] * H
    if grids is not None:
        n = Y.shape[0]
        for h in range(H):
            ok = iso[h] and math.expm1(delta[h] + dpt[h] + (2.0 * r[h] + 4.0) * dev_grid) <= tol / _DELTA_SHARE
            cheaper = 4.0 * _COST_FFT * math.log2(max(n, 2)) < _COST_TARGET * (orders[h] + 1)
            if ok and cheaper and orders[h] >= 0:  # the series stays the second try of the FFT's rejected targets
                fft[h] = True
    n_aniso = int(np.count_nonzero(~iso))
    if n_aniso:
        info.reasons.append(f"{n_aniso} anisotropic heads")
        _log_once(level, ("anisotropic", mode), "circle sums: %d of %d heads have A outside span{I, J} (anisotropic part up to %.3g); "
                  "summing those heads directly", n_aniso, H, float(np.max(delta[~iso])))
    far = [h for h in range(H) if orders[h] < 0 and iso[h]]
    if far:
        info.reasons.append(f"{len(far)} heads with r too large")
        _log_once(level, ("order", mode), "circle sums: %d of %d heads need a series order > %d (r up to %.3g); summing those heads directly",
                  len(far), H, K_MAX, float(np.max(r[far])))
    info.n_anisotropic = n_aniso
    emd = np.expm1(delta + dpt)  # the series' perturbation term, and the FFT's with the grid's deviation
    emd_fft = np.expm1(delta + dpt + (2.0 * r + 4.0) * dev_grid)
    return r, phi, (emd, emd_fft), orders, fft, grids


def moments(X, Y, w, A, *, want_q=False, tol=1e-10, mode="fast", log_form=False):
    """Scaled attention sums (C, Z, M, Q) on the circle with the true sums = exp(C) * (Z, M, Q),
    and a :class:`CircleSumInfo`; with ``log_form`` (C, log Z, Mom/Z, Q/Z).

    X (m, 2), Y (n, 2) unit points, w (n,) >= 0, A (H, 2, 2), contiguous float64; ``mode`` is
    "fast" or "auto" (module docstring). ``tol`` bounds the relative error of Z and the error
    of Mom/Z and Q/Z (whose norms are at most 1). Q is an empty array unless ``want_q``.
    """
    m, n, H = X.shape[0], Y.shape[0], A.shape[0]
    info = CircleSumInfo()
    level = logging.INFO if mode == "auto" else logging.WARNING
    tol = float(tol)
    if not tol > 0:
        raise ValueError(f"summation tolerance must be positive, got {tol}")
    if X.shape[1:] != (2,) or Y.shape[1:] != (2,) or A.shape[1:] != (2, 2):
        raise ValueError(f"circle sums need d = 2: X{X.shape}, Y{Y.shape}, A{A.shape}")

    def direct(Xs, As):
        return direct_scaled(Xs, Y, w, As, want_q, True)

    def finish(C, Z, M, Q):
        Q = Q if want_q else np.empty((0, 0))
        if log_form:
            Z, M, Q = np.log(Z) + C, M / Z[..., None], (Q / Z if want_q else Q)
        return C, Z, M, Q, info

    wsum = float(np.sum(w)) if n else 0.0
    if H == 0 or m == 0 or not wsum > 0 or np.any(w < 0) or not np.all(np.isfinite(w)):
        if n and (np.any(w < 0) or not np.all(np.isfinite(w))):
            info.reasons.append("negative or non-finite weights")
            _log_once(level, ("negative", mode), "circle sums need non-negative finite weights; summing directly")
        info.orders = [-1] * H
        return finish(*direct(X, A))
    r, phi, emd, orders, fft, grids = _plan(X, Y, A, tol, mode, level, info)
    info.orders, info.fft_heads = list(orders), [h for h in range(H) if fft[h]]
    dcost, fcost = predicted_costs(m, n, orders, fft, want_q)
    info.predicted_speedup = dcost / fcost if fcost > 0 else float("inf")
    if all(K < 0 for K in orders) or (mode == "auto" and dcost < _AUTO_MARGIN * fcost):
        info.orders, info.fft_heads = [-1] * H, []
        return finish(*direct(X, A))
    C, Z, M, Q, bad = _fast_heads(X, Y, w, A, r, phi, emd, orders, fft, grids, tol, want_q, wsum)
    info.path = "fast" if all(K >= 0 for K in orders) else "mixed"
    info.n_rechecked = _recheck(X, A, bad, direct, (C, Z, M, Q), want_q, tol, level, mode)
    return finish(C, Z, M, Q)


def _fast_heads(X, Y, w, A, r, phi, emd, orders, fft, grids, tol, want_q, wsum):
    """(C, Z, M, Q, bad) for all heads: series and FFT heads summed fast, the others directly."""
    m, H = X.shape[0], A.shape[0]
    C = np.empty((m, H))
    Z = np.empty((m, H))
    M = np.empty((m, H, 2))
    Q = np.empty((m, H)) if want_q else None
    bad = np.zeros((m, H), dtype=bool)
    groups = (
        ([h for h in range(H) if orders[h] >= 0 and not fft[h]], "series"),
        ([h for h in range(H) if fft[h]], "fft"),
        ([h for h in range(H) if orders[h] < 0], "direct"),
    )
    for hs, how in groups:
        if not hs:
            continue
        if how == "direct":
            Cd, Zd, Md, Qd = direct_scaled(X, Y, w, np.ascontiguousarray(A[hs]), want_q, True)
            C[:, hs], Z[:, hs], M[:, hs] = Cd, Zd, Md
            if want_q:
                Q[:, hs] = Qd
            continue
        if how == "series":
            Zs, Ms, Qs, bs = _series_sums(X, Y, w, r[hs], phi[hs], [orders[h] for h in hs], emd[0][hs], tol, want_q)
        else:
            Zs, Ms, Qs = _fft_sums(X, Y, w, r[hs], phi[hs], grids, want_q)
            bs = _fft_check(Zs, wsum, r[hs], Y.shape[0], emd[1][hs], tol)
            _series_retry(X, Y, w, r[hs], phi[hs], [orders[h] for h in hs], emd[0][hs], tol, want_q, (Zs, Ms, Qs, bs))
        C[:, hs] = r[hs][None, :]
        Z[:, hs], M[:, hs], bad[:, hs] = Zs, Ms, bs
        if want_q:
            Q[:, hs] = Qs
    return C, Z, M, Q, bad


def _series_retry(X, Y, w, r, phi, orders, emd, tol, want_q, out) -> None:
    """The FFT's rejected targets summed again by the series (whose round-off allowance is smaller);
    ``out`` = (Z, M, Q, bad) of the FFT heads is updated where the series passes its check."""
    Zs, Ms, Qs, bs = out
    idx = np.flatnonzero(bs.any(axis=1))
    if idx.size == 0:
        return
    Zr, Mr, Qr, br = _series_sums(np.ascontiguousarray(X[idx]), Y, w, r, phi, orders, emd, tol, want_q)
    take = bs[idx] & ~br
    rows, cols = np.nonzero(take)
    Zs[idx[rows], cols], Ms[idx[rows], cols], bs[idx[rows], cols] = Zr[rows, cols], Mr[rows, cols], False
    if want_q:
        Qs[idx[rows], cols] = Qr[rows, cols]


def _recheck(X, A, bad, direct, out, want_q, tol, level, mode) -> int:
    """Recompute directly the (target, head) pairs the a-posteriori check rejected; returns their number."""
    C, Z, M, Q = out
    m, H = bad.shape
    nb = int(np.count_nonzero(bad))
    if nb > 0.01 * m * H:
        _log_once(level, ("recheck", mode), "circle sums: %d of %d (target, head) pairs missed tol = %.1e a posteriori "
                  "(small Z relative to the round-off of the largest terms); recomputed directly", nb, m * H, tol)
    for h in np.flatnonzero(bad.any(axis=0)):
        idx = np.flatnonzero(bad[:, h])
        Cd, Zd, Md, Qd = direct(np.ascontiguousarray(X[idx]), np.ascontiguousarray(A[h : h + 1]))
        C[idx, h], Z[idx, h], M[idx, h] = Cd[:, 0], Zd[:, 0], Md[:, 0]
        if want_q:
            Q[idx, h] = Qd[:, 0]
    return nb
