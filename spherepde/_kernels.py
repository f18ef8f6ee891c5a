"""Compiled attention sums shared by the particle and the mesh solver.

For target points x_i, source points y_j with weights w_j (token weights 1/n, or cell
masses m_c = rho_c |C_c| on the mesh) and H attention matrices A_h, the kernels compute
(MODEL.md section 1)

    Z_h(x_i)  = sum_j w_j exp(x_i^T A_h y_j)                      (partition function)
    Y_h(x_i)  = sum_j w_j exp(x_i^T A_h y_j) y_j                  (first moment, R^d)
    Q_h(x_i)  = sum_j w_j exp(x_i^T A_h y_j) (x_i . y_j)^2        (only when asked for)

The softmax average of head h is a_h = V_h Y_h / Z_h; for gradient heads
grad Z_h = D_h Y_h. Q_h enters the Ito correction of the partial time derivative of
the energy (MODEL.md section 4).

Overflow: every exponent is shifted by the head's bound c_h >= max |x^T A_h y|
(the spectral norm, computed by the caller), so all exponentials are <= 1; the
returned Z and Y are *scaled*: Z_true = exp(c_h) Z_returned. Callers use
:func:`attention_moments`, which undoes the scaling (or returns log Z).

Kernels are per-target gathers (``prange`` over targets, no shared writes), so the
result is independent of the thread count.
"""

from __future__ import annotations

import numpy as np

from spherepde._numba import njit, prange

__all__ = ["attention_moments", "attention_moments_reference"]


@njit(parallel=True)
def _attention_moments_kernel(X, Y, w, A, shift, want_q, Z, M, Q):  # pragma: no cover - compiled
    m, d = X.shape
    n = Y.shape[0]
    H = A.shape[0]
    for i in prange(m):
        b = np.empty(d)
        for h in range(H):
            # b = A_h^T x_i, so that x_i^T A_h y_j = b . y_j
            for k in range(d):
                s = 0.0
                for l in range(d):
                    s += A[h, l, k] * X[i, l]
                b[k] = s
            z = 0.0
            q = 0.0
            mom = np.zeros(d)
            c = shift[h]
            for j in range(n):
                e = 0.0
                for k in range(d):
                    e += b[k] * Y[j, k]
                ew = w[j] * np.exp(e - c)
                z += ew
                for k in range(d):
                    mom[k] += ew * Y[j, k]
                if want_q:
                    xy = 0.0
                    for k in range(d):
                        xy += X[i, k] * Y[j, k]
                    q += ew * xy * xy
            Z[i, h] = z
            for k in range(d):
                M[i, h, k] = mom[k]
            if want_q:
                Q[i, h] = q


def _shifts(A: np.ndarray) -> np.ndarray:
    """Per-head bound c_h = ||A_h||_2 >= |x^T A_h y| for unit x, y."""
    return np.linalg.norm(A, ord=2, axis=(1, 2))


def attention_moments(X, Y, w, A, *, want_q: bool = False, log: bool = False):
    """Attention sums Z_h, Y_h (and Q_h) at targets X over weighted sources Y.

    Parameters
    ----------
    X : (m, d) float array, unit target points.
    Y : (n, d) float array, unit source points.
    w : (n,) float array, non-negative source weights (masses).
    A : (H, d, d) float array, attention matrices A_h.
    want_q : also return Q_h(x_i) = sum_j w_j e^{x_i A_h y_j} (x_i . y_j)^2.
    log : return log Z and the moments divided by Z (Y/Z, Q/Z) instead of the raw
        sums; this form never overflows.

    Returns
    -------
    Z : (m, H)   (or log Z)
    Mom : (m, H, d)   sum_j w_j e^{...} y_j   (or divided by Z)
    Q : (m, H) or None
    """
    X = np.ascontiguousarray(X, dtype=np.float64)
    Y = np.ascontiguousarray(Y, dtype=np.float64)
    w = np.ascontiguousarray(w, dtype=np.float64)
    A = np.ascontiguousarray(A, dtype=np.float64)
    m, d = X.shape
    H = A.shape[0]
    if Y.shape[1] != d or A.shape[1:] != (d, d) or w.shape != (Y.shape[0],):
        raise ValueError(
            f"attention_moments: inconsistent shapes X{X.shape}, Y{Y.shape}, w{w.shape}, A{A.shape}"
        )
    shift = _shifts(A)
    Z = np.empty((m, H))
    Mom = np.empty((m, H, d))
    Q = np.empty((m, H) if want_q else (0, 0))
    _attention_moments_kernel(X, Y, w, A, shift, bool(want_q), Z, Mom, Q)
    if log:
        Mom /= Z[:, :, None]
        if want_q:
            Q = Q / Z
        logZ = np.log(Z) + shift[None, :]
        return logZ, Mom, (Q if want_q else None)
    scale = np.exp(shift)[None, :]
    Z *= scale
    Mom *= scale[:, :, None]
    if want_q:
        Q *= scale
        return Z, Mom, Q
    return Z, Mom, None


def attention_moments_reference(X, Y, w, A, *, want_q: bool = False):
    """Plain NumPy version of :func:`attention_moments` (tests only; O(m n H) memory)."""
    X = np.asarray(X, float)
    Y = np.asarray(Y, float)
    w = np.asarray(w, float)
    A = np.asarray(A, float)
    expo = np.exp(np.einsum("ik,hkl,jl->ihj", X, A, Y))  # (m, H, n)
    ew = expo * w[None, None, :]
    Z = ew.sum(axis=2)
    Mom = np.einsum("ihj,jk->ihk", ew, Y)
    Q = None
    if want_q:
        xy2 = (X @ Y.T) ** 2
        Q = np.einsum("ihj,ij->ih", ew, xy2)
    return Z, Mom, Q
