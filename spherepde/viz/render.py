"""Three-dimensional views of runs: densities and tokens on the sphere (PyVista).

Everything renders off-screen by default, so it works on a headless machine: VTK's
wheels pick an OpenGL window at run time (X, then EGL, then OSMesa). Without a display
this module asks VTK for the EGL window first (``VTK_DEFAULT_OPENGL_WINDOW``), which
avoids the "bad X server connection" warning; no X server (``xvfb``) is needed.

Public functions
----------------
:func:`plot_density` / :func:`plot_particles`
    one density (cell data ``rho``, density per unit area) or one token cloud on S²,
    returned as a :class:`pyvista.Plotter` (call ``.show()`` or ``.screenshot()``).
:func:`plot_run`
    the snapshot of a run folder nearest to a time.
:func:`render_snapshots`, :func:`render_animation`
    PNG images at chosen times and a GIF/MP4 animation with one colour scale.
:func:`interactive_viewer`
    a window with a time slider (needs a display).
:func:`load_snapshots`, :func:`run_kind`
    reading run folders (:mod:`spherepde.runs.runfolder`, re-exported here).

Run folders are described in :mod:`spherepde.runs.runner`: snapshots come from
``snapshots.npz`` (``t`` (S,), ``rho`` (S, n_cells) or ``X`` (S, n, d)) or, while a run
is incomplete, from ``snapshots/NNNNNN.npz``; mesh runs store the mesh in ``mesh.npz``.

PyVista is imported only when something is drawn (the package imports fast without it). GIFs are
written with Pillow from the rendered frames (PyVista's ``open_gif`` needs imageio,
which spherepde does not require); MP4 uses :meth:`pyvista.Plotter.open_movie` and
needs ``imageio`` and ``imageio-ffmpeg``.
"""

from __future__ import annotations

import importlib.util
import logging
import math
import os
import sys
from pathlib import Path

import numpy as np

from spherepde._base import atomic_file
from spherepde.runs.runfolder import (  # re-exported: reading runs is part of this module's API
    NotARunFolderError,
    RunSnapshots,
    load_snapshots,
    run_config,
    run_kind,
)
from spherepde.viz.common import RHO_TITLE, _time_digits, _time_format, _tokens3, clip_note, color_limits, resolve_clim, snap_times

__all__ = [
    "CAMERAS", "NotARunFolderError", "RunSnapshots", "color_limits", "load_snapshots", "run_config", "run_kind", "has_display", "plot_density",
    "plot_particles", "plot_run", "render_snapshots", "render_animation", "interactive_viewer", "output_name", "run_color_limits",
]


_log = logging.getLogger(__name__)


#: Named cameras: (view direction from the centre to the camera, view-up vector).
CAMERAS = {
    "iso": ((1.0, 1.0, 1.0), (0.0, 0.0, 1.0)),
    "xy": ((0.0, 0.0, 1.0), (0.0, 1.0, 0.0)),
    "xz": ((0.0, -1.0, 0.0), (0.0, 0.0, 1.0)),
    "yz": ((1.0, 0.0, 0.0), (0.0, 0.0, 1.0)),
}


# ============================================================================ rendering core
def has_display() -> bool:
    """Whether a window can be opened (a display on Linux; assumed elsewhere)."""
    if sys.platform.startswith("linux"):
        return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    return True


def _prepare_vtk() -> None:
    # Headless Linux: try VTK's EGL window first (VTK falls back to others if it fails).
    if sys.platform.startswith("linux") and not has_display():
        os.environ.setdefault("VTK_DEFAULT_OPENGL_WINDOW", "vtkEGLRenderWindow")


def _off_screen(off_screen: bool | None) -> bool:
    import pyvista as pv

    if off_screen is None:
        return bool(pv.OFF_SCREEN) or not has_display()
    return bool(off_screen)


def _font_file() -> str | None:
    """A TrueType font with Greek letters (VTK's built-in Arial has no rho)."""
    try:
        import matplotlib

        f = Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSans.ttf"
        return str(f) if f.is_file() else None
    except ImportError:  # pragma: no cover
        return None


def _use_font(prop, font_file: str | None) -> None:
    if font_file is None:
        return
    import vtk

    prop.SetFontFamily(vtk.VTK_FONT_FILE)
    prop.SetFontFile(font_file)


def _camera(camera) -> tuple[np.ndarray, np.ndarray]:
    """(unit direction to the camera, view-up) for 'iso', 'xy', 'xz', 'yz' or 'x,y,z'."""
    if isinstance(camera, str) and camera in CAMERAS:
        d, up = CAMERAS[camera]
    else:
        try:
            d = [float(s) for s in camera.split(",")] if isinstance(camera, str) else [float(s) for s in camera]
        except (TypeError, ValueError):
            d = []
        if len(d) != 3 or not np.all(np.isfinite(d)) or not np.any(d):
            raise ValueError(f"camera must be one of {', '.join(CAMERAS)} or a direction 'x,y,z', got {camera!r}")
        up = (0.0, 0.0, 1.0)
    d = np.asarray(d, float) / np.linalg.norm(d)
    up = np.asarray(up, float)
    if abs(d @ up) > 0.99:
        up = np.array([0.0, 1.0, 0.0])
    return d, up


def _direction_label(d: np.ndarray) -> str:
    for i, axis in enumerate("xyz"):
        if abs(abs(d[i]) - 1.0) < 1e-12:
            return ("+" if d[i] > 0 else "\N{MINUS SIGN}") + axis
    d = d / np.abs(d).max()
    return "(" + ", ".join(f"{v:.2g}".replace("-", "\N{MINUS SIGN}") for v in d) + ")"


def _sphere_glyph(radius: float):
    import pyvista as pv

    return pv.Sphere(radius=radius, theta_resolution=10, phi_resolution=8)


#: Spacing of the latitude-longitude graticule (degrees).
GRATICULE_STEP = 30


def graticule_lines(step: float = GRATICULE_STEP, radius: float = 1.004, n: int = 121):
    """Lines of constant longitude (every ``step`` degrees, pole to pole) and constant
    latitude (every ``step`` degrees, poles excluded) just above the unit sphere, as one
    :class:`pyvista.PolyData` of polylines (``n_lines`` of them)."""
    import pyvista as pv

    lines, pts = [], []
    s = np.linspace(0.0, 1.0, n)
    for lon in np.radians(np.arange(-180.0, 180.0, step)):
        lat = np.pi * (s - 0.5)
        pts.append(np.column_stack([np.cos(lat) * np.cos(lon), np.cos(lat) * np.sin(lon), np.sin(lat)]))
    for lat in np.radians(np.arange(-90.0 + step, 90.0 - 1e-9, step)):
        lon = 2 * np.pi * s
        pts.append(np.column_stack([np.cos(lat) * np.cos(lon), np.cos(lat) * np.sin(lon), np.full(n, np.sin(lat))]))
    start = 0
    for P in pts:
        lines.append(np.concatenate([[len(P)], start + np.arange(len(P))]))
        start += len(P)
    return pv.PolyData(radius * np.vstack(pts), lines=np.concatenate(lines))


def _bar_labels(clim, log: bool, n: int) -> list[str]:
    lo, hi = clim
    s = np.linspace(0.0, 1.0, n)
    vals = lo * (hi / lo) ** s if log else lo + (hi - lo) * s
    return [f"{v:.3g}" for v in vals]


def _colorbar_layout(w: int, h: int, title: str, clim=(0.0, 1.0), log: bool = False) -> dict:
    """Geometry of the horizontal colour bar in a view of w x h pixels.

    The tick labels go below the bar and the title (a separate text) above it, so the two
    never meet; font sizes follow the view's size, the title's never wider than the view,
    the bar is tall enough for its labels, and there are as many labels (5 down to 2) as
    fit side by side. Positions are fractions of the view.
    """
    label = int(np.clip(round(min(w, h) / 30), 9, 22))
    y0, bar_h = 0.02, (10 + 1.6 * label) / h
    lines = title.split("\n")  # a second line: where the range clips
    title_size = int(max(6, min(label + 2, 0.9 * w / (0.62 * max(max(len(x) for x in lines), 1)))))
    title_y = y0 + bar_h + 3.0 / h
    width = 0.7
    n_labels = 2
    for n in (5, 4, 3):  # a label is about 0.6 font sizes per character wide, plus a gap
        if n * (0.6 * label * max(len(x) for x in _bar_labels(clim, log, n)) + label) <= width * w:
            n_labels = n
            break
    args = {
        "title": "", "vertical": False, "position_x": 0.15, "position_y": y0, "width": width, "height": bar_h,
        "n_labels": n_labels, "fmt": "%.3g", "unconstrained_font_size": True, "label_font_size": label,
    }
    return {"scalar_bar_args": args, "title_y": title_y, "title_size": title_size, "top": title_y + (1.4 * title_size * len(lines) + 4) / h}


def _color_limits(clim, log: bool) -> tuple[float, float]:
    """``clim`` as two floats (default (0, 1)); ValueError unless lo < hi, and lo > 0 on a log scale."""
    clim = tuple(float(c) for c in clim) if clim is not None else (0.0, 1.0)
    if log and clim[0] <= 0:
        raise ValueError(f"a log colour scale needs positive limits, got {clim}")
    if not clim[1] > clim[0]:
        raise ValueError(f"colour limits must satisfy lo < hi, got {clim}")
    return clim


#: The largest side of a rendered image in pixels (larger ones exhaust the off-screen renderer's memory).
MAX_SIDE = 8192


def _window(window_size, multiview: bool) -> tuple[int, int]:
    """The image size in pixels (default 1200 x 600 for two views, 800 x 800 for one); from 16 x 16 to MAX_SIDE x MAX_SIDE."""
    if window_size is None:
        window_size = (1200, 600) if multiview else (800, 800)
    w, h = (int(v) for v in window_size)
    if w < 16 or h < 16 or w > MAX_SIDE or h > MAX_SIDE:
        raise ValueError(f"image size must be from 16 x 16 to {MAX_SIDE} x {MAX_SIDE} pixels, got {w} x {h}")
    return w, h


class _Scene:
    """One plotter with a density surface and/or token glyphs that :meth:`update` refreshes
    in place (the colour range, camera and actors stay fixed across frames)."""

    def __init__(
        self,
        *,
        mesh=None,
        n_tokens: int = 0,
        clim=None,
        log: bool = False,
        clipped: str = "",
        cmap: str = "viridis",
        camera="iso",
        multiview: bool = False,
        window_size=None,
        off_screen: bool | None = True,
        token_radius: float | None = None,
        token_color: str = "crimson",
        sphere_opacity: float = 0.3,
        show_edges: bool = False,
        time_text: bool = True,
        title: str | None = None,
        zoom: float = 1.0,
        anti_aliasing: bool = True,
        lighting: bool = False,
        axes: bool = True,
        graticule: bool = False,
    ):
        _prepare_vtk()
        import pyvista as pv

        from spherepde.geometry.vtk import density_polydata

        if mesh is None and n_tokens == 0:
            raise ValueError("nothing to draw: give a mesh density or tokens")
        self.log = bool(log)
        self.clim = _color_limits(clim, self.log)
        w, h = _window(window_size, multiview)
        self.font = _font_file()
        shape = (1, 2) if multiview else (1, 1)
        self.plotter = pv.Plotter(off_screen=_off_screen(off_screen), window_size=(w, h), shape=shape, border=False, theme=pv.themes.DocumentTheme())
        p = self.plotter
        if not anti_aliasing:  # MSAA triples the software (EGL/llvmpipe) render time
            p.disable_anti_aliasing(all_renderers=True)
        self.poly = None
        if mesh is not None:
            self.poly = density_polydata(mesh, np.full(mesh.n_cells, self.clim[1]))
        self.tokens = None
        if n_tokens:
            self._make_tokens(n_tokens, token_radius)
        d, up = _camera(camera)
        views = [(d, "")] if not multiview else [(d, "view from " + _direction_label(d)), (-d, "view from " + _direction_label(-d))]
        self.text = None
        #: the colour bar's geometry (:func:`_colorbar_layout`) and its title (a text actor).
        #: the colour bar's title: what rho is, and where the range clips (values beyond it drawn in its end colours)
        self.colorbar_text = RHO_TITLE + (f"\n{clipped}" if clipped else "")
        self.colorbar = _colorbar_layout(w // len(views), h, self.colorbar_text, self.clim, self.log) if self.poly is not None else None
        self.colorbar_title = None
        #: the density surface's actor (one per view); lit only with ``lighting=True``.
        self.density_actors = []
        bar_top = self.colorbar["top"] if self.colorbar else 0.0
        for j, (vd, vlabel) in enumerate(views):
            p.subplot(0, j)
            self._add_surface(j == len(views) - 1, cmap=cmap, show_edges=show_edges, lighting=lighting, sphere_opacity=sphere_opacity)
            self._add_view(j, vd, vlabel, up, bar_top, graticule=graticule, token_color=token_color, zoom=zoom, axes=axes)
        p.subplot(0, 0)
        self._add_labels(w, h, time_text=time_text, title=title)
        self.time_format = "t = {:.3f}"

    def _make_tokens(self, n_tokens: int, token_radius: float | None) -> None:
        """``self.tokens``: one sphere glyph per token, (n_tokens * m) points with normals, updated in place."""
        import pyvista as pv

        r = token_radius if token_radius is not None else float(np.clip(0.1 * math.sqrt(4 * math.pi / n_tokens), 0.006, 0.04))
        g = _sphere_glyph(r)
        self._glyph_pts = np.asarray(g.points, float)
        m = self._glyph_pts.shape[0]
        gf = np.asarray(g.faces).reshape(-1, 4)
        faces = np.repeat(gf[None], n_tokens, axis=0)
        faces[:, :, 1:] += (np.arange(n_tokens) * m)[:, None, None]
        pts = np.tile(self._glyph_pts, (n_tokens, 1))
        self.tokens = pv.PolyData(pts, faces.ravel())
        self.tokens.point_data["Normals"] = np.tile(np.asarray(g.point_normals), (n_tokens, 1))
        self.n_tokens = n_tokens

    def _add_surface(self, last: bool, *, cmap: str, show_edges: bool, lighting: bool, sphere_opacity: float) -> None:
        """The current view's density surface (with the colour bar and its title when ``last``), or a plain sphere."""
        import pyvista as pv

        p = self.plotter
        if self.poly is None:
            p.add_mesh(pv.Sphere(radius=0.985, theta_resolution=90, phi_resolution=45), color="lightsteelblue", opacity=sphere_opacity, smooth_shading=True)
            return
        shading = {"lighting": True, "ambient": 0.25, "diffuse": 0.8, "specular": 0.1} if lighting else {"lighting": False}
        actor = p.add_mesh(
            self.poly,
            scalars="rho",
            preference="cell",
            clim=self.clim,
            log_scale=self.log,
            cmap=cmap,
            show_edges=show_edges,
            edge_color="gray",
            show_scalar_bar=last,
            scalar_bar_args=dict(self.colorbar["scalar_bar_args"]),
            **shading,  # unlit by default: a colour is the density's colour wherever it faces
        )
        self.density_actors.append(actor)
        if last:
            bar = p.scalar_bars[next(iter(p.scalar_bars.keys()))] if p.scalar_bars else None
            if bar is not None:
                bar.SetTextPositionToPrecedeScalarBar()  # tick labels below the bar ...
            a = p.add_text(self.colorbar_text, position=(0.5, self.colorbar["title_y"]), viewport=True, font_size=8)  # ... title above
            a.prop.SetFontSize(self.colorbar["title_size"])
            a.prop.SetJustificationToCentered()
            a.prop.SetVerticalJustificationToBottom()
            _use_font(a.prop, self.font)
            self.colorbar_title = a

    def _add_view(self, j: int, vd, vlabel: str, up, bar_top: float, *, graticule: bool, token_color: str, zoom: float, axes: bool) -> None:
        """The current view's graticule, tokens, camera (looking along ``-vd``), orientation axes and label."""
        p = self.plotter
        if graticule:
            # opaque: a translucent actor makes VTK draw the colour bar's labels on the bar
            p.add_mesh(graticule_lines(), color="#d9d9d9" if self.poly is not None else "slategray", line_width=1.0, lighting=False, name=f"graticule-{j}")
        if self.tokens is not None:
            p.add_mesh(self.tokens, color=token_color, smooth_shading=True, specular=0.3)
        p.camera_position = [tuple(4.0 * vd), (0.0, 0.0, 0.0), tuple(up)]
        p.reset_camera()
        p.camera.zoom(1.3 * zoom)
        if self.poly is not None:  # lift the sphere clear of the colour bar
            p.camera.SetWindowCenter(0.0, -min(0.3, 0.1 + max(0.0, bar_top - 0.12)))
        if axes:  # x, y, z orientation axes in the lower right corner
            y = bar_top + 0.01
            p.add_axes(viewport=(0.82, y, 1.0, min(1.0, y + 0.18)), interactive=False, line_width=2)
        if vlabel:
            a = p.add_text(vlabel, position="upper_right", font_size=11)
            _use_font(a.GetTextProperty(), self.font)

    def _add_labels(self, w: int, h: int, *, time_text: bool, title: str | None) -> None:
        """The time label and title (sized in proportion to the picture), and the colour bar's font."""
        p = self.plotter
        fs = int(np.clip(round(min(w, h) / 50), 6, 16))  # the time label in proportion to the picture
        if time_text:
            self.text = p.add_text(" ", position=(max(4, fs // 2 + 4), h - int(2.5 * fs) - 4), font_size=fs)
            _use_font(self.text.prop, self.font)
        if title:
            a = p.add_text(title, position=(max(4, fs // 2 + 4), h - int(4.4 * fs) - 6), font_size=max(6, int(0.75 * fs)))
            _use_font(a.prop, self.font)
        if self.poly is not None:
            for bar in p.scalar_bars.values():
                _use_font(bar.GetTitleTextProperty(), self.font)
                _use_font(bar.GetLabelTextProperty(), self.font)

    def update(self, t: float | None = None, rho=None, X=None, *, interpolated: bool = False) -> None:
        """Show density ``rho`` and/or tokens ``X`` at time ``t``; ``interpolated``: the
        frame lies between snapshots, and its time label says so."""
        if rho is not None:
            if self.poly is None:
                raise ValueError("this scene has no density surface")
            r = np.asarray(rho, float)
            if self.log:
                r = np.maximum(np.nan_to_num(r, nan=self.clim[0]), self.clim[0])
            self.poly.cell_data["rho"][:] = r
            self.poly.cell_data["rho"].VTKObject.Modified()
            self.poly.Modified()
        if X is not None:
            if self.tokens is None:
                raise ValueError("this scene has no tokens")
            X3 = _tokens3(X)
            if X3.shape[0] != self.n_tokens:
                raise ValueError(f"expected {self.n_tokens} tokens, got {X3.shape[0]}")
            pts = (X3[:, None, :] + self._glyph_pts[None, :, :]).reshape(-1, 3)
            self.tokens.points[:] = pts
            self.tokens.points.VTKObject.Modified()
            self.tokens.Modified()
        if t is not None and self.text is not None:
            self.text.input = self.time_format.format(float(t)) + (" (interpolated)" if interpolated else "")
        self.plotter.render()  # a no-op before the first screenshot or show()

    def image(self) -> np.ndarray:
        """The rendered frame, (height, width, 3) uint8."""
        return np.asarray(self.plotter.screenshot(return_img=True))


def _scene_for(snaps: RunSnapshots, *, particles: bool | None, clim, log: bool, **kw) -> tuple[_Scene, bool]:
    """A scene for a run's snapshots; returns it and whether tokens are drawn.

    ``particles``: None draws the tokens whenever the snapshots hold them (particle runs,
    and ``run.solver = "both"`` runs: tokens as points on the coloured sphere), True
    insists on them, False draws the density alone."""
    draw_tokens = snaps.X is not None and (snaps.kind == "particles" or particles is None or bool(particles))
    if snaps.kind == "mesh" and particles and snaps.X is None:
        raise ValueError(f"{snaps.folder}: this mesh run stored no particle snapshots (X); drop --particles")
    if snaps.kind == "mesh" and snaps.mesh.d != 3:
        raise ValueError(f"{snaps.folder}: render draws densities on S^2; this run's density lives on the circle (model.d = 2), "
                         "which has no 3-D view: 'spherepde plot' draws its views (kymograph.png: the density over theta and t; profiles_t*.png)")
    if snaps.kind == "mesh":
        clim, log = run_color_limits(snaps, clim, log=log)
        scene = _Scene(mesh=snaps.mesh, n_tokens=snaps.X.shape[1] if draw_tokens else 0, clim=clim, log=log,
                       clipped=clip_note(snaps.rho, clim, log=log), **kw)
    else:
        _tokens3(snaps.X[0])
        scene = _Scene(n_tokens=snaps.X.shape[1], **kw)
    scene.time_format = _time_format(snaps.t)
    return scene, draw_tokens


def _show_snapshot(scene: _Scene, snaps: RunSnapshots, k: int, draw_tokens: bool) -> None:
    scene.update(snaps.t[k], rho=None if snaps.rho is None else snaps.rho[k], X=snaps.X[k] if draw_tokens else None)


def run_color_limits(snaps, clim=None, *, log: bool = False) -> tuple[tuple[float, float], bool]:
    """The colour range (and scale) of a run's pictures: one range for all its snapshots.

    ``snaps``: a run folder or :class:`RunSnapshots` of a mesh run. ``clim``: None or
    ``"auto"`` (default: up to the peak over all snapshots, on a log scale when their
    dynamic range is large, so a concentrated density keeps its peaks and a spread-out
    frame is not dark; see :func:`spherepde.viz.common.auto_color_limits`), ``"auto-log"``
    (the same, always on a log scale), ``"minmax"`` (min to max over all snapshots) or
    explicit ``(lo, hi)``. Returns ((lo, hi), log).
    """
    if not isinstance(snaps, RunSnapshots):
        snaps = load_snapshots(snaps)
    if snaps.rho is None:
        raise ValueError(f"{snaps.folder}: a particle run has no density and no colour range")
    return resolve_clim(clim, snaps.rho, log=log)


def _snap_source(snaps: RunSnapshots) -> str:
    cfg_T = run_config(snaps.folder).get("solver", {}).get("T")
    notes = ([f"T = {cfg_T:g}"] if isinstance(cfg_T, (int, float)) else []) + ([] if snaps.complete else ["unfinished"])
    return f"{snaps.folder}" + (f" ({', '.join(notes)})" if notes else "")


def _camera_tag(camera) -> str:
    """'iso', 'xy', ... or 'cam1_0_-1' for a direction (a file-name part)."""
    if isinstance(camera, str) and camera in CAMERAS:
        return camera
    vals = [float(v) for v in (camera.split(",") if isinstance(camera, str) else camera)]
    return "cam" + "_".join(f"{v:g}" for v in vals)


def output_name(
    kind: str,
    *,
    t: float | None = None,
    time_digits: int = 3,
    log: bool = False,
    camera="iso",
    multiview: bool = False,
    clim=None,
    cmap: str = "viridis",
    graticule: bool = False,
    axes: bool = True,
    lighting: bool = False,
    tokens: bool = False,
    window_size=None,
    suffix: str = ".png",
) -> str:
    """The file name of a picture: what, when and how it was drawn, so that pictures with
    other options never replace each other, e.g. ``density_t16.000_log_iso.png``,
    ``density_t0.500_lin_cam0_1_1_multiview_clim0-1_graticule_320x240.png``,
    ``tokens_t0.200_iso.png`` (no colour scale) or (no ``t``) ``density_lin_iso.gif``.
    Defaults (auto colour range, viridis, axes on, unlit, default size) are left out."""
    parts = [kind]
    if t is not None:
        parts.append(f"t{float(t):.{max(3, int(time_digits))}f}")
    coloured = kind != "tokens"  # tokens alone have no colour scale
    if isinstance(clim, str) and clim == "auto-log":
        log = True
    if coloured:
        parts.append("log" if log else "lin")
    parts.append(_camera_tag(camera))
    if multiview:
        parts.append("multiview")
    if not coloured:
        pass
    elif isinstance(clim, str) and clim == "minmax":
        parts.append("minmax")
    elif clim is not None and not isinstance(clim, str):
        lo, hi = (float(c) for c in clim)
        parts.append(f"clim{lo:g}-{hi:g}")
    if cmap != "viridis":
        parts.append(str(cmap))
    if tokens:
        parts.append("tokens")
    if graticule:
        parts.append("graticule")
    if not axes:
        parts.append("noaxes")
    if lighting:
        parts.append("lit")
    if window_size is not None:
        parts.append("{}x{}".format(*(int(v) for v in window_size)))
    return "_".join(parts) + suffix


def _name_for(snaps: RunSnapshots, particles: bool | None, **options) -> str:
    """:func:`output_name` of a drawing of a run: "density" (mesh) or "tokens", with tokens on a
    mesh run when it stored them and ``particles`` is not False."""
    kind = "density" if snaps.kind == "mesh" else "tokens"
    return output_name(kind, tokens=snaps.kind == "mesh" and snaps.X is not None and particles is not False, **options)


def _refuse_existing(paths, force: bool) -> None:
    if force:
        return
    for path in paths:
        if Path(path).exists():
            raise FileExistsError(f"{path} exists (drawn before with the same time and options); add --force (force=True) to replace it")


# ================================================================================ public API
def plot_density(
    mesh,
    rho,
    *,
    t: float | None = None,
    clim=None,
    log: bool = False,
    cmap: str = "viridis",
    camera="iso",
    multiview: bool = False,
    window_size=None,
    particles=None,
    show_edges: bool = False,
    off_screen: bool | None = None,
    title: str | None = None,
    axes: bool = True,
    graticule: bool = False,
    lighting: bool = False,
):
    """Draw a cell density on a spherical mesh.

    Parameters
    ----------
    mesh : :class:`~spherepde.geometry.mesh.SphereMesh` with ``n_cells`` cells.
    rho : (n_cells,) density per unit area (cell averages).
    t : time shown in the upper-left corner (None: no time).
    clim : (lo, hi) colour range (default ``"auto"``: up to the peak of ``rho``, on a log
        scale when its dynamic range is large, :func:`~spherepde.viz.common.auto_color_limits`;
        ``"auto-log"``: the same, always on a log scale; ``"minmax"``: min to max). A range
        that clips says so in the colour bar's title ("clipped at ...").
    log : logarithmic colour scale (values below ``lo`` are drawn at ``lo``).
    camera : 'iso', 'xy' (from +z), 'xz' (from -y), 'yz' (from +x) or a direction 'x,y,z'.
    multiview : two views side by side, from the camera direction and its opposite
        (both hemispheres).
    window_size : (width, height) in pixels (default 800 x 800, or 1200 x 600 with ``multiview``).
    particles : optional (n, 3) tokens drawn as small spheres on top.
    off_screen : None: off-screen unless a display exists and ``pyvista.OFF_SCREEN`` is False.
    axes : x, y, z orientation axes in the lower right corner.
    graticule : lines of latitude and longitude every 30 degrees.
    lighting : shade the surface; off by default, so that a density value has one colour
        wherever its face points (colour maps are read against the colour bar).

    Returns
    -------
    pyvista.Plotter
    """
    rho = np.asarray(rho, float)
    if rho.shape != (mesh.n_cells,):
        raise ValueError(f"density has shape {rho.shape}, expected ({mesh.n_cells},)")
    clim, log = resolve_clim(clim, rho, log=log)
    X = None if particles is None else _tokens3(particles)
    scene = _Scene(
        mesh=mesh, n_tokens=0 if X is None else len(X), clim=clim, log=log, clipped=clip_note(rho, clim, log=log), cmap=cmap, camera=camera, multiview=multiview,
        window_size=window_size, off_screen=off_screen, show_edges=show_edges, time_text=t is not None, title=title,
        axes=axes, graticule=graticule, lighting=lighting,
    )
    scene.update(t, rho=rho, X=X)
    return scene.plotter


def plot_particles(
    X,
    *,
    t: float | None = None,
    camera="iso",
    multiview: bool = False,
    window_size=None,
    radius: float | None = None,
    color: str = "crimson",
    sphere_opacity: float = 0.3,
    off_screen: bool | None = None,
    title: str | None = None,
    axes: bool = True,
    graticule: bool = False,
):
    """Draw tokens (n, 3) (or (n, 2), on the equator) as small spheres on a translucent unit sphere.

    ``radius`` defaults to 0.1 sqrt(4 pi / n) clipped to [0.006, 0.04]. Other parameters as
    in :func:`plot_density`. Returns the :class:`pyvista.Plotter`.
    """
    X = _tokens3(X)
    scene = _Scene(
        n_tokens=len(X), camera=camera, multiview=multiview, window_size=window_size, off_screen=off_screen,
        token_radius=radius, token_color=color, sphere_opacity=sphere_opacity, time_text=t is not None, title=title,
        axes=axes, graticule=graticule,
    )
    scene.update(t, X=X)
    return scene.plotter


def plot_run(run_dir, t: float | None = None, *, clim=None, log: bool = False, particles: bool | None = None, **kw):
    """The snapshot of a run folder nearest to time ``t`` (None: the last one).

    A ``t`` between snapshots is drawn at the nearest one with a warning naming both
    times; a ``t`` outside the snapshots' times raises ValueError. Mesh runs are drawn
    with one colour range over all snapshots (:func:`run_color_limits`; ``clim`` as
    there); the tokens of a run that stored them (``run.solver = "both"``) are drawn on
    top unless ``particles=False`` (``particles=True`` insists on them). Other keywords
    as in :func:`plot_density`. Returns the :class:`pyvista.Plotter`.
    """
    snaps = load_snapshots(run_dir)
    k = len(snaps) - 1 if t is None else snap_times(snaps.t, [t], source=_snap_source(snaps), logger=_log)[0]
    scene, draw_tokens = _scene_for(snaps, particles=particles, clim=clim, log=log, **kw)
    _show_snapshot(scene, snaps, k, draw_tokens)
    return scene.plotter


def _default_times(snaps: RunSnapshots) -> list[float]:
    idx = sorted({0, (len(snaps) - 1) // 2, len(snaps) - 1})
    return [float(snaps.t[i]) for i in idx]


def render_snapshots(
    run_dir,
    times=None,
    out_dir=None,
    *,
    clim=None,
    log: bool = False,
    particles: bool | None = None,
    camera="iso",
    multiview: bool = False,
    window_size=None,
    cmap: str = "viridis",
    axes: bool = True,
    graticule: bool = False,
    lighting: bool = False,
    force: bool = False,
) -> list[Path]:
    """PNG images of a run at the snapshots nearest to ``times``.

    Parameters
    ----------
    run_dir : a run folder.
    times : requested times (None: first, middle and last snapshot); each maps to the
        nearest snapshot (a warning line names the requested and the drawn time when
        they differ; a time outside the snapshots' range raises ValueError), and a
        snapshot is drawn once.
    out_dir : output folder (default ``run_dir/figures``), created if needed.
    clim, log : one colour range for every image (:func:`run_color_limits`: by default
        up to the peak over all snapshots, log when their dynamic range is large).
    axes, graticule, lighting : as in :func:`plot_density`.
    force : replace existing files; without it an existing file raises FileExistsError
        before anything is drawn.

    Returns
    -------
    list of Path, named by the snapshot's time and the options (:func:`output_name`),
    e.g. ``density_t16.000_log_iso.png`` (mesh) or ``tokens_t0.200_lin_iso.png``.
    """
    snaps = load_snapshots(run_dir)
    out = Path(out_dir) if out_dir is not None else snaps.folder / "figures"
    times = _default_times(snaps) if times is None or len(times) == 0 else [float(t) for t in times]
    idx = list(dict.fromkeys(snap_times(snaps.t, times, source=_snap_source(snaps))))  # bad times: refused before anything else
    digits = _time_digits(snaps.t)
    if snaps.kind == "mesh":  # the automatic range may choose a log scale: the names say what is drawn
        log = run_color_limits(snaps, clim, log=log)[1]
    names = {
        k: _name_for(snaps, particles, t=float(snaps.t[k]), time_digits=digits, log=log, camera=camera, multiview=multiview, clim=clim, cmap=cmap,
                     graticule=graticule, axes=axes, lighting=lighting, window_size=window_size)
        for k in idx
    }
    _refuse_existing([out / n for n in names.values()], force)
    snap_times(snaps.t, times, source=_snap_source(snaps), logger=_log)  # now say which times were moved to a snapshot
    out.mkdir(parents=True, exist_ok=True)
    scene, draw_tokens = _scene_for(
        snaps, particles=particles, clim=clim, log=log, camera=camera, multiview=multiview, window_size=window_size, cmap=cmap,
        axes=axes, graticule=graticule, lighting=lighting,
    )
    paths = []
    try:
        for k in idx:
            _show_snapshot(scene, snaps, k, draw_tokens)
            path = out / names[k]
            scene.plotter.screenshot(str(path))
            _log.info("t = %.6g -> %s", snaps.t[k], path)
            paths.append(path)
    finally:
        scene.plotter.close()
    return paths


def _frames(snaps: RunSnapshots, frames: int | None, draw_tokens: bool):
    """Frame times, a function giving (rho, X) at frame i, and which frames are
    interpolated: all snapshots (None), ``frames`` subsampled snapshots (frames <= S), or
    linear interpolation in time between neighbouring snapshots (frames > S; tokens
    renormalised onto the sphere; frames at a snapshot time are that snapshot)."""
    S = len(snaps)
    if frames is None:
        frames = S
    frames = int(frames)
    if frames < 1:
        raise ValueError(f"frames must be at least 1, got {frames}")
    if frames <= S:
        idx = np.round(np.linspace(0, S - 1, frames)).astype(int) if frames > 1 else np.array([S - 1])
        ts = snaps.t[idx]

        def at(i):
            k = idx[i]
            return (None if snaps.rho is None else snaps.rho[k], snaps.X[k] if draw_tokens else None)

        return ts, at, np.zeros(len(ts), bool)
    if S < 2:
        raise ValueError(f"{snaps.folder}: one snapshot cannot make {frames} different frames")
    ts = np.linspace(snaps.t[0], snaps.t[-1], frames)
    tol = 1e-9 * max(1.0, float(np.max(np.abs(snaps.t))))
    near = np.abs(ts[:, None] - snaps.t[None, :])
    interpolated = near.min(axis=1) > tol
    ts = np.where(interpolated, ts, snaps.t[near.argmin(axis=1)])  # frames at a snapshot time show it exactly
    _log.info("%d frames from %d snapshots: %d interpolated linearly in time (labelled 'interpolated')", frames, S, int(interpolated.sum()))

    def at(i):
        k = int(np.clip(np.searchsorted(snaps.t, ts[i], side="right") - 1, 0, S - 2))
        w = float((ts[i] - snaps.t[k]) / (snaps.t[k + 1] - snaps.t[k]))
        rho = None if snaps.rho is None else (1 - w) * snaps.rho[k] + w * snaps.rho[k + 1]
        X = None
        if draw_tokens:
            X = (1 - w) * snaps.X[k] + w * snaps.X[k + 1]
            X = X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-300)
        return rho, X

    return ts, at, interpolated


class _GifWriter:
    """Collects frames as 256-colour images and writes an endless-loop GIF with Pillow."""

    def __init__(self, path: Path, fps: float):
        self.path = path
        self.duration = max(20, round(1000.0 / fps))
        self.frames = []

    def append(self, rgb: np.ndarray) -> None:
        from PIL import Image

        self.frames.append(Image.fromarray(np.ascontiguousarray(rgb[..., :3])).quantize(colors=256, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE))

    def close(self) -> None:
        first, *rest = self.frames
        with atomic_file(self.path, suffix=self.path.suffix) as tmp:
            first.save(tmp, save_all=True, append_images=rest, duration=self.duration, loop=0, disposal=1, optimize=False)


def _check_mp4() -> None:
    missing = [m for m in ("imageio", "imageio_ffmpeg") if importlib.util.find_spec(m) is None]
    if missing:
        raise ModuleNotFoundError(
            f"MP4 output needs imageio-ffmpeg (missing: {', '.join(missing)}): pip install imageio-ffmpeg imageio -- or write a GIF instead"
        )


def render_animation(
    run_dir,
    path=None,
    frames: int | None = None,
    *,
    fps: float = 10.0,
    clim=None,
    log: bool = False,
    particles: bool | None = None,
    camera="iso",
    multiview: bool = False,
    window_size=None,
    cmap: str = "viridis",
    progress: bool | None = None,
    anti_aliasing: bool = False,
    axes: bool = True,
    graticule: bool = False,
    lighting: bool = False,
    out_dir=None,
    movie: str = "gif",
    force: bool = False,
) -> Path:
    """An animation (GIF or MP4, by the suffix of ``path``) of a run with one colour scale.

    Parameters
    ----------
    run_dir : a run folder.
    path : output file (default: in ``out_dir``, else ``run_dir/figures``, named by the
        options with :func:`output_name`, e.g. ``density_lin_iso.gif``; ``movie`` = "gif"
        or "mp4" picks the suffix).
    frames : number of frames: None for every snapshot; fewer than the snapshots
        subsamples them evenly (first and last included); more interpolates linearly in
        time between snapshots, and the time label of every frame that is not a
        snapshot reads "t = ... (interpolated)". A GIF has exactly this many frames.
    fps : frames per second.
    clim, log : the colour range, fixed for the whole animation (:func:`run_color_limits`:
        by default up to the peak over all snapshots, on a log scale when their dynamic
        range is large, so neither a peak is clipped nor the later frames left dark).
    progress : a tqdm progress bar (default: when stderr is a terminal).
    anti_aliasing : multisampling; off by default, as it multiplies the time per frame of
        software rendering (PNG stills use it).
    axes, graticule, lighting : as in :func:`plot_density`.
    force : replace an existing file (else FileExistsError before anything is drawn).

    Returns
    -------
    Path of the written file.
    """
    snaps = load_snapshots(run_dir)
    if snaps.kind == "mesh":  # the automatic range may choose a log scale: the name says what is drawn
        log = run_color_limits(snaps, clim, log=log)[1]
    if path is None:
        path = _animation_path(
            snaps, out_dir, movie, log=log, camera=camera, multiview=multiview, clim=clim, cmap=cmap, graticule=graticule,
            axes=axes, lighting=lighting, particles=particles, window_size=window_size,
        )
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".gif", ".mp4"):
        raise ValueError(f"animation file must end in .gif or .mp4, got {path.name!r}")
    if suffix == ".mp4":
        _check_mp4()
    if not fps > 0:
        raise ValueError(f"fps must be positive, got {fps}")
    _refuse_existing([path], force)
    path.parent.mkdir(parents=True, exist_ok=True)
    scene, draw_tokens = _scene_for(
        snaps, particles=particles, clim=clim, log=log, camera=camera, multiview=multiview, window_size=window_size, cmap=cmap, anti_aliasing=anti_aliasing,
        axes=axes, graticule=graticule, lighting=lighting,
    )
    try:
        ts, at, interpolated = _frames(snaps, frames, draw_tokens)
    except ValueError:
        scene.plotter.close()
        raise
    scene.time_format = _time_format(ts)
    progress = sys.stderr.isatty() if progress is None else progress
    _write_frames(scene, ts, at, interpolated, path, fps, progress)
    if suffix == ".gif":
        from PIL import Image

        with Image.open(path) as im:
            n = getattr(im, "n_frames", 1)
        if n != len(ts):
            _log.warning("%s has %d frames, not %d: identical consecutive frames were merged", path, n, len(ts))
    _log.info("wrote %s (%d frames)", path, len(ts))
    return path


def _animation_path(snaps: RunSnapshots, out_dir, movie: str, *, particles: bool | None, **options) -> Path:
    """The default animation file: in ``out_dir`` (else ``snaps.folder/figures``), named by :func:`output_name`
    from the drawing ``options``, suffix ``.gif`` or ``.mp4`` from ``movie``."""
    if movie not in ("gif", "mp4"):
        raise ValueError(f"movie must be 'gif' or 'mp4', got {movie!r}")
    name = _name_for(snaps, particles, suffix="." + movie, **options)
    return (Path(out_dir) if out_dir is not None else snaps.folder / "figures") / name


def _write_frames(scene: _Scene, ts, at, interpolated, path: Path, fps: float, progress: bool) -> None:
    """Render frame ``i`` (time ``ts[i]``, fields ``at(i)``) for every i into ``path`` (MP4 via the plotter's movie
    writer, else a GIF); closes the scene's plotter."""
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(ts), unit="frame", desc=path.name, file=sys.stderr)
    try:
        writer = None
        if path.suffix.lower() == ".mp4":
            scene.plotter.open_movie(str(path), framerate=round(fps), quality=6)
        else:
            writer = _GifWriter(path, fps)
        for i, t in enumerate(ts):
            rho, X = at(i)
            scene.update(t, rho=rho, X=X, interpolated=bool(interpolated[i]))
            if writer is None:
                scene.plotter.write_frame()
            else:
                writer.append(scene.image())
            if bar is not None:
                bar.update(1)
        if writer is not None:
            writer.close()
    finally:
        if bar is not None:
            bar.close()
        scene.plotter.close()


def interactive_viewer(run_dir, *, off_screen: bool = False, clim=None, log: bool = False, particles: bool | None = None, **kw):
    """A plotter with a time slider over a run's snapshots (nearest snapshot is shown).

    Call ``.show()`` on the result to open the window; with ``off_screen=False`` this
    needs a display (:class:`RuntimeError` otherwise). The slider callback is stored as
    ``plotter._spherepde_set_time`` (used by tests).
    """
    if not off_screen and not has_display():
        raise RuntimeError(
            "interactive viewing needs a display, and none is set (DISPLAY/WAYLAND_DISPLAY); "
            "render PNG or GIF files instead (spherepde render RUN_DIR --gif) or run where a display exists"
        )
    snaps = load_snapshots(run_dir)
    scene, draw_tokens = _scene_for(snaps, particles=particles, clim=clim, log=log, off_screen=off_screen, **kw)
    _show_snapshot(scene, snaps, 0, draw_tokens)

    def set_time(value: float) -> None:
        _show_snapshot(scene, snaps, snaps.nearest(value), draw_tokens)

    p = scene.plotter
    p.subplot(0, 0)
    if len(snaps) > 1:
        p.add_slider_widget(set_time, rng=[float(snaps.t[0]), float(snaps.t[-1])], value=float(snaps.t[0]), title="t", pointa=(0.45, 0.93), pointb=(0.95, 0.93), style="modern", interaction_event="always", fmt="%.3g")
    p._spherepde_set_time = set_time
    return p

