"""The finite-volume geometry of a triangulated unit sphere (icosphere or mesh file): the
:class:`~spherepde.geometry.protocol.Geometry` that :meth:`SphereMesh.geometry` returns.

Cell nodes. The masses m_c sit at, and Z_h, Phi and xi are evaluated at, the cell NODES
x_c = ``nodes``: the spherical circumcentres when the mesh is well-centred (every
circumcentre inside its triangle; true for icospheres), else the barycentres
``mesh.centers`` (:func:`cell_nodes`). With circumcentres the node-to-node geodesic is
the perpendicular bisector of the shared edge -- it crosses the edge orthogonally at its
midpoint -- so the two-point difference (Phi_n - Phi_c)/d_cn is a consistent normal
derivative. With barycentres it is NOT: the barycentre connection deviates from n_e by an
O(1) angle that does not vanish under refinement. Moving the nodes does not change the
order of the nonlocal sums.

Reconstruction (:meth:`FVGeometry.reconstruct`, the scheme's ``order=2``): a gradient g_c
in the tangent plane at the barycentre b_c = ``mesh.centers[c]`` (where a cell average is a
second-order point value) by least squares from the three neighbour values (offsets =
logarithmic map of the neighbour barycentres at b_c), evaluated at the edge midpoints
(offsets r_ck = log map of the midpoints, shifted by their mean so that the three edge
values average exactly to rho_c), limited by Barth--Jespersen
(:func:`spherepde.geometry.reconstruction.limited_linear`): rho_c^{e_k} = rho_c + phi_c
g_c . r_ck with the largest phi_c in [0, 1] keeping every rho_c^{e_k} within [min, max] of
rho over the cell and its neighbours. Hence rho_c^e >= 0 and rho_c = (1/3) sum_k
rho_c^{e_k}.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass

import numpy as np

from spherepde.geometry.protocol import GeometryCounts
from spherepde.geometry.reconstruction import limited_linear

__all__ = ["FVGeometry", "cell_nodes", "fv_geometry"]

log = logging.getLogger(__name__)


def _log_map(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Logarithmic map log_x(y) of the unit sphere, row-wise: tangent at x, length = geodesic distance."""
    xy = np.sum(x * y, axis=-1, keepdims=True)
    v = y - xy * x
    nv = np.linalg.norm(v, axis=-1, keepdims=True)
    theta = np.arctan2(nv, xy)
    return np.where(nv > 0, theta / np.where(nv > 0, nv, 1.0), 0.0) * v


@dataclass(frozen=True, eq=False)
class FVGeometry(GeometryCounts):
    """The finite-volume geometry of a :class:`~spherepde.geometry.mesh.SphereMesh` (the
    :class:`~spherepde.geometry.protocol.Geometry` of a triangulated sphere), built once.

    Shapes: nc cells, ne edges (the faces), 3 faces per cell (n_slots = 3 nc, slot
    3 c + k is edge k of cell c). All arrays are contiguous and read-only.

    Attributes
    ----------
    The protocol's members: nodes (nc, 3) (below), areas (nc,), edge_cells (ne, 2) int64,
    edge_lengths (ne,), edge_normals (ne, 3), edge_midpoints (ne, 3), node_distances (ne,)
    (below), face_offsets (nc + 1,) = 3 c, cell_faces (3 nc,), cell_face_signs (3 nc,),
    face_slots (ne, 2) = 3 edge_cells + edge_slot, d = 3, slot_shape (nc, 3), and
    :meth:`reconstruct`.
    The triangle layout of the same connectivity: cell_edges (nc, 3) int64,
    cell_edge_signs (nc, 3), neighbors (nc, 3) int64 (the cell across each edge),
    edge_slot (ne, 2) int64 : ``cell_edges[edge_cells[e, i], edge_slot[e, i]] == e``.
    centers (nc, 3) barycentres, center_distances (ne,) between them.
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
    face_offsets: np.ndarray  # (nc + 1,) CSR offsets of cell -> faces (3 c)
    cell_faces: np.ndarray  # (3 nc,) cell_edges in slot order
    cell_face_signs: np.ndarray  # (3 nc,) cell_edge_signs in slot order
    face_slots: np.ndarray  # (ne, 2) slots of edge e in the lists of its two cells
    d: int = 3

    @property
    def slot_shape(self) -> tuple[int, int]:
        return (self.n_cells, 3)

    def geometry(self) -> FVGeometry:
        """The geometry itself (a geometry serves as its own mesh for the solver)."""
        return self

    def reconstruct(self, rho) -> np.ndarray:
        """Limited linear reconstruction of rho at the edge midpoints, shape (nc, 3) (module docstring)."""
        nc = self.n_cells
        faces = limited_linear(rho, self.face_offsets, self.neighbors.reshape(-1), self.recon.reshape(-1), 3 * self.face_offsets[:nc])
        return faces.reshape(nc, 3)


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
    """The :class:`FVGeometry` of the triangulated sphere ``mesh`` (computed once per mesh object, cached)."""
    nc, ne = mesh.n_cells, mesh.n_edges
    cell_edges = np.asarray(mesh.cell_edges, dtype=np.int64)
    signs = np.asarray(mesh.cell_edge_signs, dtype=np.float64)
    edge_slot = np.empty((ne, 2), dtype=np.int64)
    side = np.where(signs > 0, 0, 1)
    kk = np.tile(np.arange(3), nc)
    edge_slot[cell_edges.ravel(), side.ravel()] = kk
    ec = np.asarray(mesh.edge_cells, dtype=np.int64)
    if not (np.all(cell_edges[ec[:, 0], edge_slot[:, 0]] == np.arange(ne)) and np.all(cell_edges[ec[:, 1], edge_slot[:, 1]] == np.arange(ne))):
        raise ValueError("mesh connectivity is inconsistent (edge_cells vs cell_edges/cell_edge_signs)")
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
        face_offsets=_ro(3 * np.arange(nc + 1), np.int64),
        cell_faces=_ro(cell_edges.reshape(-1), np.int64),
        cell_face_signs=_ro(signs.reshape(-1)),
        face_slots=_ro(3 * ec + edge_slot, np.int64),
    )


