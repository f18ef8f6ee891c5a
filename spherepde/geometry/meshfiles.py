"""Sphere meshes from their sources: icosphere levels, mesh files, and writing them back.

* :func:`icosphere` -- meshzoo's icosahedral sphere with 20 n^2 cells, cached per level;
* :func:`read_mesh` / :func:`write_mesh` -- ``.npz`` (:meth:`SphereMesh.save`) or any
  closed triangulated surface PyVista reads (``.vtk .vtp .ply .obj .stl``);
* :func:`load_mesh` -- a :class:`SphereMesh`, an icosphere level, ``"icosphere:N"`` or a path;
* :func:`surface_mesh` -- the mesh of a config's mesh section, registered as the geometry
  ``mesh.kind = "icosphere"`` (:data:`spherepde.geometry.protocol.GEOMETRIES`).

PyVista is imported only when a non-``.npz`` file is read or written.
"""

from __future__ import annotations

import contextlib
import functools
import math
import operator
import warnings
from os import PathLike
from pathlib import Path

import numpy as np

from spherepde.geometry.mesh import PYVISTA_EXTENSIONS, MeshError, SphereMesh
from spherepde.geometry.protocol import GEOMETRIES

__all__ = ["icosphere", "icosphere_bytes", "load_mesh", "load_saved_mesh", "mesh_level_for_cells", "read_mesh", "surface_mesh", "write_mesh"]


# --------------------------------------------------------------------------------------
# constructors and file I/O
# --------------------------------------------------------------------------------------


def _level(n, what: str = "icosphere level") -> int:
    if isinstance(n, bool):
        raise MeshError(f"{what} must be an integer >= 1, got {n!r}.")
    try:
        n = operator.index(n)
    except TypeError:
        raise MeshError(f"{what} must be an integer >= 1, got {n!r}.") from None
    if n < 1:
        raise MeshError(f"{what} must be an integer >= 1, got {n}.")
    return n


@functools.cache
def _icosphere(n: int) -> SphereMesh:
    import meshzoo

    points, cells = meshzoo.icosa_sphere(n)
    return SphereMesh(points, cells, name=f"icosphere-{n}")


def icosphere(n: int) -> SphereMesh:
    """Icosahedral sphere ``meshzoo.icosa_sphere(n)``: ``20 n^2`` cells.

    Each icosahedron face is split into ``n^2`` triangles and the ``10 n^2 + 2``
    vertices are projected to the sphere.  Cached per process (the same object is
    returned for the same ``n``).

    Examples
    --------
    >>> import numpy as np, spherepde as sp
    >>> mesh = sp.icosphere(4)
    >>> mesh.n_cells
    320
    >>> bool(np.isclose(mesh.areas.sum(), 4 * np.pi))  # exact spherical areas
    True
    """
    return _icosphere(_level(n))


#: Memory per cell of an icosphere with its derived geometry (measured ~400 bytes).
ICOSPHERE_BYTES_PER_CELL = 512


def icosphere_bytes(n: int) -> float:
    """About how much memory :func:`icosphere` ``(n)`` and its geometry take (a float: never overflows)."""
    return 20.0 * float(n) ** 2 * ICOSPHERE_BYTES_PER_CELL


def mesh_level_for_cells(n_cells: int) -> int:
    """Smallest icosphere level ``n >= 1`` with ``20 n^2 >= n_cells``."""
    n_cells = operator.index(n_cells)
    n = max(1, math.isqrt(max(n_cells - 1, 0) // 20))
    while 20 * n * n < n_cells:
        n += 1
    while n > 1 and 20 * (n - 1) ** 2 >= n_cells:
        n -= 1
    return n


@contextlib.contextmanager
def _quiet_vtk():
    """Silence VTK while a file is read: its output window (error and warning text), its
    logger (loguru lines on stderr) and pyvista's Python warnings. A damaged file is then
    reported once, by the caller, as a one-line :class:`MeshError`."""
    import pyvista as pv
    from vtkmodules.vtkCommonCore import vtkObject

    shown = vtkObject.GetGlobalWarningDisplay()
    vtkObject.GlobalWarningDisplayOff()
    try:
        verbosity = getattr(pv, "vtk_verbosity", None)  # pyvista >= 0.45
        with verbosity("off") if verbosity is not None else contextlib.nullcontext(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        vtkObject.SetGlobalWarningDisplay(shown)


def read_mesh(path, *, merge_tolerance: float = 1e-10) -> SphereMesh:
    """Read a sphere mesh from ``.npz`` (:meth:`SphereMesh.save`) or ``pyvista.read``.

    For PyVista formats (``.vtk .vtp .ply .obj .stl`` ...) the surface is extracted,
    polygons are triangulated, and coincident points are merged (``clean`` with relative
    tolerance ``merge_tolerance`` of the bounding-box diagonal) before validation.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    MeshError
        If the file cannot be read, contains non-triangulable cells (lines, vertices),
        or is not a closed 2-manifold sphere.
    """
    path = Path(path)
    if path.is_dir():
        raise MeshError(f"{str(path)!r} is a directory; give a mesh file (.npz/.vtk/.vtp/.ply/.obj/.stl).")
    if not path.is_file():
        raise FileNotFoundError(
            f"mesh file not found: {str(path)!r}. Give an existing "
            ".npz/.vtk/.vtp/.ply/.obj/.stl file, an icosphere level (e.g. 16) or "
            "'icosphere:16'."
        )
    if path.suffix.lower() == ".npz":
        return SphereMesh.load(path)

    import pyvista as pv

    try:
        with _quiet_vtk():
            data = pv.read(path)
    except Exception as exc:  # pyvista/VTK raise many exception types
        msg = " ".join(str(exc).split())
        raise MeshError(f"cannot read {str(path)!r} as a {path.suffix} mesh (damaged or not a mesh file): {msg}") from exc
    if data is None:
        raise MeshError(f"cannot read {str(path)!r} as a {path.suffix} mesh (damaged or not a mesh file).")
    if isinstance(data, pv.MultiBlock):
        data = data.combine()
    if not isinstance(data, pv.PolyData):
        if not hasattr(data, "extract_surface"):
            raise MeshError(
                f"{str(path)!r} holds a {type(data).__name__}, not a surface mesh."
            )
        data = data.extract_surface()
    if data.n_points == 0 or data.n_cells == 0:
        raise MeshError(f"{str(path)!r} contains no surface cells.")
    if data.n_lines or data.n_verts:
        raise MeshError(
            f"{str(path)!r} contains {data.n_lines} line and {data.n_verts} vertex "
            "cell(s); a sphere mesh must consist of polygons (triangles) only."
        )
    surf = data.triangulate().clean(tolerance=merge_tolerance, absolute=False)
    if surf.n_lines or surf.n_verts:
        raise MeshError(
            f"{str(path)!r}: after merging duplicate points some triangles collapsed "
            "to lines or points (degenerate triangles); repair the mesh."
        )
    if surf.n_cells == 0 or not surf.is_all_triangles:
        raise MeshError(f"{str(path)!r}: the surface could not be triangulated.")
    cells = np.asarray(surf.regular_faces, dtype=np.int64)
    points = np.asarray(surf.points, dtype=np.float64)
    return SphereMesh(points, cells, name=path.stem)


def write_mesh(mesh: SphereMesh, path) -> None:
    """Write ``mesh`` as ``.npz`` (:meth:`SphereMesh.save`) or via ``PolyData.save``.

    PyVista formats (``.vtp .vtk .ply .stl .obj``) store the points and triangles; note
    that ``.stl`` and binary ``.ply`` keep the coordinates in single precision.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".npz":
        mesh.save(path)
        return
    if suffix not in PYVISTA_EXTENSIONS:
        raise ValueError(
            f"unsupported mesh file extension {suffix!r}; use .npz or one of "
            f"{PYVISTA_EXTENSIONS}."
        )
    import pyvista as pv

    faces = np.hstack(
        [np.full((mesh.n_cells, 1), 3, dtype=np.int64), mesh.cells]
    ).ravel()
    poly = pv.PolyData(np.array(mesh.points), faces=faces)
    if suffix == ".obj":
        poly.save(path)
    else:
        poly.save(path, recompute_normals=False)


MeshSpec = SphereMesh | int | str | PathLike


def load_mesh(spec: MeshSpec) -> SphereMesh:
    """Return a mesh from a flexible specification.

    ``spec`` may be a :class:`SphereMesh` (returned unchanged), an ``int`` (icosphere
    level), the string ``"icosphere:N"``, or a path to a mesh file (see
    :func:`read_mesh`).
    """
    if isinstance(spec, SphereMesh):
        return spec
    if isinstance(spec, (int, np.integer)) and not isinstance(spec, bool):
        return icosphere(int(spec))
    if isinstance(spec, str):
        s = spec.strip()
        if s.lower().startswith("icosphere:"):
            level = s.split(":", 1)[1].strip()
            try:
                n = int(level)
            except ValueError:
                raise MeshError(
                    f"bad mesh spec {spec!r}: expected 'icosphere:N' with an integer "
                    "N >= 1."
                ) from None
            return icosphere(n)
        return read_mesh(s)
    if isinstance(spec, PathLike):
        return read_mesh(spec)
    raise TypeError(
        f"cannot make a mesh from {type(spec).__name__}; give a SphereMesh, an "
        "icosphere level, 'icosphere:N' or a file path."
    )


def _surface_cells(section) -> float | None:
    """The cell count of :func:`surface_mesh` before it is built (None for a file: known once read)."""
    return None if section.file else 20.0 * float(section.level) ** 2


def load_saved_mesh(path):
    """The mesh a run folder saved (``mesh.npz``): a :class:`SphereMesh`, or a
    :class:`~spherepde.geometry.circle.CircleMesh` when the file holds a circle's vertex angles."""
    from spherepde._base import load_arrays

    try:
        with load_arrays(path) as data:
            circle = "circle_phi" in data.files
    except (OSError, ValueError):  # SphereMesh.load says what is wrong with the file, as before
        circle = False
    if circle:
        from spherepde.geometry.circle import CircleMesh

        return CircleMesh.load(path)
    return SphereMesh.load(path)


@GEOMETRIES.register(
    "icosphere", d=3, cells=_surface_cells,
    about="a triangulated sphere S^2: the icosphere of mesh.level (20 level^2 cells), or the closed surface mesh in mesh.file",
)
def surface_mesh(section) -> SphereMesh:
    """The triangulated sphere of a config's mesh section: ``read_mesh(section.file)`` if a file is given, else ``icosphere(section.level)``."""
    if section.file:
        return read_mesh(section.file)
    return icosphere(section.level)
