"""Limited linear reconstruction of cell averages at the faces, over CSR connectivity
(:mod:`spherepde.geometry.protocol`), for any number of faces per cell.

For cell c with slots j = o_c .. o_{c+1}-1 (k_c = o_{c+1} - o_c faces) and the neighbour
across each slot ``slot_neighbors[j]``, with delta_i = rho_{nbr(i)} - rho_c:

    rho_c^{(j)} = min( rho_c + clip(phi_c sum_i W_c[j, i] delta_i, mn_c, mx_c),  k_c rho_c ),

W_c the (k_c, k_c) weights a geometry computes (gradient composed with the face offsets,
stored row-major at ``weights[weight_offsets[c]:]``), mx_c = max(0, delta), mn_c =
min(0, delta) and phi_c in [0, 1] the largest factor keeping every unclipped value within
[rho_c + mn_c, rho_c + mx_c] (Barth--Jespersen). The cap k_c rho_c is a no-op in exact
arithmetic when the values are mean-preserving (they are >= 0 and average to rho_c); it keeps
the positivity bound of the solver >= 1/k_c of the first-order one for tiny rho_c.
"""

from __future__ import annotations

import numpy as np

from spherepde._numba import njit

__all__ = ["limited_linear"]


@njit
def _limited_linear_kernel(rho, offsets, slot_neighbors, weights, weight_offsets, kmax, faces):  # pragma: no cover - compiled
    nc = rho.shape[0]
    delta = np.empty(kmax)
    for c in range(nc):
        o0 = offsets[c]
        k = offsets[c + 1] - o0
        rc = rho[c]
        mx = 0.0
        mn = 0.0
        for i in range(k):
            di = rho[slot_neighbors[o0 + i]] - rc
            delta[i] = di
            mx = max(mx, di)
            mn = min(mn, di)
        phi = 1.0
        w0 = weight_offsets[c]
        for j in range(k):
            row = w0 + j * k
            dk = weights[row] * delta[0]
            for i in range(1, k):
                dk += weights[row + i] * delta[i]
            faces[o0 + j] = dk
            if dk > 0.0:
                r = mx / dk
                phi = min(phi, r)
            elif dk < 0.0:
                r = mn / dk
                phi = min(phi, r)
        cap = float(k) * rc
        for j in range(k):
            v = phi * faces[o0 + j]
            if v > mx:
                v = mx
            elif v < mn:
                v = mn
            faces[o0 + j] = min(rc + v, cap)


def limited_linear(rho, offsets, slot_neighbors, weights, weight_offsets) -> np.ndarray:
    """The limited face values of the module docstring, shape (offsets[-1],) in slot order.

    ``rho`` (nc,) cell averages; ``offsets`` (nc + 1,) CSR offsets of cell -> faces;
    ``slot_neighbors`` (n_slots,) the cell across each slot; ``weights`` the per-cell
    (k_c, k_c) weight blocks, row-major, cell c's block at ``weight_offsets[c]`` (nc,).
    """
    rho = np.ascontiguousarray(rho, dtype=np.float64)
    nc = rho.shape[0]
    k = np.diff(offsets)
    if offsets.shape != (nc + 1,) or slot_neighbors.shape != (int(offsets[-1]),) or weight_offsets.shape != (nc,):
        raise ValueError(f"limited_linear: offsets ({nc + 1},), slot_neighbors (n_slots,) and weight_offsets ({nc},) expected")
    if nc and int(np.max(weight_offsets + k * k)) > weights.shape[0]:
        raise ValueError("limited_linear: the weights end before the last cell's (k, k) block")
    faces = np.empty(int(offsets[-1]))
    kmax = int(np.max(k)) if nc else 0
    _limited_linear_kernel(rho, offsets, slot_neighbors, weights, weight_offsets, kmax, faces)
    return faces
