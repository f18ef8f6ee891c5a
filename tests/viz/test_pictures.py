"""Pictures worth publishing (issue 17): each test checks what was wrong in a picture, not
only that a file was written.

* the animation's shared colour range was set by the t = 0 peak (later frames dark);
* frames interpolated between snapshots were labelled as real times;
* lighting darkened colour-mapped faces (one density value, several colours);
* the colour-bar title overlapped its tick labels at small sizes;
* no orientation axes, no graticule;
* PNGs named by snapshot index, silently overwritten by a render with other options;
* ``mesh_invariants`` drew rho_min (1e-52 ... 1e-6) on a linear axis (flat zero);
* density maps were resampled on a raster (blocky) and Mollweide longitudes sat on the data;
* validation figures without tick labels on short log axes, legends over the data;
* times between snapshots or past T snapped silently to the nearest snapshot.

Runs are tiny: a fake mesh run on icosphere(4) (320 cells) whose density spreads out over
t in [0, 0.2], and the smoke sizes of the validation studies.
"""

from __future__ import annotations

import csv
import importlib
import math
import os

import numpy as np
import pytest

from spherepde.cli.main import main
from spherepde.geometry.meshfiles import icosphere
from spherepde.runs.config import config_to_toml, default_config
from spherepde.runs.series import Series
from spherepde.studies import STUDIES
from spherepde.viz import plots
from spherepde.viz import render as viz
from spherepde.viz.common import RHO_TITLE, robust_color_limits
from spherepde.viz.figstyle import figure_problems

SIZE = (160, 120)
TIMES = np.linspace(0.0, 0.2, 5)  # snapshots every 0.05 up to T = 0.2


def _blob(mesh, kappa, direction=(0.0, 0.0, 1.0)):
    mu = np.asarray(direction, float) / np.linalg.norm(direction)
    r = np.exp(kappa * (mesh.centers @ mu - 1.0))
    return r / (r * mesh.areas).sum()


def write_mesh_run(folder, rho, ts, mesh):
    """A mesh run folder as the mesh solver writes it (snapshots, mesh, config, diagnostics)."""
    folder.mkdir(parents=True, exist_ok=True)
    mesh.save(folder / "mesh.npz")
    np.savez(folder / "snapshots.npz", t=np.asarray(ts, float), rho=np.asarray(rho, float))
    cfg = default_config().with_overrides({"run.solver": "mesh", "mesh.level": 4, "solver.T": float(ts[-1])})
    (folder / "config.toml").write_text(config_to_toml(cfg))
    t = np.linspace(0.0, float(ts[-1]), 9)
    cols = {"t": t, "energy": 1 - t, "G2": 0.5 + 0 * t, "mass": 1 + 0 * t, "rho_min": np.geomspace(1e-52, 1e-6, t.size)}
    with open(folder / "diagnostics.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(list(cols))
        for k in range(t.size):
            w.writerow([repr(float(cols[c][k])) for c in cols])
    return folder


@pytest.fixture(scope="module")
def mesh4():
    return icosphere(4)


@pytest.fixture(scope="module")
def spreading_run(tmp_path_factory, mesh4):
    """A density that starts as a sharp peak (kappa 60) and spreads out (kappa 2)."""
    rho = np.stack([_blob(mesh4, k) for k in np.geomspace(60.0, 2.0, TIMES.size)])
    return write_mesh_run(tmp_path_factory.mktemp("spread") / "run", rho, TIMES, mesh4)


def _density_actor(plotter):
    for actor in plotter.renderer.actors.values():
        mapper = getattr(actor, "mapper", None)
        ds = getattr(mapper, "dataset", None) if mapper is not None else None
        if ds is not None and "rho" in ds.cell_data:
            return actor
    raise AssertionError("no density surface in the plotter")


def _luminance(img):
    img = np.asarray(img, float)[..., :3]
    return img @ np.array([0.299, 0.587, 0.114])


# ------------------------------------------------------------------ 1. colour range of animations
def test_default_colour_range_keeps_the_peak_and_shows_the_late_frames(spreading_run):
    """A sharp start that spreads out (peak / median > 50): a log scale up to the peak, so
    neither the t = 0 peak is clipped (the old percentile range did) nor the last frame dark."""
    rho = np.load(spreading_run / "snapshots.npz")["rho"]
    (lo, hi), log = viz.run_color_limits(spreading_run)
    assert log and hi == pytest.approx(rho.max()) and 0 < lo < rho[-1].min()
    frac = math.log(rho[-1].max() / lo) / math.log(hi / lo)
    assert frac > 0.5  # the last frame's peak sits in the upper half of the scale
    # what is drawn: the density surface's colour range, in PNGs, GIFs and plot_run alike
    p = viz.plot_run(spreading_run, t=0.2, window_size=SIZE, off_screen=True)
    assert tuple(_density_actor(p).mapper.scalar_range) == pytest.approx((lo, hi))
    p.close()
    # explicit limits and the old min-max range are still there
    assert viz.run_color_limits(spreading_run, (0.0, 1.0)) == ((0.0, 1.0), False)
    assert viz.run_color_limits(spreading_run, "minmax")[0][1] == pytest.approx(rho.max())
    (llo, lhi), llog = viz.run_color_limits(spreading_run, "auto-log")
    assert llog and 0 < llo < lhi <= rho.max()


def test_gif_last_frame_is_not_dark(spreading_run, tmp_path):
    import matplotlib
    from PIL import Image

    rho_end = np.load(spreading_run / "snapshots.npz")["rho"][-1].max()

    def brightest(**kw):
        """The brightest colour of the last frame, seen from +z (the density's peak), and
        the luminance the colour scale gives the last frame's peak."""
        path = viz.render_animation(spreading_run, tmp_path / f"{len(list(tmp_path.iterdir()))}.gif", window_size=(120, 120), progress=False,
                                    axes=False, camera="xy", **kw)
        with Image.open(path) as im:
            im.seek(im.n_frames - 1)
            img = np.asarray(im.convert("RGB"))[:80]  # above the colour bar
        from scipy.ndimage import binary_erosion

        lum = _luminance(img)[binary_erosion(np.any(img < 235, axis=2), iterations=2)]  # the sphere, not its rim or the background
        (lo, hi), log = viz.run_color_limits(spreading_run, kw.get("clim"))
        x = math.log(rho_end / lo) / math.log(hi / lo) if log else (rho_end - lo) / (hi - lo)
        expected = _luminance(255 * np.asarray(matplotlib.colormaps["viridis"](x)[:3]))
        return lum.max(), expected

    robust, want = brightest()
    peak, want_peak = brightest(clim="minmax")
    assert robust == pytest.approx(want, abs=6) and peak == pytest.approx(want_peak, abs=6)
    assert robust > peak + 15  # the spread-out density shows, instead of near-black


def test_robust_limits_on_concentrated_and_constant_data():
    # a density on fewer cells than the top percentile: the median frame peak, not ~0
    frames = np.zeros((3, 1000))
    frames[:, 0] = [5.0, 4.0, 3.0]
    assert robust_color_limits(frames) == (0.0, 4.0)
    lo, hi = robust_color_limits(np.full((2, 10), 0.3))
    assert lo < 0.3 < hi


def test_cli_clim_modes(spreading_run, tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["render", str(spreading_run), "--times", "0.1", "--size", *map(str, SIZE), "--clim", "auto-log", "--out", str(out), "-q"]) == 0
    assert main(["render", str(spreading_run), "--times", "0.1", "--size", *map(str, SIZE), "--clim", "0", "2", "--out", str(out), "-q"]) == 0
    assert {p.name for p in out.iterdir()} == {"density_t0.100_log_iso_160x120.png", "density_t0.100_lin_iso_clim0-2_160x120.png"}
    capsys.readouterr()
    assert main(["render", str(spreading_run), "--clim", "bright", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("spherepde: error: --clim") and "auto-log" in err[0]


# ------------------------------------------------------------------ 2. interpolated frames
def test_interpolated_frames_are_labelled(spreading_run, tmp_path, monkeypatch):
    snaps = viz.load_snapshots(spreading_run)
    ts, _, interpolated = viz._frames(snaps, 9, False)
    assert interpolated.tolist() == [False, True] * 4 + [False]  # every other frame lies between snapshots
    assert np.array_equal(ts[::2], snaps.t)

    labels = []
    update = viz._Scene.update

    def spy(self, *a, **kw):
        update(self, *a, **kw)
        labels.append(self.text.input)

    monkeypatch.setattr(viz._Scene, "update", spy)
    viz.render_animation(spreading_run, tmp_path / "a.gif", frames=9, window_size=SIZE, progress=False)
    assert labels[0] == "t = 0.000" and labels[2] == "t = 0.050" and labels[-1] == "t = 0.200"
    assert labels[1] == "t = 0.025 (interpolated)"
    assert sum(lab.endswith("(interpolated)") for lab in labels) == 4
    labels.clear()
    viz.render_animation(spreading_run, tmp_path / "b.gif", frames=3, window_size=SIZE, progress=False)  # subsampled: real snapshots
    assert labels == ["t = 0.00", "t = 0.10", "t = 0.20"]


# ------------------------------------------------------------------ 3. lighting
def test_colour_maps_are_unlit_so_one_value_has_one_colour(mesh4):
    import matplotlib

    rho = np.full(mesh4.n_cells, 0.5)
    p = viz.plot_density(mesh4, rho, clim=(0.0, 1.0), window_size=(200, 200), off_screen=True, axes=False)
    actor = _density_actor(p)
    assert actor.prop.lighting is False
    expected = 255 * np.asarray(matplotlib.colormaps["viridis"](0.5)[:3])

    def deviation(plotter):
        img = np.asarray(plotter.screenshot(return_img=True), float)[:140]  # above the colour bar
        plotter.close()
        sphere = img[np.any(img < 235, axis=2)]  # not the white background
        return np.percentile(np.abs(sphere - expected).max(axis=1), 98)  # all but the anti-aliased rim

    assert deviation(p) <= 3  # the same colour wherever the face points
    # the old shading made the same value darker towards the rim
    lit = viz.plot_density(mesh4, rho, clim=(0.0, 1.0), window_size=(200, 200), off_screen=True, axes=False, lighting=True)
    assert _density_actor(lit).prop.lighting is True
    assert deviation(lit) > 20


# ------------------------------------------------------------------ 4. colour-bar title
@pytest.mark.parametrize("size", [(160, 120), (240, 240), (400, 300), (800, 800)])
def test_colour_bar_title_sits_above_the_bar_and_its_labels(mesh4, size):
    w, h = size
    p = viz.plot_density(mesh4, _blob(mesh4, 5.0), window_size=size, off_screen=True)
    p.screenshot(return_img=True)  # lay the text out
    (bar,) = p.scalar_bars.values()
    assert bar.GetTitle() == ""  # the title is not the bar's own (VTK puts it on the labels at small sizes)
    assert bar.GetTextPosition() == bar.PrecedeScalarBar  # tick labels below the bar
    titles = [a for a in p.renderer.actors.values() if hasattr(a, "GetInput") and str(a.GetInput()).startswith(RHO_TITLE)]
    assert len(titles) == 1
    box = [0.0] * 4
    titles[0].GetBoundingBox(p.renderer, box)  # xmin, xmax, ymin, ymax in pixels, from the anchor
    x, y = titles[0].GetActualPositionCoordinate().GetComputedDisplayValue(p.renderer)
    bar_top = (bar.GetPosition()[1] + bar.GetPosition2()[1]) * h
    assert y + box[2] >= bar_top  # entirely above the bar (and so above the labels under it)
    assert 0 <= x + box[0] and x + box[1] <= w and y + box[3] <= h  # inside the picture
    p.close()


def test_colour_bar_labels_stay_off_the_bar_with_a_graticule_and_a_log_scale(mesh4):
    """A translucent graticule made VTK draw the tick labels on top of the bar."""
    import matplotlib

    w = h = 400
    rho = np.geomspace(1e-6, 1.6, mesh4.n_cells)
    p = viz.plot_density(mesh4, rho, log=True, graticule=True, window_size=(w, h), off_screen=True)
    img = np.asarray(p.screenshot(return_img=True), float)
    (bar,) = p.scalar_bars.values()
    y0, bh = bar.GetPosition()[1] * h, bar.GetPosition2()[1] * h
    p.close()
    row = img[int(round(h - (y0 + 0.85 * bh))), int(0.17 * w):int(0.83 * w)]  # through the bar, near its top
    cmap = 255 * matplotlib.colormaps["viridis"](np.linspace(0, 1, 256))[:, :3]
    dist = np.min(np.linalg.norm(row[:, None, :] - cmap[None], axis=2), axis=1)
    assert dist.max() < 15  # only the colour map's colours: no label text on the bar


# ------------------------------------------------------------------ 5. axes and graticule
def test_orientation_axes_by_default_and_graticule_on_request(mesh4):
    rho = _blob(mesh4, 5.0)
    p = viz.plot_density(mesh4, rho, window_size=SIZE, off_screen=True, multiview=True)
    assert all(r.axes_enabled for r in p.renderers)  # both views
    assert not any(name.startswith("graticule") for name in p.renderer.actors)
    p.close()
    p = viz.plot_density(mesh4, rho, window_size=SIZE, off_screen=True, axes=False, graticule=True)
    assert not p.renderer.axes_enabled
    g = p.renderer.actors["graticule-0"].mapper.dataset
    assert g.n_lines == 12 + 5  # meridians and parallels every 30 degrees
    assert np.allclose(np.linalg.norm(g.points, axis=1), 1.004)  # just above the unit sphere
    p.close()
    p = viz.plot_particles(np.eye(3), window_size=SIZE, off_screen=True, graticule=True)
    assert "graticule-0" in p.renderer.actors and p.renderer.axes_enabled
    p.close()


# ------------------------------------------------------------------ 6. file names, no silent overwrite
def test_png_names_carry_time_and_options_and_existing_files_are_refused(spreading_run, tmp_path):
    a = viz.render_snapshots(spreading_run, [0.1], tmp_path, window_size=SIZE)
    b = viz.render_snapshots(spreading_run, [0.1], tmp_path, window_size=SIZE, log=True, camera="0,1,1", graticule=True)
    assert [p.name for p in a] == ["density_t0.100_log_iso_160x120.png"]  # the automatic range chose a log scale, and the name says so
    assert [p.name for p in b] == ["density_t0.100_log_cam0_1_1_graticule_160x120.png"]
    before = a[0].read_bytes()
    with pytest.raises(FileExistsError, match="--force"):
        viz.render_snapshots(spreading_run, [0.0, 0.1], tmp_path, window_size=SIZE)  # t = 0 is new, but nothing is drawn
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([a[0].name, b[0].name])
    assert a[0].read_bytes() == before
    os.utime(a[0], (0, 0))
    assert viz.render_snapshots(spreading_run, [0.1], tmp_path, window_size=SIZE, force=True) == a
    assert a[0].stat().st_mtime > 0


def test_cli_refuses_to_overwrite_without_force(spreading_run, tmp_path, capsys):
    out = tmp_path / "r"
    args = ["render", str(spreading_run), "--times", "0.2", "--size", *map(str, SIZE), "--out", str(out), "-q"]
    assert main(args) == 0
    (png,) = out.iterdir()
    assert png.name == "density_t0.200_log_iso_160x120.png"
    os.utime(png, (0, 0))
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("spherepde: error:") and png.name in err[0] and "--force" in err[0]
    assert png.stat().st_mtime == 0  # untouched
    assert main([*args, "--clim", "minmax"]) == 0  # other options, another file
    assert main([*args, "--force"]) == 0 and png.stat().st_mtime > 0
    gif = ["render", str(spreading_run), "--gif", "--frames", "2", "--size", *map(str, SIZE), "--out", str(out), "-q"]
    assert main(gif) == 0 and (out / "density_log_iso_160x120.gif").is_file()
    assert main(gif) == 2
    assert main([*gif, "--force"]) == 0


# ------------------------------------------------------------------ 7. mesh_invariants
def test_mesh_invariants_draws_rho_min_on_a_log_axis(spreading_run):
    fig = plots.plot_mesh_invariants(spreading_run)
    ax = fig.axes[1]
    assert ax.get_yscale() == "log"
    lo, hi = ax.get_ylim()
    floor = 1e-16 / (4 * math.pi)  # no rho_max column: 1e-16 of the mean density is zero to round-off, drawn at that floor
    assert floor / 10 <= lo < floor and hi >= 1e-6  # every meaningful decade is visible, not flat zero, nor 1e-52
    assert any("zero to round-off" in t.get_text() for t in ax.texts)
    d = {"t": np.arange(4.0), "mass": np.ones(4), "rho_min": np.array([1e-40, 0.0, -1e-12, 1e-6])}  # a positivity failure
    assert plots.plot_mesh_invariants(d).axes[1].get_yscale() == "symlog"


# ------------------------------------------------------------------ 8. density maps
def _is_inside(path, transform, pts) -> np.ndarray:
    return path.contains_points(pts, transform=transform)


def _background_fraction(fig, ax, mollweide: bool) -> float:
    """Fraction of the map area's pixels that are white (a gap between cells)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    img = np.asarray(canvas.buffer_rgba())[..., :3].astype(int)
    H = img.shape[0]
    bb = ax.get_window_extent()
    x0, x1, y0, y1 = int(bb.x0) + 3, int(bb.x1) - 3, int(bb.y0) + 3, int(bb.y1) - 3
    ys, xs = np.mgrid[y0:y1, x0:x1]
    pts = np.column_stack([xs.ravel() + 0.5, ys.ravel() + 0.5])
    if mollweide:  # pixels well inside the ellipse
        path = ax.patch.get_path()
        inner = ax.patch.get_transform()
        keep = _is_inside(path, inner, pts)
        shrunk = np.column_stack([(pts[:, 0] - bb.x0 - bb.width / 2) * 1.03 + bb.x0 + bb.width / 2, (pts[:, 1] - bb.y0 - bb.height / 2) * 1.03 + bb.y0 + bb.height / 2])
        keep &= _is_inside(path, inner, shrunk)
        pts = pts[keep]
    rows = (H - pts[:, 1]).astype(int)
    cols = pts[:, 0].astype(int)
    rgb = img[rows, cols]
    return float(np.mean(np.all(rgb > 245, axis=1)))


@pytest.mark.parametrize("projection", ["equirectangular", "mollweide"])
def test_density_map_draws_the_mesh_cells_without_gaps(mesh4, projection):
    from matplotlib.collections import PolyCollection, QuadMesh

    rho = _blob(mesh4, 3.0, direction=(-1.0, 0.1, 0.3))  # a peak across the dateline
    fig = plots.plot_density_map(mesh4, rho, projection=projection, clim=(0.0, rho.max()))
    ax = fig.axes[0]
    assert not ax.images and not any(isinstance(c, QuadMesh) for c in ax.collections)  # no raster
    (pc,) = [c for c in ax.collections if isinstance(c, PolyCollection)]
    cells = pc.spherepde_cells
    assert set(cells.tolist()) == set(range(mesh4.n_cells))  # every cell, as itself
    assert mesh4.n_cells <= len(cells) <= 1.15 * mesh4.n_cells  # a few cut at the dateline
    assert np.allclose(pc.get_array(), rho[cells])
    # no gaps: at the dateline, at the poles, between cells
    flat = plots.plot_density_map(mesh4, np.full(mesh4.n_cells, 0.5), projection=projection, clim=(0.0, 1.0))
    assert _background_fraction(flat, flat.axes[0], projection == "mollweide") < 0.002


def test_mollweide_longitude_labels_are_outside_the_map(mesh4):
    from matplotlib.figure import Figure

    def labels_inside(fig, ax):
        fig.canvas.draw()
        path, tr = ax.patch.get_path(), ax.patch.get_transform()
        texts = [t for t in ax.get_xticklabels() + ax.get_yticklabels() + ax.texts if t.get_visible() and t.get_text().strip()]
        inside = []
        for t in texts:
            bb = t.get_window_extent()
            corners = np.array([[bb.x0, bb.y0], [bb.x1, bb.y0], [bb.x0, bb.y1], [bb.x1, bb.y1], [(bb.x0 + bb.x1) / 2, (bb.y0 + bb.y1) / 2]])
            if _is_inside(path, tr, corners).any():
                inside.append(t.get_text())
        return inside, texts

    bare = Figure()
    ax = bare.add_subplot(projection="mollweide")
    assert labels_inside(bare, ax)[0]  # matplotlib's own longitudes lie on the map: the check sees them
    fig = plots.plot_density_map(mesh4, _blob(mesh4, 3.0), projection="mollweide")
    inside, texts = labels_inside(fig, fig.axes[0])
    assert inside == []
    assert {"-120°", "0°", "120°"} <= {t.get_text() for t in texts}  # the longitudes are still written, below the map


def test_plot_names_maps_by_time_and_projection(spreading_run, tmp_path):
    a = plots.write_figures(spreading_run, tmp_path, times=[0.1])
    b = plots.write_figures(spreading_run, tmp_path, times=[0.1], projection="mollweide", log=True)
    assert "density_map_t0.100_equirectangular_log.png" in {p.name for p in a}  # peak / median > 50: log by default
    c = plots.write_figures(spreading_run, tmp_path / "c", times=[0.1], log=False)
    assert "density_map_t0.100_equirectangular_log.png" in {p.name for p in c}
    assert "density_map_t0.100_mollweide_log.png" in {p.name for p in b}


# ------------------------------------------------------------------ 9. validation figures
def test_figure_checker_sees_the_old_problems():
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullFormatter

    fig = Figure(figsize=(6, 4))
    ax = fig.add_subplot()
    h = np.array([0.110, 0.165, 0.326])
    ax.loglog(h, 0.05 * h / h[0], "o-", label="W1")
    ax.loglog(h, 0.3 * h / h[0], "o-", label="L1")
    ax.set_xlabel("h")
    ax.xaxis.set_minor_formatter(NullFormatter())  # as mesh_vs_particles did: no labels at all on 0.11 ... 0.33
    ax.legend(loc="best")
    problems = " | ".join(figure_problems(fig))
    assert "no y label" in problems and "tick label(s) on the x axis" in problems and "covers part of axes" in problems


@pytest.mark.parametrize("study", STUDIES)  # every registered study (spherepde.studies.STUDIES)
def test_validation_figures_are_readable(study, tmp_path, monkeypatch):
    """Every axes: x and y labels, two or more visible tick labels per axis; no legend over
    any plotting area (smoke-size results of each study)."""
    from matplotlib.figure import Figure

    mod = importlib.import_module(f"spherepde.studies.{study}")
    res = mod.run("smoke")
    found = {}
    savefig = Figure.savefig

    def checked(self, fname, *a, **kw):
        found[os.path.basename(str(fname))] = figure_problems(self)
        return savefig(self, fname, *a, **kw)

    monkeypatch.setattr(Figure, "savefig", checked)
    paths = mod.plot(res, tmp_path)
    assert paths and all(p.is_file() for p in paths)
    assert set(found) == {p.name for p in paths}
    bad = {name: pr for name, pr in found.items() if pr}
    assert not bad, bad


# ------------------------------------------------------------------ 10. times between snapshots, past T
def test_times_between_snapshots_are_named_and_times_past_T_refused(spreading_run, tmp_path, caplog):
    with caplog.at_level("WARNING", logger="spherepde"):
        paths = viz.render_snapshots(spreading_run, [0.07, 0.1], tmp_path, window_size=SIZE)
    assert [p.name for p in paths] == ["density_t0.050_log_iso_160x120.png", "density_t0.100_log_iso_160x120.png"]
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1  # 0.1 is a snapshot time: nothing to say
    assert "t = 0.07 is not a snapshot time" in warnings[0] and "nearest snapshot, t = 0.050" in warnings[0]
    caplog.clear()
    with caplog.at_level("WARNING", logger="spherepde"):
        viz.plot_run(spreading_run, t=0.19, window_size=SIZE, off_screen=True).close()
        plots.write_figures(spreading_run, tmp_path / "f", times=[0.12])
    msgs = [r.getMessage() for r in caplog.records]
    assert any("t = 0.19 is not a snapshot time" in m and "t = 0.200" in m for m in msgs)
    assert any("t = 0.12 is not a snapshot time" in m and "t = 0.100" in m for m in msgs)
    for call in (lambda: viz.render_snapshots(spreading_run, [0.3], tmp_path / "x"), lambda: viz.plot_run(spreading_run, t=-1.0, off_screen=True),
                 lambda: plots.write_figures(spreading_run, tmp_path / "g", times=[5.0])):
        with pytest.raises(ValueError, match="outside the snapshots"):
            call()
    assert not (tmp_path / "x").exists() and not (tmp_path / "g").exists()  # refused before anything is written
    viz.render_snapshots(spreading_run, [0.2 + 1e-9], tmp_path / "tol", window_size=SIZE)  # T + round-off is T


def test_cli_says_which_snapshot_it_drew_and_refuses_times_past_T(spreading_run, tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["render", str(spreading_run), "--times", "0.07", "--size", *map(str, SIZE), "--out", str(out), "-q"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "t = 0.07 is not a snapshot time" in err[0] and "t = 0.050" in err[0]
    assert main(["render", str(spreading_run), "--times", "0.5", "--out", str(tmp_path / "none"), "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("spherepde: error: t = 0.5 is outside the snapshots") and "T = 0.2" in err[0]
    assert not (tmp_path / "none").exists()


# ------------------------------------------------------------------ 10. colour ranges and round-off that read right (issue 26)
def _clusters(mesh):
    """Four sharp clusters (kappa 200) on a nearly empty sphere, as clustering-mesh at T = 3."""
    dirs = [(0, 0, 1), (0.94, 0, -0.33), (-0.47, 0.82, -0.33), (-0.47, -0.82, -0.33)]
    return sum(_blob(mesh, 200.0, d) for d in dirs) / 4


def test_default_colour_range_keeps_the_peaks_of_clusters_at_every_level():
    """The old rule drew 0-0.61 with rho_max = 40 (each cluster one saturated cell) and
    flipped between ranges from one level to the next; now: log up to the peak at every level."""
    from spherepde.viz.common import resolve_clim

    peaks, rels = [], []
    for level in (8, 16, 32):
        mesh = icosphere(level)
        rho = _clusters(mesh)
        (lo, hi), log = resolve_clim(None, rho)
        assert log and hi == pytest.approx(rho.max()) and 0 < lo < hi  # no peak clipped
        assert resolve_clim(None, rho, log=True)[0][1] == pytest.approx(rho.max())  # --log too (it drew up to the 99th percentile)
        assert resolve_clim("auto-log", rho)[0][1] == pytest.approx(rho.max())
        peaks.append(hi)
        rels.append(math.log(hi / lo))
    assert max(rels) - min(rels) < 1.0  # the same rule, nearly the same range, at every level


def test_density_map_colour_bar_says_when_it_clips(mesh4):
    from matplotlib.colors import LogNorm

    rho = _clusters(mesh4)
    fig = plots.plot_density_map(mesh4, rho)  # default: log, up to the peak
    pc = fig.axes[0].collections[0]
    assert isinstance(pc.norm, LogNorm) and pc.norm.vmax == pytest.approx(rho.max())
    cbar = pc.colorbar
    assert cbar.extend in ("neither", "min")  # nothing above the top; below the log floor only
    fig = plots.plot_density_map(mesh4, rho, clim=(0.0, 0.5 * rho.max()))
    assert fig.axes[0].collections[0].colorbar.extend == "max"  # values above the range: an arrow
    fig = plots.plot_density_map(mesh4, np.full(mesh4.n_cells, 1 / (4 * math.pi)))
    assert fig.axes[0].collections[0].colorbar.extend == "neither"


def test_render_colour_bar_says_when_it_clips(mesh4):
    rho = _clusters(mesh4)
    p = viz.plot_density(mesh4, rho, clim=(0.0, 0.5), window_size=(240, 240), off_screen=True)
    p.screenshot(return_img=True)
    texts = [str(a.GetInput()) for a in p.renderer.actors.values() if hasattr(a, "GetInput")]
    p.close()
    assert any(t.startswith(RHO_TITLE) and f"clipped above 0.5 (max {rho.max():.2g})" in t for t in texts), texts
    p = viz.plot_density(mesh4, rho, window_size=(240, 240), off_screen=True)  # default: the peak is the top
    assert tuple(_density_actor(p).mapper.scalar_range)[1] == pytest.approx(rho.max())
    p.close()


def test_round_off_is_not_plotted_as_signal():
    t = np.linspace(0.0, 1.0, 11)
    sym = {"t": t, "mean_resultant": 1e-16 * (1 + np.sin(7 * t)), "energy": 1 - t}
    ax = plots.plot_mean_resultant(sym).axes[0]
    assert ax.get_ylim()[1] >= 0.01 and any("round-off" in x.get_text() for x in ax.texts)
    mass = np.ones_like(t)
    mass[6:] -= 2.220446049250313e-16  # one ulp
    ax = plots.plot_mesh_invariants({"t": t, "mass": mass}).axes[0]
    lo, hi = ax.get_ylim()
    assert hi - lo >= 1e-12 and any("round-off" in x.get_text() for x in ax.texts)
    real = {"t": t, "mean_resultant": 0.3 + 0.1 * t}  # a real signal keeps its autoscaled axis
    ax = plots.plot_mean_resultant(real).axes[0]
    assert ax.get_ylim()[0] > 0.2 and not ax.texts


def test_g2_title_says_what_it_is_for_each_sign():
    t = np.linspace(0.0, 1.0, 5)
    cols = {"t": t, "G2": 0.5 + t, "energy": 1 + t}
    plus = plots.plot_dissipation(Series([cols], sign=1.0))._suptitle.get_text()
    minus = plots.plot_dissipation(Series([cols], sign=-1.0))._suptitle.get_text()
    assert "Dissipation" not in plus and "Metric slope" in plus and "raises E" in plus
    assert minus.startswith("Dissipation") and "lowers E" in minus
