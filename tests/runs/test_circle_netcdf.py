"""NetCDF export and open_run of circle runs (model.d = 2, issue 34 item 1): the density on the arcs
with a 1-D UGRID mesh (cf_role mesh_topology, topology_dimension 1, the arcs as edges between their end
points), arc lengths as cell measures, point masses, and the tokens of particle and ``both`` runs."""

from __future__ import annotations

import math

import numpy as np
import pytest

import spherepde as sp
from spherepde.runs.dataset import export_netcdf

xr = pytest.importorskip("xarray")

CIRCLE = {"model.d": 2, "mesh.kind": "circle", "mesh.cells": 48, "model.H": 1, "solver.T": 0.2, "weights.dt": 0.05,
          "output.record_dt": 0.1, "output.snapshot_dt": 0.1, "output.vtk": False, "initial.kind": "vmf",
          "initial.means": [0.5, 2.5], "initial.kappas": [4.0]}


def _run_and_export(tmp_path, **over):
    cfg = sp.default_config().with_overrides({**CIRCLE, **over})
    run = tmp_path / "run"
    sp.run(cfg, out=run, progress=False)
    return run, export_netcdf(run, tmp_path / "run.nc")


def _documented(ds):
    """Every data variable and coordinate carries a long_name and units (the topology's integer variables: a long_name)."""
    for name, v in ds.variables.items():
        assert "long_name" in v.attrs, name
        if v.dtype.kind == "f":
            assert "units" in v.attrs, name


def test_circle_mesh_run_exports_a_1d_ugrid_mesh(tmp_path):
    run, nc = _run_and_export(tmp_path)
    with np.load(run / "snapshots.npz") as z:
        rho, t = z["rho"], z["t"]
    with np.load(run / "mesh.npz") as z:
        phi = z["circle_phi"]
    with xr.open_dataset(nc, engine="h5netcdf") as ds:
        np.testing.assert_array_equal(ds["rho"].values, rho)  # the same numbers as the run folder
        np.testing.assert_array_equal(ds["time"].values, t)
        h = np.diff(np.append(phi, phi[0] + 2 * math.pi))
        np.testing.assert_allclose(ds["cell_length"].values, h, rtol=1e-15)
        np.testing.assert_allclose((ds["rho"] * ds["cell_length"]).sum("cell").values, 1.0, rtol=1e-12)  # mass 1 at every snapshot
        np.testing.assert_allclose(ds["cell_theta"].values, phi + h / 2, rtol=1e-15)
        np.testing.assert_allclose(ds["cell_xy"].values, np.stack([np.cos(phi + h / 2), np.sin(phi + h / 2)], axis=1), atol=1e-15)
        (name,) = [k for k, v in ds.variables.items() if v.attrs.get("cf_role") == "mesh_topology"]
        topo = ds[name]
        assert int(topo.attrs["topology_dimension"]) == 1 and topo.attrs["edge_dimension"] == "cell"
        conn = ds[topo.attrs["edge_node_connectivity"]]
        assert conn.attrs["cf_role"] == "edge_node_connectivity" and conn.dims == ("cell", "cell_node")
        ends = conn.values.astype(np.int64) - int(conn.attrs["start_index"])
        xn, yn = (ds[v].values for v in topo.attrs["node_coordinates"].split())
        # each arc runs counter-clockwise from its first end point to its second, over the arc length
        a0, a1 = np.arctan2(yn[ends[:, 0]], xn[ends[:, 0]]), np.arctan2(yn[ends[:, 1]], xn[ends[:, 1]])
        np.testing.assert_allclose(np.mod(a1 - a0, 2 * math.pi), ds["cell_length"].values, atol=1e-12)
        np.testing.assert_allclose(ds["node_theta"].values, phi, rtol=0, atol=0)
        assert ds["rho"].attrs["mesh"] == name and ds["rho"].attrs["location"] == "edge" and ds["rho"].attrs["units"] == "rad-1"
        assert "UGRID-1.0" in ds.attrs["Conventions"]
        _documented(ds)
    opened = sp.open_run(run)  # open_run gives the same dataset without the topology
    np.testing.assert_allclose((opened["rho"] * opened["cell_length"]).sum("cell").values, 1.0, rtol=1e-12)
    assert opened["cell_length"].attrs["units"] == "rad"


def test_circle_point_masses_export(tmp_path):
    run, nc = _run_and_export(
        tmp_path, **{"solver.integrator": "implicit", "solver.atoms": True, "model.sign": 1, "weights.process": "frozen",
                     "weights.init": "beta", "weights.beta": 6.0, "initial.means": [0.0, 1.2], "initial.kappas": [800.0],
                     "mesh.cells": 128, "solver.T": 0.4, "output.snapshot_dt": 0.2, "output.record_dt": 0.1})
    with np.load(run / "snapshots.npz") as z:
        atom_m, atom_x, cells = z["atom_m"], z["atom_x"], z["rho_cells"]
    assert atom_m[-1].sum() > 0.5, "the run should have collapsed into point masses"
    with xr.open_dataset(nc, engine="h5netcdf") as ds:
        np.testing.assert_array_equal(ds["point_mass_m"].values, atom_m)
        np.testing.assert_array_equal(ds["point_mass_xy"].values, atom_x)
        np.testing.assert_array_equal(ds["rho"].values, cells)
        assert ds["point_mass_xy"].dims == ("time", "point_mass", "xy")
        total = (ds["rho"] * ds["cell_length"]).sum("cell") + ds["point_mass_m"].sum("point_mass")
        np.testing.assert_allclose(total.values, 1.0, rtol=1e-9)
        used = ds["point_mass_m"].values > 0
        np.testing.assert_allclose(np.linalg.norm(ds["point_mass_xy"].values[used], axis=-1), 1.0, rtol=1e-12)
        _documented(ds)


def test_circle_token_run_exports_positions_and_angles(tmp_path):
    run, nc = _run_and_export(tmp_path, **{"run.solver": "particles", "initial.n": 30})
    with np.load(run / "snapshots.npz") as z:
        X = z["X"]
    with xr.open_dataset(nc, engine="h5netcdf") as ds:
        assert ds["x"].dims == ("time", "token", "xy")
        np.testing.assert_array_equal(ds["x"].values, X)
        np.testing.assert_allclose(np.cos(ds["x_theta"].values), X[..., 0], atol=1e-12)
        np.testing.assert_allclose(np.sin(ds["x_theta"].values), X[..., 1], atol=1e-12)
        assert not [v for v in ds.variables.values() if v.attrs.get("cf_role") == "mesh_topology"] and "rho" not in ds
        _documented(ds)


def test_circle_both_run_exports_mesh_and_tokens(tmp_path):
    run, nc = _run_and_export(tmp_path, **{"run.solver": "both", "initial.n": 40})
    with np.load(run / "snapshots.npz") as z:
        X, rho = z["X"], z["rho"]
    with xr.open_dataset(nc, engine="h5netcdf") as ds:
        np.testing.assert_array_equal(ds["x"].values, X)
        np.testing.assert_array_equal(ds["rho"].values, rho)
        np.testing.assert_allclose((ds["rho"] * ds["cell_length"]).sum("cell").values, 1.0, rtol=1e-12)
        assert ds["rho"].attrs["location"] == "edge" and "l1_hist" in ds and ds.attrs["config_run_solver"] == "both"
        _documented(ds)


def test_the_guide_snippet_for_circle_runs_runs(tmp_path, monkeypatch):
    """docs/guide/results-as-data.md, "Circle runs": the snippet runs as written (mass 1, arcs summing to 2 pi)."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "guide" / "results-as-data.md").read_text(encoding="utf-8")
    section = text.split("## Circle runs", 1)[1].split("\n## ", 1)[0]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "results-as-data.md", "exec"), {"sp": sp})  # noqa: S102 - the documented snippet
    assert (tmp_path / "runs" / "circle-demo" / "mesh.npz").is_file()


def test_the_guide_snippet_for_nucleation_runs_after_the_example(tmp_path, monkeypatch):
    """docs/guide/results-as-data.md, "Nucleation on the circle": the snippet runs as written, also where the user
    ran the example its comment names first (it wrote into the example's folder and stopped: RunExistsError)."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "guide" / "results-as-data.md").read_text(encoding="utf-8")
    section = text.split("## Nucleation on the circle", 1)[1].split("\n## ", 1)[0]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    example = tmp_path / "runs" / "circle-metastable-mesh"
    example.mkdir(parents=True)
    (example / "diagnostics.csv").write_text("t\n0\n")  # the user's own run of the example
    exec(compile(code, "results-as-data.md", "exec"), {"sp": sp})  # noqa: S102 - the documented snippet
    assert (example / "diagnostics.csv").read_text() == "t\n0\n"
