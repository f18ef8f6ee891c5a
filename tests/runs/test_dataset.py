"""Run folders as xarray datasets and NetCDF files (spherepde.open_run, spherepde export --netcdf).

Every test reopens what was written and compares it with the run folder's own files.
"""

from __future__ import annotations

import numpy as np
import pytest

import spherepde as sp
from spherepde.cli.main import main
from spherepde.runs import montecarlo, runner
from spherepde.runs.config import default_config
from spherepde.runs.runfolder import read_diagnostics

xr = pytest.importorskip("xarray")  # a dependency: installed with the package

TINY = {"mesh.level": 4, "model.H": 2, "solver.T": 0.1, "output.record_dt": 0.05, "output.snapshot_dt": 0.05, "weights.dt": 0.01}


def _run(tmp_path_factory, name, **over):
    out = tmp_path_factory.mktemp("runs") / name
    cfg = default_config().with_overrides({**TINY, **over})
    if cfg.montecarlo.paths > 1:
        montecarlo.monte_carlo(cfg, out=out, progress=False)
    else:
        runner.run(cfg, out=out, progress=False)
    return out


@pytest.fixture(scope="module")
def mesh_run(tmp_path_factory):
    return _run(tmp_path_factory, "mesh")


@pytest.fixture(scope="module")
def token_run(tmp_path_factory):
    return _run(tmp_path_factory, "tokens", **{"run.solver": "particles", "initial.n": 30})


@pytest.fixture(scope="module")
def both_run(tmp_path_factory):
    return _run(tmp_path_factory, "both", **{"run.solver": "both", "initial.n": 30})


@pytest.fixture(scope="module")
def mc_run(tmp_path_factory):
    return _run(tmp_path_factory, "mc", **{"run.solver": "particles", "initial.n": 20, "montecarlo.paths": 2})


def _check_against_folder(ds, folder):
    diag = read_diagnostics(folder / "diagnostics.csv")
    np.testing.assert_array_equal(ds["time_diag"].values, diag["t"])
    for col, values in diag.items():
        if col != "t":
            np.testing.assert_array_equal(ds[col].values, values)
            assert ds[col].attrs["long_name"] and "units" in ds[col].attrs
    path = sp.WeightPath.load(folder / "weights.npz")
    np.testing.assert_array_equal(ds["D"].values, path.A)
    np.testing.assert_allclose(ds["time_w"].values, path.times)
    assert ds.attrs["config_model_H"] == 2 and "[model]" in ds.attrs["config_toml"]
    assert ds.attrs["version_spherepde"] == sp.__version__


def test_mesh_run_dataset(mesh_run):
    ds = sp.open_run(mesh_run)
    _check_against_folder(ds, mesh_run)
    with np.load(mesh_run / "snapshots.npz") as z:
        np.testing.assert_array_equal(ds["rho"].values, z["rho"])
        np.testing.assert_array_equal(ds["time"].values, z["t"])
    mesh = sp.SphereMesh.load(mesh_run / "mesh.npz")
    np.testing.assert_allclose(ds["cell_area"].values.sum(), 4 * np.pi, rtol=1e-12)
    # mass from the dataset alone: sum_c rho_c |C_c| = 1 at every snapshot
    np.testing.assert_allclose((ds["rho"] * ds["cell_area"]).sum("cell").values, 1.0, rtol=1e-10)
    lat = np.degrees(np.arcsin(mesh.centers[:, 2]))
    np.testing.assert_allclose(ds["cell_lat"].values, lat)
    assert ds["rho"].attrs["units"] == "sr-1" and ds.attrs["run_kind"] == "mesh"


def test_token_run_dataset(token_run):
    ds = sp.open_run(token_run)
    _check_against_folder(ds, token_run)
    with np.load(token_run / "snapshots.npz") as z:
        np.testing.assert_array_equal(ds["x"].values, z["X"])
    assert ds["x"].dims == ("time", "token", "xyz") and "rho" not in ds


def test_both_run_has_density_and_tokens(both_run):
    ds = sp.open_run(both_run)
    _check_against_folder(ds, both_run)
    assert "rho" in ds and "x" in ds and "p_G2" in ds
    assert ds["p_G2"].attrs["long_name"].startswith("tokens:")


def test_montecarlo_paths_are_stacked(mc_run):
    ds = sp.open_run(mc_run)
    assert ds.sizes["path"] == 2 and list(ds["path"].values) == ["path-000", "path-001"]
    for k, p in enumerate(sorted(mc_run.glob("path-*"))):
        diag = read_diagnostics(p / "diagnostics.csv")
        np.testing.assert_array_equal(ds["G2"].isel(path=k).values, diag["G2"])
    # independent weight noise: the paths differ
    assert not np.array_equal(ds["D"].isel(path=0).values, ds["D"].isel(path=1).values)


@pytest.mark.parametrize("which", ["mesh_run", "token_run", "both_run", "mc_run"])
def test_netcdf_roundtrip(which, request, tmp_path):
    folder = request.getfixturevalue(which)
    target = tmp_path / "run.nc"
    assert main(["export", str(folder), "--netcdf", str(target), "-q"]) == 0
    back = xr.load_dataset(target, engine="h5netcdf")
    ds = sp.open_run(folder)
    for name in ds.data_vars:
        np.testing.assert_array_equal(back[name].values, ds[name].values)
        assert back[name].attrs.get("units") == ds[name].attrs.get("units")
    assert back.attrs["Conventions"].startswith("CF")


def test_export_refuses_to_overwrite_and_bad_folders(mesh_run, tmp_path, capsys):
    target = tmp_path / "a.nc"
    target.write_text("keep me")
    assert main(["export", str(mesh_run), "--netcdf", str(target)]) == 2
    assert target.read_text() == "keep me"
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--force" in err[0]
    assert main(["export", str(tmp_path / "none"), "--netcdf", str(tmp_path / "b.nc")]) == 2
    assert not (tmp_path / "b.nc").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["export", str(empty), "--netcdf", str(tmp_path / "c.nc")]) == 2
    assert "run folder" in capsys.readouterr().err


def test_diagnostics_frame(mesh_run):
    df = sp.diagnostics_frame(mesh_run)
    diag = read_diagnostics(mesh_run / "diagnostics.csv")
    np.testing.assert_array_equal(df["energy"].to_numpy(), diag["energy"])
    assert df.index.name == "t"
