"""Energy rates and the potential of a weighted cloud in one compiled pass over the heads.

The same quantities as :func:`spherepde.model.energy.state_rates`,
:func:`spherepde.model.velocity.velocity_from_fields` and
:func:`spherepde.model.energy.martingale_increment` (docs/model.md §3), computed from the
log form of the head fields (log Z_h, Ybar_h = Y_h / Z_h, Qbar_h = Q_h / Z_h at the
points x_i with weights w_i) without forming any (n, H) temporary:

    Phi(x_i)  = (1/H) sum_h log Z_h(x_i)                 (v = s grad_S Phi for gradient heads)
    xi(x_i)   = (1/H) sum_h Z_h(x_i)                     (dE/dmu)
    v(x_i)    = (1/H) sum_h P_x V_h Ybar_h(x_i)         (unnormalised attention: Ybar_h -> Z_h Ybar_h)
    E         = (1/(2H)) sum_i w_i sum_h Z_h(x_i)
    G2        = sum_i w_i |v(x_i)|^2 / ((1/H) sum_h 1/Z_h(x_i))   (unnormalised attention: mobility 1)
    M_h       = sum_i w_i Z_h(x_i) x_i Ybar_h(x_i)^T     (3 x 3; = sum_ij w_i w_j e^{x_i D_h x_j} x_i x_j^T)
    d_tE      = (1/(2H)) [ sum_h <f_h, M_h> + (sigma^2/4) sum_i w_i sum_h Z_h (1 + Qbar_h) ]
    dM-term   = (1/(2H)) sum_h <dM_h, M_h>               (Ito martingale increment, :func:`martingale_from_moments`)

with <F, M> = sum_kl F_kl M_kl (so sum_i w_i x_i^T f_h Y_h(x_i) = <f_h, M_h>). The cells are
summed in a fixed number of chunks whose partial sums are added in a fixed order, so
the result does not depend on the number of threads. The NumPy functions above are
the reference (tests compare the two).
"""

from __future__ import annotations

import math

import numpy as np

from spherepde._numba import njit, prange, serial_below

__all__ = ["fused_rates", "martingale_from_moments"]

#: Chunks of points summed in parallel (fixed: results independent of the thread count).
_CHUNKS = 32


@njit(parallel=True)
def _rates_kernel(X, w, logZ, Ybar, Qbar, want_q, unnorm, V, Phi, xi, part, Mpart):  # pragma: no cover - compiled
    n, H = logZ.shape
    nch = part.shape[0]
    csize = (n + nch - 1) // nch
    for c in prange(nch):
        e_sum = 0.0
        q_sum = 0.0
        g2 = 0.0
        Mc = Mpart[c]
        for i in range(c * csize, min(n, (c + 1) * csize)):
            x0 = X[i, 0]
            x1 = X[i, 1]
            x2 = X[i, 2]
            wi = w[i]
            phi = 0.0
            zs = 0.0
            mob = 0.0
            qz = 0.0
            a0 = 0.0
            a1 = 0.0
            a2 = 0.0
            for h in range(H):
                lz = logZ[i, h]
                z = math.exp(lz)
                phi += lz
                zs += z
                mob += 1.0 / z
                y0 = Ybar[i, h, 0]
                y1 = Ybar[i, h, 1]
                y2 = Ybar[i, h, 2]
                if unnorm:  # unnormalised attention: a_h = V_h Y_h = Z_h V_h Ybar_h
                    a0 += z * (V[h, 0, 0] * y0 + V[h, 0, 1] * y1 + V[h, 0, 2] * y2)
                    a1 += z * (V[h, 1, 0] * y0 + V[h, 1, 1] * y1 + V[h, 1, 2] * y2)
                    a2 += z * (V[h, 2, 0] * y0 + V[h, 2, 1] * y1 + V[h, 2, 2] * y2)
                else:
                    a0 += V[h, 0, 0] * y0 + V[h, 0, 1] * y1 + V[h, 0, 2] * y2
                    a1 += V[h, 1, 0] * y0 + V[h, 1, 1] * y1 + V[h, 1, 2] * y2
                    a2 += V[h, 2, 0] * y0 + V[h, 2, 1] * y1 + V[h, 2, 2] * y2
                wz = wi * z
                u0 = wz * x0
                u1 = wz * x1
                u2 = wz * x2
                Mc[h, 0, 0] += u0 * y0
                Mc[h, 0, 1] += u0 * y1
                Mc[h, 0, 2] += u0 * y2
                Mc[h, 1, 0] += u1 * y0
                Mc[h, 1, 1] += u1 * y1
                Mc[h, 1, 2] += u1 * y2
                Mc[h, 2, 0] += u2 * y0
                Mc[h, 2, 1] += u2 * y1
                Mc[h, 2, 2] += u2 * y2
                if want_q:
                    qz += z * (1.0 + Qbar[i, h])
            Phi[i] = phi / H
            xi[i] = zs / H
            a0 /= H
            a1 /= H
            a2 /= H
            ax = a0 * x0 + a1 * x1 + a2 * x2
            v0 = a0 - ax * x0
            v1 = a1 - ax * x1
            v2 = a2 - ax * x2
            if unnorm:  # mobility 1
                g2 += wi * (v0 * v0 + v1 * v1 + v2 * v2)
            else:
                g2 += wi * (v0 * v0 + v1 * v1 + v2 * v2) / (mob / H)
            e_sum += wi * zs
            q_sum += wi * qz
        part[c, 0] = e_sum
        part[c, 1] = q_sum
        part[c, 2] = g2


def fused_rates(X, w, logZ, Ybar, Qbar, V, f, sigma: float, *, normalised: bool = True) -> dict:
    """Energy quantities of a weighted cloud from the log-form head fields (module docstring).

    Parameters
    ----------
    X : (n, 3) unit points; w : (n,) weights (masses) summing to 1.
    logZ : (n, H) log Z_h(x_i); Ybar : (n, H, 3) Y_h / Z_h; Qbar : (n, H) Q_h / Z_h, or
        None (needed when sigma > 0).
    V : (H, 3, 3) value matrices (s D_h for gradient heads); f : (H, 3, 3) drift f_h(D_h, t).
    sigma : noise level of the weight process (Ito correction sigma^2/4 (Z_h + Q_h)).
    normalised : softmax attention (True) or unnormalised attention (False: v = (1/H) sum_h P_x V_h Y_h
        and G2 = sum_i w_i |v(x_i)|^2, mobility 1; docs/model.md "Unnormalised attention").

    Returns
    -------
    dict with energy, dEdt_partial, G2 (floats), Phi (n,), xi (n,) and M (H, 3, 3).
    """
    X = np.ascontiguousarray(X, dtype=np.float64)
    w = np.ascontiguousarray(w, dtype=np.float64)
    logZ = np.ascontiguousarray(logZ, dtype=np.float64)
    Ybar = np.ascontiguousarray(Ybar, dtype=np.float64)
    n, H = logZ.shape
    if X.shape != (n, 3) or w.shape != (n,) or Ybar.shape != (n, H, 3) or V.shape != (H, 3, 3):
        raise ValueError(f"fused_rates: inconsistent shapes X{X.shape}, w{w.shape}, logZ{logZ.shape}, Ybar{Ybar.shape}, V{V.shape}")
    want_q = sigma > 0
    if want_q and Qbar is None:
        raise ValueError("fused_rates: sigma > 0 needs the second moment Qbar (want_q=True)")
    Qbar = np.ascontiguousarray(Qbar, dtype=np.float64) if want_q else np.empty((0, 0))
    Phi = np.empty(n)
    xi = np.empty(n)
    part = np.empty((_CHUNKS, 3))
    Mpart = np.zeros((_CHUNKS, H, 3, 3))
    with serial_below(n * H):
        _rates_kernel(X, w, logZ, Ybar, Qbar, want_q, not normalised, np.ascontiguousarray(V, dtype=np.float64), Phi, xi, part, Mpart)
    M = Mpart[0].copy()
    for c in range(1, _CHUNKS):  # fixed order
        M += Mpart[c]
    tot = part.sum(axis=0)
    dEdt = float(np.sum(np.asarray(f) * M))
    if want_q:
        dEdt += (sigma**2 / 4) * tot[1]
    return {
        "energy": float(tot[0] / (2 * H)),
        "dEdt_partial": float(dEdt / (2 * H)),
        "G2": float(tot[2]),
        "Phi": Phi,
        "xi": xi,
        "M": M,
    }


def martingale_from_moments(M, dM) -> float:
    """(1/(2H)) sum_h <dM_h, M_h>: the Ito martingale increment from the moments M of
    :func:`fused_rates` (the same as :func:`spherepde.model.energy.martingale_increment`)."""
    return float(np.sum(np.asarray(dM) * M) / (2 * M.shape[0]))
