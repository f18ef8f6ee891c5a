"""Finite-volume building blocks of the mesh solver (docs/model.md §1.3 and §4).

The Transformer PDE  d_t rho + div_S(rho v) = 0  on S^2 is discretised with cell
averages rho_c on a triangulated sphere (:class:`spherepde.geometry.mesh.SphereMesh`):

    d rho_c / dt = -(1/|C_c|) sum_{e in dC_c} s_ce |e| F_e,
    F_e = u_e^+ rho_c^e + u_e^- rho_n^e                                   (upwind)

where, for edge e with ``edge_cells[e] = (c, n)``, u_e is the normal velocity along
``edge_normals[e]`` (pointing from c into n), s_ce = ``cell_edge_signs`` and rho_c^e,
rho_n^e are the values of rho reconstructed at the edge midpoint from the two sides
(Carrillo, Chertock & Huang, Commun. Comput. Phys. 17, 2015, adapted to the sphere).

Edge velocities (two forms, :func:`edge_velocity`):

* ``"potential"`` (gradient heads A_h = D_h, V_h = s D_h, default):
  u_e = s (Phi_n - Phi_c) / d_cn with Phi_c = (1/H) sum_h log Z_h(x_c), Z_h from the cell
  masses m_c = rho_c |C_c| at the cell nodes x_c, d_cn the geodesic node distance. This
  carries the energy structure to the mesh: with xi_c = dE/dm_c = (1/H) sum_h Z_h(x_c),

      dE/dt = sum_c xi_c dm_c/dt = sum_e |e| F_e (xi_n - xi_c),

  and F_e has the sign of u_e, i.e. of s (Phi_n - Phi_c). For H = 1, Phi = log xi is an
  increasing function of xi, so every term has the sign of s: the semi-discrete energy
  is monotone (non-increasing for s = -1, non-decreasing for s = +1). For H > 1 no
  sign is guaranteed (as for the continuous multi-head flow).
* ``"midpoint"`` (any heads): u_e = v(x_e) . n_e with v = (1/H) sum_h P_x V_h Y_h/Z_h
  evaluated at the edge midpoint x_e (one attention sum per edge: 1.5 n_c targets).

Cell nodes. The masses m_c sit at, and Z_h, Phi, xi are evaluated at, the cell NODES
x_c = ``geom.nodes``: the spherical circumcentres when the mesh is well-centred (every
circumcentre inside its triangle; true for icospheres), else the barycentres
``mesh.centers`` (:func:`cell_nodes`). With circumcentres the node-to-node geodesic is
the perpendicular bisector of the shared edge -- it crosses the edge orthogonally at its
midpoint -- so the two-point difference (Phi_n - Phi_c)/d_cn is a consistent normal
derivative. With barycentres it is NOT: on icospheres the barycentre connection deviates
from n_e by 2 deg on average (up to 10 deg), an O(1) tangential error that does not
vanish under refinement. Moving the nodes does not change the order of the nonlocal sums.

Default: ``"potential"`` (on circumcentre nodes). Both forms are second-order consistent
(pointwise u_e and the linear growth rates gamma_l, ``tests/test_meshsolver.py``); the
potential form needs the attention sums at the n_c nodes only -- which the energy
diagnostics need at every stage anyway -- while the midpoint form adds 1.5 n_c
edge-midpoint targets (2.5x the work per stage for gradient heads), and the potential form
makes the semi-discrete energy exactly monotone for H = 1. The midpoint form is the one for
general (A, V) heads. The measurements behind this choice are in CHANGELOG.md.

Reconstruction (``order=2``): a gradient g_c in the tangent plane at the barycentre
b_c = ``mesh.centers[c]`` (where a cell average is a second-order point value) by least
squares from the three neighbour values (offsets = logarithmic map of the neighbour
barycentres at b_c), evaluated at the edge midpoints (offsets r_ck = log map of the
midpoints, shifted by their mean so that the three edge values average exactly to
rho_c), limited by Barth--Jespersen: rho_c^{e_k} = rho_c + phi_c g_c . r_ck with the
largest phi_c in [0, 1] keeping every rho_c^{e_k} within [min, max] of rho over the cell
and its neighbours. Hence rho_c^e >= 0 and rho_c = (1/3) sum_k rho_c^{e_k}. Transport
order in h: 1 (``order=1``) and 2 (``order=2``) for a rigid rotation of a smooth density
(the analytic validation study measures it).

CFL bound (stability and positivity of one forward-Euler step; an SSP-RK step is
positive when every stage obeys it, which the solver checks):

* order 1: dt <= min_c |C_c| / sum_k |e_k| w_ck^+,  with w_ck = s_ck u_{e_k} the outflow
  speed of c across e_k (rho_c^new = rho_c (1 - dt sum_k |e_k| w_ck^+/|C_c|) + inflow >= 0);
* order 2: dt <= min_c min( |C_c| / (2 sum_k |e_k| w_ck^+),  rho_c |C_c| / sum_k |e_k| w_ck^+ rho_c^{e_k} ):
  half of the first-order bound (the analogue of the dt <= dx / (2 max|u|) of
  Carrillo--Chertock--Huang) AND the exact positivity limit of the Euler step with the
  reconstructed values (rho_c^new >= rho_c - dt/|C_c| sum_k |e_k| w_ck^+ rho_c^{e_k}).
  Half the first-order bound alone does not guarantee positivity on triangles: with one
  outflow edge the face value can reach ~2--3 rho_c. The second term is never below
  min_c |C_c| / (3 max_k |e_k| w_ck^+) because the reconstruction is mean-preserving
  (rho_c = (1/3) sum_k rho_c^{e_k}); for smooth data it is ~ the first-order bound, so
  in practice the bound is half the first-order one.

Kernels (Numba, :mod:`spherepde._numba`): reconstruction, flux + divergence gather,
CFL bound. Each has a NumPy reference in :mod:`spherepde.solvers._reference` (tests only). The divergence is a
per-cell gather over the 3 edges of the cell after the edge fluxes are stored, so no
two loop iterations write the same entry.
"""

from __future__ import annotations

import functools
import logging
import math
from dataclasses import dataclass

import numpy as np

from spherepde._numba import njit, prange, serial_below
from spherepde.attention import attention_moments

__all__ = [
    "DEFAULT_VELOCITY",
    "VELOCITY_FORMS",
    "FVGeometry",
    "cell_fields",
    "cell_nodes",
    "cell_potentials",
    "cfl_bound",
    "edge_velocity",
    "face_values",
    "fv_geometry",
    "fv_rhs",
    "midpoint_edge_velocity",
    "potential_edge_velocity",
    "reconstruct",
    "rigid_rotation_edge_velocity",
    "scheme_g2",
]

log = logging.getLogger(__name__)

#: Edge-velocity forms accepted by :func:`edge_velocity` and the mesh solver.
VELOCITY_FORMS = ("potential", "midpoint")
#: The default form (justified in the module docstring).
DEFAULT_VELOCITY = "potential"


# ------------------------------------------------------------------------ geometry
def _log_map(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Logarithmic map log_x(y) of the unit sphere, row-wise: tangent at x, length = geodesic distance."""
    xy = np.sum(x * y, axis=-1, keepdims=True)
    v = y - xy * x
    nv = np.linalg.norm(v, axis=-1, keepdims=True)
    theta = np.arctan2(nv, xy)
    return np.where(nv > 0, theta / np.where(nv > 0, nv, 1.0), 0.0) * v


@dataclass(frozen=True, eq=False)
class FVGeometry:
    """Arrays of a :class:`~spherepde.geometry.mesh.SphereMesh` prepared once for the FV kernels.

    Shapes: nc cells, ne edges. All arrays are contiguous and read-only.

    Attributes
    ----------
    centers (nc, 3), areas (nc,), edge_midpoints (ne, 3), edge_normals (ne, 3),
    edge_lengths (ne,), center_distances (ne,), edge_cells (ne, 2) int64,
    cell_edges (nc, 3) int64, cell_edge_signs (nc, 3) float, neighbors (nc, 3) int64,
    edge_slot (ne, 2) int64 : ``cell_edges[edge_cells[e, i], edge_slot[e, i]] == e``,
    recon (nc, 3, 3) : reconstruction weights, rho_c^{e_k} - rho_c =
        phi_c sum_j recon[c, k, j] (rho_{neighbors[c, j]} - rho_c).
    vertices_of_edges (ne, 2, 3) : the end points of each edge.
    nodes (nc, 3) : the cell nodes x_c that carry the masses m_c in the nonlocal sums and
        where Z_h, Phi and xi are evaluated -- the spherical circumcentres when every
        circumcentre lies inside its triangle (``node_kind == "circumcentre"``), else
        ``mesh.centers`` (``"barycentre"``); see :func:`cell_nodes`.
    node_distances (ne,) : d_cn, geodesic distance between the nodes of the two cells.
    """

    centers: np.ndarray
    areas: np.ndarray
    edge_midpoints: np.ndarray
    edge_normals: np.ndarray
    edge_lengths: np.ndarray
    center_distances: np.ndarray
    edge_cells: np.ndarray
    cell_edges: np.ndarray
    cell_edge_signs: np.ndarray
    neighbors: np.ndarray
    edge_slot: np.ndarray
    recon: np.ndarray
    vertices_of_edges: np.ndarray  # (ne, 2, 3) end points p_i, p_j of each edge
    nodes: np.ndarray  # (nc, 3) points carrying the cell masses (circumcentres or barycentres)
    node_distances: np.ndarray  # (ne,) geodesic distance between the nodes of edge_cells[e]
    node_kind: str  # "circumcentre" or "barycentre"

    @property
    def n_cells(self) -> int:
        return self.areas.shape[0]

    @property
    def n_edges(self) -> int:
        return self.edge_lengths.shape[0]


def _ro(a, dtype=np.float64):
    a = np.ascontiguousarray(a, dtype=dtype)
    a.flags.writeable = False
    return a


def _reconstruction_weights(centers, midpoints, neighbors, cell_edges, points, cells) -> np.ndarray:
    """Least-squares gradient composed with the (mean-shifted) edge offsets, (nc, 3, 3)."""
    x = centers
    nc = x.shape[0]
    # tangent basis at x_c
    e1 = points[cells[:, 0]] - x
    e1 -= np.sum(e1 * x, axis=1, keepdims=True) * x
    e1 /= np.linalg.norm(e1, axis=1, keepdims=True)
    e2 = np.cross(x, e1)
    basis = np.stack([e1, e2], axis=2)  # (nc, 3, 2)
    T = _log_map(x[:, None, :], centers[neighbors])  # (nc, 3 nbrs, 3)
    R = _log_map(x[:, None, :], midpoints[cell_edges])  # (nc, 3 edges, 3)
    R = R - R.mean(axis=1, keepdims=True)
    T2 = np.einsum("ckd,cda->cka", T, basis)  # (nc, 3, 2)
    M = np.einsum("cka,ckb->cab", T2, T2)  # (nc, 2, 2)
    pinv = np.linalg.solve(M, np.swapaxes(T2, 1, 2))  # (nc, 2, 3)
    G = np.einsum("cda,caj->cdj", basis, pinv)  # (nc, 3 dims, 3 nbrs): g = G delta
    W = np.einsum("ckd,cdj->ckj", R, G)
    assert W.shape == (nc, 3, 3)
    return W


def _geodesic(a, b):
    return 2.0 * np.arctan2(np.linalg.norm(a - b, axis=-1), np.linalg.norm(a + b, axis=-1))


def cell_nodes(mesh) -> tuple[np.ndarray, str]:
    """The cell nodes used for the nonlocal sums and the two-point potential flux.

    Spherical circumcentres cc = (b - a) x (c - a) / |...| if every one lies strictly
    inside its triangle (a "well-centred" mesh, true for icospheres); then the geodesic
    joining the nodes of two neighbours is the perpendicular bisector of their common
    edge: it crosses the edge at its midpoint, orthogonally, so (Phi_n - Phi_c)/d_cn is
    a consistent approximation of the normal derivative (an admissible mesh for
    two-point fluxes in the sense of Eymard, Gallouet & Herbin). Otherwise the
    barycentres ``mesh.centers`` are returned and a warning is logged: the potential
    form is then not consistent (use ``velocity="midpoint"``).

    Returns
    -------
    nodes (nc, 3), kind ("circumcentre" or "barycentre").
    """
    p = np.asarray(mesh.points)[np.asarray(mesh.cells)]  # (nc, 3, 3), outward counter-clockwise
    cc = np.cross(p[:, 1] - p[:, 0], p[:, 2] - p[:, 0])
    cc /= np.linalg.norm(cc, axis=1, keepdims=True)
    inside = np.ones(cc.shape[0], dtype=bool)
    for k in range(3):
        a, b = p[:, k], p[:, (k + 1) % 3]
        side = np.cross(a, b)
        side /= np.linalg.norm(side, axis=1, keepdims=True)
        inside &= np.einsum("ij,ij->i", side, cc) > 1e-12
    if inside.all():
        return cc, "circumcentre"
    log.warning(
        "mesh %s is not well-centred (%d circumcentres outside their triangle): using barycentres as cell "
        "nodes; the two-point 'potential' velocity is then not consistent -- prefer velocity='midpoint'",
        getattr(mesh, "name", "?"),
        int((~inside).sum()),
    )
    return np.asarray(mesh.centers), "barycentre"


@functools.lru_cache(maxsize=16)
def fv_geometry(mesh) -> FVGeometry:
    """The :class:`FVGeometry` of ``mesh`` (computed once per mesh object, cached)."""
    nc, ne = mesh.n_cells, mesh.n_edges
    cell_edges = np.asarray(mesh.cell_edges, dtype=np.int64)
    signs = np.asarray(mesh.cell_edge_signs, dtype=np.float64)
    edge_slot = np.empty((ne, 2), dtype=np.int64)
    side = np.where(signs > 0, 0, 1)
    cc = np.repeat(np.arange(nc), 3)
    kk = np.tile(np.arange(3), nc)
    edge_slot[cell_edges.ravel(), side.ravel()] = kk
    ec = np.asarray(mesh.edge_cells, dtype=np.int64)
    if not (np.all(cell_edges[ec[:, 0], edge_slot[:, 0]] == np.arange(ne)) and np.all(cell_edges[ec[:, 1], edge_slot[:, 1]] == np.arange(ne))):
        raise ValueError("mesh connectivity is inconsistent (edge_cells vs cell_edges/cell_edge_signs)")
    del cc
    recon = _reconstruction_weights(
        np.asarray(mesh.centers), np.asarray(mesh.edge_midpoints), np.asarray(mesh.neighbors), cell_edges, np.asarray(mesh.points), np.asarray(mesh.cells)
    )
    p = np.asarray(mesh.points)
    nodes, kind = cell_nodes(mesh)
    return FVGeometry(
        centers=_ro(mesh.centers),
        areas=_ro(mesh.areas),
        edge_midpoints=_ro(mesh.edge_midpoints),
        edge_normals=_ro(mesh.edge_normals),
        edge_lengths=_ro(mesh.edge_lengths),
        center_distances=_ro(mesh.center_distances),
        edge_cells=_ro(ec, np.int64),
        cell_edges=_ro(cell_edges, np.int64),
        cell_edge_signs=_ro(signs),
        neighbors=_ro(mesh.neighbors, np.int64),
        edge_slot=_ro(edge_slot, np.int64),
        recon=_ro(recon),
        vertices_of_edges=_ro(p[np.asarray(mesh.edges)]),
        nodes=_ro(nodes),
        node_distances=_ro(_geodesic(nodes[ec[:, 0]], nodes[ec[:, 1]])),
        node_kind=kind,
    )


# ------------------------------------------------------------- nonlocal quantities
def cell_fields(geom: FVGeometry, masses, A, *, want_q: bool = False, summation: str = "auto", tol: float = 1e-10,
                tol_moments: float | None = None):
    """log Z_h, Y_h/Z_h (and Q_h/Z_h) at the cell nodes from the cell masses.

    Z_h(x_c) = sum_c' m_c' exp(x_c^T A_h x_c'), m_c = rho_c |C_c| at the nodes x_c
    (``geom.nodes``; docs/model.md §4). ``summation`` / ``tol``: direct, fast
    (spherical harmonics) or auto, see :func:`spherepde.attention.attention_moments`;
    ``tol_moments`` (default ``tol``) the accuracy of Ybar and Qbar alone on the fast path.

    Returns
    -------
    logZ (nc, H), Ybar (nc, H, 3), Qbar (nc, H) or None.
    """
    return attention_moments(geom.nodes, geom.nodes, masses, A, want_q=want_q, log=True, summation=summation, tol=tol,
                             tol_moments=tol_moments)


def cell_potentials(geom: FVGeometry, masses, A) -> np.ndarray:
    """Phi_c = (1/H) sum_h log Z_h(x_c) at the cell nodes x_c, shape (nc,)."""
    logZ, _, _ = cell_fields(geom, masses, A)
    return logZ.mean(axis=1)


def potential_edge_velocity(geom: FVGeometry, Phi, sign: float) -> np.ndarray:
    """u_e = s (Phi_n - Phi_c) / d_cn for ``edge_cells[e] = (c, n)``, shape (ne,) (d_cn = ``node_distances``)."""
    c, n = geom.edge_cells[:, 0], geom.edge_cells[:, 1]
    return sign * (Phi[n] - Phi[c]) / geom.node_distances


def midpoint_edge_velocity(geom: FVGeometry, masses, A, V, *, summation: str = "auto", tol: float = 1e-10) -> np.ndarray:
    """u_e = v(x_e) . n_e, v = (1/H) sum_h P_x V_h Y_h(x_e)/Z_h(x_e), shape (ne,).

    n_e is tangent at x_e, so the projection P_x drops out of the dot product.
    ``summation`` / ``tol`` as in :func:`cell_fields`.
    """
    _, Ybar, _ = attention_moments(geom.edge_midpoints, geom.nodes, masses, A, log=True, summation=summation, tol=tol)
    a = np.einsum("hkl,ehl->ek", V, Ybar) / V.shape[0]
    return np.einsum("ek,ek->e", a, geom.edge_normals)


def edge_velocity(geom: FVGeometry, form: str, masses, A, V, sign: float, logZ=None, *, summation: str = "auto", tol: float = 1e-10) -> np.ndarray:
    """Edge normal velocities in the chosen form (``"potential"`` or ``"midpoint"``), shape (ne,).

    ``logZ`` (nc, H) at the cell centres can be passed to avoid recomputing it for the
    potential form.
    """
    if form == "potential":
        if logZ is None:
            logZ, _, _ = cell_fields(geom, masses, A, summation=summation, tol=tol)
        return potential_edge_velocity(geom, logZ.mean(axis=1), sign)
    if form == "midpoint":
        return midpoint_edge_velocity(geom, masses, A, V, summation=summation, tol=tol)
    raise ValueError(f"unknown edge velocity form {form!r}; use one of {VELOCITY_FORMS}")


def rigid_rotation_edge_velocity(geom_or_mesh, omega) -> np.ndarray:
    """Edge-averaged normal velocity of the rigid rotation v(x) = omega x x, shape (ne,).

    u_e = (1/|e|) int_e v . n_e ds = (psi(p_j) - psi(p_i)) / |e| with the stream function
    psi(x) = omega . x (v = grad psi x x), so the discrete divergence vanishes
    exactly (up to round-off): a test velocity for pure transport.
    """
    geom = geom_or_mesh if isinstance(geom_or_mesh, FVGeometry) else fv_geometry(geom_or_mesh)
    omega = np.asarray(omega, dtype=float)
    p = geom.vertices_of_edges
    flux = p[:, 1, :] @ omega - p[:, 0, :] @ omega  # int_e v.n ds for n ~ p_j x p_i
    return flux / geom.edge_lengths


# --------------------------------------------------------------------- the kernels
@njit
def _reconstruct_kernel(rho, neighbors, recon, faces):  # pragma: no cover - compiled
    nc = rho.shape[0]
    for c in range(nc):
        rc = rho[c]
        d0 = rho[neighbors[c, 0]] - rc
        d1 = rho[neighbors[c, 1]] - rc
        d2 = rho[neighbors[c, 2]] - rc
        mx = max(0.0, d0, d1, d2)
        mn = min(0.0, d0, d1, d2)
        phi = 1.0
        for k in range(3):
            dk = recon[c, k, 0] * d0 + recon[c, k, 1] * d1 + recon[c, k, 2] * d2
            faces[c, k] = dk
            if dk > 0.0:
                r = mx / dk
                phi = min(phi, r)
            elif dk < 0.0:
                r = mn / dk
                phi = min(phi, r)
        for k in range(3):
            v = phi * faces[c, k]
            if v > mx:
                v = mx
            elif v < mn:
                v = mn
            # cap at 3 rho_c (a no-op in exact arithmetic, where the three edge values are
            # >= 0 and average to rho_c): keeps the positivity bound >= 1/3 of the
            # first-order one when rho_c is tiny or subnormal next to heavier neighbours
            faces[c, k] = min(rc + v, 3.0 * rc)


def reconstruct(geom: FVGeometry, rho) -> np.ndarray:
    """Limited linear reconstruction of rho at the edge midpoints, shape (nc, 3).

    ``faces[c, k]`` is the value of cell c at its edge ``cell_edges[c, k]`` (see the
    module docstring: least-squares gradient, Barth--Jespersen limiter). The values lie
    in [min, max] of rho over the cell and its neighbours and average to rho_c.
    """
    rho = np.ascontiguousarray(rho, dtype=np.float64)
    faces = np.empty((rho.shape[0], 3))
    _reconstruct_kernel(rho, geom.neighbors, geom.recon, faces)
    return faces


def face_values(geom: FVGeometry, rho, order: int) -> np.ndarray:
    """Edge values rho_c^{e_k}, (nc, 3): rho_c itself (order 1) or the reconstruction (order 2)."""
    if order == 1:
        return np.repeat(np.ascontiguousarray(rho, dtype=np.float64)[:, None], 3, axis=1)
    if order == 2:
        return reconstruct(geom, rho)
    raise ValueError(f"order must be 1 (upwind) or 2 (limited linear reconstruction), got {order!r}")


@njit
def _fv_rhs_kernel(u, faces, edge_cells, edge_slot, cell_edges, cell_edge_signs, edge_lengths, areas, flux, out):  # pragma: no cover
    ne = u.shape[0]
    for e in range(ne):
        ue = u[e]
        if ue > 0.0:
            flux[e] = ue * faces[edge_cells[e, 0], edge_slot[e, 0]]
        else:
            flux[e] = ue * faces[edge_cells[e, 1], edge_slot[e, 1]]
    nc = areas.shape[0]
    for c in range(nc):
        s = 0.0
        for k in range(3):
            e = cell_edges[c, k]
            s += cell_edge_signs[c, k] * edge_lengths[e] * flux[e]
        out[c] = -s / areas[c]


def fv_rhs(geom: FVGeometry, faces, u, *, flux=None, out=None) -> np.ndarray:
    """The semi-discrete update d rho_c/dt = -(1/|C_c|) sum_k s_ck |e_k| F_{e_k}, shape (nc,).

    Parameters
    ----------
    faces : (nc, 3) edge values (:func:`face_values`).
    u : (ne,) normal velocities along ``edge_normals``.
    flux, out : optional preallocated (ne,) and (nc,) outputs; ``flux`` receives F_e.
    """
    u = np.ascontiguousarray(u, dtype=np.float64)
    faces = np.ascontiguousarray(faces, dtype=np.float64)
    if u.shape != (geom.n_edges,) or faces.shape != (geom.n_cells, 3):
        raise ValueError(f"fv_rhs: expected u ({geom.n_edges},) and faces ({geom.n_cells}, 3), got {u.shape} and {faces.shape}")
    flux = np.empty(geom.n_edges) if flux is None else flux
    out = np.empty(geom.n_cells) if out is None else out
    _fv_rhs_kernel(u, faces, geom.edge_cells, geom.edge_slot, geom.cell_edges, geom.cell_edge_signs, geom.edge_lengths, geom.areas, flux, out)
    return out


@njit
def _cfl_kernel(u, rho, faces, cell_edges, cell_edge_signs, edge_lengths, areas, order, out):  # pragma: no cover
    nc = areas.shape[0]
    for c in range(nc):
        s1 = 0.0  # sum_k |e_k| w_ck^+                  (outflow speed)
        s2 = 0.0  # sum_k |e_k| w_ck^+ rho_c^k / rho_c  (relative outflow rate)
        for k in range(3):
            e = cell_edges[c, k]
            w = cell_edge_signs[c, k] * u[e]
            if w > 0.0:
                f = edge_lengths[e] * w
                s1 += f
                if order == 2 and rho[c] > 0.0:
                    s2 += f * (faces[c, k] / rho[c])
        b = areas[c] / s1 if s1 > 0.0 else np.inf
        if order == 2:
            b = 0.5 * b
            if s2 > 0.0:
                bp = areas[c] / s2
                b = min(b, bp)
        out[c] = b


def cfl_bound(geom: FVGeometry, u, order: int, rho=None, faces=None) -> float:
    """The stability/positivity bound on dt for edge velocities u (ne,) (``inf`` for u = 0).

    With w_ck = s_ck u_{e_k} the outflow speed of cell c across its edge k:

    * order 1: min_c |C_c| / sum_k |e_k| w_ck^+ ;
    * order 2: min_c min( |C_c| / (2 sum_k |e_k| w_ck^+),  rho_c |C_c| / sum_k |e_k| w_ck^+ rho_c^{e_k} ),
      i.e. half the first-order bound and the exact positivity limit of one Euler step
      with the reconstructed edge values ``faces`` (needs ``rho`` and ``faces``). The
      limit is computed from the ratios rho_c^{e_k} / rho_c <= 3 (see :func:`reconstruct`),
      so it stays >= 1/3 of the first-order bound even for tiny or subnormal rho_c.
    """
    if order not in (1, 2):
        raise ValueError(f"order must be 1 or 2, got {order!r}")
    u = np.ascontiguousarray(u, dtype=np.float64)
    if order == 2:
        if rho is None or faces is None:
            raise ValueError("cfl_bound(order=2) needs the cell values rho and the reconstructed faces")
        rho = np.ascontiguousarray(rho, dtype=np.float64)
        faces = np.ascontiguousarray(faces, dtype=np.float64)
    else:
        rho = np.empty(0)
        faces = np.empty((0, 3))
    out = np.empty(geom.n_cells)
    _cfl_kernel(u, rho, faces, geom.cell_edges, geom.cell_edge_signs, geom.edge_lengths, geom.areas, int(order), out)
    return float(out.min())


# ------------------------------------------------------- the scheme's metric slope
@njit(parallel=True)
def _scheme_g2_kernel(logZ, edge_cells, edge_lengths, node_distances, flux, u, out):  # pragma: no cover - compiled
    ne = u.shape[0]
    H = logZ.shape[1]
    for e in prange(ne):
        if flux[e] == 0.0 or u[e] == 0.0:
            out[e] = 0.0
            continue
        c = edge_cells[e, 0]
        n = edge_cells[e, 1]
        inv = 0.0  # (1/H) sum_h 1 / L(Z_hc, Z_hn)
        for h in range(H):
            la = logZ[c, h]
            dl = logZ[n, h] - la
            if abs(dl) < 1e-8:
                r = 1.0 - 0.5 * dl  # dl / expm1(dl) to O(dl^2)
            else:
                r = dl / math.expm1(dl)
            inv += math.exp(-la) * r
        out[e] = edge_lengths[e] * node_distances[e] * flux[e] * u[e] * H / inv


def scheme_g2(geom: FVGeometry, logZ, u, flux) -> float:
    """The metric slope G^2 of the finite-volume scheme (docs/model.md §3.4), a float.

        G^2_h = sum_e |e| d_cn F_e u_e b_e,   b_e = ( (1/H) sum_h 1 / L(Z_h(x_c), Z_h(x_n)) )^{-1},

    with F_e the scheme's flux (:func:`fv_rhs`), u_e the edge normal velocity, d_cn the node
    distance and L(a, b) = (b - a) / (log b - log a) the logarithmic mean. It is the
    discrete form of the paper's G^2 = int |v|^2 / ((1/H) sum_h 1/Z_h) dmu (the diamond of
    edge e has area |e| d_cn / 2 and u_e^2 averages |v|^2 / 2 over directions), and for
    the potential velocity u_e = s (Phi_n - Phi_c) / d_cn with one head it equals
    s * (the discrete transport rate sum_e |e| F_e (xi_n - xi_c)) exactly, because
    Z_n - Z_c = L(Z_c, Z_n) (log Z_n - log Z_c). So the paper-form balance closes on the
    mesh with the same accuracy as the exact chain-rule balance (for H = 1).

    Parameters
    ----------
    logZ : (nc, H) log Z_h at the cell nodes; u : (ne,) edge velocities; flux : (ne,) F_e.
    """
    logZ = np.ascontiguousarray(logZ, dtype=np.float64)
    u = np.ascontiguousarray(u, dtype=np.float64)
    flux = np.ascontiguousarray(flux, dtype=np.float64)
    if logZ.ndim != 2 or logZ.shape[0] != geom.n_cells or u.shape != (geom.n_edges,) or flux.shape != (geom.n_edges,):
        raise ValueError(f"scheme_g2: expected logZ ({geom.n_cells}, H), u and flux ({geom.n_edges},); got {logZ.shape}, {u.shape}, {flux.shape}")
    out = np.empty(geom.n_edges)
    with serial_below(geom.n_edges * logZ.shape[1]):
        _scheme_g2_kernel(logZ, geom.edge_cells, geom.edge_lengths, geom.node_distances, flux, u, out)
    return float(np.sum(out))


