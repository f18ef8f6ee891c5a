"""The linearly implicit upwind step of the mesh solver (docs/model.md §4.5).

With the edge velocities u frozen at the start of a step (u = u[rho^n, Theta_{t_n}]), the
first-order upwind scheme of :mod:`spherepde.solvers.fv` is linear in rho:

    |C_c| d rho_c/dt = -(K rho)_c,   K = sum_e |e| [ u_e^+ (1_c - 1_n) 1_c^T + u_e^- (1_c - 1_n) 1_n^T ]

for every face e = (c, n) of the geometry (``edge_cells``, :mod:`spherepde.geometry.protocol`;
u_e along the normal from c into n, u^+ = max(u, 0), u^- = min(u, 0)): the operator is
assembled face by face, so it holds for any number of faces per cell. One backward-Euler step of size h solves

    (C + h K) rho^{n+1} = C rho^n,   C = diag(|C_c|).

Properties (proved in docs/model.md §4.5), for ANY h > 0:

* M = C + h K has positive diagonal (|C_c| + h sum |e| u_e^+ over the outflow edges of c),
  non-positive off-diagonal entries (h |e| u_e^- and -h |e| u_e^+) and column sums
  1^T M = 1^T C > 0 (every edge adds as much to a column as it takes from it), so M is
  strictly diagonally dominant by columns: a non-singular M-matrix with M^{-1} >= 0.
  Hence rho^n >= 0  =>  rho^{n+1} >= 0;
* mass: 1^T C rho^{n+1} = 1^T M rho^{n+1} = 1^T C rho^n (exactly, up to the solver's round-off);
* the scheme is first order in time and space; it is consistent with the explicit
  upwind step (their difference is O(h^2) per step).

Token noise (nu > 0, :mod:`spherepde.solvers.diffusion`): K becomes the Scharfetter--Gummel
matrix K + sum_e |e| D_e (1_c - 1_n)(1_c - 1_n)^T with D_e = (nu/d_cn) B(|u_e d_cn/nu|) >= 0 of the
frozen u; the added term has non-positive off-diagonal entries (-h |e| D_e), a positive diagonal
and zero column sums, so M = C + h K is still a column-diagonally-dominant M-matrix: positivity
and mass hold for ANY h, as without noise.

The step is the scheme's own, not a linearisation of a nonlinear solve: the velocity is
re-evaluated at the start of every step (Bailo, Carrillo & Hu, Commun. Math. Sci. 18,
2020, analyse such semi-implicit schemes for aggregation equations).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sps
import scipy.sparse.linalg as spla

from spherepde.geometry.protocol import Geometry
from spherepde.solvers.diffusion import diffusion_coefficients

__all__ = ["implicit_flux", "implicit_upwind_step", "upwind_matrix"]


def upwind_matrix(geom: Geometry, u, nu: float = 0.0) -> sps.csc_matrix:
    """The first-order upwind transport matrix K of the module docstring, (nc, nc) sparse (``nu`` > 0: the
    Scharfetter--Gummel matrix with the diffusion of token noise nu).

    ``|C| d rho/dt = -K rho`` reproduces :func:`spherepde.solvers.fv.fv_rhs` at order 1 (with nu: plus
    :class:`spherepde.solvers.diffusion.MeshDiffusion`).
    """
    u = np.asarray(u, dtype=np.float64)
    if u.shape != (geom.n_edges,):
        raise ValueError(f"upwind_matrix: u must have shape ({geom.n_edges},), got {u.shape}")
    c, n = geom.edge_cells[:, 0], geom.edge_cells[:, 1]
    up = geom.edge_lengths * np.maximum(u, 0.0)
    um = geom.edge_lengths * np.minimum(u, 0.0)
    rows = np.concatenate([c, c, n, n])
    cols = np.concatenate([c, n, c, n])
    vals = np.concatenate([up, um, -up, -um])
    if nu > 0.0:
        De = geom.edge_lengths * diffusion_coefficients(geom, u, nu, 1)
        rows, cols, vals = np.concatenate([rows, c, c, n, n]), np.concatenate([cols, c, n, c, n]), np.concatenate([vals, De, -De, -De, De])
    nc = geom.n_cells
    return sps.csc_matrix((vals, (rows, cols)), shape=(nc, nc))


def implicit_upwind_step(geom: Geometry, rho, u, h: float, nu: float = 0.0) -> np.ndarray:
    """rho^{n+1} solving (C + h K(u)) rho^{n+1} = C rho^n (module docstring; ``nu`` > 0: the SG matrix), shape (nc,).

    Non-negative for non-negative ``rho`` and any h > 0, mass-conserving. Tiny negative
    round-off of the sparse LU (|value| <= 1e-14 max rho) is set to zero.
    """
    h = float(h)
    if not (h > 0.0 and np.isfinite(h)):
        raise ValueError(f"implicit_upwind_step: h must be a positive number, got {h}")
    rho = np.asarray(rho, dtype=np.float64)
    C = geom.areas
    M = (sps.diags(C, format="csc") + h * upwind_matrix(geom, u, nu)).tocsc()
    new = spla.spsolve(M, C * rho)
    new = np.asarray(new, dtype=np.float64)
    tiny = 1e-14 * max(float(np.max(np.abs(new))), 0.0)
    new[(new < 0.0) & (new >= -tiny)] = 0.0
    return new


def implicit_flux(geom: Geometry, rho, u, nu: float = 0.0) -> np.ndarray:
    """Upwind edge fluxes F_e = u_e^+ rho_c + u_e^- rho_n of the (first-order) values ``rho``, (ne,)
    (``nu`` > 0: plus D_e (rho_c - rho_n), the Scharfetter--Gummel flux)."""
    c, n = geom.edge_cells[:, 0], geom.edge_cells[:, 1]
    u = np.asarray(u, dtype=np.float64)
    F = np.maximum(u, 0.0) * rho[c] + np.minimum(u, 0.0) * rho[n]
    if nu > 0.0:
        F = F + diffusion_coefficients(geom, u, nu, 1) * (rho[c] - rho[n])
    return F
