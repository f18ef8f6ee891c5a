"""Plain NumPy references of the compiled finite-volume kernels of :mod:`spherepde.solvers.fv`,
for the tests and benchmarks only.

Private: nothing in the package imports this module. Each ``<name>_reference`` computes
what ``spherepde.solvers.fv.<name>`` computes, with array operations instead of a Numba
loop, so the tests can compare the two.
"""

from __future__ import annotations

import numpy as np

from spherepde.attention._reference import attention_moments_reference
from spherepde.geometry.protocol import Geometry
from spherepde.geometry.surface import FVGeometry

__all__ = [
    "cell_potentials_reference",
    "cfl_bound_reference",
    "fv_rhs_reference",
    "midpoint_edge_velocity_reference",
    "reconstruct_reference",
    "scheme_g2_reference",
]


def cell_potentials_reference(geom: Geometry, masses, A) -> np.ndarray:
    """NumPy reference of :func:`cell_potentials` (tests only)."""
    Z, _, _ = attention_moments_reference(geom.nodes, geom.nodes, masses, A)
    return np.log(Z).mean(axis=1)


def midpoint_edge_velocity_reference(geom: Geometry, masses, A, V) -> np.ndarray:
    """NumPy reference of :func:`midpoint_edge_velocity` (tests only)."""
    x = geom.edge_midpoints
    Z, Y, _ = attention_moments_reference(x, geom.nodes, masses, A)
    H = A.shape[0]
    v = np.zeros_like(x)
    for h in range(H):
        a = (Y[:, h, :] @ V[h].T) / Z[:, h : h + 1]
        v += a - np.sum(a * x, axis=1, keepdims=True) * x
    return np.sum(v / H * geom.edge_normals, axis=1)


def reconstruct_reference(geom: FVGeometry, rho) -> np.ndarray:
    """NumPy reference of :func:`reconstruct` on a triangulated sphere (its ``neighbors`` and ``recon``; tests only)."""
    rho = np.asarray(rho, float)
    delta = rho[geom.neighbors] - rho[:, None]  # (nc, 3)
    mx = np.maximum(delta.max(axis=1), 0.0)
    mn = np.minimum(delta.min(axis=1), 0.0)
    dk = np.einsum("ckj,cj->ck", geom.recon, delta)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(dk > 0, mx[:, None] / dk, np.where(dk < 0, mn[:, None] / dk, 1.0))
    phi = np.minimum(1.0, r.min(axis=1))
    v = np.clip(phi[:, None] * dk, mn[:, None], mx[:, None])
    return np.minimum(rho[:, None] + v, 3.0 * rho[:, None])


def _slot_cells(geom: Geometry) -> np.ndarray:
    """The cell of each CSR slot, (n_slots,)."""
    return np.repeat(np.arange(geom.n_cells), np.diff(geom.face_offsets))


def fv_rhs_reference(geom: Geometry, faces, u) -> np.ndarray:
    """NumPy reference of :func:`fv_rhs` (face-wise scatter with ``np.add.at``; any geometry; tests only)."""
    f = np.asarray(faces, float).reshape(-1)
    c, n = geom.edge_cells[:, 0], geom.edge_cells[:, 1]
    F = np.maximum(u, 0) * f[geom.face_slots[:, 0]] + np.minimum(u, 0) * f[geom.face_slots[:, 1]]
    out = np.zeros(geom.n_cells)
    np.add.at(out, c, -geom.edge_lengths * F)
    np.add.at(out, n, geom.edge_lengths * F)
    return out / geom.areas


def cfl_bound_reference(geom: Geometry, u, order: int, rho=None, faces=None) -> float:
    """NumPy reference of :func:`cfl_bound` (per-slot outflow summed per cell; any geometry; tests only)."""
    cells = _slot_cells(geom)
    w = np.maximum(geom.cell_face_signs * np.asarray(u)[geom.cell_faces], 0.0) * geom.edge_lengths[geom.cell_faces]
    with np.errstate(divide="ignore", invalid="ignore"):
        b = geom.areas / np.bincount(cells, w, minlength=geom.n_cells)
        if order == 2:
            rho = np.asarray(rho, float)[cells]
            f = np.asarray(faces, float).reshape(-1)
            ratio = np.divide(f, rho, out=np.zeros_like(f), where=rho > 0)
            s2 = np.bincount(cells, w * ratio, minlength=geom.n_cells)
            bp = np.where(s2 > 0, geom.areas / np.where(s2 > 0, s2, 1.0), np.inf)
            b = np.minimum(0.5 * b, bp)
    return float(np.min(b))


def scheme_g2_reference(geom: Geometry, logZ, u, flux) -> float:
    """NumPy reference of :func:`scheme_g2` (tests only)."""
    Z = np.exp(np.asarray(logZ, float))
    c, n = geom.edge_cells[:, 0], geom.edge_cells[:, 1]
    a, b = Z[c], Z[n]
    with np.errstate(divide="ignore", invalid="ignore"):
        L = np.where(np.isclose(a, b, rtol=1e-12, atol=0), 0.5 * (a + b), (b - a) / (np.log(b) - np.log(a)))
    be = 1.0 / np.mean(1.0 / L, axis=1)
    return float(np.sum(geom.edge_lengths * geom.node_distances * flux * u * be))
