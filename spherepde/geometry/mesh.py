"""Triangulated unit spheres with exact spherical geometry.

A :class:`SphereMesh` is an immutable pair of arrays -- vertices on the unit sphere and
outward-oriented triangles -- whose derived geometry (cell areas and centres, edges,
edge normals, neighbours) is computed with vectorised NumPy on first use and cached.
Edges are great-circle arcs and cells are spherical triangles, so the cell areas sum
to :math:`4\\pi` to round-off.

Conventions
-----------
* ``cells[c] = (a, b, c)`` is ordered counter-clockwise seen from outside the sphere,
  i.e. ``det[p_a, p_b, p_c] > 0``.
* ``edges[e] = (i, j)`` with ``i < j``.  ``edge_cells[e] = (c, n)``: ``c`` is the cell
  in which the edge is traversed ``i -> j``, ``n`` the one traversing it ``j -> i``.
* ``edge_normals[e]`` is the unit tangent vector at the edge midpoint, orthogonal to
  the edge's great circle, pointing out of ``c = edge_cells[e, 0]`` into
  ``n = edge_cells[e, 1]``.  It is parallel to :math:`p_j \\times p_i`, the pole of
  the great circle, and is therefore also the outward normal of ``c`` at *every*
  point of the arc.
* ``cell_edges[c, k]`` is the edge from ``cells[c, k]`` to ``cells[c, (k + 1) % 3]``;
  ``cell_edge_signs[c, k] = +1`` if ``c == edge_cells[e, 0]`` (the edge normal points
  out of ``c``) and ``-1`` otherwise; ``neighbors[c, k]`` is the cell across it.

Icosphere levels and mesh files (reading and writing) are in :mod:`spherepde.geometry.meshfiles`.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path

import numpy as np

from spherepde._base import atomic_file, load_arrays
from spherepde.geometry.surface import FVGeometry, fv_geometry

__all__ = [
    "MeshError",
    "SphereMesh",
    "spherical_triangle_areas",
]

logger = logging.getLogger(__name__)

#: File extensions handled through PyVista (everything else but ``.npz``).
PYVISTA_EXTENSIONS = (".vtk", ".vtp", ".ply", ".obj", ".stl")

_EPS = np.finfo(np.float64).eps


class MeshError(ValueError):
    """A mesh is not a valid triangulation of the sphere (or cannot be read as one)."""


# --------------------------------------------------------------------------------------
# small vectorised helpers
# --------------------------------------------------------------------------------------


def _rowdot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.einsum("ij,ij->i", a, b)


def _rownorm(a: np.ndarray) -> np.ndarray:
    return np.sqrt(_rowdot(a, a))


def _normalize(a: np.ndarray) -> np.ndarray:
    return a / _rownorm(a)[:, None]


def _readonly(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    a.flags.writeable = False
    return a


def _geodesic_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Great-circle distance between unit vectors, rows of ``a`` and ``b``.

    ``d = 2 atan2(|a - b|, |a + b|)``; identical to ``atan2(|a x b|, a . b)`` but with
    full relative accuracy for short arcs (the chord is computed without cancellation).
    """
    return 2.0 * np.arctan2(_rownorm(a - b), _rownorm(a + b))


def _triple_product(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Row-wise ``det[a, b, c] = a . (b x c)``, as ``(a - c) . ((b - c) x c)``.

    The translated form is algebraically identical and loses no accuracy for small
    triangles (error ``O(eps h^2)`` instead of ``O(eps h)``).
    """
    return _rowdot(a - c, np.cross(b - c, c))


def spherical_triangle_areas(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Areas of spherical triangles with unit-vector vertices ``a, b, c`` ``(m, 3)``.

    Van Oosterom & Strackee (1983), IEEE Trans. Biomed. Eng. 30(2), eq. (8)::

        tan(E / 2) = |a . (b x c)| / (1 + a . b + b . c + c . a),

    evaluated with ``arctan2`` so that ``E`` is correct on ``[0, 2 pi)``.
    Returns ``(m,)``.
    """
    num = np.abs(_triple_product(a, b, c))
    den = 1.0 + _rowdot(a, b) + _rowdot(b, c) + _rowdot(c, a)
    return 2.0 * np.arctan2(num, den)


# --------------------------------------------------------------------------------------
# validation and topology
# --------------------------------------------------------------------------------------


def _as_points(points) -> np.ndarray:
    try:
        p = np.array(points, dtype=np.float64, copy=True)
    except (TypeError, ValueError) as exc:
        raise MeshError(f"points must be a numeric (nv, 3) array: {exc}") from exc
    if p.ndim != 2 or p.shape[1] != 3:
        raise MeshError(f"points must have shape (nv, 3), got {p.shape}.")
    bad = ~np.isfinite(p).all(axis=1)
    if bad.any():
        idx = np.flatnonzero(bad)
        raise MeshError(
            f"{idx.size} point(s) are not finite (NaN/inf), e.g. point {idx[0]} = "
            f"{p[idx[0]]}; remove or repair them before building the mesh."
        )
    r = _rownorm(p)
    tiny = r <= 1e-12 * max(1.0, float(r.max(initial=0.0)))
    if tiny.any():
        idx = np.flatnonzero(tiny)
        raise MeshError(
            f"{idx.size} point(s) have (near-)zero length, e.g. point {idx[0]} = "
            f"{p[idx[0]]}; they cannot be projected to the sphere. The mesh must "
            "surround the origin."
        )
    # points already on the sphere to round-off are kept bit for bit, so projecting is
    # idempotent and save/load round trips are exact
    r = np.where(np.abs(r - 1.0) <= 4 * _EPS, 1.0, r)
    return p / r[:, None]


def _as_cells(cells, nv: int) -> np.ndarray:
    c = np.asarray(cells)
    if c.ndim != 2 or c.shape[1] != 3:
        raise MeshError(
            f"cells must have shape (nc, 3) (triangles only), got {c.shape}; "
            "triangulate polygonal meshes first (read_mesh does this for files)."
        )
    if c.dtype.kind not in "iu":
        if (
            c.dtype.kind == "f"
            and c.size
            and np.all(np.isfinite(c))
            and np.all(c == np.round(c))
        ):
            c = c.astype(np.int64)
        elif c.size:
            raise MeshError(f"cells must be an integer array, got dtype {c.dtype}.")
    c = np.array(c, dtype=np.int64, copy=True)
    if c.shape[0] < 4:
        raise MeshError(
            "a closed triangulated sphere needs at least 4 triangles, "
            f"got {c.shape[0]}."
        )
    if c.min() < 0 or c.max() >= nv:
        bad = np.flatnonzero(((c < 0) | (c >= nv)).any(axis=1))
        raise MeshError(
            f"{bad.size} cell(s) reference vertex indices outside [0, {nv}), "
            f"e.g. cell {bad[0]} = {c[bad[0]].tolist()}."
        )
    used = np.zeros(nv, dtype=bool)
    used[c.ravel()] = True
    if not used.all():
        idx = np.flatnonzero(~used)
        raise MeshError(
            f"{idx.size} vertex/vertices are used by no triangle, e.g. vertex "
            f"{idx[0]}; remove unused points (read_mesh cleans files automatically)."
        )
    return c


def _orient_outward(p: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Reject degenerate triangles and reorder each one so that ``det[a, b, c] > 0``."""
    rep = (c[:, 0] == c[:, 1]) | (c[:, 1] == c[:, 2]) | (c[:, 2] == c[:, 0])
    if rep.any():
        idx = np.flatnonzero(rep)
        raise MeshError(
            f"{idx.size} degenerate triangle(s) repeat a vertex, e.g. cell {idx[0]} = "
            f"{c[idx[0]].tolist()}; remove them."
        )
    a, b, d = p[c[:, 0]], p[c[:, 1]], p[c[:, 2]]
    chords = np.stack([_rownorm(a - b), _rownorm(b - d), _rownorm(d - a)], axis=1)
    det = _triple_product(a, b, d)
    degenerate = (chords.min(axis=1) <= 1e-14) | (
        np.abs(det) <= 64 * _EPS * chords.max(axis=1) ** 2
    )
    if degenerate.any():
        idx = np.flatnonzero(degenerate)
        raise MeshError(
            f"{idx.size} degenerate triangle(s) have zero spherical area (coincident "
            "vertices or three vertices on one great circle), e.g. cell "
            f"{idx[0]} = {c[idx[0]].tolist()}; remove them or merge duplicate points."
        )
    flip = det < 0
    if flip.any():
        logger.debug(
            "reoriented %d of %d triangles outward", int(flip.sum()), c.shape[0]
        )
        c[flip, 1], c[flip, 2] = c[flip, 2].copy(), c[flip, 1].copy()
    return c


def _topology(c: np.ndarray, nv: int):
    """Edges and their adjacency for outward-oriented triangles; validates the surface.

    Returns ``edges (ne, 2)``, ``edge_cells (ne, 2)`` and ``cell_edges (nc, 3)``.
    """
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    nc = c.shape[0]
    # half-edge h = 3 * cell + k runs from c[cell, k] to c[cell, (k + 1) % 3]
    tail = c.ravel()
    head = np.roll(c, -1, axis=1).ravel()
    lo, hi = np.minimum(tail, head), np.maximum(tail, head)
    key = lo * np.int64(nv) + hi
    ukey, inv, counts = np.unique(key, return_inverse=True, return_counts=True)
    inv = inv.ravel()
    if (counts != 2).any():
        bad = np.flatnonzero(counts != 2)
        open_ = counts[bad] == 1
        e0 = ukey[bad[0]]
        example = (
            f"edge ({e0 // nv}, {e0 % nv}) is shared by {counts[bad[0]]} triangle(s)"
        )
        if open_.all():
            raise MeshError(
                f"the surface is open: {bad.size} edge(s) belong to only one triangle "
                f"({example}). A sphere mesh must be closed; fill the holes or merge "
                "duplicated points."
            )
        raise MeshError(
            f"the surface is not a 2-manifold: {int((~open_).sum())} edge(s) are "
            f"shared by more than two triangles and {int(open_.sum())} by only one "
            f"({example}). Every edge must be shared by exactly two triangles; remove "
            "duplicated or dangling triangles."
        )
    tri_key = np.sort(c, axis=1)
    if np.unique(tri_key, axis=0).shape[0] != nc:
        raise MeshError(
            "the mesh contains duplicated triangles (same three vertices); remove them."
        )

    ne = ukey.size
    edges = np.stack([ukey // nv, ukey % nv], axis=1)
    cell_edges = inv.reshape(nc, 3).astype(np.int64)
    # the two half-edges of every edge (a stable sort puts them next to each other)
    order = np.argsort(inv, kind="stable")
    h_pair = order.reshape(ne, 2)

    # connectedness of the cell graph
    ncomp, _ = connected_components(
        coo_matrix(
            (np.ones(ne), (h_pair[:, 0] // 3, h_pair[:, 1] // 3)), shape=(nc, nc)
        ),
        directed=False,
    )
    if ncomp != 1:
        raise MeshError(
            f"the mesh has {ncomp} pieces not connected through edges (separate "
            "surfaces, possibly touching at vertices); a sphere mesh must be one piece."
        )
    # For a closed, edge-connected 2-manifold, chi = 2 also excludes pinched vertices
    # (splitting k pinched vertices gives a closed connected surface with chi + k <= 2).
    chi = nv - ne + nc
    if chi != 2:
        raise MeshError(
            f"Euler characteristic V - E + F = {nv} - {ne} + {nc} = {chi}, not 2: the "
            "surface is not a topological sphere (it has handles or pinched vertices); "
            "supply a triangulation of the sphere."
        )

    forward = tail < head
    if np.bincount(inv[forward], minlength=ne).min() != 1:
        raise MeshError(
            "the triangles cannot all be oriented outward consistently: after making "
            "each det[a, b, c] > 0 some edge is traversed twice in the same direction, "
            "so triangles overlap or fold over. The mesh does not cover the sphere "
            "exactly once."
        )
    h_fwd = np.empty(ne, dtype=np.int64)
    h_bwd = np.empty(ne, dtype=np.int64)
    h_fwd[inv[forward]] = np.flatnonzero(forward)
    h_bwd[inv[~forward]] = np.flatnonzero(~forward)
    edge_cells = np.stack([h_fwd // 3, h_bwd // 3], axis=1)

    return edges, edge_cells, cell_edges


# --------------------------------------------------------------------------------------
# the mesh
# --------------------------------------------------------------------------------------


class SphereMesh:
    """Immutable triangulated unit sphere with exact spherical geometry.

    Derived geometry is computed lazily and cached.

    Parameters
    ----------
    points : array_like, shape (nv, 3)
        Vertex positions; each is projected radially to the unit sphere.
    cells : array_like of int, shape (nc, 3)
        Triangles as vertex indices.  Each is reordered (two vertices swapped) if needed
        so that ``det[p_a, p_b, p_c] > 0`` (counter-clockwise seen from outside).
    name : str
        A label for logs and file names.

    Raises
    ------
    MeshError
        If the points are not finite or at the origin, indices are out of range, a
        vertex is unused, a triangle is degenerate, the surface is not a closed
        connected 2-manifold with Euler characteristic 2, or the triangles overlap.

    Notes
    -----
    ``points``, ``cells`` and every derived array are read-only.  Derived geometry is
    computed with vectorised NumPy on first access (``functools.cached_property``); see
    the module docstring for the orientation conventions.
    """

    _frozen = False
    #: the ambient dimension (S^2 in R^3); a circle mesh has d = 2
    d = 3

    def __init__(self, points, cells, *, name: str = "custom"):
        p = _as_points(points)
        c = _as_cells(cells, p.shape[0])
        c = _orient_outward(p, c)
        edges, edge_cells, cell_edges = _topology(c, p.shape[0])
        self.points = _readonly(p)
        self.cells = _readonly(c)
        self.name = str(name)
        self._edges = _readonly(edges)
        self._edge_cells = _readonly(edge_cells)
        self._cell_edges = _readonly(cell_edges)
        self._frozen = True
        # with every triangle positive and consistently oriented, the triangles cover
        # the sphere an integer number of times; anything but once means overlaps.
        cover = float(self.areas.sum()) / (4.0 * np.pi)
        if abs(cover - 1.0) > 1e-8:
            raise MeshError(
                f"the triangles cover the sphere {cover:.6g} times (total area "
                f"{4 * np.pi * cover:.6g}, expected 4 pi): they overlap. Supply a mesh "
                "that covers the sphere exactly once."
            )

    def __setattr__(self, key, value):
        if self._frozen:
            raise AttributeError(f"SphereMesh is immutable; cannot set {key!r}.")
        object.__setattr__(self, key, value)

    def __delattr__(self, key):
        raise AttributeError(f"SphereMesh is immutable; cannot delete {key!r}.")

    def __repr__(self) -> str:
        return (
            f"SphereMesh(name={self.name!r}, n_vertices={self.n_vertices}, "
            f"n_edges={self.n_edges}, n_cells={self.n_cells})"
        )

    # -- sizes -------------------------------------------------------------------------
    @property
    def n_cells(self) -> int:
        """Number of triangles ``nc``."""
        return int(self.cells.shape[0])

    @property
    def n_edges(self) -> int:
        """Number of undirected edges ``ne = 3 nc / 2``."""
        return int(self._edges.shape[0])

    @property
    def n_vertices(self) -> int:
        """Number of vertices ``nv = nc / 2 + 2``."""
        return int(self.points.shape[0])

    def geometry(self) -> FVGeometry:
        """The finite-volume geometry of this mesh (:class:`~spherepde.geometry.surface.FVGeometry`,
        the :class:`~spherepde.geometry.protocol.Geometry` the solver reads), built once."""
        return fv_geometry(self)

    # -- topology ----------------------------------------------------------------------
    @functools.cached_property
    def edges(self) -> np.ndarray:
        """``(ne, 2)`` int64: vertices ``(i, j)``, ``i < j``, of each edge (unique)."""
        return self._edges

    @functools.cached_property
    def edge_cells(self) -> np.ndarray:
        """``(ne, 2)`` int64: the two cells ``(c, n)`` sharing each edge.

        For ``edges[e] = (i, j)``, cell ``c`` traverses it as ``i -> j`` and ``n`` as
        ``j -> i``; ``edge_normals[e]`` points from ``c`` into ``n``.
        """
        return self._edge_cells

    @functools.cached_property
    def cell_edges(self) -> np.ndarray:
        """``(nc, 3)`` int64: edge ``k`` of cell ``c`` joins vertices ``k`` and ``k+1``.

        That is ``cells[c, k]`` and ``cells[c, (k + 1) % 3]``.
        """
        return self._cell_edges

    @functools.cached_property
    def cell_edge_signs(self) -> np.ndarray:
        """``(nc, 3)`` float64: +1 if ``c == edge_cells[cell_edges[c, k], 0]``, else -1.

        ``cell_edge_signs[c, k] * edge_normals[cell_edges[c, k]]`` is the outward normal
        of cell ``c`` on its ``k``-th edge.
        """
        own = self._edge_cells[self._cell_edges, 0] == np.arange(self.n_cells)[:, None]
        return _readonly(np.where(own, 1.0, -1.0))

    @functools.cached_property
    def neighbors(self) -> np.ndarray:
        """``(nc, 3)`` int64: the cell across ``cell_edges[c, k]``."""
        ec = self._edge_cells[self._cell_edges]  # (nc, 3, 2)
        own = ec[..., 0] == np.arange(self.n_cells)[:, None]
        return _readonly(np.where(own, ec[..., 1], ec[..., 0]))

    # -- geometry ----------------------------------------------------------------------
    @functools.cached_property
    def centers(self) -> np.ndarray:
        """``(nc, 3)`` cell centres on the sphere, ``(a + b + c) / |a + b + c|``."""
        p = self.points
        s = p[self.cells[:, 0]] + p[self.cells[:, 1]] + p[self.cells[:, 2]]
        return _readonly(_normalize(s))

    @functools.cached_property
    def areas(self) -> np.ndarray:
        """``(nc,)`` exact spherical-triangle areas (spherical excess ``E``).

        ``tan(E/2) = |a . (b x c)| / (1 + a . b + b . c + c . a)`` (Van Oosterom &
        Strackee 1983), via ``arctan2``; they sum to ``4 pi`` to round-off.
        """
        p = self.points
        a, b, c = p[self.cells[:, 0]], p[self.cells[:, 1]], p[self.cells[:, 2]]
        return _readonly(spherical_triangle_areas(a, b, c))

    @functools.cached_property
    def edge_lengths(self) -> np.ndarray:
        """``(ne,)`` great-circle arc lengths ``|e|``.

        ``|e| = 2 atan2(|p_i - p_j|, |p_i + p_j|)``, equal to
        ``atan2(|p_i x p_j|, p_i . p_j)`` but accurate for short edges.
        """
        p = self.points
        return _readonly(_geodesic_distance(p[self._edges[:, 0]], p[self._edges[:, 1]]))

    @functools.cached_property
    def edge_midpoints(self) -> np.ndarray:
        """``(ne, 3)`` great-circle midpoints ``(p_i + p_j) / |p_i + p_j|``."""
        p = self.points
        return _readonly(_normalize(p[self._edges[:, 0]] + p[self._edges[:, 1]]))

    @functools.cached_property
    def edge_normals(self) -> np.ndarray:
        """``(ne, 3)`` unit normals, tangent at the midpoint ``m``, normal to the edge.

        ``n = (p_j - p_i) x m / |(p_j - p_i) x m|``, which equals
        ``(p_j x p_i) / |p_j x p_i|`` (the pole of the edge's great circle, constant
        along the arc) and points out of ``edge_cells[e, 0]`` into ``edge_cells[e, 1]``.
        """
        p = self.points
        d = p[self._edges[:, 1]] - p[self._edges[:, 0]]
        return _readonly(_normalize(np.cross(d, self.edge_midpoints)))

    @functools.cached_property
    def center_distances(self) -> np.ndarray:
        """``(ne,)`` geodesic distance between ``centers[c]`` and ``centers[n]``.

        ``d = atan2(|a x b|, a . b)``, evaluated as ``2 atan2(|a - b|, |a + b|)`` (same
        value, accurate for short distances).
        """
        x = self.centers
        return _readonly(
            _geodesic_distance(x[self._edge_cells[:, 0]], x[self._edge_cells[:, 1]])
        )

    @functools.cached_property
    def h(self) -> float:
        """Mesh size: the largest great-circle edge length."""
        return float(self.edge_lengths.max())

    # -- diagnostics and operators -----------------------------------------------------
    def quality(self) -> dict:
        """Summary statistics: sizes, cell areas (``area_ratio = min/max``), lengths."""
        a, L = self.areas, self.edge_lengths
        return {
            "name": self.name,
            "n_cells": self.n_cells,
            "n_edges": self.n_edges,
            "n_vertices": self.n_vertices,
            "area_total": float(a.sum()),
            "area_min": float(a.min()),
            "area_max": float(a.max()),
            "area_ratio": float(a.min() / a.max()),
            "h": float(L.max()),
            "h_min": float(L.min()),
            "h_mean": float(L.mean()),
        }

    def divergence(self, normal_flux_per_length) -> np.ndarray:
        """Discrete divergence of an edge field given along ``edge_normals``.

        .. math::

            (\\nabla\\cdot u)_c
            = \\frac{1}{|C_c|} \\sum_{k=0}^{2} s_{ck}\\,|e_{ck}|\\,u_{e_{ck}},

        with ``s = cell_edge_signs``, ``e = cell_edges``.

        Parameters
        ----------
        normal_flux_per_length : array_like, shape (ne,) or (ne, ...)
            Normal velocity ``u_e`` (flux per unit length) along ``edge_normals[e]``.

        Returns
        -------
        ndarray, shape (nc,) or (nc, ...)
        """
        u = np.asarray(normal_flux_per_length, dtype=np.float64)
        if u.ndim == 0 or u.shape[0] != self.n_edges:
            raise ValueError(
                f"expected an edge field with leading dimension {self.n_edges}, "
                f"got shape {u.shape}."
            )
        w = self.cell_edge_signs * self.edge_lengths[self._cell_edges]  # (nc, 3)
        extra = (1,) * (u.ndim - 1)
        flux = (w.reshape(w.shape + extra) * u[self._cell_edges]).sum(axis=1)
        return flux / self.areas.reshape((-1, *extra))

    # -- I/O ---------------------------------------------------------------------------
    def save(self, path) -> None:
        """Write ``points`` (float64), ``cells`` (int64) and ``name`` to ``.npz``.

        The file is compressed and exact: :meth:`load` reproduces the mesh bit for bit; it is
        written atomically (:func:`spherepde._base.atomic_file`), and, as NumPy does, ``.npz``
        is appended to a name without it.
        """
        path = Path(path)
        if path.suffix != ".npz":
            path = path.with_name(path.name + ".npz")
        with atomic_file(path) as tmp, open(tmp, "wb") as fh:
            np.savez_compressed(fh, points=self.points, cells=self.cells, name=np.array(self.name))

    @classmethod
    def load(cls, path) -> SphereMesh:
        """Read a mesh written by :meth:`save` (:func:`spherepde._base.load_arrays`: headers
        checked, nothing unpickled)."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"mesh file not found: {str(path)!r}")
        try:
            with load_arrays(path) as data:
                missing = {"points", "cells"} - set(data.files)
                if missing:
                    raise MeshError(
                        f"{str(path)!r} is not a spherepde mesh file: missing "
                        f"array(s) {sorted(missing)} (found {sorted(data.files)})."
                    )
                points, cells = data["points"], data["cells"]
                name = str(data["name"]) if "name" in data.files else path.stem
        except MeshError:
            raise
        except (OSError, ValueError) as exc:
            raise MeshError(
                f"cannot read {str(path)!r} as a .npz mesh file: {exc}"
            ) from exc
        return cls(points, cells, name=name)
