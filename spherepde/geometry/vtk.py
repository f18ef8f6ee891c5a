"""File I/O at the edge of the package: VTK snapshots of mesh densities and of tokens.

PyVista reads ``.pvd`` time series but has no writer for them, so :func:`write_pvd`
writes the small XML index itself next to one ``.vtp`` file per snapshot
(:func:`write_density_vtp` for densities, :func:`write_tokens_vtp` for token clouds,
:func:`write_point_masses_vtp` for the point masses of a mesh run).
ParaView and ``pyvista.read`` open both. Token files are plain XML written here (no VTK
call), so a full disk raises an ordinary ``OSError``.
"""

from __future__ import annotations

from xml.sax.saxutils import quoteattr

import numpy as np

from spherepde._base import atomic_file, atomic_write_text

__all__ = ["write_density_vtp", "write_pvd", "density_polydata", "polygon_connectivity", "write_tokens_vtp", "write_point_masses_vtp"]


def polygon_connectivity(cells) -> np.ndarray:
    """VTK's flat polygon list ``[k_0, i_0 .. , k_1, j_0 .., ...]`` of ``cells``, int64.

    ``cells`` is an (nc, k) integer array (every cell a k-gon: triangles, quads, ...) or a
    sequence of vertex-index sequences of any lengths (k >= 3 each).
    """
    if isinstance(cells, np.ndarray) and cells.ndim == 2:
        return np.hstack([np.full((cells.shape[0], 1), cells.shape[1]), cells]).ravel()
    rows = [np.asarray(c, dtype=np.int64).ravel() for c in cells]
    if any(r.size < 3 for r in rows):
        raise ValueError("every polygon needs at least 3 vertices")
    return np.concatenate([np.concatenate([[r.size], r]) for r in rows]).astype(np.int64) if rows else np.empty(0, np.int64)


def density_polydata(mesh, rho):
    """A ``pyvista.PolyData`` of the mesh (``mesh.points``, polygons ``mesh.cells`` of any
    vertex count, :func:`polygon_connectivity`; on the circle, points (nc, 2) in the plane z = 0 and
    its arcs as line cells) with cell data ``rho`` (density) and ``mass`` (rho |C|)."""
    import pyvista as pv

    rho = np.asarray(rho, float)
    if rho.shape != (mesh.n_cells,):
        raise ValueError(f"density has shape {rho.shape}, expected ({mesh.n_cells},)")
    points = np.asarray(mesh.points, float)
    if points.shape[1] == 2:  # the circle: its arcs as line cells (chords) in the plane z = 0
        poly = pv.PolyData(np.column_stack([points, np.zeros(len(points))]), lines=polygon_connectivity(mesh.cells))
    else:
        poly = pv.PolyData(points, polygon_connectivity(mesh.cells))
    poly.cell_data["rho"] = rho
    poly.cell_data["mass"] = rho * mesh.areas
    return poly


def write_density_vtp(mesh, rho, path, *, t: float | None = None) -> None:
    """Write one density snapshot as VTK XML PolyData (.vtp); ``t`` goes to field data TimeValue."""
    poly = density_polydata(mesh, rho)
    if t is not None:
        poly.field_data["TimeValue"] = np.array([t])
    with atomic_file(path, suffix=".vtp") as tmp:
        poly.save(tmp)


def write_pvd(path, entries) -> None:
    """Write a ParaView collection (.pvd) indexing (time, relative file) pairs."""
    lines = ['<?xml version="1.0"?>', '<VTKFile type="Collection" version="0.1" byte_order="LittleEndian">', "  <Collection>"]
    for t, fname in entries:
        lines.append(f'    <DataSet timestep="{float(t)!r}" group="" part="0" file={quoteattr(str(fname))}/>')
    lines += ["  </Collection>", "</VTKFile>", ""]
    atomic_write_text(path, "\n".join(lines))


def _ascii(values) -> str:
    return " ".join(repr(float(v)) if isinstance(v, (float, np.floating)) else str(int(v)) for v in values)


def write_tokens_vtp(X, path, *, t: float | None = None) -> None:
    """Write one token cloud as VTK XML PolyData (.vtp): one vertex per token.

    ``X`` (n, 3) tokens on S^2 (or (n, 2) on S^1, drawn in the plane z = 0; or (n, d) on
    S^{d-1} with d > 3, of which the first three coordinates are written -- VTK points are
    three-dimensional -- a projection, noted in the run's run.log). Point data ``token``
    (the token's index, the same token in every file of a series); ``t`` goes to the
    field data ``TimeValue``. Written atomically (temporary file + rename).
    """
    X = np.asarray(X, float)
    if X.ndim != 2 or X.shape[1] < 2 or X.shape[0] == 0:
        raise ValueError(f"tokens must have shape (n, d) with d >= 2 and n >= 1, got {X.shape}")
    if X.shape[1] == 2:
        X = np.column_stack([X, np.zeros(len(X))])
    elif X.shape[1] > 3:
        X = X[:, :3]
    _write_points(X, {"token": np.arange(X.shape[0])}, path, t)


def write_point_masses_vtp(x, m, path, *, t: float | None = None) -> None:
    """Write the point masses of a mesh run as VTK XML PolyData (.vtp): one vertex per point mass at
    its position ``x`` (k, 3) on S^2, point data ``mass`` (k,) (and ``index``); none at all is an empty
    file (k = 0). ``t`` goes to the field data ``TimeValue``. Written atomically."""
    x, m = np.asarray(x, float), np.asarray(m, float).reshape(-1)
    x = np.column_stack([x, np.zeros(len(x))]) if x.ndim == 2 and x.shape[1] == 2 else x.reshape(-1, 3)  # the circle: in the plane z = 0
    if x.shape[0] != m.size:
        raise ValueError(f"point masses: {x.shape[0]} positions but {m.size} masses")
    _write_points(x, {"mass": m, "index": np.arange(m.size)}, path, t)


def _write_points(X, point_data: dict, path, t) -> None:
    """VTK XML PolyData of the points X (n, 3) (one vertex each) with the named point-data arrays."""
    n = X.shape[0]
    idx = np.arange(n)
    field = ""
    if t is not None:
        field = f'    <FieldData>\n      <DataArray type="Float64" Name="TimeValue" NumberOfTuples="1" format="ascii">{float(t)!r}</DataArray>\n    </FieldData>\n'
    arrays = "".join(
        f'        <DataArray type="{"Float64" if np.asarray(v).dtype.kind == "f" else "Int64"}" Name="{name}" format="ascii">{_ascii(v)}</DataArray>\n'
        for name, v in point_data.items())
    text = (
        '<?xml version="1.0"?>\n'
        '<VTKFile type="PolyData" version="1.0" byte_order="LittleEndian" header_type="UInt64">\n'
        "  <PolyData>\n"
        f"{field}"
        f'    <Piece NumberOfPoints="{n}" NumberOfVerts="{n}" NumberOfLines="0" NumberOfStrips="0" NumberOfPolys="0">\n'
        f'      <PointData Scalars="{next(iter(point_data))}">\n'
        f"{arrays}"
        "      </PointData>\n"
        "      <Points>\n"
        f'        <DataArray type="Float64" Name="Points" NumberOfComponents="3" format="ascii">{_ascii(X.ravel())}</DataArray>\n'
        "      </Points>\n"
        "      <Verts>\n"
        f'        <DataArray type="Int64" Name="connectivity" format="ascii">{_ascii(idx)}</DataArray>\n'
        f'        <DataArray type="Int64" Name="offsets" format="ascii">{_ascii(idx + 1)}</DataArray>\n'
        "      </Verts>\n"
        "    </Piece>\n"
        "  </PolyData>\n"
        "</VTKFile>\n"
    )
    atomic_write_text(path, text)
