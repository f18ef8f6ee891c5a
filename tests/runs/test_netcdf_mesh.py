"""NetCDF export carries the mesh (issue 26): found, the file had cell centres and areas but no
cell connectivity, so the map could not be redrawn (or opened as a mesh) from the file alone.
Now the UGRID conventions (1.0): a mesh_topology variable, node coordinates, face-node connectivity."""

from __future__ import annotations

import numpy as np
import pytest

import spherepde as sp
from spherepde.runs.dataset import export_netcdf

xr = pytest.importorskip("xarray")


def _mesh_from_file(ds):
    """The triangles and vertices named by the file's UGRID mesh topology, read from nothing else."""
    (name,) = [k for k, v in ds.variables.items() if v.attrs.get("cf_role") == "mesh_topology"]
    topo = ds[name]
    assert int(topo.attrs["topology_dimension"]) == 2
    conn = ds[topo.attrs["face_node_connectivity"]]
    assert conn.attrs["cf_role"] == "face_node_connectivity"
    cells = conn.values.astype(np.int64) - int(conn.attrs["start_index"])
    lon_name, lat_name = topo.attrs["node_coordinates"].split()
    lon, lat = np.radians(ds[lon_name].values), np.radians(ds[lat_name].values)
    points = np.stack([np.cos(lat) * np.cos(lon), np.cos(lat) * np.sin(lon), np.sin(lat)], axis=1)
    return topo, conn, cells, points


def test_netcdf_export_holds_the_mesh_topology(tmp_path):
    cfg = sp.default_config().with_overrides({"mesh.level": 2, "model.H": 1, "solver.T": 0.05, "output.vtk": False})
    run = tmp_path / "run"
    sp.run(cfg, out=run, progress=False)
    nc = export_netcdf(run, tmp_path / "run.nc")
    with xr.open_dataset(nc, engine="h5netcdf") as ds:
        topo, conn, cells, points = _mesh_from_file(ds)
        assert topo.attrs["face_dimension"] == "cell" and conn.dims == ("cell", "cell_node")
        assert ds["rho"].dims == ("time", "cell")
        assert ds["rho"].attrs["mesh"] == topo.name and ds["rho"].attrs["location"] == "face"
        assert "UGRID-1.0" in ds.attrs["Conventions"]
        node_xyz = ds["node_xyz"].values
    with np.load(run / "mesh.npz") as z:
        assert np.array_equal(cells, z["cells"])
        np.testing.assert_allclose(points, z["points"], atol=1e-12)
        assert np.array_equal(node_xyz, z["points"])


def test_particle_export_has_no_mesh(tmp_path):
    cfg = sp.default_config().with_overrides({"run.solver": "particles", "initial.n": 20, "model.H": 1, "solver.T": 0.05, "output.vtk": False})
    run = tmp_path / "run"
    sp.run(cfg, out=run, progress=False)
    with xr.open_dataset(export_netcdf(run, tmp_path / "p.nc"), engine="h5netcdf") as ds:
        assert not [v for v in ds.variables.values() if v.attrs.get("cf_role") == "mesh_topology"]
        assert "node" not in ds.dims
