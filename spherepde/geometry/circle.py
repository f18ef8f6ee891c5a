"""The circle S^1 (d = 2) as a finite-volume geometry: a periodic partition into arcs, registered
as ``mesh.kind = "circle"`` (:data:`spherepde.geometry.protocol.GEOMETRIES`; docs/model.md, "The
circle").

A partition of S^1 is given by its ``nc >= 3`` vertex angles phi_0 < phi_1 < ... < phi_{nc-1}
< phi_0 + 2 pi (the arc end points). Then, with phi_nc = phi_0 + 2 pi,

* cell c is the arc [phi_c, phi_{c+1}]: measure |C_c| = h_c = phi_{c+1} - phi_c (the areas sum
  to 2 pi), node x_c = (cos theta_c, sin theta_c) at the arc midpoint theta_c = phi_c + h_c / 2;
* face e is the point phi_{e+1} shared by cell c = e and cell n = e + 1 (mod nc): measure
  |e| = 1 (a point), normal n_e = (-sin phi_{e+1}, cos phi_{e+1}) (the unit tangent, pointing
  counter-clockwise, from c into n), face point x_e = (cos phi_{e+1}, sin phi_{e+1}) and node
  distance d_cn = (h_c + h_n) / 2 (the arc between the two nodes);
* cell -> faces in CSR form: two faces per cell, slot 2c its left face (face c - 1, sign -1)
  and slot 2c + 1 its right face (face c, sign +1); ``slot_shape`` = (nc, 2).

With these members the upwind update of :mod:`spherepde.solvers.fv` is the one-dimensional
finite-volume scheme d rho_c/dt = -(F_{c+1/2} - F_{c-1/2}) / h_c.

Reconstruction (``order = 2``): the central slope g_c = (rho_{c+1} - rho_{c-1}) / (d_{c-1,c} +
d_{c,c+1}) evaluated at the two end points, rho_c -/+ g_c h_c / 2, limited by the same
Barth--Jespersen limiter as on the sphere
(:func:`spherepde.geometry.reconstruction.limited_linear`): both values lie in [min, max] of
rho over the cell and its two neighbours, and they average to rho_c.

A uniform mesh has ``mesh.cells`` equal arcs starting at phi_0 = 0; a mesh file
(``mesh.file``, ``.npy`` or a text file) holds the vertex angles (nc,) in radians, or the
vertex points (nc, 2) on the unit circle, in counter-clockwise order (:func:`read_circle`).
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

import numpy as np

from spherepde._base import atomic_file, load_arrays
from spherepde.geometry import circle_densities
from spherepde.geometry.protocol import GEOMETRIES, GeometryCounts
from spherepde.geometry.reconstruction import limited_linear

__all__ = ["CircleMesh", "circle_mesh", "read_circle", "uniform_circle", "unit", "angles"]

#: The fewest arcs a circle mesh may have (with two, both faces of a cell face the same neighbour).
MIN_CELLS = 3


def unit(theta) -> np.ndarray:
    """Points (cos theta, sin theta), shape (..., 2)."""
    theta = np.asarray(theta, dtype=np.float64)
    return np.stack([np.cos(theta), np.sin(theta)], axis=-1)


def angles(X) -> np.ndarray:
    """The angles in [0, 2 pi) of points X (..., 2) (the points need not be unit)."""
    X = np.asarray(X, dtype=np.float64)
    return np.mod(np.arctan2(X[..., 1], X[..., 0]), 2.0 * np.pi)


def _ro(a, dtype=np.float64) -> np.ndarray:
    a = np.ascontiguousarray(a, dtype=dtype)
    a.flags.writeable = False
    return a


def partition_problem(phi) -> str | None:
    """What is wrong with vertex angles ``phi`` as a partition of S^1, as a phrase, or None."""
    phi = np.asarray(phi)
    if phi.ndim != 1 or phi.dtype.kind not in "iuf":
        return f"expected a 1-D array of vertex angles, got shape {phi.shape} of {phi.dtype}"
    if phi.size < MIN_CELLS:
        return f"{phi.size} vertices make {phi.size} arc(s); a circle mesh needs at least {MIN_CELLS}"
    if not np.all(np.isfinite(phi)):
        return f"{int(np.sum(~np.isfinite(phi)))} NaN/inf angle(s)"
    h = np.diff(np.append(phi.astype(np.float64), phi[0] + 2.0 * np.pi))
    if np.any(h[:-1] <= 0):
        k = int(np.argmax(h[:-1] <= 0))
        return f"the angles are not strictly increasing (phi_{k + 1} = {float(phi[k + 1]):.6g} <= phi_{k} = {float(phi[k]):.6g})"
    if h[-1] <= 0:
        return f"the angles span {float(phi[-1] - phi[0]):.6g} >= 2 pi: they must lie within one turn, phi_0 <= phi < phi_0 + 2 pi"
    return None


class CircleMesh(GeometryCounts):
    """A periodic finite-volume mesh of S^1 (module docstring); it is its own geometry.

    Parameters
    ----------
    phi : (nc,) vertex angles, strictly increasing within one turn (:func:`partition_problem`).
    name : a name for logs and file names.

    Attributes
    ----------
    The :class:`~spherepde.geometry.protocol.Geometry` members (d = 2, nodes (nc, 2), areas
    (nc,), edge_cells (nc, 2), edge_lengths (nc,) = 1, edge_normals (nc, 2), edge_midpoints
    (nc, 2), node_distances (nc,), face_offsets, cell_faces, cell_face_signs, face_slots), and
    phi (nc,) the vertex angles, theta (nc,) the node angles, centers (= nodes), points (nc, 2)
    the vertices, cells (nc, 2) the vertices of each arc, h the largest arc, neighbors (nc, 2)
    the cells left and right of each cell.
    """

    d = 2

    def __init__(self, phi, *, name: str = "circle"):
        problem = partition_problem(phi)
        if problem:
            raise ValueError(f"circle mesh: {problem}")
        phi = np.asarray(phi, dtype=np.float64)
        nc = phi.size
        self.name = str(name)
        self.phi = _ro(phi)
        ends = np.append(phi, phi[0] + 2.0 * np.pi)
        h = np.diff(ends)
        self.areas = _ro(h)
        self.theta = _ro(phi + 0.5 * h)
        self.nodes = _ro(unit(self.theta))
        self.centers = self.nodes
        self.points = _ro(unit(phi))
        c = np.arange(nc, dtype=np.int64)
        right, left = (c + 1) % nc, (c - 1) % nc
        self.cells = _ro(np.stack([c, right], axis=1), np.int64)
        self.neighbors = _ro(np.stack([left, right], axis=1), np.int64)
        self.edge_cells = _ro(np.stack([c, right], axis=1), np.int64)
        self.edge_lengths = _ro(np.ones(nc))
        self.edge_midpoints = _ro(unit(ends[1:]))
        self.edge_normals = _ro(np.stack([-np.sin(ends[1:]), np.cos(ends[1:])], axis=1))
        self.node_distances = _ro(0.5 * (h + h[right]))
        self.face_offsets = _ro(2 * np.arange(nc + 1), np.int64)
        self.cell_faces = _ro(np.stack([left, c], axis=1).reshape(-1), np.int64)
        self.cell_face_signs = _ro(np.tile([-1.0, 1.0], nc))
        self.face_slots = _ro(np.stack([2 * c + 1, 2 * right], axis=1), np.int64)
        # reconstruction weights: rows (left face, right face), columns (delta_left, delta_right)
        q = 0.5 * h / (self.node_distances[left] + self.node_distances)
        self._weights = _ro(np.stack([q, -q, -q, q], axis=1).reshape(-1))
        self._slot_neighbors = _ro(self.neighbors.reshape(-1), np.int64)
        self._weight_offsets = _ro(4 * c, np.int64)

    # ------------------------------------------------------------------ protocol
    @property
    def slot_shape(self) -> tuple[int, int]:
        return (self.n_cells, 2)

    @property
    def h(self) -> float:
        """The largest arc length (the mesh width)."""
        return float(np.max(self.areas))

    def geometry(self) -> CircleMesh:
        """The mesh itself (a circle mesh is its own finite-volume geometry)."""
        return self

    def reconstruct(self, rho) -> np.ndarray:
        """Limited linear face values of the cell averages ``rho`` (nc,), shape (nc, 2): (left, right) end of each arc."""
        faces = limited_linear(rho, self.face_offsets, self._slot_neighbors, self._weights, self._weight_offsets)
        return faces.reshape(self.n_cells, 2)

    # ------------------------------------------------------------------ location
    def locate(self, X) -> np.ndarray:
        """The cell holding each point of X (n, 2) (by its angle), shape (n,) int64."""
        a = np.mod(angles(X) - self.phi[0], 2.0 * np.pi)
        return np.clip(np.searchsorted(self.phi - self.phi[0], a, side="right") - 1, 0, self.n_cells - 1).astype(np.int64)

    # ------------------------------------------------------------------ files
    def save(self, path) -> None:
        """Write the vertex angles ``phi`` and the name to ``.npz`` (exact; :meth:`load` reads it back)."""
        path = Path(path)
        if path.suffix != ".npz":
            path = path.with_name(path.name + ".npz")
        with atomic_file(path) as tmp, open(tmp, "wb") as fh:
            np.savez_compressed(fh, circle_phi=self.phi, name=np.array(self.name))

    @classmethod
    def load(cls, path) -> CircleMesh:
        """Read a circle mesh written by :meth:`save`."""
        with load_arrays(path) as data:
            if "circle_phi" not in data.files:
                raise ValueError(f"{path} is not a circle mesh file (no array 'circle_phi'; found {sorted(data.files)})")
            phi, name = np.array(data["circle_phi"]), str(data["name"]) if "name" in data.files else Path(path).stem
        return cls(phi, name=name)

    def __repr__(self) -> str:
        return f"CircleMesh({self.name!r}, {self.n_cells} arcs, h = {self.h:.3g})"


def uniform_circle(n: int) -> CircleMesh:
    """``n`` equal arcs starting at angle 0."""
    n = int(n)
    if n < MIN_CELLS:
        raise ValueError(f"mesh.cells: a circle mesh needs at least {MIN_CELLS} arcs, got {n}")
    return CircleMesh(2.0 * np.pi * np.arange(n) / n, name=f"circle{n}")


def read_circle(path) -> CircleMesh:
    """A circle mesh from a file of vertex angles (nc,) in radians or vertex points (nc, 2) on the
    unit circle, counter-clockwise within one turn: ``.npy`` or text (``np.loadtxt``)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"mesh.file: circle mesh file not found: {str(path)!r}")
    try:
        arr = np.asarray(load_arrays(path)) if path.suffix == ".npy" else np.loadtxt(path, ndmin=1)
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read {path} as vertex angles (nc,) or points (nc, 2): {' '.join(str(exc).split())}") from None
    if arr.ndim == 2 and arr.shape[1] == 2:
        r = np.linalg.norm(arr, axis=1) if arr.dtype.kind in "iuf" else np.zeros(0)
        if r.size != arr.shape[0] or not np.all(np.abs(r - 1.0) <= 1e-9):
            raise ValueError(f"{path}: vertex points (nc, 2) must lie on the unit circle (| |x| - 1 | <= 1e-9)")
        a = np.arctan2(arr[:, 1], arr[:, 0])
        arr = a[0] + np.concatenate([[0.0], np.cumsum(np.mod(np.diff(a), 2.0 * np.pi))])
    problem = partition_problem(arr)
    if problem:
        raise ValueError(f"{path}: {problem}")
    return CircleMesh(arr, name=path.stem)


def _circle_cells(section) -> float | None:
    return None if section.file else float(section.cells)


@functools.lru_cache(maxsize=8)
def _uniform_cached(n: int) -> CircleMesh:
    return uniform_circle(n)


def _densities():
    """The circle's initial densities (:mod:`spherepde.geometry.circle_densities`)."""
    return circle_densities


@GEOMETRIES.register(
    "circle", d=2, cells=_circle_cells, densities=_densities, size_key="mesh.cells",
    about="the circle S^1 (model.d = 2): mesh.cells equal arcs, or the partition whose vertex angles (or points) mesh.file holds",
)
def circle_mesh(section) -> CircleMesh:
    """The circle mesh of a config's mesh section: ``read_circle(section.file)`` if a file is given, else ``section.cells`` equal arcs."""
    if section.file:
        return read_circle(section.file)
    return _uniform_cached(int(section.cells))


def arc_between(a, b) -> np.ndarray:
    """The arc (angle in [0, pi]) between angles a and b."""
    d = np.mod(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64), 2.0 * np.pi)
    return np.minimum(d, 2.0 * math.pi - d)
