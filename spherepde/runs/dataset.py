"""Run folders as labelled data: :func:`open_run` returns an :class:`xarray.Dataset`.

One dataset per run folder, with units and long names on every variable and the resolved
configuration and versions as dataset attributes, so a notebook (or ncview, or ParaView
through NetCDF) sees what a run computed without knowing the folder layout:

============================  =================================================================
variable                      dims
============================  =================================================================
``rho``                       ``(time, cell)``: cell densities, mesh and ``both`` runs (with
                              point masses: the cells alone)
``point_mass_m``              ``(time, point_mass)``: the masses of the point masses
                              (``solver.atoms``; unused slots 0)
``point_mass_xyz``            ``(time, point_mass, xyz)``: their positions on the unit sphere
                              (unused slots (0, 0, 0))
``x``                         ``(time, token, xyz)``: token positions, particle and ``both`` runs
``cell_lon``, ``cell_lat``    ``(cell,)``: cell centres in degrees; ``cell_xyz`` ``(cell, xyz)``;
                              ``cell_node_xyz`` ``(cell, xyz)``: the solver's cell nodes
``cell_area``                 ``(cell,)``: spherical-triangle areas (sum 4 pi)
``energy``, ``G2``, ...       ``(time_diag,)``: every column of ``diagnostics.csv``
``D`` (or ``A`` and ``V``)    ``(time_w, head, i, j)``: the weight path (gradient / general heads)
============================  =================================================================

A circle run (model.d = 2; cells are arcs) has ``rho`` per unit arc length, ``cell_length``
``(cell,)`` (arc lengths, sum 2 pi) instead of ``cell_area``, ``cell_theta`` (node angles) instead
of ``cell_lon``/``cell_lat``, ``cell_xy``/``cell_node_xy`` ``(cell, xy)``, ``point_mass_xy``
``(time, point_mass, xy)``, and tokens ``x`` ``(time, token, xy)`` with their angles ``x_theta``
``(time, token)``; its NetCDF export holds a 1-D UGRID mesh (the arcs as edges between their end points).

``time`` are the snapshot times, ``time_diag`` the record times of the diagnostics and
``time_w`` the grid of the weight path. A Monte-Carlo folder (``path-NNN`` runs) stacks
its paths along a ``path`` dimension. :func:`open_sweep` gives a sweep's ``results.csv``
as a dataset over its runs, and :func:`diagnostics_frame` a run's diagnostics as a
:class:`pandas.DataFrame`. :func:`export_netcdf` writes a dataset as NetCDF-4 with
CF-style attributes and, for cell densities, the mesh's topology after the UGRID conventions
(via h5netcdf: see README, "Results as data").
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from spherepde._base import atomic_file, load_arrays, one_line
from spherepde.model.columns import attributes as column_attributes
from spherepde.runs.runfolder import (
    CONFIG_FILE,
    DIAGNOSTICS_FILE,
    MESH_FILE,
    MONTE_CARLO,
    SNAPSHOTS_FILE,
    SUMMARY_FILE,
    WEIGHTS_FILE,
    DiagnosticsError,
    NotARunFolderError,
    RunFolder,
    check_recorded,
    load_snapshots,
    read_diagnostics,
    run_config,
    run_folder_above,
    run_kind,
)

__all__ = ["RunFileError", "check_npz", "check_run_parts", "open_run", "open_sweep", "diagnostics_frame", "export_netcdf"]

_DIMLESS = "1"


def _xr():
    try:
        import xarray
    except ImportError:  # pragma: no cover - xarray is a dependency
        raise ImportError('open_run needs xarray: pip install "xarray>=2024.1"') from None
    return xarray


class RunFileError(ValueError):
    """A file of a run folder is damaged or cannot be read (one line naming the file; nothing was written)."""


def _read_csv(path: Path) -> dict[str, np.ndarray]:
    """The diagnostics table (:func:`spherepde.runs.runfolder.read_diagnostics`; an unfinished
    last line of a run still writing is left out), {} when missing or empty."""
    if not path.is_file() or path.stat().st_size == 0:
        return {}
    try:
        return read_diagnostics(path)
    except DiagnosticsError as exc:
        raise RunFileError(str(exc)) from None
    except OSError as exc:
        raise RunFileError(f"{path} cannot be read as a diagnostics table ({one_line(exc)}); the run folder is damaged") from None


def _config_sections() -> set[str]:
    """The sections every run's config.toml holds (the resolved configuration is written whole)."""
    import tomllib

    from spherepde.runs.config import config_to_toml, default_config

    return set(tomllib.loads(config_to_toml(default_config(), comments=False)))


def check_whole_run(folder: Path) -> None:
    """What an export promises, the whole run: config.toml with every section, diagnostics.csv
    with every row (all that summary.json lists for a completed run; no NaN time) and
    weights.npz must be there (a Monte-Carlo folder: in each path). :class:`RunFileError`
    naming the first missing or damaged file."""
    import tomllib

    folders = RunFolder(folder).monte_carlo_paths() if run_kind(folder) == MONTE_CARLO else [folder]
    for f in folders:
        for name in (CONFIG_FILE, DIAGNOSTICS_FILE, WEIGHTS_FILE):
            if not (f / name).is_file():
                raise RunFileError(f"{f / name} is missing; the run folder is damaged and cannot be exported whole")
        try:
            cfg = tomllib.loads((f / CONFIG_FILE).read_text())
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            raise RunFileError(f"{f / 'config.toml'} cannot be read ({one_line(exc)}); the run folder is damaged") from None
        missing = sorted(_config_sections() - set(cfg))
        if missing:
            raise RunFileError(f"{f / 'config.toml'} lacks the section(s) {', '.join(missing)} every run writes (cut short?); the run folder is damaged")
        path = f / DIAGNOSTICS_FILE
        try:
            check_recorded(path, read_diagnostics(path))
        except DiagnosticsError as exc:
            raise RunFileError(str(exc)) from None
        except OSError as exc:
            raise RunFileError(f"{path} cannot be read as a diagnostics table ({one_line(exc)}); the run folder is damaged") from None


def check_npz(path: Path) -> None:
    """Read the .npz archive ``path`` through the safe loader (headers checked before any
    allocation, no pickles) and check every member's CRC; :class:`RunFileError` naming the
    file when it is damaged, truncated, forged or holds Python objects."""
    import zipfile

    try:
        if not zipfile.is_zipfile(path):
            raise ValueError("not a complete .npz archive: truncated, damaged or another kind of file")
        with load_arrays(path):
            pass
        with zipfile.ZipFile(path) as zf:
            bad = zf.testzip()
        if bad is not None:
            raise ValueError(f"member {bad} fails its checksum")
    except RunFileError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, RuntimeError) as exc:
        msg = one_line(exc)
        if msg.startswith(str(path)):
            msg = msg[len(str(path)):].lstrip(" :")
        if msg.startswith("(array "):  # "(array 'A'): holds Python objects ..." -> "array 'A' holds Python objects ..."
            msg = msg[1:].replace("):", ":", 1)
        raise RunFileError(f"{path} is damaged or unreadable ({msg}); nothing was written") from None


def _check_text_parts(folder: Path) -> None:
    """config.toml and summary.json, where present, must parse (RunFileError naming the file)."""
    import tomllib

    for name, parse in ((CONFIG_FILE, tomllib.loads), (SUMMARY_FILE, json.loads)):
        p = folder / name
        if not (p.exists() or p.is_symlink()):
            continue
        try:
            parse(p.read_text())
        except (OSError, ValueError, UnicodeDecodeError) as exc:  # TOMLDecodeError and JSONDecodeError are ValueErrors
            raise RunFileError(f"{p} cannot be read ({one_line(exc)}); the run folder is damaged") from None


def _check_parts(folder: Path, kind: str) -> bool:
    """Check every array file of a run folder before anything is read or written; a mesh
    run's snapshots need its mesh.npz. Returns whether the run has snapshots."""
    snaps = folder / SNAPSHOTS_FILE
    parts = [snaps] if snaps.exists() or snaps.is_symlink() else RunFolder(folder).snapshot_files()
    has_snapshots = bool(parts)
    for name in (MESH_FILE, WEIGHTS_FILE):
        if (folder / name).exists():
            parts.append(folder / name)
    for p in parts:
        if not p.is_file():
            raise RunFileError(f"{p} is not a file; the run folder is damaged")
        check_npz(p)
    _check_text_parts(folder)
    if has_snapshots and kind == "mesh" and not (folder / MESH_FILE).is_file():
        raise RunFileError(f"{folder / 'mesh.npz'} is missing: a mesh run's densities cannot be placed without it; the run folder is damaged")
    return has_snapshots


def diagnostics_frame(run_dir):
    """A run's ``diagnostics.csv`` as a :class:`pandas.DataFrame` indexed by the record time ``t``."""
    import pandas as pd

    path = Path(run_dir) / DIAGNOSTICS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir}: no diagnostics.csv (is this a run folder?)")
    return pd.DataFrame(read_diagnostics(path)).set_index("t", drop=False)


def _flat_config(cfg: dict) -> dict:
    out = {}
    for section, table in cfg.items():
        if isinstance(table, dict):
            for k, v in table.items():
                out[f"config_{section}_{k}"] = json.dumps(v) if isinstance(v, (list, dict, bool)) else v
    return out


def _weights(folder: Path) -> dict:
    p = folder / WEIGHTS_FILE
    if not p.is_file():
        return {}
    from spherepde.model.weights import WeightPath

    try:
        path = WeightPath.load(p)
    except (OSError, ValueError, KeyError) as exc:
        raise RunFileError(f"{p} cannot be read as a weight path ({one_line(exc)}); the run folder is damaged") from None
    dims = ("time_w", "head", "i", "j")
    if path.is_gradient:
        data = {"D": (dims, np.asarray(path.A), {"long_name": "gradient-head matrices D_h(t) (A = D, V = s D)", "units": _DIMLESS})}
    else:
        data = {
            "A": (dims, np.asarray(path.A), {"long_name": "attention matrices A_h(t)", "units": _DIMLESS}),
            "V": (dims, np.asarray(path.V), {"long_name": "value matrices V_h(t)", "units": _DIMLESS}),
        }
    return {"vars": data, "coords": {"time_w": ("time_w", path.times, {"long_name": "time of the weight-path grid", "units": _DIMLESS})},
            "attrs": {"weights_dt": path.dt, "weights_sign": path.sign, "weights_heads": path.heads, "weights_sigma": path.sigma}}


def check_run_parts(run_dir) -> None:
    """Check the array files of a run folder (a Monte-Carlo folder: of each path) with the
    safe loader; :class:`RunFileError` naming the first damaged or missing part."""
    folder = Path(run_dir)
    _check_text_parts(folder)  # before run_kind reads config.toml
    kind = run_kind(folder)
    for f in RunFolder(folder).monte_carlo_paths() if kind == MONTE_CARLO else [folder]:
        if f is not folder:
            _check_text_parts(f)
        _check_parts(f, run_kind(f) if f is not folder else kind)


def _open_single(folder: Path):
    xr = _xr()
    data_vars, coords, attrs = {}, {}, {}
    kind = run_kind(folder)
    snaps = None
    if (folder / SNAPSHOTS_FILE).exists() or RunFolder(folder).snapshot_files():  # checked by open_run (check_run_parts)
        try:
            snaps = load_snapshots(folder)
        except (OSError, ValueError, KeyError) as exc:  # read by the checks above: a content problem (shapes, keys)
            raise RunFileError(f"{folder}: its snapshots cannot be read ({one_line(exc)}); the run folder is damaged") from None
    if snaps is not None:
        coords["time"] = ("time", snaps.t, {"long_name": "time of the snapshot", "units": _DIMLESS})
        if snaps.rho is not None and snaps.mesh.d == 2:
            _circle_vars(snaps, data_vars, coords)
        elif snaps.rho is not None:
            mesh = snaps.mesh
            c = np.asarray(mesh.centers if hasattr(mesh, "centers") else mesh.cell_centers, float)
            if snaps.atom_m is None:
                data_vars["rho"] = (("time", "cell"), snaps.rho, {"long_name": "cell-averaged density of mu_t per unit area", "units": "sr-1"})
            else:
                data_vars.update(_point_mass_vars(snaps))
            coords["cell_lon"] = ("cell", np.degrees(np.arctan2(c[:, 1], c[:, 0])), {"long_name": "longitude of the cell centre", "units": "degrees_east"})
            coords["cell_lat"] = ("cell", np.degrees(np.arcsin(np.clip(c[:, 2], -1, 1))), {"long_name": "latitude of the cell centre", "units": "degrees_north"})
            data_vars["cell_xyz"] = (("cell", "xyz"), c, {"long_name": "cell centre on the unit sphere", "units": _DIMLESS})
            data_vars["cell_node_xyz"] = (("cell", "xyz"), _cell_nodes(mesh), {
                "long_name": "cell node on the unit sphere: where the solver places the cell's mass (energy, mean_resultant)", "units": _DIMLESS})
            data_vars["cell_area"] = ("cell", np.asarray(mesh.areas, float), {"long_name": "area of the spherical-triangle cell", "units": "sr"})
        if snaps.X is not None:
            data_vars.update(_token_vars(snaps.X))
    diag = _read_csv(folder / DIAGNOSTICS_FILE)
    if diag:
        coords["time_diag"] = ("time_diag", diag["t"], {"long_name": "time of the diagnostics record", "units": _DIMLESS})
        for col, values in diag.items():
            if col == "t":
                continue
            long_name, units = column_attributes(col)
            data_vars[col] = ("time_diag", values, {"long_name": long_name, "units": units})
    w = _weights(folder)
    if w:
        data_vars.update(w["vars"])
        coords.update(w["coords"])
        attrs.update(w["attrs"])
    cfg = run_config(folder)
    attrs.update(_flat_config(cfg))
    summary = {}
    if (folder / SUMMARY_FILE).is_file():
        try:
            summary = json.loads((folder / SUMMARY_FILE).read_text())
        except (OSError, ValueError):
            summary = {}
    for k, v in (summary.get("versions") or {}).items():
        attrs[f"version_{k}"] = str(v)
    attrs.update({
        "title": f"spherepde run {folder.name}",
        "source": "spherepde (the Transformer PDE on the sphere)",
        "Conventions": "CF-1.10",
        "run_kind": kind,
        "run_status": str(summary.get("status", "unknown")),
        "run_folder": str(folder),
    })
    if (folder / CONFIG_FILE).is_file():
        attrs["config_toml"] = (folder / CONFIG_FILE).read_text()
    if not data_vars:
        raise NotARunFolderError(f"{folder}: no diagnostics, snapshots or weights to read; is this a spherepde run folder?")
    return xr.Dataset(data_vars, coords=coords, attrs=attrs)


def _token_vars(X) -> dict:
    """``x`` (time, token, xyz) on S^{d-1}; on the circle (d = 2) ``x`` (time, token, xy) and the angles ``x_theta``."""
    if X.shape[-1] != 2:
        return {"x": (("time", "token", "xyz"), X, {"long_name": "token positions on the unit sphere", "units": _DIMLESS})}
    from spherepde.geometry.circle import angles

    return {"x": (("time", "token", "xy"), X, {"long_name": "token positions on the unit circle", "units": _DIMLESS}),
            "x_theta": (("time", "token"), angles(X), {"long_name": "token angle on the unit circle, in [0, 2 pi)", "units": "rad"})}


def _circle_vars(snaps, data_vars: dict, coords: dict) -> None:
    """The cell variables of a circle run (model.d = 2; a cell is an arc, docs/model.md "The circle"):
    ``rho`` (time, cell) per unit arc length, ``cell_theta`` (the node angle, arc midpoint), ``cell_xy``,
    ``cell_node_xy``, ``cell_length`` (arc lengths, sum 2 pi) and, with point masses, ``point_mass_m`` /
    ``point_mass_xy``: mu_t = rho dtheta + sum_k point_mass_m[k] delta_{point_mass_xy[k]}."""
    mesh = snaps.mesh
    if snaps.atom_m is None:
        data_vars["rho"] = (("time", "cell"), snaps.rho, {"long_name": "cell-averaged density of mu_t per unit arc length", "units": "rad-1"})
    else:
        data_vars["rho"] = (("time", "cell"), snaps.rho_cells, {
            "long_name": "cell-averaged density of the cells' part of mu_t per unit arc length (the point masses are point_mass_m)", "units": "rad-1"})
        data_vars["point_mass_m"] = (("time", "point_mass"), snaps.atom_m, {
            "long_name": "mass of each point mass (a collapsed cluster, a Dirac mass of mu_t); 0: unused slot", "units": _DIMLESS})
        data_vars["point_mass_xy"] = (("time", "point_mass", "xy"), snaps.atom_x, {
            "long_name": "position of each point mass on the unit circle; (0, 0): unused slot", "units": _DIMLESS})
    coords["cell_theta"] = ("cell", np.asarray(mesh.theta, float), {"long_name": "angle of the cell node (the arc midpoint)", "units": "rad"})
    nodes = np.asarray(mesh.nodes, float)
    data_vars["cell_xy"] = (("cell", "xy"), nodes, {"long_name": "cell centre (the arc midpoint) on the unit circle", "units": _DIMLESS})
    data_vars["cell_node_xy"] = (("cell", "xy"), nodes, {
        "long_name": "cell node on the unit circle: where the solver places the cell's mass (energy, mean_resultant)", "units": _DIMLESS})
    data_vars["cell_length"] = ("cell", np.asarray(mesh.areas, float), {"long_name": "length of the arc (cell); the lengths sum to 2 pi", "units": "rad"})


def _cell_nodes(mesh) -> np.ndarray:
    """The solver's cell nodes x_c (nc, 3) (:attr:`spherepde.geometry.protocol.FVGeometry.nodes`)."""
    from spherepde.geometry.protocol import geometry_of

    return np.asarray(geometry_of(mesh).nodes, float)


def _point_mass_vars(snaps) -> dict:
    """``rho`` (the cells alone), ``point_mass_m`` and ``point_mass_xyz`` of a run with point masses:
    mu_t = rho dsigma + sum_k point_mass_m[k] delta_{point_mass_xyz[k]} (unused slots: mass 0 at (0, 0, 0))."""
    return {
        "rho": (("time", "cell"), snaps.rho_cells, {
            "long_name": "cell-averaged density of the cells' part of mu_t per unit area (the point masses are point_mass_m)", "units": "sr-1"}),
        "point_mass_m": (("time", "point_mass"), snaps.atom_m, {
            "long_name": "mass of each point mass (a collapsed cluster, a Dirac mass of mu_t); 0: unused slot", "units": _DIMLESS}),
        "point_mass_xyz": (("time", "point_mass", "xyz"), snaps.atom_x, {
            "long_name": "position of each point mass on the unit sphere; (0, 0, 0): unused slot", "units": _DIMLESS}),
    }


def open_run(run_dir):
    """The run folder ``run_dir`` as an :class:`xarray.Dataset` (see the module docstring).

    A Monte-Carlo folder stacks its ``path-NNN`` runs along a ``path`` dimension (paths
    cut short are padded with NaN).
    """
    xr = _xr()
    folder = Path(run_dir)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no such run folder")
    check_run_parts(folder)  # every part of the run (and of its paths) before anything is read
    if run_kind(folder) == MONTE_CARLO:
        paths = RunFolder(folder).monte_carlo_paths()
        if not paths:
            raise NotARunFolderError(f"{folder}: a Monte-Carlo folder without path-NNN runs")
        sets = _same_point_mass_slots([_open_single(p) for p in paths])
        ds = xr.concat(sets, dim="path", data_vars="different", coords="different", compat="equals", join="outer", combine_attrs="drop_conflicts")
        ds = ds.assign_coords(path=("path", [p.name for p in paths]))
        ds.attrs.update({"title": f"spherepde Monte-Carlo runs {folder.name}", "run_kind": MONTE_CARLO, "run_folder": str(folder)})
        return ds
    return _open_single(folder)


def _same_point_mass_slots(sets: list) -> list:
    """The datasets of a Monte-Carlo folder's paths with as many ``point_mass`` slots each (the most
    of any path; the added slots are unused: mass 0 at (0, 0, 0)), so that they stack."""
    k = max((ds.sizes.get("point_mass", 0) for ds in sets), default=0)
    return [ds.pad(point_mass=(0, k - ds.sizes["point_mass"]), constant_values=0.0) if "point_mass" in ds.dims else ds for ds in sets]


def open_sweep(sweep_dir):
    """A sweep's ``results.csv`` as an :class:`xarray.Dataset` over its runs (dimension ``run``)."""
    import pandas as pd

    path = Path(sweep_dir) / "results.csv"
    if not path.is_file():
        raise FileNotFoundError(f"{sweep_dir}: no results.csv (is this a sweep folder?)")
    try:
        df = pd.read_csv(path)
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise RunFileError(f"{path} cannot be read as a results table ({one_line(exc)}); nothing was written") from None
    df.index.name = "run"
    ds = df.to_xarray()
    ds.attrs.update({"title": f"spherepde sweep {Path(sweep_dir).name}", "Conventions": "CF-1.10"})
    return ds


def _check_target(target: Path, folder: Path) -> None:
    """Refuse an export into a run folder (only run and resume write there) or onto a folder."""
    resolved = target.resolve()
    if resolved.is_dir():
        raise IsADirectoryError(f"--netcdf {target} is a folder; give the name of the NetCDF file to write (e.g. {target / 'run.nc'})")
    inside = run_folder_above(resolved.parent)
    if inside is None and folder.is_dir() and resolved.is_relative_to(folder.resolve()):
        inside = folder
    if inside is not None:
        raise PermissionError(
            f"--netcdf {target} lies inside the run folder {inside}; only 'spherepde run' and 'resume' write into a run folder "
            "-- write the NetCDF file elsewhere (nothing was written)"
        )


def _check_space(target: Path, ds) -> None:
    """Refuse (OSError, one line) when the target's file system lacks room for the file: a
    write that runs out of space can crash the HDF5 library, so the size is estimated first
    (the arrays, uncompressed, and the attributes, plus room for HDF5's own structures)."""
    import shutil

    size = int(ds.nbytes) + sum(len(str(v)) for v in ds.attrs.values()) + 4096 * (len(ds.variables) + 16)
    for v in ds.variables.values():
        size += sum(len(str(a)) for a in v.attrs.values())
    need = int(size * 1.25) + (1 << 20)
    try:
        free = shutil.disk_usage(target.parent).free
    except OSError:
        return
    if free < need:
        raise OSError(f"not enough space for {target}: about {need / 1e6:.1f} MB needed, {free / 1e6:.1f} MB free on its file system; "
                      "free some space or choose another file; nothing was written")


def _with_mesh_topology(ds, folder: Path):
    """``ds`` with the mesh's topology after the UGRID conventions (1.0) when it holds cell
    densities: a ``mesh`` variable (cf_role mesh_topology, topology_dimension 2), the vertices
    ``node_lon``/``node_lat`` (and exact ``node_xyz``) and ``cell_nodes`` (cell, 3), the vertices
    of each cell in the mesh's order, start_index 0; ``rho`` and ``cell_area`` name
    the mesh and location 'face'. The map can then be redrawn, or the file opened as a mesh,
    from the file alone."""
    if "rho" not in ds or "cell" not in ds.dims:
        return ds
    paths = [folder] + RunFolder(folder).monte_carlo_paths()
    mesh_file = next((p / MESH_FILE for p in paths if (p / MESH_FILE).is_file()), None)
    if mesh_file is None:
        return ds
    from spherepde.geometry.meshfiles import load_saved_mesh

    mesh = load_saved_mesh(mesh_file)
    points, cells = np.asarray(mesh.points, float), np.asarray(mesh.cells)
    if len(cells) != ds.sizes["cell"]:
        raise RunFileError(f"{mesh_file} has {len(cells)} cells, but the snapshots hold {ds.sizes['cell']}; the run folder is damaged")
    ds = ds.copy()
    if mesh.d == 2:
        return _with_circle_topology(ds, mesh)
    ds["mesh"] = ((), np.int32(0), {
        "cf_role": "mesh_topology", "long_name": "topology of the sphere mesh: spherical triangles (cells) on the unit sphere",
        "topology_dimension": np.int32(2), "node_coordinates": "node_lon node_lat", "face_node_connectivity": "cell_nodes",
        "face_dimension": "cell", "face_coordinates": "cell_lon cell_lat"})
    ds["node_lon"] = ("node", np.degrees(np.arctan2(points[:, 1], points[:, 0])),
                      {"standard_name": "longitude", "long_name": "longitude of the mesh vertex", "units": "degrees_east"})
    ds["node_lat"] = ("node", np.degrees(np.arcsin(np.clip(points[:, 2], -1, 1))),
                      {"standard_name": "latitude", "long_name": "latitude of the mesh vertex", "units": "degrees_north"})
    ds["node_xyz"] = (("node", "xyz"), points, {"long_name": "mesh vertex on the unit sphere (exact)", "units": _DIMLESS})
    ds["cell_nodes"] = (("cell", "cell_node"), cells.astype(np.int32), {
        "cf_role": "face_node_connectivity", "start_index": np.int32(0),
        "long_name": "vertices of each cell (indices into node)"})
    for name in ("rho", "cell_area"):
        if name in ds:
            ds[name].attrs.update({"mesh": "mesh", "location": "face"})
    ds.attrs["Conventions"] = "CF-1.10 UGRID-1.0"
    return ds


def _with_circle_topology(ds, mesh):
    """``ds`` (a copy) with a circle mesh's topology after UGRID 1.0 as a 1-D network: ``mesh``
    (cf_role mesh_topology, topology_dimension 1), the arc end points ``node_x``/``node_y`` (and their
    angles ``node_theta``) and ``cell_nodes`` (cell, 2), the two end points of each arc (counter-clockwise,
    start_index 0); ``rho`` and ``cell_length`` name the mesh and location 'edge'."""
    points = np.asarray(mesh.points, float)
    ds["mesh"] = ((), np.int32(0), {
        "cf_role": "mesh_topology", "long_name": "topology of the circle mesh: arcs (cells) of the unit circle between their end points",
        "topology_dimension": np.int32(1), "node_coordinates": "node_x node_y", "edge_node_connectivity": "cell_nodes",
        "edge_dimension": "cell", "edge_coordinates": "cell_x cell_y"})
    ds["node_x"] = ("node", points[:, 0], {"long_name": "x of the arc end point on the unit circle", "units": _DIMLESS})
    ds["node_y"] = ("node", points[:, 1], {"long_name": "y of the arc end point on the unit circle", "units": _DIMLESS})
    ds["node_theta"] = ("node", np.asarray(mesh.phi, float), {"long_name": "angle of the arc end point (the mesh's vertex angle)", "units": "rad"})
    ds["cell_x"] = ("cell", np.asarray(mesh.nodes, float)[:, 0], {"long_name": "x of the arc midpoint on the unit circle", "units": _DIMLESS})
    ds["cell_y"] = ("cell", np.asarray(mesh.nodes, float)[:, 1], {"long_name": "y of the arc midpoint on the unit circle", "units": _DIMLESS})
    ds["cell_nodes"] = (("cell", "cell_node"), np.asarray(mesh.cells).astype(np.int32), {
        "cf_role": "edge_node_connectivity", "start_index": np.int32(0),
        "long_name": "end points of each arc, counter-clockwise (indices into node)"})
    for name in ("rho", "cell_length"):
        if name in ds:
            ds[name].attrs.update({"mesh": "mesh", "location": "edge"})
    ds.attrs["Conventions"] = "CF-1.10 UGRID-1.0"
    return ds


def export_netcdf(run_dir, target, *, force: bool = False) -> Path:
    """Write :func:`open_run` (or :func:`open_sweep` for a sweep folder) of ``run_dir`` as NetCDF-4.

    Refuses to overwrite ``target`` unless ``force``; writes through a temporary file, so an
    interrupted export never leaves a half-written file under the target name.
    """
    target = Path(target)
    folder = Path(run_dir)
    _check_target(target, folder)
    if target.exists() and not force:
        raise FileExistsError(f"{target} exists; choose another file or pass --force to overwrite it")
    if target.parent and not target.parent.is_dir():
        raise FileNotFoundError(f"{target.parent}: no such folder for the NetCDF file")
    if not os.access(target.parent, os.W_OK | os.X_OK):
        raise PermissionError(f"cannot write {target}: the folder {target.parent} is not writable; choose another file")
    if (folder / "results.csv").is_file() and not (folder / DIAGNOSTICS_FILE).is_file():
        ds = open_sweep(folder)
    else:
        if folder.is_dir():
            check_run_parts(folder)  # config.toml and summary.json parse before run_kind reads them
            check_whole_run(folder)
        ds = open_run(folder)
    ds = _with_mesh_topology(ds, folder)
    _check_space(target, ds)
    with atomic_file(target) as tmp:
        ds.to_netcdf(tmp, engine="h5netcdf", format="NETCDF4")
    return target
