"""Tests for spherepde.viz.render (PyVista, off-screen), spherepde.viz.plots (Matplotlib) and the
``render``/``plot`` subcommands, on tiny particle runs, a fake mesh run and a small
Monte-Carlo folder."""

from __future__ import annotations

import csv
import shutil

import numpy as np
import pytest

from spherepde.cli.main import main
from spherepde.geometry.meshfiles import icosphere
from spherepde.runs.config import config_to_toml, default_config
from spherepde.runs.montecarlo import monte_carlo
from spherepde.runs.runfolder import read_diagnostics
from spherepde.runs.runner import run
from spherepde.runs.series import load_series
from spherepde.viz import plots
from spherepde.viz import render as viz

TINY = {"run.solver": "particles", "solver.T": 0.2, "model.H": 2, "initial.n": 60, "output.snapshot_dt": 0.05}
SIZE = (160, 120)


# ------------------------------------------------------------------------------ fixtures
def _blob(mesh, direction, kappa=5.0):
    mu = np.asarray(direction, float) / np.linalg.norm(direction)
    r = np.exp(kappa * (mesh.centers @ mu))
    return r / (r * mesh.areas).sum()


def write_fake_mesh_run(folder, *, level=8, n_snap=5, with_tokens=True, snapshots=True):
    """A mesh run folder as the mesh solver writes it: a moving von Mises-like blob."""
    folder.mkdir(parents=True, exist_ok=True)
    mesh = icosphere(level)
    mesh.save(folder / "mesh.npz")
    ts = np.linspace(0.0, 1.0, n_snap)
    rho = np.stack([_blob(mesh, [np.cos(2 * t), np.sin(2 * t), 0.3]) for t in ts])
    if snapshots:
        arrays = {"t": ts, "rho": rho}
        if with_tokens:
            X = np.random.default_rng(0).normal(size=(n_snap, 40, 3))
            arrays["X"] = X / np.linalg.norm(X, axis=-1, keepdims=True)
        np.savez(folder / "snapshots.npz", **arrays)
    (folder / "config.toml").write_text(config_to_toml(default_config().with_overrides({"run.solver": "mesh"})))
    t = np.linspace(0.0, 1.0, 21)
    cols = {
        "t": t, "step": np.arange(21.0), "energy": 2 - 0.1 * t, "dEdt_partial": -0.1 + 0 * t, "martingale": 0.01 * np.sin(5 * t),
        "transport": -0.05 + 0 * t, "G2": 0.05 * np.exp(-t), "int_dEdt": -0.1 * t, "int_transport": -0.05 * t,
        "int_G2": 0.05 * (1 - np.exp(-t)), "edi_paper": 1e-3 * t, "edi_exact": 1e-4 * t, "mean_resultant": 0.1 + 0 * t,
        "mass": 1 + 1e-13 * t, "rho_min": 0.01 + 1e-3 * t, "rho_max": 2 + t, "dt_last": 0.01 + 0 * t,
    }
    with open(folder / "diagnostics.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(list(cols))
        for k in range(t.size):
            w.writerow([repr(float(cols[c][k])) for c in cols])
    return folder


@pytest.fixture(scope="module")
def particle_run(tmp_path_factory):
    return run(default_config().with_overrides(TINY), out=tmp_path_factory.mktemp("p") / "run").folder


@pytest.fixture(scope="module")
def mesh_run(tmp_path_factory):
    return write_fake_mesh_run(tmp_path_factory.mktemp("m") / "run")


@pytest.fixture(scope="module")
def mc_run(tmp_path_factory):
    cfg = default_config().with_overrides({**TINY, "initial.n": 30, "output.snapshot_dt": 0.1})
    return monte_carlo(cfg, paths=2, out=tmp_path_factory.mktemp("mc") / "mc").folder


def _shot(plotter):
    img = np.asarray(plotter.screenshot(return_img=True))
    plotter.close()
    return img


# ------------------------------------------------------------------------------ PyVista
def test_offscreen_density_image_has_size_is_not_blank_and_follows_density():
    mesh = icosphere(8)
    a = _shot(viz.plot_density(mesh, _blob(mesh, [1, 0, 0]), t=0.5, window_size=SIZE, off_screen=True))
    b = _shot(viz.plot_density(mesh, _blob(mesh, [-1, 0, 0]), t=0.5, window_size=SIZE, off_screen=True))
    assert a.shape == (SIZE[1], SIZE[0], 3) and a.dtype == np.uint8
    assert a.std() > 10.0
    assert np.abs(a.astype(float) - b).mean() > 1.0


def test_log_scale_multiview_and_particle_overlay():
    mesh = icosphere(4)
    rho = _blob(mesh, [0, 0, 1], kappa=20.0)
    X = np.random.default_rng(1).normal(size=(30, 3))
    img = _shot(viz.plot_density(mesh, rho, log=True, multiview=True, camera="xy", particles=X, window_size=(240, 120), off_screen=True))
    assert img.shape == (120, 240, 3) and img.std() > 10.0
    with pytest.raises(ValueError, match="positive"):
        viz.plot_density(mesh, rho, log=True, clim=(0.0, 1.0), off_screen=True)


def test_particles_image_is_not_blank_and_tokens_matter():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 3))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    a = _shot(viz.plot_particles(X, t=0.0, window_size=SIZE, off_screen=True))
    b = _shot(viz.plot_particles(-X, t=0.0, window_size=SIZE, off_screen=True))
    assert a.shape == (SIZE[1], SIZE[0], 3) and a.std() > 10.0
    assert np.abs(a.astype(float) - b).mean() > 0.2


def test_camera_specs():
    d, _ = viz._camera("0,0,2")
    assert np.allclose(d, [0, 0, 1])
    for bad in ("top", "1,2", "0,0,0"):
        with pytest.raises(ValueError, match="camera"):
            viz._camera(bad)


def test_render_snapshots_nearest_times(mesh_run, particle_run, tmp_path):
    paths = viz.render_snapshots(mesh_run, [0.0, 0.26, 1.0, 0.9], tmp_path, window_size=SIZE)
    scale = "log" if viz.run_color_limits(mesh_run)[1] else "lin"  # the automatic range's scale, named
    assert [p.name for p in paths] == [f"density_t{t}_{scale}_iso_tokens_160x120.png" for t in ("0.000", "0.250", "1.000")]  # by time and options
    from PIL import Image

    imgs = [np.asarray(Image.open(p).convert("RGB"), float) for p in paths]
    assert imgs[0].shape == (SIZE[1], SIZE[0], 3)
    assert np.abs(imgs[0] - imgs[2]).mean() > 0.5
    tok = viz.render_snapshots(particle_run, None, tmp_path / "p", window_size=SIZE)
    assert [p.name for p in tok] == [f"tokens_t{t}_iso_160x120.png" for t in ("0.000", "0.100", "0.200")]


@pytest.mark.parametrize("frames", [3, 8])
def test_gif_has_requested_frames(mesh_run, tmp_path, frames):
    from PIL import Image

    path = viz.render_animation(mesh_run, tmp_path / "a.gif", frames=frames, window_size=SIZE, progress=False, log=frames == 8)
    with Image.open(path) as im:
        assert im.n_frames == frames
        assert im.size == SIZE


def test_particle_gif_every_snapshot(particle_run, tmp_path):
    from PIL import Image

    path = viz.render_animation(particle_run, tmp_path / "tokens.gif", window_size=SIZE, progress=False)
    with Image.open(path) as im:
        assert im.n_frames == len(viz.load_snapshots(particle_run))


def test_mp4_without_imageio_ffmpeg_says_what_to_install(mesh_run, tmp_path, monkeypatch):
    monkeypatch.setattr(viz.importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(ModuleNotFoundError, match="pip install imageio-ffmpeg"):
        viz.render_animation(mesh_run, tmp_path / "a.mp4", frames=2)
    with pytest.raises(ValueError, match=".gif or .mp4"):
        viz.render_animation(mesh_run, tmp_path / "a.avi", frames=2)


def test_particles_overlay_needs_stored_tokens(tmp_path):
    folder = write_fake_mesh_run(tmp_path / "run", level=4, with_tokens=False)
    with pytest.raises(ValueError, match="no particle snapshots"):
        viz.plot_run(folder, particles=True, off_screen=True)
    _shot(viz.plot_run(folder, t=0.5, window_size=SIZE, off_screen=True))


def test_interactive_viewer_slider_and_display_check(particle_run, monkeypatch):
    p = viz.interactive_viewer(particle_run, off_screen=True, window_size=SIZE)
    a = np.asarray(p.screenshot(return_img=True), float)
    p._spherepde_set_time(0.2)
    b = np.asarray(p.screenshot(return_img=True), float)
    p.close()
    assert np.abs(a - b).mean() > 0.05
    monkeypatch.setattr(viz, "has_display", lambda: False)
    with pytest.raises(RuntimeError, match="display"):
        viz.interactive_viewer(particle_run)


# ------------------------------------------------------------------------ run folders
def test_incomplete_run_reads_snapshot_files(particle_run, tmp_path):
    folder = shutil.copytree(particle_run, tmp_path / "run")
    full = viz.load_snapshots(folder)
    (folder / "snapshots.npz").unlink()
    part = viz.load_snapshots(folder)
    assert full.complete and not part.complete
    assert np.array_equal(full.t, part.t) and np.array_equal(full.X, part.X)


def test_missing_snapshots_is_a_clear_error(particle_run, tmp_path):
    folder = shutil.copytree(particle_run, tmp_path / "nosnap")
    (folder / "snapshots.npz").unlink()
    shutil.rmtree(folder / "snapshots")
    for call in (lambda: viz.load_snapshots(folder), lambda: viz.render_snapshots(folder, [0.0], tmp_path), lambda: viz.render_animation(folder, tmp_path / "a.gif")):
        with pytest.raises(FileNotFoundError, match="wrote no snapshots") as err:
            call()
        assert str(folder) in str(err.value)
    with pytest.raises(FileNotFoundError, match="wrote no snapshots"):
        plots.write_figures(folder, tmp_path / "f", times=[0.1])
    assert main(["render", str(folder), "-q"]) == 2
    assert main(["plot", str(folder), "--out", str(tmp_path / "f"), "-q"]) == 0  # diagnostics only


def test_not_a_run_folder(tmp_path, mc_run):
    with pytest.raises(viz.NotARunFolderError, match="not a spherepde run folder"):
        viz.load_snapshots(tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        viz.run_kind(tmp_path / "nope")
    with pytest.raises(viz.NotARunFolderError, match="Monte-Carlo"):
        viz.load_snapshots(mc_run)
    assert viz.run_kind(mc_run) == "monte-carlo"
    assert main(["plot", str(tmp_path), "-q"]) == 2


# ------------------------------------------------------------------------- Matplotlib
def _names(paths):
    return {p.name for p in paths}


def test_figures_particle_run(particle_run, tmp_path):
    paths = plots.write_figures(particle_run, tmp_path, formats=["png", "pdf"])
    names = _names(paths)
    for stem in ("energy", "G2", "energy_balance", "tokens_map_t0.000_equirectangular"):
        assert {f"{stem}.png", f"{stem}.pdf"} <= names
    assert "mesh_invariants.png" not in names
    assert all(p.stat().st_size > 1000 for p in paths)
    assert (tmp_path / "energy.pdf").read_bytes().startswith(b"%PDF")


def test_figures_mesh_run(mesh_run, tmp_path):
    paths = plots.write_figures(mesh_run, tmp_path, formats=["png", "pdf"], times=[0.5], projection="mollweide", log=True)
    assert {"mesh_invariants.png", "mesh_invariants.pdf", "density_map_t0.500_mollweide_log.png", "density_map_t0.500_mollweide_log.pdf", "energy_balance.pdf"} <= _names(paths)


def test_figures_monte_carlo_bands(mc_run, tmp_path):
    s = load_series(mc_run)
    assert s.kind == "monte-carlo" and len(s.paths) == 2
    mean, std = s.stat("G2")
    assert std is not None and std.shape == mean.shape
    fig = plots.plot_energy_balance(mc_run)
    assert "2 paths" in fig._suptitle.get_text()
    assert any(len(ax.collections) for ax in fig.axes)  # the ± std bands
    paths = plots.write_figures(mc_run, tmp_path, formats=["png", "pdf"])
    assert {"energy.png", "energy.pdf", "G2.png", "energy_balance.png"} <= _names(paths)
    # aggregates only (path folders removed): bands from diagnostics_std.csv
    agg = shutil.copytree(mc_run, tmp_path / "agg", ignore=shutil.ignore_patterns("path-*"))
    s2 = load_series(agg)
    assert s2.stat("energy")[1] is not None
    assert "G2.png" in _names(plots.write_figures(agg, tmp_path / "agg_f"))


def test_distance_columns_and_undefined_energy(particle_run, tmp_path):
    d = read_diagnostics(particle_run / "diagnostics.csv")
    d["w_1"] = 0.1 + d["t"]
    d["l1_rho"] = 0.2 + d["t"] ** 2
    fig = plots.plot_distances(d)
    assert len([ln for ln in fig.axes[0].lines if "at t = 0" not in ln.get_label()]) == 2 and fig.axes[0].get_yscale() == "log"
    d["energy"] = np.full_like(d["t"], np.nan)
    with pytest.raises(ValueError, match="not defined"):
        plots.plot_energy(d)
    fig = plots.plot_token_map(viz.load_snapshots(particle_run).X[-1], t=0.2, projection="mollweide")
    assert fig.axes[0].name == "mollweide"


def test_density_map_is_finite_everywhere():
    mesh = icosphere(6)
    lon_e, lat_e, img = plots._raster(mesh, _blob(mesh, [0, 1, 0]))
    assert img.shape == (lat_e.size - 1, lon_e.size - 1) and np.all(np.isfinite(img))
    fig = plots.plot_density_map(mesh, _blob(mesh, [0, 1, 0]), t=1.0)
    assert fig.axes[0].get_xlabel().startswith("longitude")


# -------------------------------------------------------------------------------- CLI
def test_cli_render_and_plot(particle_run, mesh_run, tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["render", str(particle_run), "--times", "0", "0.2", "--size", *map(str, SIZE), "--out", str(out), "-q"]) == 0
    assert _names(out.iterdir()) == {"tokens_t0.000_iso_160x120.png", "tokens_t0.200_iso_160x120.png"}
    assert main(["render", str(mesh_run), "--gif", "--frames", "3", "--size", *map(str, SIZE), "--camera", "0,1,1", "--clim", "0", "1", "--out", str(out), "-q"]) == 0
    from PIL import Image

    with Image.open(out / "density_lin_cam0_1_1_clim0-1_tokens_160x120.gif") as im:
        assert im.n_frames == 3
    assert main(["render", str(mesh_run), "--frames", "3"]) == 2
    assert main(["render", str(mesh_run), "--interactive"] if not viz.has_display() else ["render", str(tmp_path / "none")]) == 2
    capsys.readouterr()
    assert main(["plot", str(mesh_run), "--format", "png", "svg", "--out", str(tmp_path / "p")]) == 0
    printed = capsys.readouterr().out.split()
    assert str(tmp_path / "p" / "energy.svg") in printed
    scale = "log" if viz.run_color_limits(mesh_run)[1] else "lin"
    assert (tmp_path / "p" / f"density_map_t0.000_equirectangular_{scale}.png").is_file()


def test_figures_of_a_saved_custom_process_name_it(tmp_path):
    """A run on a saved path of a custom process once read 'file weights' in every title."""
    from dataclasses import dataclass

    from spherepde.model.weights import generate_weight_path

    @dataclass(frozen=True)
    class Relax:
        name = "my-relaxation"
        sigma = 0.0

        def drift(self, D, t):
            return np.eye(3)[None] - D

    generate_weight_path(Relax(), H=2, d=3, T=0.1, dt=0.01, seed=0, init="identity").save(tmp_path / "w.npz")
    cfg = default_config().with_overrides({"run.solver": "particles", "model.H": 2, "weights.process": "file", "weights.path_file": str(tmp_path / "w.npz"),
                                           "solver.T": 0.1, "initial.n": 20, "output.vtk": False})
    folder = run(cfg, out=tmp_path / "r", progress=False).folder
    assert load_series(folder).label == "particles, H = 2, my-relaxation weights (from a file)"
    assert "my-relaxation weights" in plots.plot_energy(folder)._suptitle.get_text()
