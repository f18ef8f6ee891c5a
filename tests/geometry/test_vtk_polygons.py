"""The VTK density writer takes polygons of any vertex count; triangles are written as before."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from spherepde.geometry import vtk
from spherepde.geometry.meshfiles import icosphere


def test_triangles_are_written_as_before(tmp_path):
    pv = pytest.importorskip("pyvista")
    m = icosphere(3)
    rho = np.linspace(0.0, 1.0, m.n_cells)
    vtk.write_density_vtp(m, rho, tmp_path / "new.vtp", t=0.5)
    poly = pv.PolyData(np.asarray(m.points, float), np.hstack([np.full((m.n_cells, 1), 3), m.cells]).ravel())  # the former layout
    poly.cell_data["rho"] = rho
    poly.cell_data["mass"] = rho * m.areas
    poly.field_data["TimeValue"] = np.array([0.5])
    poly.save(tmp_path / "old.vtp")
    assert (tmp_path / "new.vtp").read_bytes() == (tmp_path / "old.vtp").read_bytes()


def test_polygons_of_any_vertex_count(tmp_path):
    pv = pytest.importorskip("pyvista")
    # a cube projected to the sphere: six quads, and the same with one quad split into two triangles
    p = np.array([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)], float) / np.sqrt(3)
    quads = np.array([[0, 1, 3, 2], [4, 6, 7, 5], [0, 4, 5, 1], [2, 3, 7, 6], [0, 2, 6, 4], [1, 5, 7, 3]])
    assert vtk.polygon_connectivity(quads)[:5].tolist() == [4, 0, 1, 3, 2]
    mixed = [[0, 1, 3], [0, 3, 2], *quads[1:].tolist()]
    np.testing.assert_array_equal(vtk.polygon_connectivity(mixed)[:8], [3, 0, 1, 3, 3, 0, 3, 2])
    for cells in (quads, mixed):
        n = len(cells)
        mesh = SimpleNamespace(points=p, cells=cells, n_cells=n, areas=np.full(n, 4 * np.pi / n))
        vtk.write_density_vtp(mesh, np.ones(n), tmp_path / "poly.vtp")
        back = pv.read(tmp_path / "poly.vtp")
        assert back.n_cells == n and np.allclose(back.cell_data["mass"].sum(), 4 * np.pi)
    with pytest.raises(ValueError, match="at least 3"):
        vtk.polygon_connectivity([[0, 1]])
