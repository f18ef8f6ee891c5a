"""Fast summation of the attention sums on S^2 (d = 3) by spherical harmonics.

For a target x and head h put b = A_h^T x, kappa = |b|, c = b / kappa. Funk--Hecke and
the addition theorem (real, orthonormal spherical harmonics Y_lm) give

    exp(b . y) = sum_l (2l+1) i_l(kappa) P_l(c . y) = sum_l 4 pi i_l(kappa) sum_m Y_lm(c) Y_lm(y),

so, truncated at degree L,

    Z_h(x)   = sum_j w_j exp(b . y_j)        ~ sum_{l<=L} 4 pi i_l(kappa) sum_m Y_lm(c) S_lm,
    Mom_h(x) = sum_j w_j exp(b . y_j) y_j    ~ (same with S^k_lm),  k = 1, 2, 3,
    Q_h(x)   = sum_j w_j exp(b . y_j)(x.y_j)^2 ~ sum_{k<=k'} x_k x_k' (same with S^{kk'}_lm),

with source moments S_lm = sum_j w_j Y_lm(y_j), S^k_lm = sum_j w_j y_jk Y_lm(y_j),
S^{kk'}_lm = sum_j w_j y_jk y_jk' Y_lm(y_j), computed once for all heads and targets.
Cost O(N L^2 (1 + H)) instead of O(N^2 H). i_l is the modified spherical Bessel
function; everything is evaluated *scaled* by exp(-kappa) (Z_s = exp(-kappa) Z lies in
[exp(-2 kappa), 1] sum w), so nothing overflows; the kernels return the shift kappa
in the convention of :mod:`spherepde.attention.direct` (true sums = exp(C) * scaled sums).

Accuracy control (``tol``; w >= 0 assumed, else the sums are done directly)
------------------------------------------------------------------------
Truncation error. |P_l| <= 1 on [-1, 1], so for every y the truncated expansion errs by
at most T_L(kappa) = sum_{l>L} (2l+1) i_l(kappa), increasing in kappa. Hence
|Z~ - Z| <= T_L(kappa) sum w, ||Mom~ - Mom|| <= T_L(kappa) sum w (the error is a scalar
function times y_j, |y_j| = 1) and |Q~ - Q| <= T_L(kappa) sum w. :func:`tail_bound`
computes T_L by summing the series and bounding the rest geometrically (term ratio
(2l+3) i_{l+1} / ((2l+1) i_l) < kappa / (2l+1), from I_{nu+1}/I_nu < x/(nu+1/2+...)).

Degree per block of targets (a priori). Z(x) >= exp(-kappa(x)) sum w for w >= 0, with
kappa(x) = |A_h^T x|, so |Z~ - Z| / Z <= exp(kappa) T_L(kappa) =: eps, increasing in kappa.
For each block of _P targets and head h, L is the smallest degree with
exp(kappa_b) T_L(kappa_b) <= tol / 6, kappa_b the block's largest kappa rounded up to a
multiple of 1/64 (:func:`degree_table`). If a head needs L > ``l_max`` (default
:data:`L_MAX`) at its largest kappa over all targets, it is summed directly (and a log
record says so). The moments Mom/Z and Q/Z may be asked for at a looser ``tol_moments``:
they are then truncated at that tolerance's (lower) degree and checked against it.

Check per target (a posteriori). With eta = sum w (exp(-kappa) T_L(kappa_h) + rho)
(scaled truncation bound plus a round-off allowance rho = (64 + sqrt(n)/8) u, calibrated
against extended-precision sums on worst cases with a safety factor >= 3), a target
is accepted when 3 eta <= tol Z~_s. Then

    |Z~ - Z| / Z <= eta / (Z~_s - eta) <= tol / 2,
    ||Mom~/Z~ - Mom/Z|| <= (||dMom|| + ||Mom/Z|| |dZ|) / Z~_s <= 2 eta / Z~_s < tol,

(the same for Q/Z) -- the error of the softmax average v = Mom/Z is measured in its own
natural scale ||v|| <= max |y| = 1 (a relative error ||dv|| / ||v|| cannot be bounded
where v -> 0, e.g. a uniform density). Rejected targets are recomputed by the direct
kernel: none for spread densities; where mass is concentrated and kappa >~ 5, the
targets far from it (Z~_s < ~5e-4 sum w at tol = 1e-10), whose expansion loses
exp(2 kappa)-fold to cancellation.

Selection (:func:`moments`, called from :func:`spherepde.attention.attention_moments`):
``summation="fast"`` uses this path for every head that meets the tolerance;
``"auto"`` in addition compares a cost model of both paths (:func:`predicted_costs`) and
takes the direct sums unless the fast path is predicted at least :data:`_AUTO_MARGIN` (1.5)
times cheaper; problems below 10^6 target-source-head triples
(``spherepde.attention.sums._AUTO_MIN_WORK``) are always summed directly
(``spherepde bench`` measures the speed-ups). Fallbacks are logged once per process and reason (logger
``spherepde.attention.harmonic``; INFO for ``auto``, WARNING for an explicit ``"fast"``).

Kernels: blocks of 64 targets (or sources) share every inner loop, which LLVM
vectorises over the block; targets run in parallel (gathers, no shared writes), sources
in a fixed number of blocks whose partial moments are added in a fixed order, so the
results do not depend on the number of threads.
"""

from __future__ import annotations

import functools
import logging
import math
from dataclasses import dataclass, field

import numpy as np
from scipy.special import ive

from spherepde._base import log_once
from spherepde._numba import SIMD_FASTMATH, njit, prange, serial_below
from spherepde.attention.direct import direct_scaled

__all__ = [
    "L_MAX",
    "FastSumInfo",
    "choose_degree",
    "log_tail_bound",
    "moments",
    "real_sph_harm",
    "scaled_bessel_coefficients",
    "source_moments",
    "tail_bound",
]

log = logging.getLogger(__name__)

#: Largest expansion degree used; heads needing more are summed directly.
L_MAX = 64
_U = 2.0**-53


def _round_allowance(n: int) -> float:
    """Round-off allowance rho of the scaled sums, relative to sum w: (64 + sqrt(n)/8) u.

    Measured against extended-precision sums (tests/attention/test_harmonic.py; uniform to
    point-like densities, L = 10..64, targets near and far from the mass, all ten
    moments): at most 20, 13 and 21 u for n = 2,880, 20,480 and 81,920 -- a safety
    factor of >= 3."""
    return (64.0 + math.sqrt(n) / 8.0) * _U


#: Number of moments: Z and Mom (1 + 3), with Q also the six products y_k y_k' (10).
_NMOM = (4, 10)
#: The most source blocks (partial moments, added in a fixed order).
_SOURCE_BLOCKS = 32

#: Cost model, relative to one (target, source, head) exponential of the direct SIMD
#: kernel: per (source, coefficient, moment) and per (target, head, coefficient,
#: moment) of the expansion (measured side by side on 2 cores: ~1.2 ns vs ~0.1-0.15 and
#: ~0.08-0.15 of it; ``spherepde bench`` reports the measured speed-ups).
_COST_DIRECT = 1.0
_COST_SOURCE = 0.12
_COST_TARGET = 0.13
#: Fixed cost of a fast evaluation (set-up, two parallel regions; ~0.8 ms on a loaded 2-core
#: machine: a whole fast evaluation at 640 x 640 points, one head, takes 1.7 ms).
_COST_FIXED = 4e5
#: "auto" takes the fast path only when it is predicted this many times cheaper (the model
#: is within ~25 % of the measured ratio from 640 to 5,120 points, H = 1 and 10).
_AUTO_MARGIN = 1.5


# ----------------------------------------------------------------- Bessel tails
def _scaled_il(l, kappa):
    """exp(-kappa) i_l(kappa) (modified spherical Bessel, first kind), vectorised in l."""
    l = np.asarray(l, dtype=float)
    if kappa == 0.0:
        return np.where(l == 0, 1.0, 0.0)
    return ive(l + 0.5, kappa) * math.sqrt(math.pi / (2.0 * kappa))


def log_tail_bound(kappa: float, L: int) -> float:
    """log of an upper bound of T_L(kappa) = sum_{l > L} (2l+1) i_l(kappa) (-inf if 0).

    Sums the (scaled) terms up to l = max(L, 2 kappa) + 40 and bounds the remainder by a
    geometric series with ratio kappa / (2 l + 1) (< 1/2 there).
    """
    kappa = float(kappa)
    if kappa <= 0.0:
        return -math.inf
    top = int(max(L, 2.0 * kappa)) + 40
    ls = np.arange(L + 1, top + 1)
    terms = (2 * ls + 1) * _scaled_il(ls, kappa)
    r = kappa / (2 * top + 1)
    s = float(np.sum(terms) + terms[-1] * r / (1.0 - r))
    return math.log(s) + kappa if s > 0.0 else -math.inf


def tail_bound(kappa: float, L: int) -> float:
    """Upper bound of T_L(kappa) = sum_{l > L} (2l+1) i_l(kappa) (see :func:`log_tail_bound`;
    inf where it overflows)."""
    lt = log_tail_bound(kappa, L)
    return math.exp(lt) if lt < 709.0 else math.inf


def _round_up(kappa: float) -> float:
    """kappa rounded up to a multiple of 1/64 (T_L is increasing in kappa: conservative)."""
    return math.ceil(max(float(kappa), 0.0) * 64.0) / 64.0


@functools.lru_cache(maxsize=1 << 16)
def _tail_cached(kappa_q: float, L: int) -> float:
    return tail_bound(kappa_q, L)


@functools.lru_cache(maxsize=1 << 16)
def _choose_degree_cached(kappa_q: float, tol: float, l_max: int) -> int:
    if tol < 1.0 and kappa_q > 2.0 * l_max + 2.0:  # e^kappa T_L(kappa) >> 1 for every L <= l_max
        return -1
    target = math.log(tol / 6.0)
    for L in range(l_max + 1):
        if kappa_q + log_tail_bound(kappa_q, L) <= target:
            return L
    return -1


def choose_degree(kappa: float, tol: float, l_max: int = L_MAX) -> int:
    """Smallest L with exp(kappa) T_L(kappa) <= tol / 6 (the a-priori relative error of Z
    for any density with w >= 0), or -1 if L > l_max would be needed.

    kappa is rounded up to a grid of 1/64 for caching (a larger kappa is conservative).
    """
    if not tol > 0:
        raise ValueError(f"tol must be positive, got {tol}")
    return _choose_degree_cached(_round_up(kappa), float(tol), int(l_max))


def scaled_bessel_coefficients(kappa: float, L: int) -> np.ndarray:
    """4 pi exp(-kappa) i_l(kappa), l = 0..L (NumPy/SciPy; the kernels use a continued fraction)."""
    return 4.0 * math.pi * _scaled_il(np.arange(L + 1), float(kappa))


# ------------------------------------------------------- Legendre recurrences
@functools.lru_cache(maxsize=8)
def _legendre_tables(L: int):
    """Coefficients of the normalised associated Legendre recurrences up to degree L.

    q_lm = Pbar_l^m(z) / sin^m(theta) (orthonormal on the sphere together with cos/sin(m phi);
    no Condon--Shortley phase):
        q_00 = 1/sqrt(4 pi),  q_mm = sqrt((2m+1)/(2m)) q_{m-1,m-1},  q_{m+1,m} = sqrt(2m+3) z q_mm,
        q_lm = a_lm (z q_{l-1,m} - b_lm q_{l-2,m}),  a_lm = sqrt((4l^2-1)/(l^2-m^2)),
        b_lm = sqrt(((l-1)^2-m^2)/(4(l-1)^2-1)).
    """
    a = np.zeros((L + 1, L + 1))
    b = np.zeros((L + 1, L + 1))
    for l in range(2, L + 1):
        m = np.arange(0, l - 1)
        a[l, : l - 1] = np.sqrt((4.0 * l * l - 1.0) / (l * l - m * m))
        b[l, : l - 1] = np.sqrt(((l - 1.0) ** 2 - m * m) / (4.0 * (l - 1.0) ** 2 - 1.0))
    m = np.arange(L + 1)
    diag = np.ones(L + 1)
    diag[1:] = np.sqrt((2.0 * m[1:] + 1.0) / (2.0 * m[1:]))
    sub = np.sqrt(2.0 * m + 3.0)
    for arr in (a, b, diag, sub):
        arr.flags.writeable = False
    return a, b, diag, sub


#: Points handled together by the kernels: the inner loops run over these lanes and
#: LLVM vectorises them (with runtime alias checks; 8 fully unrolled lanes do not vectorise).
_P = 64


@njit(fastmath=SIMD_FASTMATH)
def _legendre_v(z, L, a, b, diag, sub, q):  # pragma: no cover - compiled
    """q[l, m, p] = q_lm(z[p]) for 0 <= m <= l <= L and the _P lanes p (see :func:`_legendre_tables`)."""
    for p in range(_P):
        q[0, 0, p] = 0.28209479177387814  # 1/sqrt(4 pi)
    if L == 0:
        return
    for p in range(_P):
        q[1, 0, p] = sub[0] * z[p] * q[0, 0, p]
        q[1, 1, p] = diag[1] * q[0, 0, p]
    for l in range(2, L + 1):
        for m in range(l - 1):
            alm = a[l, m]
            blm = b[l, m]
            for p in range(_P):
                q[l, m, p] = alm * (z[p] * q[l - 1, m, p] - blm * q[l - 2, m, p])
        sl = sub[l - 1]
        dl = diag[l]
        for p in range(_P):
            q[l, l - 1, p] = sl * z[p] * q[l - 1, l - 1, p]
            q[l, l, p] = dl * q[l - 1, l - 1, p]


@njit(fastmath=SIMD_FASTMATH)
def _azimuth_v(x, y, L, cr, ci, re, im):  # pragma: no cover - compiled
    """cr[m, p] + i ci[m, p] = sqrt(2) (x[p] + i y[p])^m for m >= 1; cr[0] = 1, ci[0] = 0."""
    s2 = 1.4142135623730951
    for p in range(_P):
        cr[0, p] = 1.0
        ci[0, p] = 0.0
        re[p] = 1.0
        im[p] = 0.0
    for m in range(1, L + 1):
        for p in range(_P):
            r0 = re[p] * x[p] - im[p] * y[p]
            i0 = re[p] * y[p] + im[p] * x[p]
            re[p] = r0
            im[p] = i0
            cr[m, p] = s2 * r0
            ci[m, p] = s2 * i0


@njit(fastmath=SIMD_FASTMATH)
def _harmonics_kernel(P, L, a, b, diag, sub, out):  # pragma: no cover - compiled
    n = P.shape[0]
    q = np.empty((L + 1, L + 1, _P))
    cr = np.empty((L + 1, _P))
    ci = np.empty((L + 1, _P))
    re = np.empty(_P)
    im = np.empty(_P)
    xs = np.empty(_P)
    ys = np.empty(_P)
    zs = np.empty(_P)
    for i0 in range(0, n, _P):
        for p in range(_P):
            i = min(i0 + p, n - 1)
            xs[p] = P[i, 0]
            ys[p] = P[i, 1]
            zs[p] = P[i, 2]
        _legendre_v(zs, L, a, b, diag, sub, q)
        _azimuth_v(xs, ys, L, cr, ci, re, im)
        for p in range(min(_P, n - i0)):
            i = i0 + p
            for l in range(L + 1):
                base = l * l + l
                out[i, base] = q[l, 0, p]
                for m in range(1, l + 1):
                    out[i, base + m] = q[l, m, p] * cr[m, p]
                    out[i, base - m] = q[l, m, p] * ci[m, p]


def real_sph_harm(P, L: int) -> np.ndarray:
    """Real orthonormal spherical harmonics at unit points P (n, 3), shape (n, (L+1)^2).

    Column l^2 + l + m holds Y_lm: m = 0: Pbar_l(z); m > 0: sqrt(2) Pbar_l^m cos(m phi);
    m < 0: sqrt(2) Pbar_l^|m| sin(|m| phi) (no Condon--Shortley phase). The compiled
    recurrences of the fast-summation kernels (:func:`_legendre_v`, :func:`_azimuth_v`).
    """
    P = np.ascontiguousarray(P, dtype=np.float64)
    L = int(L)
    out = np.empty((P.shape[0], (L + 1) ** 2))
    _harmonics_kernel(P, L, *_legendre_tables(L), out)
    return out


# ------------------------------------------------------------ coefficient matrices
# Internal layout of a degree-L coefficient vector (length (L+1)^2; the vector of a lower
# degree is a prefix): at offset l^2 the l+1 "cosine" entries m = 0..l, then at offset
# l^2 + l the l "sine" entries m = 1..l (Y_{l,m} and Y_{l,-m} of :func:`real_sph_harm`).
@njit(fastmath=SIMD_FASTMATH)
def _bessel_cf(kappa, nv, L, top, cl, rr):  # pragma: no cover - compiled
    """cl[l, p] = 4 pi exp(-kappa_p) i_l(kappa_p), l = 0..L, p < nv, from the continued
    fraction of the ratios r_l = i_l / i_{l-1} = kappa / (2l + 1 + kappa r_{l+1}) started
    at ``top`` >= L + 16 + kappa (relative error ~1e-15, no overflow for any kappa >= 0;
    exp(-kappa) i_0 = -expm1(-2 kappa) / (2 kappa))."""
    for p in range(nv):
        rr[p] = 0.0
    for l in range(top, L, -1):
        for p in range(nv):
            rr[p] = kappa[p] / (2.0 * l + 1.0 + kappa[p] * rr[p])
    for l in range(L, 0, -1):
        for p in range(nv):
            rr[p] = kappa[p] / (2.0 * l + 1.0 + kappa[p] * rr[p])
            cl[l, p] = rr[p]
    for p in range(nv):
        k = kappa[p]
        cl[0, p] = 4.0 * math.pi * (-math.expm1(-2.0 * k) / (2.0 * k) if k > 1e-300 else 1.0)
    for l in range(1, L + 1):
        for p in range(nv):
            cl[l, p] *= cl[l - 1, p]


#: Smallest kappa of a block for which :func:`_bessel_block` uses Miller's downward
#: recurrence: the unnormalised values grow by at most e^kappa (2L+1)!! / kappa^L
#: (< 1e250 for L <= 64 at kappa >= 0.05), far from overflow.
_MILLER_KAPPA = 0.05


@njit(fastmath=SIMD_FASTMATH)
def _bessel_block(kappa, kmin, L, top, cl, rr):  # pragma: no cover - compiled
    """cl[l, p] = 4 pi exp(-kappa_p) i_l(kappa_p), l = 0..L, for the _P lanes.

    Where every lane has kappa >= _MILLER_KAPPA (``kmin``), the continued fraction is run
    only from ``top`` down to r_{L+1} = i_{L+1} / i_L, then Miller's downward recurrence
    i_{l-1} = i_{l+1} + (2l+1)/kappa i_l (stable for the minimal solution i_l, products
    only) gives values proportional to i_l, normalised by the closed form of
    exp(-kappa) i_0 = -expm1(-2 kappa) / (2 kappa): about L fewer divisions than
    :func:`_bessel_cf` (which handles the other blocks), agreeing with it to ~1e-15."""
    if kmin < _MILLER_KAPPA or L < 1:
        _bessel_cf(kappa, _P, L, top, cl, rr)
        return
    for p in range(_P):
        rr[p] = 0.0
    for l in range(top, L, -1):
        t = 2.0 * l + 1.0
        for p in range(_P):
            rr[p] = kappa[p] / (t + kappa[p] * rr[p])
    t = 2.0 * L + 1.0
    for p in range(_P):
        inv = 1.0 / kappa[p]
        cl[L, p] = 1.0
        cl[L - 1, p] = rr[p] + t * inv  # i_{L+1}/i_L + (2L+1)/kappa
        rr[p] = inv
    for l in range(L - 1, 0, -1):
        t = 2.0 * l + 1.0
        for p in range(_P):
            cl[l - 1, p] = cl[l + 1, p] + t * rr[p] * cl[l, p]
    for p in range(_P):
        k = kappa[p]
        rr[p] = 4.0 * math.pi * (-math.expm1(-2.0 * k) / (2.0 * k)) / cl[0, p]
    for l in range(L + 1):
        for p in range(_P):
            cl[l, p] *= rr[p]


@njit(fastmath=SIMD_FASTMATH)
def _load_block(P, i0, nv, c0, c1, c2):  # pragma: no cover - compiled
    for p in range(_P):
        i = i0 + min(p, nv - 1)  # padding lanes repeat the last point
        c0[p] = P[i, 0]
        c1[p] = P[i, 1]
        c2[p] = P[i, 2]


@njit(parallel=True, fastmath=SIMD_FASTMATH)
def _source_kernel(Y, F, L, a, b, diag, sub, bsize, out):  # pragma: no cover - compiled
    """out[kb, s, :] = sum over the sources j of block kb of F[s, j] Y(y_j) (internal layout).

    One parallel region; blocks of _P sources share every loop (vectorised over them);
    each (s, coefficient) is a dot product over the _P sources."""
    n = Y.shape[0]
    nmom = F.shape[0]
    nblk = out.shape[0]
    for kb in prange(nblk):
        q = np.empty((L + 1, L + 1, _P))
        cr = np.empty((L + 1, _P))
        ci = np.empty((L + 1, _P))
        re = np.empty(_P)
        im = np.empty(_P)
        c0 = np.empty(_P)
        c1 = np.empty(_P)
        c2 = np.empty(_P)
        f = np.zeros((nmom, _P))
        o_ = out[kb]
        o_[:] = 0.0
        j1 = min(n, (kb + 1) * bsize)
        for j0 in range(kb * bsize, j1, _P):
            nv = min(_P, j1 - j0)
            _load_block(Y, j0, nv, c0, c1, c2)
            for s in range(nmom):
                for p in range(nv):
                    f[s, p] = F[s, j0 + p]
                for p in range(nv, _P):  # padding lanes carry no weight
                    f[s, p] = 0.0
            _legendre_v(c2, L, a, b, diag, sub, q)
            _azimuth_v(c0, c1, L, cr, ci, re, im)
            # all moments of one coefficient in one vectorised pass over the lanes
            # (separate reductions keep LLVM's accumulators in registers)
            f0 = f[0]
            f1 = f[1]
            f2 = f[2]
            f3 = f[3]
            for l in range(L + 1):
                o = l * l
                for m in range(l + 1):
                    a0 = 0.0
                    a1 = 0.0
                    a2 = 0.0
                    a3 = 0.0
                    s0 = 0.0
                    s1 = 0.0
                    s2 = 0.0
                    s3 = 0.0
                    for p in range(_P):
                        uc = q[l, m, p] * cr[m, p]
                        us = q[l, m, p] * ci[m, p]
                        a0 += f0[p] * uc
                        a1 += f1[p] * uc
                        a2 += f2[p] * uc
                        a3 += f3[p] * uc
                        s0 += f0[p] * us
                        s1 += f1[p] * us
                        s2 += f2[p] * us
                        s3 += f3[p] * us
                    o_[0, o + m] += a0
                    o_[1, o + m] += a1
                    o_[2, o + m] += a2
                    o_[3, o + m] += a3
                    if m > 0:
                        o_[0, o + l + m] += s0
                        o_[1, o + l + m] += s1
                        o_[2, o + l + m] += s2
                        o_[3, o + l + m] += s3
                    if nmom == 10:
                        for s in range(4, 10, 3):
                            g0 = f[s]
                            g1 = f[s + 1]
                            g2 = f[s + 2]
                            a0 = 0.0
                            a1 = 0.0
                            a2 = 0.0
                            s0 = 0.0
                            s1 = 0.0
                            s2 = 0.0
                            for p in range(_P):
                                uc = q[l, m, p] * cr[m, p]
                                us = q[l, m, p] * ci[m, p]
                                a0 += g0[p] * uc
                                a1 += g1[p] * uc
                                a2 += g2[p] * uc
                                s0 += g0[p] * us
                                s1 += g1[p] * us
                                s2 += g2[p] * us
                            o_[s, o + m] += a0
                            o_[s + 1, o + m] += a1
                            o_[s + 2, o + m] += a2
                            if m > 0:
                                o_[s, o + l + m] += s0
                                o_[s + 1, o + l + m] += s1
                                o_[s + 2, o + l + m] += s2


def _cdiv(a: int, b: int) -> int:
    return -(a // -b)


def _source_functions(Y, w, want_q):
    """w_j f_s(y_j), shape (nmom, n), f = (1, y_1, y_2, y_3[, y1^2, y1 y2, y1 y3, y2^2, y2 y3, y3^2])."""
    wy = w[:, None] * Y
    rows = [w, wy[:, 0], wy[:, 1], wy[:, 2]]
    if want_q:
        rows += [wy[:, 0] * Y[:, 0], wy[:, 0] * Y[:, 1], wy[:, 0] * Y[:, 2], wy[:, 1] * Y[:, 1], wy[:, 1] * Y[:, 2], wy[:, 2] * Y[:, 2]]
    return np.ascontiguousarray(np.stack(rows))


def source_moments(Y, w, L: int, want_q: bool = False) -> np.ndarray:
    """Source moments up to degree L, shape (nmom, (L+1)^2) in the internal layout
    (see above): S[s, .] = sum_j w_j f_s(y_j) Y(y_j), f = (1, y_1, y_2, y_3[, y1^2,
    y1 y2, y1 y3, y2^2, y2 y3, y3^2]) (nmom = 4, or 10 with ``want_q``).
    """
    Y = np.ascontiguousarray(Y, dtype=np.float64)
    w = np.ascontiguousarray(w, dtype=np.float64)
    L = int(L)
    n = Y.shape[0]
    F = _source_functions(Y, w, want_q)
    # a fixed number of blocks (a function of n only) added in a fixed order: the
    # result does not depend on the number of threads
    nblk = max(1, min(_SOURCE_BLOCKS, _cdiv(n, 1024)))
    bsize = _cdiv(_cdiv(n, nblk), _P) * _P
    nblk = max(1, _cdiv(n, bsize))
    out = np.empty((nblk, F.shape[0], (L + 1) ** 2))
    _source_kernel(Y, F, L, *_legendre_tables(L), bsize, out)
    S = out[0].copy()
    for k in range(1, nblk):
        S += out[k]
    return S


@njit(fastmath=SIMD_FASTMATH)
def _accumulate(S, L0, L1, nmom, cl, q, cr, ci, acc):  # pragma: no cover - compiled
    """acc[s, p] += sum_{L0 <= l <= L1} sum_m cl[l, p] (Y_{l,m}(c_p) S[s, l,m] + Y_{l,-m}(c_p) S[s, l,-m])
    for the first ``nmom`` moments s (1, 4 or 10), in one vectorised pass over the lanes
    per coefficient (separate accumulators keep LLVM's registers)."""
    a0 = acc[0]
    a1 = acc[1]
    a2 = acc[2]
    a3 = acc[3]
    for l in range(L0, L1 + 1):
        o = l * l
        for m in range(l + 1):
            k0 = S[0, o + m]
            j0 = S[0, o + l + m] if m > 0 else 0.0  # no sine entry for m = 0 (ci[0] = 0)
            if nmom == 1:
                for p in range(_P):
                    t = cl[l, p] * q[l, m, p]
                    a0[p] += t * (cr[m, p] * k0 + ci[m, p] * j0)
                continue
            k1 = S[1, o + m]
            k2 = S[2, o + m]
            k3 = S[3, o + m]
            j1 = S[1, o + l + m] if m > 0 else 0.0
            j2 = S[2, o + l + m] if m > 0 else 0.0
            j3 = S[3, o + l + m] if m > 0 else 0.0
            for p in range(_P):
                t = cl[l, p] * q[l, m, p]
                uc = t * cr[m, p]
                us = t * ci[m, p]
                a0[p] += uc * k0 + us * j0
                a1[p] += uc * k1 + us * j1
                a2[p] += uc * k2 + us * j2
                a3[p] += uc * k3 + us * j3
            if nmom == 10:
                for s in range(4, 10, 3):
                    g0 = acc[s]
                    g1 = acc[s + 1]
                    g2 = acc[s + 2]
                    k0 = S[s, o + m]
                    k1 = S[s + 1, o + m]
                    k2 = S[s + 2, o + m]
                    j0 = S[s, o + l + m] if m > 0 else 0.0
                    j1 = S[s + 1, o + l + m] if m > 0 else 0.0
                    j2 = S[s + 2, o + l + m] if m > 0 else 0.0
                    for p in range(_P):
                        t = cl[l, p] * q[l, m, p]
                        uc = t * cr[m, p]
                        us = t * ci[m, p]
                        g0[p] += uc * k0 + us * j0
                        g1[p] += uc * k1 + us * j1
                        g2[p] += uc * k2 + us * j2


@njit(parallel=True, fastmath=SIMD_FASTMATH)
def _target_kernel(X, A, S, want_q, deg_z, deg_m, tail_z, tail_m, wsum, tol_z, tol_m, rho, log_form,
                   a, b, diag, sub, C, Z, M, Q, bad):  # pragma: no cover - compiled
    """Truncated expansions of all heads at the targets X, in the (target, head) layout.

    For target x_i and head h, b = A_h^T x_i, kappa = |b|, c = b / kappa:
    Z~ = sum_{l <= Lz} 4 pi exp(-kappa) i_l(kappa) sum_m Y_lm(c) S_lm (scaled by exp(-kappa)),
    and the moments Mom~ (and Q~ = sum_kk' x_k x_k' Q~^{kk'}) the same with S^k, S^{kk'}
    truncated at Lm <= Lz. The degrees are chosen per block of _P targets from the
    largest kappa of the block, kq = ceil(64 kappa): Lz = deg_z[kq] (relative error of Z
    <= tol_z a priori), Lm = deg_m[kq] (error of Mom/Z, Q/Z <= tol_m); tail_z[kq] and
    tail_m[kq] are the tail bounds T_L(kq / 64) of those degrees. A block whose degree is
    -1 (kappa too large for the table's l_max) and every target failing the a-posteriori
    test (module docstring) 3 eta <= tol Z~ (eta = wsum (exp(-kappa) T_L + rho), for both
    tolerances) get bad[i, h] = 1 and are left for direct summation.

    Outputs: C[i, h] = kappa, Z, M[i, h, :], Q (scaled, true = exp(C) * value); with
    ``log_form`` Z = log Z (true), M = Mom / Z, Q = Q / Z instead (C still kappa).
    One parallel region over the blocks, all heads inside."""
    m_t = X.shape[0]
    H = A.shape[0]
    nmom = 10 if want_q else 4
    ntab = deg_z.shape[0]
    Lmax = 0
    for k in range(ntab):
        Lmax = max(Lmax, deg_z[k])
    nblk = (m_t + _P - 1) // _P
    for kb in prange(nblk):
        q = np.empty((Lmax + 1, Lmax + 1, _P))
        cr = np.empty((Lmax + 1, _P))
        ci = np.empty((Lmax + 1, _P))
        cl = np.empty((Lmax + 1, _P))
        re = np.empty(_P)
        im = np.empty(_P)
        rr = np.empty(_P)
        x0 = np.empty(_P)
        x1 = np.empty(_P)
        x2 = np.empty(_P)
        c0 = np.empty(_P)
        c1 = np.empty(_P)
        c2 = np.empty(_P)
        kap = np.empty(_P)
        acc = np.empty((nmom, _P))
        i0 = kb * _P
        nv = min(_P, m_t - i0)
        _load_block(X, i0, nv, x0, x1, x2)
        for h in range(H):
            kmax = _block_centres(A, h, x0, x1, x2, kap, c0, c1, c2)
            for p in range(nv):
                C[i0 + p, h] = kap[p]
            kq = min(int(math.ceil(kmax * 64.0)), ntab - 1)
            L = deg_z[kq]
            Lm = min(deg_m[kq], L)
            if L < 0 or Lm < 0:
                for p in range(nv):
                    bad[i0 + p, h] = 1
                continue
            kmin = kap[0]
            for p in range(_P):
                kmin = min(kmin, kap[p])
            _bessel_block(kap, kmin, L, L + 16 + int(kmax), cl, rr)
            _legendre_v(c2, L, a, b, diag, sub, q)
            _azimuth_v(c0, c1, L, cr, ci, re, im)
            for s in range(nmom):
                for p in range(_P):
                    acc[s, p] = 0.0
            _accumulate(S, 0, Lm, nmom, cl, q, cr, ci, acc)
            _accumulate(S, Lm + 1, L, 1, cl, q, cr, ci, acc)
            _store_block(acc, kap, x0, x1, x2, i0, nv, h, want_q, log_form, wsum, tail_z[kq], tail_m[kq], rho,
                         tol_z, tol_m, Z, M, Q, bad)


@njit(fastmath=SIMD_FASTMATH)
def _block_centres(A, h, x0, x1, x2, kap, c0, c1, c2):  # pragma: no cover - compiled
    """For the _P targets of a block (x0, x1, x2) and head h: b = A_h^T x, kap = |b|, (c0, c1, c2) = b / |b|
    (the north pole where b = 0); returns the block's largest kappa."""
    kmax = 0.0
    for p in range(_P):
        b0 = A[h, 0, 0] * x0[p] + A[h, 1, 0] * x1[p] + A[h, 2, 0] * x2[p]
        b1 = A[h, 0, 1] * x0[p] + A[h, 1, 1] * x1[p] + A[h, 2, 1] * x2[p]
        b2 = A[h, 0, 2] * x0[p] + A[h, 1, 2] * x1[p] + A[h, 2, 2] * x2[p]
        k = math.sqrt(b0 * b0 + b1 * b1 + b2 * b2)
        kap[p] = k
        kmax = max(kmax, k)
        if k > 0.0:
            c0[p] = b0 / k
            c1[p] = b1 / k
            c2[p] = b2 / k
        else:  # exp(0) = 1: only l = 0 contributes, any centre will do
            c0[p] = 0.0
            c1[p] = 0.0
            c2[p] = 1.0
    return kmax


@njit(fastmath=SIMD_FASTMATH)
def _store_block(acc, kap, x0, x1, x2, i0, nv, h, want_q, log_form, wsum, tz, tm, rho, tol_z, tol_m,
                 Z, M, Q, bad):  # pragma: no cover - compiled
    """Write the accumulated sums ``acc`` of the first ``nv`` targets of a block (rows i0 + p, head h) into Z, M, Q
    (scaled, or in log form), and flag bad[i, h] = 1 where the a-posteriori test
    3 wsum (exp(-kappa) T_L + rho) <= tol Z~ fails for the tail bound tz (Z) or tm (moments)."""
    for p in range(nv):
        i = i0 + p
        zs = acc[0, p]
        e = math.exp(-kap[p])
        if not (3.0 * wsum * (e * tz + rho) <= tol_z * zs and 3.0 * wsum * (e * tm + rho) <= tol_m * zs):
            bad[i, h] = 1
        qs = 0.0
        if want_q:
            y0 = x0[p]
            y1 = x1[p]
            y2 = x2[p]
            qs = (y0 * y0 * acc[4, p] + 2.0 * y0 * y1 * acc[5, p] + 2.0 * y0 * y2 * acc[6, p]
                  + y1 * y1 * acc[7, p] + 2.0 * y1 * y2 * acc[8, p] + y2 * y2 * acc[9, p])
        if log_form:
            if zs > 0.0:
                Z[i, h] = math.log(zs) + kap[p]
                M[i, h, 0] = acc[1, p] / zs
                M[i, h, 1] = acc[2, p] / zs
                M[i, h, 2] = acc[3, p] / zs
                if want_q:
                    Q[i, h] = qs / zs
            else:  # rejected above (bad = 1); recomputed directly
                Z[i, h] = -np.inf
        else:
            Z[i, h] = zs
            M[i, h, 0] = acc[1, p]
            M[i, h, 1] = acc[2, p]
            M[i, h, 2] = acc[3, p]
            if want_q:
                Q[i, h] = qs


@njit(parallel=True)
def _kappa_max_kernel(X, A, out):  # pragma: no cover - compiled
    """out[h] = max_i |A_h^T x_i|."""
    H = A.shape[0]
    for h in prange(H):
        km = 0.0
        for i in range(X.shape[0]):
            s = 0.0
            for k in range(3):
                bk = A[h, 0, k] * X[i, 0] + A[h, 1, k] * X[i, 1] + A[h, 2, k] * X[i, 2]
                s += bk * bk
            km = max(km, s)
        out[h] = math.sqrt(km)


#: kappa_max runs on one thread below SERIAL_WORK * KAPPA_WORK target-heads (m H): a head's max costs ~15 flops per target,
#: far less than waking the thread pool (the same bits either way: each head is one thread's loop).
KAPPA_WORK = 64


def kappa_max(X, A) -> np.ndarray:
    """kappa_h = max_i |A_h^T x_i|, shape (H,) (X (m, 3), A (H, 3, 3)); the same bits on any thread count."""
    out = np.empty(A.shape[0])
    with serial_below(X.shape[0] * A.shape[0] / KAPPA_WORK):  # waking the threads costs more than a few million products
        _kappa_max_kernel(np.ascontiguousarray(X, dtype=np.float64), np.ascontiguousarray(A, dtype=np.float64), out)
    return out


def degree_table(kappa: float, tol: float, l_max: int = L_MAX):
    """(deg, tail): for kq = 0 .. ceil(64 kappa), deg[kq] = :func:`choose_degree` (kq / 64, tol)
    (-1 where L > l_max would be needed) and tail[kq] = T_deg(kq / 64) (:func:`tail_bound`;
    inf where deg = -1). The per-block degree choice of the target kernel."""
    nq = int(math.ceil(max(float(kappa), 0.0) * 64.0)) + 1
    return _degree_table(nq, float(tol), int(l_max))


#: (tol, l_max) -> (deg, tail) of the longest table built so far: a shorter table is its prefix (entry kq depends on kq,
#: tol and l_max alone), so a kappa that moves from step to step extends one table instead of building a new one.
_DEGREE_TABLES: dict = {}


def _degree_table(nq: int, tol: float, l_max: int):
    deg, tail = _DEGREE_TABLES.get((tol, l_max), (np.empty(0, dtype=np.int64), np.empty(0)))
    n0 = deg.shape[0]
    if nq > n0:
        deg = np.concatenate([deg, np.empty(nq - n0, dtype=np.int64)])
        tail = np.concatenate([tail, np.empty(nq - n0)])
        for k in range(n0, nq):
            deg[k] = _choose_degree_cached(k / 64.0, tol, l_max)
            tail[k] = _tail_cached(k / 64.0, int(deg[k])) if deg[k] >= 0 else math.inf
        for arr in (deg, tail):
            arr.flags.writeable = False
        if len(_DEGREE_TABLES) >= 64:  # a bound on the memory, as the lru_cache before
            _DEGREE_TABLES.clear()
        _DEGREE_TABLES[(tol, l_max)] = (deg, tail)
    return deg[:nq], tail[:nq]


def target_expansion(X, A, degrees, S: np.ndarray, *, want_q: bool = False):
    """(C, Z, M, Q): the scaled truncated expansions exp(-kappa) sum_j w_j f(y_j)
    exp(x_i^T A y_j) with f = 1, y, (x_i . y)^2 at one fixed degree per head
    (``degrees[h]`` >= 0, no a-posteriori check) from the source moments S of
    :func:`source_moments`; C (m, H) = kappa = |A_h^T x_i|, Z (m, H), M (m, H, 3), Q (m, H)
    (zeros without ``want_q``). For tests of the expansion itself; :func:`moments` is the
    driver with error control."""
    X = np.ascontiguousarray(X, dtype=np.float64)
    A = np.ascontiguousarray(A, dtype=np.float64)
    m, H = X.shape[0], A.shape[0]
    out = tuple(np.zeros(s) for s in ((m, H), (m, H), (m, H, 3), (m, H)))
    for h, L in enumerate(degrees):
        deg = np.full(1, int(L), dtype=np.int64)
        zero = np.zeros(1)
        res = tuple(np.zeros(s) for s in ((m, 1), (m, 1), (m, 1, 3), (m, 1)))
        _target_kernel(X, A[h : h + 1], np.ascontiguousarray(S), bool(want_q), deg, deg, zero, zero, 0.0, 1.0, 1.0, 0.0,
                       False, *_legendre_tables(int(L)), *res, np.zeros((m, 1), dtype=np.uint8))
        for o, r in zip(out, res):
            o[:, h] = r[:, 0]
    return out


# ------------------------------------------------------------------- driver
@dataclass
class FastSumInfo:
    """What :func:`moments` did: ``path`` ("fast", "direct" or "mixed"), the degree per
    head (-1: direct), the number of (target, head) pairs recomputed directly by the
    a-posteriori check, the predicted cost ratio direct/fast, and the reasons of fallbacks."""

    path: str = "direct"
    degrees: list = field(default_factory=list)
    n_rechecked: int = 0
    predicted_speedup: float = float("nan")
    reasons: list = field(default_factory=list)
    #: degree_rule "adaptive": the degrees reached, (blocks of 64 targets, heads summed by expansion, 2): Z, moments
    block_degrees: np.ndarray | None = None


_LOGGED: set = set()


def _log_once(level: int, key, msg: str, *args) -> None:
    log_once(log, _LOGGED, level, key, msg, *args)


def predicted_costs(m: int, n: int, degrees, want_q: bool):
    """(direct, fast) cost estimates (arbitrary units) of the heads with degree >= 0."""
    nmom = _NMOM[bool(want_q)]
    ds = [L for L in degrees if L >= 0]
    if not ds:
        return 0.0, 0.0
    direct = _COST_DIRECT * m * n * len(ds) * (1.1 if want_q else 1.0)
    fast = _COST_FIXED + _COST_SOURCE * n * (max(ds) + 1) ** 2 * nmom + _COST_TARGET * m * nmom * sum((L + 1) ** 2 for L in ds)
    return direct, fast


def _to_log(C, Z, M, Q):
    """The log form (log Z, Mom / Z, Q / Z) of scaled sums (true = exp(C) * scaled)."""
    logZ = np.log(Z) + C
    M = M / Z[..., None]
    Q = Q / Z if Q is not None and Q.size else Q
    return logZ, M, Q


#: How the target kernel chooses the expansion degree (the ``degree_rule`` of :func:`moments`): "adaptive" (default)
#: stops each block at the first degree that passes the a-posteriori test (:mod:`spherepde.attention.adaptive`),
#: "a-priori" takes the table degree of the block's largest kappa (the previous kernel, kept for comparison).
DEGREE_RULES = ("adaptive", "a-priori", "synthesis")
#: The adaptive rule's kernels: :mod:`spherepde.attention.adaptive` registers itself here on import (it builds on
#: this module's kernels, so this module does not import it: no import cycle).
ADAPTIVE_RULE: dict = {}
#: The rule "synthesis" (:mod:`spherepde.attention.synthesis`: many targets from a Gauss grid and one matrix product),
#: registered there on import like the adaptive rule.
SYNTHESIS_RULE: dict = {}

#: ``target_masses``: the largest tolerance of the moments at a target of negligible mass
MOMENTS_TOL_CAP = 1e-3


def moments(X, Y, w, A, *, want_q=False, tol=1e-10, tol_moments=None, mode="fast", direct=None, l_max=L_MAX, log_form=False,
            degree_rule="adaptive", target_masses=None):
    """Scaled attention sums (C, Z, M, Q) with the true sums = exp(C) * (Z, M, Q), and a
    :class:`FastSumInfo`.

    X (m, 3), Y (n, 3), w (n,) >= 0, A (H, 3, 3), contiguous float64. ``mode`` is
    "fast" or "auto" (see the module docstring). ``direct(X, A) -> (C, Z, M, Q)`` is the
    direct summation used for fallbacks (default: the kernels of :mod:`spherepde.attention.direct`).
    ``tol`` bounds the relative error of Z; ``tol_moments`` (default ``tol``, at least
    ``tol``) the error of Mom/Z and Q/Z, which are then truncated at a lower degree.
    With ``log_form`` the result is (C, log Z, Mom/Z, Q/Z) (C = kappa, informative only).
    ``degree_rule`` (:data:`DEGREE_RULES`) chooses how the target kernel picks the degree; both meet ``tol``.
    ``target_masses`` (adaptive rule only; None: off): masses m_i >= 0 of the targets when the moments feed only
    mass-weighted sums (the energy diagnostics). The moments at target i then meet
    tol_m,i = min(max(tol_m, :data:`MOMENTS_TOL_CAP`), tol_m max(1, mbar / m_i)) (mbar the mean mass) instead
    of tol_m: sum_i m_i tol_m,i <= 2 tol_m sum_i m_i, so every mass-weighted sum of them keeps its error bound up
    to a factor 2, and targets without mass stop earlier. Z is unaffected.
    """
    if degree_rule not in DEGREE_RULES:
        raise ValueError(f"unknown degree_rule {degree_rule!r}; use one of {DEGREE_RULES}")
    if direct is None:
        def direct(Xs, As):
            return direct_scaled(Xs, Y, w, As, want_q, True)

    m, d = X.shape
    H = A.shape[0]
    info = FastSumInfo()
    level = logging.INFO if mode == "auto" else logging.WARNING
    tol = float(tol)
    if not tol > 0:
        raise ValueError(f"summation tolerance must be positive, got {tol}")
    tol_m = tol if tol_moments is None else max(float(tol_moments), tol)

    def finish(C, Z, M, Q):
        if not want_q:
            Q = np.empty((0, 0))
        if log_form:
            Z, M, Q = _to_log(C, Z, M, Q)
        return C, Z, M, Q, info

    def all_direct(reason_key, msg, *args):
        if reason_key is not None:
            _log_once(level, (reason_key, mode), msg, *args)
            info.reasons.append(msg % args)
        info.path = "direct"
        info.degrees = [-1] * H
        return finish(*direct(X, A))

    if d != 3:
        return all_direct(None, "")
    if H == 0 or m == 0:
        return all_direct(None, "")
    if np.any(w < 0) or not np.all(np.isfinite(w)):
        return all_direct("negative", "fast summation needs non-negative weights; summing directly")
    wsum = float(np.sum(w))
    if not wsum > 0:
        return all_direct(None, "")
    kappa = kappa_max(X, A)  # kappa_h = max_i |A_h^T x_i|
    degrees = [choose_degree(k, tol, l_max) for k in kappa]
    info.degrees = list(degrees)
    far = _far_heads(kappa, degrees, tol, l_max, level, mode, info)
    if len(far) == H:
        info.degrees = [-1] * H
        info.path = "direct"
        return finish(*direct(X, A))
    dcost, fcost = predicted_costs(m, Y.shape[0], degrees, want_q)
    info.predicted_speedup = dcost / fcost if fcost > 0 else float("inf")
    if mode == "auto" and dcost < _AUTO_MARGIN * fcost:
        info.path = "direct"
        info.degrees = [-1] * H
        log.debug("auto summation: direct (predicted fast/direct cost %.3g)", fcost / max(dcost, 1e-300))
        return finish(*direct(X, A))
    expand = _expand
    if degree_rule == "synthesis":
        if "module" not in SYNTHESIS_RULE:
            raise RuntimeError("degree_rule 'synthesis' needs spherepde.attention.synthesis imported (import spherepde.attention)")
        expand = SYNTHESIS_RULE["module"].expand
    C, Z, Mom, Q, bad = expand(X, Y, w, A, kappa, degrees, far, wsum, tol, tol_m, l_max, want_q, log_form, degree_rule, info,
                               target_masses)
    info.path = "fast" if not far else "mixed"

    def put(idx, h, res):
        Cd, Zd, Md, Qd = res
        if log_form:
            Zd, Md, Qd = _to_log(Cd, Zd, Md, Qd if want_q else None)
        C[idx, h], Z[idx, h], Mom[idx, h] = Cd, Zd, Md
        if want_q:
            Q[idx, h] = Qd

    # heads summed directly
    if far:
        put(slice(None), far, direct(X, np.ascontiguousarray(A[far])))
    info.n_rechecked = _recheck(X, A, bad, direct, put, want_q, tol, level, mode)
    return C, Z, Mom, Q, info


def _far_heads(kappa, degrees, tol: float, l_max: int, level: int, mode: str, info: FastSumInfo) -> list[int]:
    """The heads whose kappa is too large for an expansion of degree <= l_max (degree -1); logged once, noted in ``info``."""
    H = len(degrees)
    far = [h for h in range(H) if degrees[h] < 0]
    if far:
        _log_once(
            level, ("kappa", mode),
            "fast summation: %d of %d heads have kappa = |A^T x| up to %.3g, too large for tol = %.1e with degree <= %d; "
            "summing those heads directly",
            len(far), H, float(kappa[far].max()), tol, l_max,
        )
        info.reasons.append(f"{len(far)} heads with kappa too large")
    return far


def _moment_tolerances(tol_m: float, m: int, target_masses) -> np.ndarray:
    """The per-target tolerance of the moments (:func:`moments`, ``target_masses``), shape (m,)."""
    if target_masses is None:
        return np.full(m, tol_m)
    tm = np.asarray(target_masses, dtype=np.float64)
    if tm.shape != (m,) or np.any(tm < 0) or not np.all(np.isfinite(tm)):
        raise ValueError(f"target_masses: expected ({m},) finite non-negative masses, got shape {tm.shape}")
    mbar = float(tm.mean())
    with np.errstate(divide="ignore"):
        f = np.where(tm > 0, mbar / np.where(tm > 0, tm, 1.0), np.inf)
    return np.minimum(max(tol_m, MOMENTS_TOL_CAP), tol_m * np.maximum(1.0, f))


def _expand(X, Y, w, A, kappa, degrees, far, wsum, tol, tol_m, l_max, want_q, log_form, degree_rule="a-priori", info=None,
            target_masses=None, S=None):
    """(C, Z, Mom, Q, bad) for all H heads from the expansions of the heads not in ``far`` (:func:`_target_kernel`);
    the far heads' entries are left for direct summation. ``S``: the source moments of Y, w (:func:`source_moments`,
    with the Q rows when ``want_q``) to a degree >= max(degrees), when the caller has them."""
    m, H = X.shape[0], A.shape[0]
    # degree tables up to the largest kappa of the heads summed by expansion (the far
    # heads' blocks get degree -1 from the table or are overwritten below)
    kfit = max(float(kappa[h]) for h in range(H) if degrees[h] >= 0)
    deg_z, tail_z = degree_table(kfit, tol, l_max)
    deg_m, tail_m = degree_table(kfit, tol_m, l_max)
    if S is None or S.shape[1] < (max(degrees) + 1) ** 2:
        S = source_moments(Y, w, max(degrees), want_q)
    near = [h for h in range(H) if degrees[h] >= 0]
    An = A if not far else np.ascontiguousarray(A[near])  # the far heads are summed directly below
    Hn = An.shape[0]
    C = np.empty((m, Hn))
    Z = np.empty((m, Hn))
    Mom = np.empty((m, Hn, 3))
    Q = np.empty((m, Hn) if want_q else (0, 0))
    bad = np.zeros((m, Hn), dtype=np.uint8)
    if degree_rule == "adaptive":
        adaptive = ADAPTIVE_RULE.get("module")
        if adaptive is None:  # registered by spherepde.attention.adaptive on import (the package's __init__ imports it)
            raise RuntimeError("degree_rule 'adaptive' needs spherepde.attention.adaptive imported (import spherepde.attention)")
        degs = np.empty((_cdiv(m, _P), Hn, 2), dtype=np.int64)
        adaptive._target_kernel(X, An, np.ascontiguousarray(S), bool(want_q), deg_z, adaptive.tail_table(deg_z.shape[0], l_max), wsum,
                               tol, _moment_tolerances(tol_m, m, target_masses), _round_allowance(Y.shape[0]), bool(log_form), *_legendre_tables(int(deg_z.max())),
                               C, Z, Mom, Q, bad, degs)
        if info is not None:
            info.block_degrees = degs
    else:
        _target_kernel(X, An, np.ascontiguousarray(S), bool(want_q), deg_z, deg_m, tail_z, tail_m, wsum, tol, tol_m,
                       _round_allowance(Y.shape[0]), bool(log_form), *_legendre_tables(int(deg_z.max())), C, Z, Mom, Q, bad)
    if far:  # back to all H heads
        full = [np.empty((m, H)), np.empty((m, H)), np.empty((m, H, 3)), np.empty((m, H) if want_q else (0, 0)),
                np.zeros((m, H), dtype=np.uint8)]
        for arr, part in zip(full, (C, Z, Mom, Q, bad)):
            if arr.size:
                arr[:, near] = part
        C, Z, Mom, Q, bad = full
    return C, Z, Mom, Q, bad


def _recheck(X, A, bad, direct, put, want_q, tol, level, mode) -> int:
    """Recompute directly (``put(idx, h, direct(...))``) the (target, head) pairs that the a-posteriori check
    rejected (``bad``); returns their number."""
    m, H = bad.shape
    nb = int(np.count_nonzero(bad))
    if nb:
        if nb > 0.01 * m * H:
            _log_once(
                level, ("recheck", mode),
                "fast summation: %d of %d (target, head) pairs missed tol = %.1e a posteriori (small Z relative to "
                "the expansion's round-off); recomputed directly", nb, m * H, tol,
            )
        for h in np.flatnonzero(bad.any(axis=0)):
            idx = np.flatnonzero(bad[:, h])
            Cd, Zd, Md, Qd = direct(np.ascontiguousarray(X[idx]), np.ascontiguousarray(A[h : h + 1]))
            put(idx, h, (Cd[:, 0], Zd[:, 0], Md[:, 0], Qd[:, 0] if want_q else None))
    return nb
