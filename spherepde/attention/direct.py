"""Compiled attention sums shared by the particle and the mesh solver.

For target points x_i, source points y_j with weights w_j (token weights 1/n, or cell
masses m_c = rho_c |C_c| on the mesh) and H attention matrices A_h, the kernels compute
(docs/model.md §1)

    Z_h(x_i)  = sum_j w_j exp(x_i^T A_h y_j)                      (partition function)
    Y_h(x_i)  = sum_j w_j exp(x_i^T A_h y_j) y_j                  (first moment, R^d)
    Q_h(x_i)  = sum_j w_j exp(x_i^T A_h y_j) (x_i . y_j)^2        (only when asked for)

The softmax average of head h is a_h = V_h Y_h / Z_h; for gradient heads
grad Z_h = D_h Y_h. Q_h enters the Ito correction of the partial time derivative of
the energy (docs/model.md §3).

Overflow: for each target x_i and head h every exponent is shifted by
c_ih = max_j x_i^T A_h y_j over the sources with positive weight (a running maximum,
i.e. an online log-sum-exp), so all exponentials are <= 1 and the largest is exactly 1:
neither overflow nor a total underflow of Z can occur, whatever ||A_h||. The kernel
returns *scaled* sums, Z_true = exp(c_ih) Z_returned, and the shifts c_ih; callers use
:func:`spherepde.attention.attention_moments`, which undoes the scaling (or returns log Z = log Z_returned
+ c_ih, finite for any ||A_h||).

Kernels are per-target gathers (``prange`` over targets, no shared writes), so the
result is independent of the thread count; small problems run serially (same
per-target code, bit-identical results) to avoid the thread-pool start-up cost.
"""

from __future__ import annotations

import math

import numpy as np

from spherepde._numba import SIMD_FASTMATH, njit, prange

__all__ = ["direct_scaled"]


@njit
def _moments_one_target(i, X, Y, w, A, want_q, C, Z, M, Q):  # pragma: no cover - compiled
    """All heads' sums for target i (the same operations, in the same order, whichever
    driver calls it, so the serial and the parallel kernel agree bit for bit)."""
    d = X.shape[1]
    n = Y.shape[0]
    H = A.shape[0]
    b = np.empty(d)
    mom = np.empty(d)
    for h in range(H):
        # b = A_h^T x_i, so that x_i^T A_h y_j = b . y_j
        for k in range(d):
            s = 0.0
            for l in range(d):
                s += A[h, l, k] * X[i, l]
            b[k] = s
        z = 0.0
        q = 0.0
        for k in range(d):
            mom[k] = 0.0
        # running maximum c of the exponents of the sources with positive weight
        # (online log-sum-exp): every exponential is <= 1 and the largest is 1,
        # so neither overflow nor a total underflow can occur
        c = -np.inf
        for j in range(n):
            if w[j] == 0.0:
                continue
            e = 0.0
            for k in range(d):
                e += b[k] * Y[j, k]
            if e > c:
                r = np.exp(c - e)
                z *= r
                q *= r
                for k in range(d):
                    mom[k] *= r
                c = e
            ew = w[j] * np.exp(e - c)
            z += ew
            for k in range(d):
                mom[k] += ew * Y[j, k]
            if want_q:
                xy = 0.0
                for k in range(d):
                    xy += X[i, k] * Y[j, k]
                q += ew * xy * xy
        C[i, h] = c
        Z[i, h] = z
        for k in range(d):
            M[i, h, k] = mom[k]
        if want_q:
            Q[i, h] = q


@njit(parallel=True)
def _attention_moments_kernel(X, Y, w, A, want_q, C, Z, M, Q):  # pragma: no cover - compiled
    for i in prange(X.shape[0]):
        _moments_one_target(i, X, Y, w, A, want_q, C, Z, M, Q)


@njit
def _attention_moments_kernel_serial(X, Y, w, A, want_q, C, Z, M, Q):  # pragma: no cover - compiled
    for i in range(X.shape[0]):
        _moments_one_target(i, X, Y, w, A, want_q, C, Z, M, Q)



# ----------------------------------------------------------------- SIMD path, d = 3
#: Chunk of sources whose exponentials are computed into a small buffer (L1-resident).
_CHUNK = 256
#: The SIMD path is used while every ||A_h||_2 <= this bound (then exponents lie in
#: [-2c, 0] with c = ||A_h||_2 <= 64: no overflow, no total underflow, no subnormal 2^k).
_SIMD_MAX_NORM = 64.0


#: Cody--Waite split of ln 2 (fdlibm): k * _LN2HI is exact for |k| < 2^20.
_LOG2E = 1.4426950408889634
_LN2HI = 6.93147180369123816490e-01
_LN2LO = 1.90821492927058770002e-10


@njit(fastmath=SIMD_FASTMATH)
def _moments_one_target3(i, X, Y0, Y1, Y2, w, A, shift, want_q, Z, M, Q):  # pragma: no cover - compiled
    """d = 3 sums for target i with a vectorisable exponential.

    exp(s - c) = 2^k exp(r), k = round((s - c) / ln 2), r = (s - c) - k ln 2 in
    [-ln2/2, ln2/2] (Cody--Waite), exp(r) by its degree-13 Taylor polynomial (truncation
    error < 5e-18 relative) and 2^k assembled in the exponent bits (s - c >= -2c >= -128:
    no subnormals). No libm call in the inner loops, so LLVM vectorises them; the
    reductions are reassociated (fastmath 'reassoc'), so the result differs from the
    plain loop by round-off only and does not depend on the thread count.
    """
    n = Y0.shape[0]
    H = A.shape[0]
    buf = np.empty(_CHUNK)
    ibuf = np.empty(_CHUNK, dtype=np.int64)
    pow2 = ibuf.view(np.float64)  # 2^k, written as integer bit patterns
    x0 = X[i, 0]
    x1 = X[i, 1]
    x2 = X[i, 2]
    for h in range(H):
        b0 = A[h, 0, 0] * x0 + A[h, 1, 0] * x1 + A[h, 2, 0] * x2
        b1 = A[h, 0, 1] * x0 + A[h, 1, 1] * x1 + A[h, 2, 1] * x2
        b2 = A[h, 0, 2] * x0 + A[h, 1, 2] * x1 + A[h, 2, 2] * x2
        c = shift[h]
        z = 0.0
        m0 = 0.0
        m1 = 0.0
        m2 = 0.0
        q = 0.0
        for s in range(0, n, _CHUNK):
            L = min(_CHUNK, n - s)
            # chunk views indexed from 0: with Y0[s + jj] LLVM cannot prove the index is
            # non-negative (wraparound check) and the loops do not vectorise (~3x slower)
            y0 = Y0[s : s + L]
            y1 = Y1[s : s + L]
            y2 = Y2[s : s + L]
            ws = w[s : s + L]
            for jj in range(L):
                t = b0 * y0[jj] + b1 * y1[jj] + b2 * y2[jj] - c
                kf = math.floor(t * _LOG2E + 0.5)
                r = t - kf * _LN2HI
                r = r - kf * _LN2LO
                p = 1.0 / 6227020800.0
                p = p * r + 1.0 / 479001600.0
                p = p * r + 1.0 / 39916800.0
                p = p * r + 1.0 / 3628800.0
                p = p * r + 1.0 / 362880.0
                p = p * r + 1.0 / 40320.0
                p = p * r + 1.0 / 5040.0
                p = p * r + 1.0 / 720.0
                p = p * r + 1.0 / 120.0
                p = p * r + 1.0 / 24.0
                p = p * r + 1.0 / 6.0
                p = p * r + 0.5
                p = p * r + 1.0
                p = p * r + 1.0
                buf[jj] = ws[jj] * p
                ibuf[jj] = (np.int64(kf) + 1023) << 52
            if want_q:
                for jj in range(L):
                    ew = buf[jj] * pow2[jj]
                    z += ew
                    m0 += ew * y0[jj]
                    m1 += ew * y1[jj]
                    m2 += ew * y2[jj]
                    xy = x0 * y0[jj] + x1 * y1[jj] + x2 * y2[jj]
                    q += ew * xy * xy
            else:
                for jj in range(L):
                    ew = buf[jj] * pow2[jj]
                    z += ew
                    m0 += ew * y0[jj]
                    m1 += ew * y1[jj]
                    m2 += ew * y2[jj]
        Z[i, h] = z
        M[i, h, 0] = m0
        M[i, h, 1] = m1
        M[i, h, 2] = m2
        if want_q:
            Q[i, h] = q


@njit(parallel=True, fastmath=SIMD_FASTMATH)
def _kernel3(X, Y0, Y1, Y2, w, A, shift, want_q, Z, M, Q):  # pragma: no cover - compiled
    for i in prange(X.shape[0]):
        _moments_one_target3(i, X, Y0, Y1, Y2, w, A, shift, want_q, Z, M, Q)


@njit(fastmath=SIMD_FASTMATH)
def _kernel3_serial(X, Y0, Y1, Y2, w, A, shift, want_q, Z, M, Q):  # pragma: no cover - compiled
    for i in range(X.shape[0]):
        _moments_one_target3(i, X, Y0, Y1, Y2, w, A, shift, want_q, Z, M, Q)


def _simd3(X, Y, w, A, want_q, parallel, shift=None):
    """The d = 3 SIMD path; returns (C, Z, M, Q) with the true sums = exp(C) * (Z, M, Q).
    ``shift``: the norms ||A_h||_2 when already known."""
    m = X.shape[0]
    H = A.shape[0]
    if shift is None:
        shift = np.linalg.norm(A, ord=2, axis=(1, 2))
    Z = np.empty((m, H))
    M = np.empty((m, H, 3))
    Q = np.empty((m, H) if want_q else (0, 0))
    Yt = np.ascontiguousarray(Y.T)
    kern = _kernel3 if parallel else _kernel3_serial
    kern(X, Yt[0], Yt[1], Yt[2], w, A, shift, bool(want_q), Z, M, Q)
    return np.broadcast_to(shift[None, :], (m, H)), Z, M, Q

#: Below this many (target, source, head) triples (~3 ms of serial work) the serial kernel is used: starting
#: the thread pool costs ~0.5 ms (far more on a loaded machine), ~40k triples of work.
_PARALLEL_MIN_WORK = 2_000_000
def direct_scaled(X, Y, w, A, want_q, simd):
    """Direct sums (C, Z, M, Q) with the true sums = exp(C) * (Z, M, Q) (contiguous float64 input)."""
    m, d = X.shape
    H = A.shape[0]
    parallel = m * Y.shape[0] * H >= _PARALLEL_MIN_WORK
    if d == 3 and simd:
        norms = np.linalg.norm(A, ord=2, axis=(1, 2))
        if H == 0 or norms.max() <= _SIMD_MAX_NORM:
            return _simd3(X, Y, w, A, want_q, parallel, norms)
    C = np.empty((m, H))
    Z = np.empty((m, H))
    Mom = np.empty((m, H, d))
    Q = np.empty((m, H) if want_q else (0, 0))
    kernel = _attention_moments_kernel if parallel else _attention_moments_kernel_serial
    kernel(X, Y, w, A, bool(want_q), C, Z, Mom, Q)
    return C, Z, Mom, Q


