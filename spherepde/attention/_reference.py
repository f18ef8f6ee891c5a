"""Plain NumPy references of the compiled attention sums, for the tests and benchmarks only.

Private: nothing in the package imports this module. Each function computes what its
compiled counterpart computes, by the formula, so the tests can compare the two.

* :func:`attention_moments_reference` -- :func:`spherepde.attention.attention_moments`
  (Z_h, Y_h, Q_h by dense ``einsum``; O(m n H) memory);
* :func:`real_sph_harm_reference` -- :func:`spherepde.attention.harmonic.real_sph_harm`
  from SciPy's spherical harmonics.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["attention_moments_reference", "real_sph_harm_reference"]


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


def real_sph_harm_reference(P, L: int) -> np.ndarray:
    """:func:`real_sph_harm` from ``scipy.special.sph_harm_y`` (tests only)."""
    P = np.asarray(P, dtype=float)
    theta = np.arccos(np.clip(P[:, 2], -1.0, 1.0))
    phi = np.mod(np.arctan2(P[:, 1], P[:, 0]), 2 * np.pi)
    try:
        from scipy.special import sph_harm_y

        Yc = lambda l, m: sph_harm_y(l, m, theta, phi)
    except ImportError:  # scipy < 1.15
        from scipy.special import sph_harm

        Yc = lambda l, m: sph_harm(m, l, phi, theta)
    out = np.empty((P.shape[0], (L + 1) ** 2))
    for l in range(L + 1):
        out[:, l * l + l] = Yc(l, 0).real
        for m in range(1, l + 1):
            y = Yc(l, m) * (-1.0) ** m * math.sqrt(2.0)  # undo Condon--Shortley
            out[:, l * l + l + m] = y.real
            out[:, l * l + l - m] = y.imag
    return out
