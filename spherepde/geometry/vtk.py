"""File I/O at the edge of the package: VTK snapshots of mesh densities.

PyVista reads ``.pvd`` time series but has no writer for them, so :func:`write_pvd`
writes the small XML index itself next to one ``.vtp`` file per snapshot
(:func:`write_density_vtp`). ParaView and ``pyvista.read`` open both.
"""

from __future__ import annotations

from pathlib import Path
from xml.sax.saxutils import quoteattr

import numpy as np

__all__ = ["write_density_vtp", "write_pvd", "density_polydata"]


def density_polydata(mesh, rho):
    """A ``pyvista.PolyData`` of the mesh with cell data ``rho`` (density) and ``mass`` (rho |C|)."""
    import pyvista as pv

    rho = np.asarray(rho, float)
    if rho.shape != (mesh.n_cells,):
        raise ValueError(f"density has shape {rho.shape}, expected ({mesh.n_cells},)")
    faces = np.hstack([np.full((mesh.n_cells, 1), 3), mesh.cells]).ravel()
    poly = pv.PolyData(np.asarray(mesh.points, float), faces)
    poly.cell_data["rho"] = rho
    poly.cell_data["mass"] = rho * mesh.areas
    return poly


def write_density_vtp(mesh, rho, path, *, t: float | None = None) -> None:
    """Write one density snapshot as VTK XML PolyData (.vtp); ``t`` goes to field data TimeValue."""
    poly = density_polydata(mesh, rho)
    if t is not None:
        poly.field_data["TimeValue"] = np.array([t])
    path = Path(path)
    tmp = path.with_name(path.stem + ".tmp.vtp")
    poly.save(tmp)
    tmp.replace(path)


def write_pvd(path, entries) -> None:
    """Write a ParaView collection (.pvd) indexing (time, relative file) pairs."""
    lines = ['<?xml version="1.0"?>', '<VTKFile type="Collection" version="0.1" byte_order="LittleEndian">', "  <Collection>"]
    for t, fname in entries:
        lines.append(f'    <DataSet timestep="{float(t)!r}" group="" part="0" file={quoteattr(str(fname))}/>')
    lines += ["  </Collection>", "</VTKFile>", ""]
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("\n".join(lines))
    tmp.replace(path)
