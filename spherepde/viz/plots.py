"""Two-dimensional figures of runs (Matplotlib): diagnostics over time and density maps.

Figures are :class:`matplotlib.figure.Figure` objects made without ``pyplot``, so no
GUI backend is touched (files are written by the Agg, PDF and SVG canvases) and
nothing is shown; in a notebook, display the returned figure.

Symbols follow docs/model.md §3: the energy E(t), the dissipation G²(t), the
explicit time derivative ∂_tE, the martingale M_t, and the energy-dissipation identity
(EDI) for gradient heads with sign s,

    E(t) − E(0) = ∫_0^t ∂_tE ds + s ∫_0^t G² ds + M_t     (paper's form, s = −1),

whose residuals ``edi_paper`` and ``edi_exact`` the solvers record
(:mod:`spherepde.model.energy`).

Sources
-------
Every ``plot_*`` function for diagnostics takes a *source*: a run folder, a
Monte-Carlo folder (mean ± one standard deviation over its ``path-NNN`` runs, or from
``diagnostics_mean.csv``/``diagnostics_std.csv`` when the path folders are gone), a dict
of column arrays (:func:`spherepde.runs.runner.read_diagnostics`) or a list of such dicts
(one per path).
"""

from __future__ import annotations

import csv
import logging
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = [
    "FORMATS",
    "Series",
    "load_series",
    "plot_density_map",
    "plot_dissipation",
    "plot_distances",
    "plot_energy",
    "plot_energy_balance",
    "plot_mesh_invariants",
    "plot_token_map",
    "write_figures",
]

_log = logging.getLogger(__name__)

#: Output formats of :func:`write_figures`.
FORMATS = ("png", "pdf", "svg")

RHO_LABEL = r"$\rho$ (density per unit area)"
T_LABEL = r"$t$"


# ================================================================================= reading
def _read_csv(path: Path) -> dict:
    """:func:`spherepde.runs.runner.read_diagnostics`, tolerant of a half-written last row."""
    from spherepde.runs.runner import read_diagnostics

    try:
        return read_diagnostics(path)
    except ValueError:
        with open(path, newline="") as fh:
            rows = list(csv.reader(fh))
        if not rows:
            raise ValueError(f"{path} is empty: the run has recorded nothing yet") from None
        header, body = rows[0], []
        for r in rows[1:]:
            try:
                vals = [float(x) for x in r]
            except ValueError:
                vals = None
            if vals is None or len(vals) != len(header):
                _log.warning("%s: skipping a malformed row (a run still writing?)", path)
                continue
            body.append(vals)
        data = np.array(body, float).reshape(len(body), len(header))
        return {h: data[:, i] for i, h in enumerate(header)}


@dataclass
class Series:
    """Diagnostics of one run or of the paths of a Monte-Carlo folder.

    Attributes
    ----------
    paths : one dict of column arrays per path (one for a single run), equal lengths;
        for a Monte-Carlo folder read from its aggregate files, the mean columns.
    std : per-column standard deviations when only aggregates were available, else None.
    sign : the model's sign s (EDI), from the config (default -1).
    kind : "particles", "mesh" or "montecarlo".
    """

    paths: list
    std: dict | None = None
    sign: float = -1.0
    kind: str = "particles"
    label: str = ""

    @property
    def t(self) -> np.ndarray:
        return self.paths[0]["t"]

    @property
    def columns(self) -> list[str]:
        return list(self.paths[0])

    @property
    def n_paths(self) -> int:
        return len(self.paths) if self.std is None else 0

    def has(self, col: str) -> bool:
        return col in self.paths[0]

    def stat(self, what) -> tuple[np.ndarray, np.ndarray | None]:
        """Mean over paths and standard deviation (None for one run) of a column name or of
        a function of a path's columns."""
        f = (lambda d: d[what]) if isinstance(what, str) else what
        vals = np.stack([np.asarray(f(d), float) for d in self.paths])
        if self.std is not None:  # aggregates only: std exists for plain columns
            return vals[0], (self.std[what] if isinstance(what, str) and what in self.std else None)
        if len(vals) == 1:
            return vals[0], None
        return vals.mean(axis=0), vals.std(axis=0, ddof=1)


def load_series(source) -> Series:
    """A :class:`Series` from a run folder, a Monte-Carlo folder, a dict or a list of dicts."""
    if isinstance(source, Series):
        return source
    if isinstance(source, dict):
        return Series([source])
    if isinstance(source, (list, tuple)):
        return Series(list(source))
    from spherepde.runs.folders import run_config, run_kind

    folder = Path(source)
    kind = run_kind(folder)
    cfg = run_config(folder)
    sign = float(cfg.get("model", {}).get("sign", -1))
    label = _run_label(cfg)
    if kind != "montecarlo":
        csvp = folder / "diagnostics.csv"
        if not csvp.is_file():
            raise FileNotFoundError(f"{folder}: no diagnostics.csv; the run has recorded nothing yet")
        return Series([_read_csv(csvp)], sign=sign, kind=kind, label=label)
    paths = []
    for p in sorted(folder.glob("path-[0-9]*")):
        if (p / "diagnostics.csv").is_file():
            paths.append(_read_csv(p / "diagnostics.csv"))
    n = len(paths[0]["t"]) if paths else 0
    if paths and all(len(d["t"]) == n for d in paths) and n:
        return Series(paths, sign=sign, kind=kind, label=label)
    mean, std = folder / "diagnostics_mean.csv", folder / "diagnostics_std.csv"
    if mean.is_file():
        return Series([_read_csv(mean)], std=_read_csv(std) if std.is_file() else {}, sign=sign, kind=kind, label=label)
    raise FileNotFoundError(f"{folder}: Monte-Carlo folder with no finished paths and no diagnostics_mean.csv")


def _run_label(cfg: dict) -> str:
    """'mesh, H = 10, ou weights' from a run's config (empty if unknown)."""
    run, model, w = cfg.get("run", {}), cfg.get("model", {}), cfg.get("weights", {})
    parts = []
    if run.get("solver"):
        parts.append(run["solver"])
    if "H" in model:
        parts.append(f"H = {model['H']}")
    if w.get("process"):
        parts.append(f"{w['process']} weights")
    return ", ".join(parts)


# ============================================================================ figure helpers
def _figure(nrows: int = 1, *, height: float = 3.8, width: float = 6.4, sharex: bool = True):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height * (1 if nrows == 1 else 0.75 * nrows)), layout="constrained")
    axes = fig.subplots(nrows, 1, sharex=sharex, squeeze=False)[:, 0]
    return fig, axes


def _curve(ax, t, mean, std, label, **kw):
    (line,) = ax.plot(t, mean, label=label, **kw)
    if std is not None and np.any(np.isfinite(std)):
        ax.fill_between(t, mean - std, mean + std, color=line.get_color(), alpha=0.22, linewidth=0)
    return line


def _band_note(s: Series) -> str:
    if s.kind == "montecarlo" or len(s.paths) > 1 or s.std is not None:
        return f"mean ± 1 std over {s.n_paths} paths" if s.n_paths else "Monte-Carlo mean ± 1 std"
    return ""


def _finish(fig, axes, s: Series, title: str, *, outside: bool = False) -> None:
    extra = ", ".join(x for x in (s.label, _band_note(s)) if x)
    fig.suptitle(title + (f" ({extra})" if extra else ""), fontsize=11)
    axes[-1].set_xlabel(T_LABEL)
    for ax in axes:
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            if outside:
                ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
            else:
                ax.legend(fontsize=8, loc="best")


def _defined(s: Series, col: str) -> bool:
    return s.has(col) and bool(np.any(np.isfinite(s.paths[0][col])))


def _need_energy(s: Series) -> None:
    if not _defined(s, "energy"):
        raise ValueError("the energy is not defined for this run (general heads, docs/model.md §1): no energy figures")


# ================================================================================ diagnostics
def plot_energy(source):
    """E(t) (docs/model.md §3). Returns the Figure."""
    s = load_series(source)
    _need_energy(s)
    fig, (ax,) = _figure()
    _curve(ax, s.t, *s.stat("energy"), r"$E(t)$")
    ax.set_ylabel(r"$E$")
    _finish(fig, [ax], s, "Energy")
    return fig


def plot_dissipation(source):
    """G²(t) on a log scale (docs/model.md §3). Returns the Figure."""
    s = load_series(source)
    if not _defined(s, "G2"):
        raise ValueError("the dissipation G² is not defined for this run (general heads)")
    fig, (ax,) = _figure()
    mean, std = s.stat("G2")
    _curve(ax, s.t, mean, std, r"$G^2(t)$")
    if np.any(mean > 0):
        ax.set_yscale("log")
    ax.set_ylabel(r"$G^2$")
    _finish(fig, [ax], s, "Dissipation")
    return fig


def plot_energy_balance(source, *, sign: float | None = None):
    """The energy-balance curves and the EDI residuals (docs/model.md §3).

    Top: ΔE = E(t) − E(0), ∫_0^t ∂_tE ds, ∫_0^t G² ds, M_t and the paper's right-hand side
    ∫∂_tE + s∫G² + M_t (dashed); bottom: the residuals ``edi_paper`` and ``edi_exact``.
    ``sign`` overrides the model's s. Returns the Figure.
    """
    s = load_series(source)
    _need_energy(s)
    sg = s.sign if sign is None else float(sign)
    fig, (ax, ax2) = _figure(2, height=4.4, width=8.6)
    t = s.t
    _curve(ax, t, *s.stat(lambda d: d["energy"] - d["energy"][0]), r"$\Delta E = E(t) - E(0)$", color="k", lw=2)
    if s.has("int_dEdt"):
        _curve(ax, t, *s.stat("int_dEdt"), r"$\int_0^t \partial_t E\,ds$")
    if s.has("int_G2"):
        _curve(ax, t, *s.stat("int_G2"), r"$\int_0^t G^2\,ds$")
    if s.has("martingale"):
        _curve(ax, t, *s.stat("martingale"), r"$M_t$")
    if all(s.has(c) for c in ("int_dEdt", "int_G2", "martingale")):
        rhs, _ = s.stat(lambda d: d["int_dEdt"] + sg * d["int_G2"] + d["martingale"])
        ss = "-" if sg < 0 else "+"
        ax.plot(t, rhs, "--", color="0.45", lw=1.5, label=rf"$\int\partial_t E\,ds {ss} \int G^2\,ds + M_t$")
    ax.set_ylabel("energy terms")
    for col, lab in (("edi_paper", "EDI residual, paper's form"), ("edi_exact", "EDI residual, exact chain rule")):
        if s.has(col):
            _curve(ax2, t, *s.stat(col), lab)
    ax2.axhline(0.0, color="0.6", lw=0.8)
    ax2.set_ylabel("residual")
    _finish(fig, [ax, ax2], s, "Energy balance", outside=True)
    return fig


def plot_mesh_invariants(source):
    """Mesh runs: relative mass drift (m(t) − m(0))/m(0) and the minimum density ρ_min(t)."""
    s = load_series(source)
    if not s.has("mass"):
        raise ValueError("no 'mass' column: mass drift is recorded by mesh runs only")
    n = 2 if s.has("rho_min") else 1
    fig, axes = _figure(n, height=4.0)
    _curve(axes[0], s.t, *s.stat(lambda d: (d["mass"] - d["mass"][0]) / d["mass"][0]), r"$(m(t)-m(0))/m(0)$")
    axes[0].set_ylabel("relative mass drift")
    if n == 2:
        _curve(axes[1], s.t, *s.stat("rho_min"), r"$\rho_{\min}(t)$")
        axes[1].axhline(0.0, color="0.6", lw=0.8)
        axes[1].set_ylabel(r"$\rho_{\min}$")
    _finish(fig, list(axes), s, "Mass and positivity")
    return fig


def distance_columns(columns) -> list[str]:
    """Columns holding mesh-versus-particle distances (``w_*``, ``l1_*``)."""
    return [c for c in columns if c.startswith(("w_", "l1_"))]


def plot_distances(source):
    """Distance diagnostics (columns ``w_*``: Wasserstein, ``l1_*``: L¹), log scale when positive."""
    s = load_series(source)
    cols = distance_columns(s.columns)
    if not cols:
        raise ValueError("no distance columns (w_*, l1_*) in the diagnostics")
    fig, (ax,) = _figure()
    allpos = True
    for c in cols:
        mean, std = s.stat(c)
        _curve(ax, s.t, mean, std, c)
        fin = mean[np.isfinite(mean)]
        allpos &= bool(fin.size) and bool(np.all(fin > 0))
    if allpos:
        ax.set_yscale("log")
    ax.set_ylabel("distance")
    _finish(fig, [ax], s, "Distances")
    return fig


# ============================================================================== density maps
def _lonlat(P) -> tuple[np.ndarray, np.ndarray]:
    P = np.asarray(P, float)
    return np.arctan2(P[:, 1], P[:, 0]), np.arcsin(np.clip(P[:, 2] / np.linalg.norm(P, axis=1), -1.0, 1.0))


def _raster(mesh, rho, nlat: int | None = None):
    """Cell densities sampled on a regular longitude–latitude grid (nearest cell centre)."""
    from scipy.spatial import cKDTree

    if nlat is None:
        nlat = int(np.clip(2.2 * math.sqrt(mesh.n_cells / 2.0), 90, 720))
    nlon = 2 * nlat
    lon_e = np.linspace(-np.pi, np.pi, nlon + 1)
    lat_e = np.linspace(-np.pi / 2, np.pi / 2, nlat + 1)
    lon_c, lat_c = 0.5 * (lon_e[1:] + lon_e[:-1]), 0.5 * (lat_e[1:] + lat_e[:-1])
    LON, LAT = np.meshgrid(lon_c, lat_c)
    q = np.column_stack([(np.cos(LAT) * np.cos(LON)).ravel(), (np.cos(LAT) * np.sin(LON)).ravel(), np.sin(LAT).ravel()])
    _, idx = cKDTree(np.asarray(mesh.centers, float)).query(q)
    return lon_e, lat_e, np.asarray(rho, float)[idx].reshape(nlat, nlon)


def _map_axes(fig, projection: str):
    if projection in ("mollweide", "moll"):
        ax = fig.add_subplot(projection="mollweide")
        ax.grid(True, alpha=0.35)
        ax.tick_params(labelsize=7)
        return ax, True
    if projection not in ("equirectangular", "equirect", "lonlat"):
        raise ValueError(f"projection must be 'equirectangular' or 'mollweide', got {projection!r}")
    ax = fig.add_subplot()
    ax.set_xlim(-180, 180)
    ax.set_ylim(-90, 90)
    ax.set_aspect("equal")
    ax.set_xticks(range(-180, 181, 60))
    ax.set_yticks(range(-90, 91, 30))
    ax.set_xlabel("longitude (°)")
    ax.set_ylabel("latitude (°)")
    return ax, False


def plot_density_map(mesh, rho, *, t: float | None = None, projection: str = "equirectangular", log: bool = False, clim=None, cmap: str = "viridis", tokens=None):
    """A longitude–latitude map of a cell density (equirectangular or Mollweide).

    Parameters
    ----------
    mesh : :class:`~spherepde.geometry.mesh.SphereMesh`; rho : (n_cells,) density per unit area.
    t : time for the title. log, clim : colour scale (values below ``clim[0]`` clipped on a
    log scale). tokens : optional (n, 3) tokens drawn as dots.

    The map samples each cell on a regular grid (nearest cell centre; rasterised in
    vector output). Returns the Figure.
    """
    from matplotlib.colors import LogNorm, Normalize
    from matplotlib.figure import Figure

    rho = np.asarray(rho, float)
    if rho.shape != (mesh.n_cells,):
        raise ValueError(f"density has shape {rho.shape}, expected ({mesh.n_cells},)")
    from spherepde.viz.common import color_limits

    lo, hi = color_limits(rho, log=log) if clim is None else (float(clim[0]), float(clim[1]))
    fig = Figure(figsize=(7.2, 4.2), layout="constrained")
    ax, radians = _map_axes(fig, projection)
    lon_e, lat_e, img = _raster(mesh, rho)
    if log:
        img = np.maximum(img, lo)
    norm = LogNorm(lo, hi) if log else Normalize(lo, hi)
    k = 1.0 if radians else 180.0 / np.pi
    pc = ax.pcolormesh(lon_e * k, lat_e * k, img, norm=norm, cmap=cmap, shading="flat", rasterized=True)
    if tokens is not None:
        lon, lat = _lonlat(np.asarray(tokens)[:, :3])
        ax.scatter(lon * k, lat * k, s=4, c="crimson", edgecolors="none", label="tokens")
    fig.colorbar(pc, ax=ax, orientation="horizontal", shrink=0.7, pad=0.02, aspect=35, label=RHO_LABEL)
    ax.set_title("density" + (f", t = {t:.4g}" if t is not None else ""), fontsize=11)
    return fig


def plot_token_map(X, *, t: float | None = None, projection: str = "equirectangular"):
    """A longitude–latitude scatter of tokens (n, 3). Returns the Figure."""
    from matplotlib.figure import Figure

    X = np.asarray(X, float)
    if X.ndim != 2 or X.shape[1] != 3:
        raise ValueError(f"tokens must have shape (n, 3) for a map, got {X.shape}")
    fig = Figure(figsize=(7.2, 3.9), layout="constrained")
    ax, radians = _map_axes(fig, projection)
    k = 1.0 if radians else 180.0 / np.pi
    lon, lat = _lonlat(X)
    ax.scatter(lon * k, lat * k, s=10, c="crimson", edgecolors="none", alpha=0.8)
    if not radians:
        ax.grid(True, alpha=0.3)
    ax.set_title(f"{len(X)} tokens" + (f", t = {t:.4g}" if t is not None else ""), fontsize=11)
    return fig


# ============================================================================== whole folders
def _save(fig, out: Path, stem: str, formats, dpi: int) -> list[Path]:
    paths = []
    for fmt in formats:
        p = out / f"{stem}.{fmt}"
        fig.savefig(p, format=fmt, dpi=dpi)
        paths.append(p)
    return paths


def write_figures(run_dir, out_dir=None, *, formats=("png",), times=None, projection: str = "equirectangular", log: bool = False, dpi: int = 150) -> list[Path]:
    """Write every figure that a run or Monte-Carlo folder supports.

    ``energy``, ``G2``, ``energy_balance`` (gradient heads), ``mesh_invariants`` (mesh
    runs), ``distances`` (``w_*``/``l1_*`` columns), and for single runs at ``times``
    (nearest snapshots; default first, middle, last) ``density_map_NNNNNN`` (mesh) or
    ``tokens_map_NNNNNN`` (particles, d = 3). Each in every format of ``formats``
    (png, pdf, svg). ``out_dir`` defaults to ``run_dir/figures``. Returns the paths.
    """
    formats = [f.lower().lstrip(".") for f in formats]
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise ValueError(f"unknown figure format(s) {bad}; choose from {', '.join(FORMATS)}")
    folder = Path(run_dir)
    s = load_series(folder)
    out = Path(out_dir) if out_dir is not None else folder / "figures"
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    makers = [("energy", plot_energy), ("G2", plot_dissipation), ("energy_balance", plot_energy_balance)]
    if s.has("mass"):
        makers.append(("mesh_invariants", plot_mesh_invariants))
    if distance_columns(s.columns):
        makers.append(("distances", plot_distances))
    for stem, fn in makers:
        try:
            fig = fn(s)
        except ValueError as exc:
            _log.info("skipping %s: %s", stem, exc)
            continue
        written += _save(fig, out, stem, formats, dpi)
    if s.kind == "montecarlo":
        if times:
            _log.warning("density maps are drawn for single runs; draw one of the path-NNN folders")
        return written
    from spherepde.runs.folders import load_snapshots
    from spherepde.viz.common import color_limits

    try:
        snaps = load_snapshots(folder)
    except FileNotFoundError:
        if times:
            raise
        _log.warning("%s wrote no snapshots: no maps", folder)
        return written
    times = [float(snaps.t[i]) for i in sorted({0, (len(snaps) - 1) // 2, len(snaps) - 1})] if not times else [float(t) for t in times]
    idx = list(dict.fromkeys(snaps.nearest(t) for t in times))
    if snaps.rho is not None:
        clim = color_limits(snaps.rho, log=log)
        for k in idx:
            fig = plot_density_map(snaps.mesh, snaps.rho[k], t=float(snaps.t[k]), projection=projection, log=log, clim=clim, tokens=None)
            written += _save(fig, out, f"density_map_{k:06d}", formats, dpi)
    elif snaps.X is not None and snaps.X.shape[2] == 3:
        for k in idx:
            fig = plot_token_map(snaps.X[k], t=float(snaps.t[k]), projection=projection)
            written += _save(fig, out, f"tokens_map_{k:06d}", formats, dpi)
    return written
