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

**Second order in space** (``order = 2``, :func:`face_weights`): the limited linear reconstruction
of :func:`spherepde.solvers.fv.face_values` at the step's start gives every face value as a
multiple of its cell's value, rho_c^{e} = w_{c,e} rho_c with w_{c,e} = rho_c^{e,n} / rho_c^n. With
the weights frozen over the step (like the velocity), the flux u_e^+ w_{c,e} rho_c + u_e^- w_{n,e}
rho_n is still linear in rho, and K(u, w) = sum_e |e| [u_e^+ w_{c,e} (1_c - 1_n) 1_c^T + u_e^-
w_{n,e} (1_c - 1_n) 1_n^T] keeps every property above for any weights w >= 0: positive diagonal,
non-positive off-diagonals, column sums 1^T C. Positivity and mass therefore hold for ANY h, and
the flux of the end state agrees with the explicit second-order flux up to O(h) (the weights lag
by one step), so the spatial error is that of the reconstruction wherever the limiter is inactive.
The weights are bounded, w in [0, W_MAX]: each cell's reconstructed slope is scaled down (never
up) until its largest weight is at most W_MAX = 2 -- a stricter limiter, not a change of the
scheme's form (near a vacuum, rho_c -> 0, the weights tend to 1: upwind).

Token noise (nu > 0, :mod:`spherepde.solvers.diffusion`): K becomes the Scharfetter--Gummel
matrix K + sum_e |e| D_e (1_c - 1_n)(1_c - 1_n)^T with D_e = (nu/d_cn) B(|u_e d_cn/nu|) >= 0 of the
frozen u (order 2: the central D_e = nu/d_cn of the explicit order-2 flux); the added term has
non-positive off-diagonal entries (-h |e| D_e), a positive diagonal and zero column sums, so
M = C + h K is still a column-diagonally-dominant M-matrix: positivity and mass hold for ANY h,
as without noise.

**Solving by one upwind sweep** (``solve = "sweep"``, the default; ``"lu"``: the sparse LU of SciPy,
the previous route). Without noise, row c of M couples cell c only to the neighbours it receives
mass from (u_e pointing into c); if the directed graph "n sends to c" has no cycle -- always so for
the potential velocity u_e = s (Phi_n - Phi_c)/d_cn, which flows along strictly increasing s Phi --,
M is triangular in a topological order of that graph and

    rho_c^{n+1} = ( |C_c| rho_c^n + h sum_{e: n -> c} |e| |u_e| w_{n,e} rho_n^{n+1} ) / ( |C_c| + h sum_{e: c -> n} |e| |u_e| w_{c,e} )

solves it exactly, cell after cell in that order (Kahn's algorithm), in O(cells + faces): every
operation adds or divides non-negative numbers, so positivity holds to the last bit. The result
equals the LU solution up to round-off (the sums are taken in another order). A cycle (a
prescribed or midpoint velocity can have one) or token noise (the symmetric diffusion couples
both ways) falls back to the LU solve.

The step is the scheme's own, not a linearisation of a nonlinear solve: the velocity is
re-evaluated at the start of every step (Bailo, Carrillo & Hu, Commun. Math. Sci. 18,
2020, analyse such semi-implicit schemes for aggregation equations).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sps
import scipy.sparse.linalg as spla

from spherepde._numba import njit
from spherepde.geometry.protocol import Geometry
from spherepde.solvers.diffusion import diffusion_coefficients

__all__ = ["SOLVES", "W_MAX", "face_weights", "implicit_flux", "implicit_upwind_step", "upwind_matrix"]

#: How :func:`implicit_upwind_step` solves (C + h K) rho^{n+1} = C rho^n (module docstring).
SOLVES = ("sweep", "lu")

#: The largest face weight w = rho_face / rho_cell of the second-order implicit step (module docstring).
W_MAX = 2.0


def face_weights(geom: Geometry, rho, faces) -> tuple[np.ndarray, np.ndarray]:
    """The frozen face weights (w_c, w_n) of every face e = (c, n), each (ne,), from the cell values
    ``rho`` (nc,) and their reconstructed face values ``faces`` (``geom.slot_shape``) (module docstring).

    w = rho_face / rho_cell, each cell's deviation from 1 scaled by one factor in (0, 1] so that its
    weights lie in [0, W_MAX]; cells with rho_c <= 0 get weight 1.
    """
    rho = np.asarray(rho, dtype=np.float64)
    faces = np.asarray(faces, dtype=np.float64).reshape(-1)
    counts = np.diff(geom.face_offsets)
    cell_of_slot = np.repeat(np.arange(geom.n_cells), counts)
    rc = rho[cell_of_slot]
    pos = rc > 0.0
    dev = np.where(pos, faces / np.where(pos, rc, 1.0) - 1.0, 0.0)  # w - 1 per slot
    # one factor per cell: the largest slot deviation above W_MAX - 1 or below -1 sets it
    over = np.maximum(dev / (W_MAX - 1.0), -dev)
    worst = np.zeros(geom.n_cells)
    np.maximum.at(worst, cell_of_slot, over)
    scale = np.where(worst > 1.0, 1.0 / np.maximum(worst, 1.0), 1.0)
    w = 1.0 + scale[cell_of_slot] * dev
    w = np.clip(w, 0.0, W_MAX)  # round-off only
    slots = geom.face_slots
    return w[slots[:, 0]], w[slots[:, 1]]


def upwind_matrix(geom: Geometry, u, nu: float = 0.0, weights=None) -> sps.csc_matrix:
    """The upwind transport matrix K of the module docstring, (nc, nc) sparse (``nu`` > 0: the
    Scharfetter--Gummel matrix with the diffusion of token noise nu).

    ``|C| d rho/dt = -K rho`` reproduces :func:`spherepde.solvers.fv.fv_rhs` at order 1 (with nu: plus
    :class:`spherepde.solvers.diffusion.MeshDiffusion`); ``weights`` = (w_c, w_n) from
    :func:`face_weights` (None: all 1, first order).
    """
    u = np.asarray(u, dtype=np.float64)
    if u.shape != (geom.n_edges,):
        raise ValueError(f"upwind_matrix: u must have shape ({geom.n_edges},), got {u.shape}")
    c, n = geom.edge_cells[:, 0], geom.edge_cells[:, 1]
    up = geom.edge_lengths * np.maximum(u, 0.0)
    um = geom.edge_lengths * np.minimum(u, 0.0)
    if weights is not None:
        up = up * weights[0]
        um = um * weights[1]
    rows = np.concatenate([c, c, n, n])
    cols = np.concatenate([c, n, c, n])
    vals = np.concatenate([up, um, -up, -um])
    if nu > 0.0:
        De = geom.edge_lengths * diffusion_coefficients(geom, u, nu, 1 if weights is None else 2)
        rows, cols, vals = np.concatenate([rows, c, c, n, n]), np.concatenate([cols, c, n, c, n]), np.concatenate([vals, De, -De, -De, De])
    nc = geom.n_cells
    return sps.csc_matrix((vals, (rows, cols)), shape=(nc, nc))


def implicit_upwind_step(geom: Geometry, rho, u, h: float, nu: float = 0.0, weights=None, *, solve: str = "sweep") -> np.ndarray:
    """rho^{n+1} solving (C + h K(u, w)) rho^{n+1} = C rho^n (module docstring; ``nu`` > 0: the SG matrix), shape (nc,).

    Non-negative for non-negative ``rho`` and any h > 0, mass-conserving. ``solve``: ``"sweep"``
    (one upwind sweep where M is triangular, else the LU) or ``"lu"`` (SciPy's sparse LU always;
    tiny negative round-off of it, |value| <= 1e-14 max rho, is set to zero).
    """
    h = float(h)
    if not (h > 0.0 and np.isfinite(h)):
        raise ValueError(f"implicit_upwind_step: h must be a positive number, got {h}")
    if solve not in SOLVES:
        raise ValueError(f"implicit_upwind_step: solve must be one of {SOLVES}, got {solve!r}")
    rho = np.asarray(rho, dtype=np.float64)
    C = geom.areas
    if solve == "sweep" and nu == 0.0:
        u = np.asarray(u, dtype=np.float64)
        ones = np.ones(u.shape[0])
        wc, wn = (ones, ones) if weights is None else (np.asarray(weights[0], dtype=np.float64), np.asarray(weights[1], dtype=np.float64))
        new = np.empty_like(rho)
        ec = np.ascontiguousarray(geom.edge_cells, dtype=np.int64)
        if _upwind_sweep(np.ascontiguousarray(C, dtype=np.float64), rho, ec, np.ascontiguousarray(geom.edge_lengths, dtype=np.float64),
                         u, wc, wn, h, new):
            return new
    M = (sps.diags(C, format="csc") + h * upwind_matrix(geom, u, nu, weights)).tocsc()
    new = spla.spsolve(M, C * rho)
    new = np.asarray(new, dtype=np.float64)
    tiny = 1e-14 * max(float(np.max(np.abs(new))), 0.0)
    new[(new < 0.0) & (new >= -tiny)] = 0.0
    return new


@njit
def _upwind_sweep(C, rho, ec, el, u, wc, wn, h, out):  # pragma: no cover - compiled
    """(C + h K(u, w)) out = C rho by substitution in a topological order of the upwind graph (module
    docstring); False (``out`` unusable) if that graph has a cycle."""
    nc = C.shape[0]
    ne = u.shape[0]
    diag = C.copy()
    rhs = C * rho
    indeg = np.zeros(nc, dtype=np.int64)
    nout = np.zeros(nc + 1, dtype=np.int64)
    for e in range(ne):  # flows a -> b (u > 0) or b -> a (u < 0)
        a, b = ec[e, 0], ec[e, 1]
        if u[e] > 0.0:
            diag[a] += h * (el[e] * u[e]) * wc[e]
            indeg[b] += 1
            nout[a + 1] += 1
        elif u[e] < 0.0:
            diag[b] += h * (el[e] * -u[e]) * wn[e]
            indeg[a] += 1
            nout[b + 1] += 1
    for c in range(nc):
        nout[c + 1] += nout[c]
    fill = nout[:nc].copy()
    dst = np.empty(nout[nc], dtype=np.int64)
    coef = np.empty(nout[nc])
    for e in range(ne):
        a, b = ec[e, 0], ec[e, 1]
        if u[e] > 0.0:
            dst[fill[a]] = b
            coef[fill[a]] = h * (el[e] * u[e]) * wc[e]
            fill[a] += 1
        elif u[e] < 0.0:
            dst[fill[b]] = a
            coef[fill[b]] = h * (el[e] * -u[e]) * wn[e]
            fill[b] += 1
    queue = np.empty(nc, dtype=np.int64)
    tail = 0
    for c in range(nc):
        if indeg[c] == 0:
            queue[tail] = c
            tail += 1
    head = 0
    while head < tail:
        c = queue[head]
        head += 1
        out[c] = rhs[c] / diag[c]
        for k in range(nout[c], nout[c + 1]):
            d = dst[k]
            rhs[d] += coef[k] * out[c]
            indeg[d] -= 1
            if indeg[d] == 0:
                queue[tail] = d
                tail += 1
    return tail == nc


def implicit_flux(geom: Geometry, rho, u, nu: float = 0.0, weights=None) -> np.ndarray:
    """Upwind edge fluxes F_e = u_e^+ w_c rho_c + u_e^- w_n rho_n of the values ``rho``, (ne,) (w = 1 without
    ``weights``; ``nu`` > 0: plus D_e (rho_c - rho_n), the Scharfetter--Gummel flux)."""
    c, n = geom.edge_cells[:, 0], geom.edge_cells[:, 1]
    u = np.asarray(u, dtype=np.float64)
    if weights is None:
        F = np.maximum(u, 0.0) * rho[c] + np.minimum(u, 0.0) * rho[n]
    else:
        F = np.maximum(u, 0.0) * weights[0] * rho[c] + np.minimum(u, 0.0) * weights[1] * rho[n]
    if nu > 0.0:
        F = F + diffusion_coefficients(geom, u, nu, 1 if weights is None else 2) * (rho[c] - rho[n])
    return F
