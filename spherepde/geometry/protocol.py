"""The geometry seam: what the finite-volume solver needs to know about a mesh, and the
registry of the meshes a run can use (``mesh.kind``).

A finite-volume geometry on the sphere S^{d-1} in R^d consists of

* **cells** c = 0 .. nc-1: a node x_c on S^{d-1} (``nodes``, (nc, d)) that carries the cell
  mass in the nonlocal sums, and a measure |C_c| > 0 (``areas``, (nc,));
* **faces** e = 0 .. ne-1 (edges of a surface mesh, points of a circle): the two cells
  ``edge_cells[e] = (c, n)`` (ne, 2), a measure |e| (``edge_lengths``, (ne,); 1 for a point
  face), a unit normal n_e tangent at the face pointing from c into n (``edge_normals``,
  (ne, d)), a representative point x_e (``edge_midpoints``, (ne, d)) and the geodesic
  distance d_cn between the two nodes (``node_distances``, (ne,));
* **cell -> faces connectivity** in compressed-sparse-row form, so any number of faces per
  cell works: the faces of cell c are ``cell_faces[face_offsets[c]:face_offsets[c + 1]]``
  with orientation ``cell_face_signs`` (+1 where the face's normal points out of c, -1
  otherwise). Position j = face_offsets[c] + k is the *slot* of (cell c, its k-th face);
  ``face_slots[e] = (j_c, j_n)`` are the slots of face e in the lists of its two cells.
  Values per slot ("face values": the density of cell c reconstructed at its face k) are
  arrays with ``face_offsets[-1]`` entries in slot order, shaped ``slot_shape`` ((nc, k)
  for a geometry with k faces in every cell, else (n_slots,));
* **the reconstruction the geometry owns**: ``reconstruct(rho)`` returns the limited face
  values of the cell averages ``rho`` (nc,) for the second-order scheme, shape
  ``slot_shape``; each value lies in [min, max] of rho over the cell and its neighbours.

The solver (:mod:`spherepde.solvers.fv`, :mod:`spherepde.solvers.implicit`,
:class:`spherepde.solvers.mesh.MeshSolver`) reads only these members. The object a
registered builder returns (the *mesh*: what densities, VTK files and run folders use) gives
its geometry through ``mesh.geometry()``; a geometry is its own mesh for the solver
(``geometry()`` returns itself). :class:`spherepde.geometry.surface.FVGeometry` is the
geometry of a triangulated sphere (icosphere or mesh file).

Registry: :data:`GEOMETRIES` (config key ``mesh.kind``). An entry is a builder
``build(mesh_section) -> mesh`` registered with the ambient dimension it supports (``d=``)
and, optionally, ``cells=`` a function of the mesh section giving the cell count before the
mesh is built (None when unknown; the config's memory estimate reads it);
:func:`check_dimension` is the one place that refuses another d (the config calls it with
the entry's d before a run, the solver with the geometry's d).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from spherepde._registry import Registry

__all__ = ["GEOMETRIES", "Geometry", "GeometryCounts", "check_dimension", "geometry_dimension", "geometry_of", "local_maxima", "mesh_spacing"]

#: The meshes a run can use, by ``mesh.kind``: builders ``build(mesh_section) -> mesh`` with info ``d`` (ambient dimension).
GEOMETRIES = Registry("geometry", key="mesh.kind")


@runtime_checkable
class Geometry(Protocol):
    """A finite-volume geometry on S^{d-1} (module docstring): the members the solver reads."""

    d: int
    nodes: np.ndarray  # (nc, d) cell nodes on S^{d-1}
    areas: np.ndarray  # (nc,) cell measures |C_c|
    edge_cells: np.ndarray  # (ne, 2) int64, the two cells (c, n) of each face
    edge_lengths: np.ndarray  # (ne,) face measures |e|
    edge_normals: np.ndarray  # (ne, d) unit normals from c into n, tangent at the face
    edge_midpoints: np.ndarray  # (ne, d) face points (midpoint edge velocity)
    node_distances: np.ndarray  # (ne,) geodesic distance between the nodes of c and n
    face_offsets: np.ndarray  # (nc + 1,) int64 CSR offsets of cell -> faces
    cell_faces: np.ndarray  # (n_slots,) int64 face of each slot
    cell_face_signs: np.ndarray  # (n_slots,) float, +1 where the face normal points out of the cell
    face_slots: np.ndarray  # (ne, 2) int64 slots of face e in the lists of edge_cells[e]

    @property
    def n_cells(self) -> int: ...

    @property
    def n_edges(self) -> int: ...

    @property
    def slot_shape(self) -> tuple[int, ...]: ...

    def reconstruct(self, rho) -> np.ndarray: ...

    def geometry(self) -> Geometry: ...


class GeometryCounts:
    """``n_cells`` and ``n_edges`` of a geometry from its ``areas`` and ``edge_lengths`` (a mixin)."""

    @property
    def n_cells(self) -> int:
        return self.areas.shape[0]

    @property
    def n_edges(self) -> int:
        return self.edge_lengths.shape[0]


def geometry_of(mesh) -> Geometry:
    """The finite-volume geometry of ``mesh`` (``mesh.geometry()``; a geometry returns itself)."""
    return mesh.geometry()


def geometry_dimension(kind: str) -> int:
    """The ambient dimension d the registered geometry ``kind`` works in (ValueError for an unknown kind)."""
    return int(GEOMETRIES.entry(kind).info["d"])


def check_dimension(geometry_d: int, d: int) -> None:
    """Refuse a model of ambient dimension ``d`` on a geometry of dimension ``geometry_d`` (ValueError)."""
    if int(d) != int(geometry_d):
        raise ValueError(
            f"the mesh solver works on S^{int(geometry_d) - 1} (d = {int(geometry_d)}), got d = {d}; use run.solver = 'particles' for other d"
        )


def mesh_spacing(geom: Geometry) -> float:
    """The typical cell width of ``geom``: the mean face measure on a surface (d = 3, where a face is
    an edge with a length), the mean node distance where faces are points (d = 2, the circle)."""
    return float(np.mean(geom.node_distances if geom.d == 2 else geom.edge_lengths))


def local_maxima(geom: Geometry, values) -> np.ndarray:
    """Cells whose value is >= the value of every neighbour across a face, bool (nc,).

    Built from the faces (``edge_cells``) alone, so it holds for any geometry; for a
    triangulated sphere it equals ``np.all(values[:, None] >= values[neighbors], axis=1)``.
    """
    values = np.asarray(values)
    c, n = geom.edge_cells[:, 0], geom.edge_cells[:, 1]
    out = np.ones(geom.n_cells, dtype=bool)
    out[c[~(values[c] >= values[n])]] = False
    out[n[~(values[n] >= values[c])]] = False
    return out
