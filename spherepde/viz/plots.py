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
Monte-Carlo folder (the mean over its ``path-NNN`` runs with a band of one standard
error of the mean and a 5-95 % quantile band, both kept positive on log axes; from
``diagnostics_mean.csv``/``diagnostics_std.csv`` (and ``diagnostics_q05/q95.csv``) when the
path folders are gone), a dict of column arrays
(:func:`spherepde.runs.runfolder.read_diagnostics`) or a list of such dicts (one per path).
The data behind the figures (:class:`~spherepde.runs.series.Series`, its bands and tracks)
is :mod:`spherepde.runs.series`; this module only draws.

Coupled runs (``run.solver = "both"``) overlay the mesh columns and the tokens' ``p_``
columns in the energy, G², EDI and mean-resultant figures, and plot the distances
between the two (``w1_exact``, ``w1_sliced``, ``l1_hist``) labelled by method.
:func:`plot_columns` draws the same figures for several runs (``spherepde compare``).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from spherepde.model.columns import COLUMNS, distance_columns
from spherepde.runs.runfolder import MONTE_CARLO
from spherepde.runs.series import Series, defined, distance_floor, load_series, solver_tracks

__all__ = [
    "DISTANCE_LABELS",
    "FORMATS",
    "PANELS",
    "CLUSTER_COUNT_TITLE",
    "flicker_spans",
    "Panel",
    "column_panel",
    "distance_label",
    "plot_columns",
    "plot_edi_residuals",
    "plot_mean_resultant",
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


#: The relative mass drift axis spans at least +-this (the README's bound on the drift).
MASS_DRIFT_SPAN = 1e-12
#: rho_min below this fraction of the peak density is zero to round-off.
RHO_ROUNDOFF = 1e-16

# ============================================================================ figure helpers
def _figure(nrows: int = 1, *, height: float = 3.8, width: float = 6.4, sharex: bool = True):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height * (1 if nrows == 1 else 0.75 * nrows)), layout="constrained")
    axes = fig.subplots(nrows, 1, sharex=sharex, squeeze=False)[:, 0]
    return fig, axes


def _positive(a) -> np.ndarray:
    a = np.asarray(a, float)
    return np.where(a > 0, a, np.nan)


def _draw(ax, s: Series, what, label: str, *, log: bool = False, **kw):
    """One column (or function of columns) of ``s``: the mean as a line and, for several
    paths, a dark band mean ± one standard error and a light 5-95 % quantile band. On a
    log axis the bands keep to their positive part."""
    b = s.band(what)
    t = s.t
    fin = np.isfinite(b.mean)
    sparse = fin.sum() < fin.size and fin.any()
    if sparse:  # e.g. distances recorded every N-th row: join the recorded points
        kw.setdefault("marker", "o")
        kw.setdefault("markersize", 3)
        (line,) = ax.plot(t[fin], b.mean[fin], label=label, **kw)
    else:
        (line,) = ax.plot(t, b.mean, label=label, **kw)
    color = line.get_color()
    first = not getattr(ax, "_spherepde_bands", False)
    drew = False
    if b.q05 is not None and b.q95 is not None and np.any(np.isfinite(b.q05)):
        lo, hi = np.asarray(b.q05, float), np.asarray(b.q95, float)
        if log:
            lo, hi = _positive(lo), _positive(hi)
        ax.fill_between(t, lo, hi, color=color, alpha=0.12, linewidth=0, label="5–95 % of paths" if first else None)
        drew = True
    if b.sem is not None and np.any(np.isfinite(b.sem)):
        lo, hi = b.mean - b.sem, b.mean + b.sem
        if log:
            lo, hi = _positive(lo), _positive(hi)
        ax.fill_between(t, lo, hi, color=color, alpha=0.35, linewidth=0, label="mean ± 1 standard error" if first else None)
        drew = True
    if drew:
        ax._spherepde_bands = True
    return line


def _band_note(s: Series) -> str:
    if not s.is_ensemble:
        return ""
    n = s.n_paths
    over = f"{n} paths" if n else "Monte-Carlo paths"
    if s.std is not None and s.quantiles is None:
        return f"mean ± s.e., {over}"
    return f"mean ± s.e. and 5–95 % band, {over}"


def _finish(fig, axes, s: Series | None, title: str, *, outside: bool = False, note: str = "") -> None:
    extra = ", ".join(x for x in ((s.label if s else ""), (_band_note(s) if s else ""), note) if x)
    sep = "\n" if len(title) + len(extra) > 60 else " "  # long notes on a line of their own, never clipped
    fig.suptitle(title + (f"{sep}({extra})" if extra else ""), fontsize=11)
    axes[-1].set_xlabel(T_LABEL)
    for ax in axes:
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            if outside:
                ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
            else:
                ax.legend(fontsize=8, loc="best")


def _need_energy(s: Series) -> None:
    if not defined(s, "energy"):
        raise ValueError("the energy is not defined for this run (general heads, docs/model.md §1): no energy figures")


# ============================================================================ column panels
@dataclass(frozen=True)
class Panel:
    """One axes of a figure of columns: the column, its symbol (legend), the y label."""

    column: str
    symbol: str
    ylabel: str
    log: bool | None = False  # None: log scale when every value is positive
    zero_line: bool = False
    floor: float = 0.0  # the y axis spans at least [0, floor]: smaller values are noise or round-off, not a signal
    integer: bool = False  # a count: integer ticks only (also on its difference panel), spans where it flickers shaded


#: Values at most this large (in units where the quantity is O(1)) are zero to round-off.
ROUNDOFF = 1e-12


def column_panel(column: str, **options) -> Panel:
    """The panel of a diagnostics column: its symbol and axis label from the column registry
    (:data:`spherepde.model.columns.COLUMNS`; an unregistered column: its name)."""
    c = COLUMNS.get(column)
    return Panel(column, (c.symbol if c else "") or column, (c.axis or c.long_name) if c else column, **options)


#: The panels of the standard figures (``plot``) and of ``spherepde compare``.
PANELS = {
    "energy": (column_panel("energy"),),
    "G2": (column_panel("G2", log=None),),
    "edi": (column_panel("edi_paper", zero_line=True), column_panel("edi_exact", zero_line=True)),
    "mean_resultant": (column_panel("mean_resultant", floor=0.01),),
    "clusters": (column_panel("n_clusters", floor=1.0, integer=True), column_panel("energy")),
}

#: What the count of clusters is, and what it is not (the clusters figure's title).
CLUSTER_COUNT_TITLE = ("Clusters and energy; count: groups by single linkage\n"
                       "at chordal 0.1 with >= 1 % of the mass. A count going back\n"
                       "and forth (shaded): two groups at that distance, not merges")

_TITLES = {"energy": "Energy", "G2": "Dissipation", "edi": "Energy-dissipation identity: residuals", "mean_resultant": "Mean resultant length",
           "clusters": CLUSTER_COUNT_TITLE}

#: Label of the shaded spans where a count flickers.
FLICKER_LABEL = "count flickers: groups at the linkage distance"


def flicker_spans(t, counts) -> list[tuple[float, float]]:
    """Time spans where an integer count goes back and forth: maximal runs of consecutive
    changes of alternating sign (up then down, or down then up), each from the record before
    the first change to the record after the last; a monotone staircase has none. t, counts: (n,)."""
    t, c = np.asarray(t, float), np.asarray(counts, float)
    ok = np.isfinite(c)
    t, c = t[ok], c[ok]
    steps = np.diff(c)
    idx = np.flatnonzero(steps != 0)
    sign = np.sign(steps[idx])
    spans, i = [], 0
    while i < idx.size - 1:
        j = i
        while j + 1 < idx.size and sign[j + 1] != sign[j]:
            j += 1
        if j > i:
            spans.append((float(t[idx[i]]), float(t[idx[j] + 1])))
        i = j + 1
    return spans


def _integer_axis(ax, tracks, p: Panel) -> None:
    """Integer ticks on a count axis; the spans where a single run's count flickers shaded."""
    from matplotlib.ticker import MaxNLocator

    ax.yaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
    first = True
    for tr in tracks:
        if tr.series.is_ensemble or not tr.defined(p.column):
            continue  # a mean over paths is no count
        for a, b in flicker_spans(tr.series.t, tr.series.band(tr.prefix + p.column).mean):
            ax.axvspan(a, b, color="0.85", zorder=0, label=FLICKER_LABEL if first else None)
            first = False


def figure_title(stem: str, sign: float = -1.0) -> str:
    """The title of a standard figure; G² is the dissipation only for s = -1 (for s = +1 the
    flow raises the energy at the rate G², docs/model.md §3)."""
    if stem == "G2":
        return "Dissipation $G^2$ (s = -1: the flow lowers E at this rate)" if sign < 0 else "Metric slope $G^2$ (s = +1: the flow raises E at this rate)"
    return _TITLES[stem]


def _roundoff_floor(ax, values, floor: float, what: str) -> None:
    """Give a linear axis at least the span [0, floor] (or [-floor, floor] for values of both
    signs), so round-off is not drawn as a signal; say so when every value is round-off."""
    v = np.concatenate([np.asarray(x, float).ravel() for x in values]) if values else np.array([])
    v = v[np.isfinite(v)]
    if not v.size or floor <= 0:
        return
    top = float(np.max(np.abs(v)))
    if top >= floor:
        return
    lo = -floor if np.min(v) < -ROUNDOFF * floor else -0.04 * floor
    ax.set_ylim(lo, floor)
    if top <= ROUNDOFF * max(1.0, floor):
        ax.text(0.02, 0.95, f"{what}: |values| <= {top:.1e}, zero to round-off", transform=ax.transAxes, va="top", fontsize=8, color="0.3")


def plot_columns(tracks, panels, title: str, *, note: str = "", differences: dict | None = None, reference: str = ""):
    """A figure with one axes per :class:`Panel`, each overlaying the column of every
    :class:`Track` (several runs, or the mesh and the tokens of a coupled run).

    ``differences`` (column -> list of (label, t, y - y_reference)) adds below each panel
    the differences to the reference track (``reference``: its label). Panels whose
    column no track defines are left out; raises ValueError when none is left.
    """
    tracks = list(tracks)
    panels = [p for p in panels if any(tr.defined(p.column) for tr in tracks)]
    if not panels:
        raise ValueError("no track defines the column(s) of this figure")
    rows = []
    for p in panels:
        rows.append(("value", p))
        if differences and differences.get(p.column):
            rows.append(("diff", p))
    fig, axes = _figure(len(rows), height=4.0, width=8.6 if len(tracks) > 1 else 6.4)
    series = {id(tr.series): tr.series for tr in tracks}
    single = next(iter(series.values())) if len(series) == 1 else None
    for ax, (what, p) in zip(axes, rows):
        if what == "value":
            log = p.log
            if log is None:
                vals = [np.asarray(tr.series.band(tr.prefix + p.column).mean) for tr in tracks if tr.defined(p.column)]
                fin = np.concatenate([v[np.isfinite(v)] for v in vals]) if vals else np.array([])
                log = bool(fin.size) and bool(np.all(fin > 0))
            for tr in tracks:
                if tr.defined(p.column):
                    lab = p.symbol + (f", {tr.label}" if tr.label else "")
                    _draw(ax, tr.series, tr.prefix + p.column, lab, log=log)
            if log:
                ax.set_yscale("log")
            elif p.floor:
                _roundoff_floor(ax, [tr.series.band(tr.prefix + p.column).mean for tr in tracks if tr.defined(p.column)], p.floor, p.column)
            ax.set_ylabel(p.ylabel)
            if p.integer:
                _integer_axis(ax, tracks, p)
        else:
            for k, (lab, t, d) in enumerate(differences[p.column]):  # track k + 1 against track 0: its colour above
                ax.plot(t, d, color=f"C{(k + 1) % 10}", label=f"{lab} − {reference}" if reference else lab)
            ax.axhline(0.0, color="0.6", lw=0.8)
            ax.set_ylabel(f"difference in {p.column}")
            if p.integer:
                from matplotlib.ticker import MaxNLocator

                ax.yaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
        if p.zero_line and what == "value":
            ax.axhline(0.0, color="0.6", lw=0.8)
    _finish(fig, list(axes), single, title, outside=len(tracks) > 1, note=note)
    return fig


# ================================================================================ diagnostics
def plot_energy(source):
    """E(t) (docs/model.md §3); a coupled run overlays mesh and tokens. Returns the Figure."""
    s = load_series(source)
    _need_energy(s)
    return plot_columns(solver_tracks(s), PANELS["energy"], _TITLES["energy"])


def plot_dissipation(source):
    """G²(t), log scale when positive (docs/model.md §3); a coupled run overlays mesh and
    tokens. Returns the Figure."""
    s = load_series(source)
    if not defined(s, "G2"):
        raise ValueError("the dissipation G² is not defined for this run (general heads)")
    return plot_columns(solver_tracks(s), PANELS["G2"], figure_title("G2", s.sign))


def plot_mean_resultant(source):
    """The mean resultant length R(t) = |sum_i w_i x_i| (1: one point mass, 0: balanced);
    a coupled run overlays mesh and tokens. Returns the Figure."""
    s = load_series(source)
    if not s.has("mean_resultant"):
        raise ValueError("no 'mean_resultant' column in the diagnostics")
    return plot_columns(solver_tracks(s), PANELS["mean_resultant"], _TITLES["mean_resultant"])


def plot_clusters(source):
    """The number of clusters (docs/model.md §4.10: single-linkage groups at chordal distance
    0.1 with >= 1 % of the mass) above the energy, with integer ticks: under s = +1 a staircase
    of plateaus and merges. Spans where the count goes back and forth (:func:`flicker_spans`:
    two groups at the linkage distance, not merges) are shaded. Returns the Figure."""
    s = load_series(source)
    if not s.has("n_clusters"):
        raise ValueError("no 'n_clusters' column in the diagnostics")
    return plot_columns(solver_tracks(s), PANELS["clusters"], _TITLES["clusters"])


#: The residuals of the energy balance's lower panel: (column, label, line style) -- the two residuals,
#: then the two parts of edi_exact (docs/model.md §3.6), drawn where a run has them.
_BALANCE_RESIDUALS = (
    ("edi_paper", "EDI residual, paper's form", "-"),
    ("edi_exact", "EDI residual, exact chain rule", "-"),
    ("edi_transport", "edi_exact: the solver's transport part", ":"),
    ("edi_weights", "edi_exact: the weight path's part", ":"),
)


def plot_energy_balance(source, *, sign: float | None = None):
    """The energy-balance curves and the EDI residuals (docs/model.md §3).

    Top: ΔE = E(t) − E(0), ∫_0^t ∂_tE ds, ∫_0^t G² ds, M_t, the energy of collapses and merges
    J_t (``int_collapse_energy``, where a run has it) and the paper's right-hand side
    ∫∂_tE + s∫G² + M_t + J_t (dashed), so ΔE minus the dashed line is ``edi_paper``; bottom: the
    residuals ``edi_paper`` and ``edi_exact`` and the parts of ``edi_exact``, ``edi_transport``
    (the solver) and ``edi_weights`` (the weight path) (a coupled run: the mesh's and the
    tokens' residuals). ``sign`` overrides the model's s. Returns the Figure.
    """
    s = load_series(source)
    _need_energy(s)
    sg = s.sign if sign is None else float(sign)
    fig, (ax, ax2) = _figure(2, height=4.4, width=8.6)
    _draw(ax, s, lambda d: d["energy"] - d["energy"][0], r"$\Delta E = E(t) - E(0)$", color="k", lw=2)
    if s.has("int_dEdt"):
        _draw(ax, s, "int_dEdt", r"$\int_0^t \partial_t E\,ds$")
    g2 = "int_G2_scheme" if s.has("int_G2_scheme") else "int_G2"  # the mesh: the scheme's G^2, the one in edi_paper
    if s.has(g2):
        _draw(ax, s, g2, r"$\int_0^t G^2\,ds$" + (" (scheme)" if g2 == "int_G2_scheme" else ""))
    if s.has("martingale"):
        _draw(ax, s, "martingale", r"$M_t$")
    jumps = defined(s, "int_collapse_energy") and bool(np.nanmax(np.abs(s.band("int_collapse_energy").mean)) > 0)  # 0 without point masses
    if jumps:
        _draw(ax, s, "int_collapse_energy", r"$J_t$ (collapses and merges)")
    if all(s.has(c) for c in ("int_dEdt", g2, "martingale")):
        rhs = s.band(lambda d: d["int_dEdt"] + sg * d[g2] + d["martingale"] + (d["int_collapse_energy"] if jumps else 0.0)).mean
        ss = "-" if sg < 0 else "+"
        ax.plot(s.t, rhs, "--", color="0.45", lw=1.5, label=rf"$\int\partial_t E\,ds {ss} \int G^2\,ds + M_t$" + (r"$ + J_t$" if jumps else ""))
    tracks = solver_tracks(s)
    ax.set_ylabel("energy terms" + (", mesh" if len(tracks) > 1 else ""))
    for tr in tracks:
        for col, lab, ls in _BALANCE_RESIDUALS:
            if tr.has(col):
                _draw(ax2, s, tr.prefix + col, lab + (f", {tr.label}" if tr.label else ""), ls=ls if tr.prefix == "" else "--")
    ax2.axhline(0.0, color="0.6", lw=0.8)
    ax2.set_ylabel("residual")
    _finish(fig, [ax, ax2], s, "Energy balance", outside=True)
    return fig


def plot_edi_residuals(source):
    """The two EDI residuals (paper's form, exact chain rule) in two panels; a coupled run
    overlays mesh and tokens. Returns the Figure."""
    s = load_series(source)
    if not any(defined(s, c) for c in ("edi_paper", "edi_exact")):
        raise ValueError("the EDI residuals are not defined for this run (general heads)")
    return plot_columns(solver_tracks(s), PANELS["edi"], _TITLES["edi"])


def plot_mesh_invariants(source):
    """Mesh runs: relative mass drift (m(t) − m(0))/m(0) and the minimum density ρ_min(t)."""
    s = load_series(source)
    if not s.has("mass"):
        raise ValueError("no 'mass' column: mass drift is recorded by mesh runs only")
    n = 2 if s.has("rho_min") else 1
    fig, axes = _figure(n, height=4.0)
    drift = lambda d: (d["mass"] - d["mass"][0]) / d["mass"][0]  # noqa: E731
    _draw(axes[0], s, drift, r"$(m(t)-m(0))/m(0)$")
    # a drift of a few ulps is round-off: at least +-MASS_DRIFT_SPAN, so one ulp is not drawn as a drop
    _roundoff_floor(axes[0], [s.band(drift).mean], MASS_DRIFT_SPAN, "relative mass drift")
    axes[0].set_ylabel("relative mass drift")
    if n == 2:
        # a log axis: rho_min spans many decades (1e-52 ... 1e-6), which a linear axis shows as flat zero
        rmin = s.band("rho_min").mean
        fin = rmin[np.isfinite(rmin)]
        positive = bool(fin.size) and bool(np.all(fin >= 0))  # exact zeros (emptied cells) are not a positivity failure
        peak = s.band("rho_max").mean if s.has("rho_max") else s.band("mass").mean / (4 * math.pi)  # the peak, else the mean density
        peak = float(np.nanmax(peak)) if np.any(np.isfinite(peak)) else math.nan
        floor = RHO_ROUNDOFF * peak if positive and math.isfinite(peak) and peak > 0 else 0.0
        if floor and np.any(fin < floor):  # below 1e-16 of the peak a density is zero to round-off: drawn at that floor
            _draw(axes[1], s, lambda d: np.maximum(d["rho_min"], floor), r"$\rho_{\min}(t)$, at least $10^{-16}\times$ the peak", log=True)
            axes[1].set_ylim(floor / 3, None)
            axes[1].text(0.02, 0.05, f"below {floor:.1e} (1e-16 of the peak density): zero to round-off, drawn at that floor", transform=axes[1].transAxes, fontsize=8, color="0.3")
        else:
            _draw(axes[1], s, "rho_min", r"$\rho_{\min}(t)$", log=True)
        if positive:
            axes[1].set_yscale("log")
        else:  # zero or negative values (a positivity failure): symmetric log, linear near 0
            tiny = np.abs(fin[fin != 0])
            axes[1].set_yscale("symlog", linthresh=float(tiny.min()) if tiny.size else 1e-300)
            axes[1].axhline(0.0, color="0.6", lw=0.8)
        axes[1].set_ylabel(r"$\rho_{\min}$ (density per unit area)")
    _finish(fig, list(axes), s, "Mass and positivity")
    return fig


#: Legend labels of the distance columns a coupled run writes (the method in words).
DISTANCE_LABELS = {c: COLUMNS[c].symbol for c in ("w1_exact", "w1_sliced", "l1_hist")}


def distance_label(col: str, s: Series | None = None) -> str:
    """What a distance column is, in words (older runs: ``w_sphere`` with the flag ``w_exact``)."""
    if col in DISTANCE_LABELS:
        return DISTANCE_LABELS[col]
    if col == "w_sphere" and s is not None and s.has("w_exact"):
        flag = np.asarray(s.paths[0]["w_exact"], float)
        exact = bool(np.nanmax(flag) > 0.5) if np.any(np.isfinite(flag)) else False
        return r"exact $W_1$ (geodesic cost; rad)" if exact else r"sliced spherical $W_1$ (POT, fraction of a turn)"
    return col


def plot_distances(source):
    """Mesh-versus-particle distances over time, each labelled with its method (exact W₁,
    sliced spherical W₁, L¹ to the token histogram); log scale when positive. Rows where
    a run skipped the distances (``output.distance_every``) are left out."""
    s = load_series(source)
    cols = distance_columns(s.columns)
    if not cols:
        raise ValueError("no distance columns (w1_exact, w1_sliced, l1_hist) in the diagnostics")
    fig, (ax,) = _figure(width=7.6)
    allpos = True
    for c in cols:
        mean = s.band(c).mean
        fin = mean[np.isfinite(mean)]
        allpos &= bool(fin.size) and bool(np.all(fin > 0))
    for c in cols:
        line = _draw(ax, s, c, distance_label(c, s), log=allpos)
        floor = distance_floor(s, c)
        if math.isfinite(floor):  # tokens drawn from the density: what the distance reads when they agree
            ax.axhline(floor, color=line.get_color(), ls=":", lw=1.2, label=f"{c} at t = 0 = {floor:.3g} (sampling floor)")
    if allpos:
        ax.set_yscale("log")
    ax.set_ylabel("distance between mesh and tokens")
    _finish(fig, [ax], s, "Mesh versus tokens", note="dotted: the value at t = 0, where the tokens are drawn from the density")
    return fig


# ============================================================================== density maps
def lon_lat(P) -> tuple[np.ndarray, np.ndarray]:
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


def cell_polygons(mesh, *, max_step: float = 0.06) -> tuple[list, np.ndarray]:
    """The mesh's cells as polygons in (longitude, latitude) degrees, for maps.

    Each edge is the great-circle arc between its vertices, sampled every ``max_step``
    radians at most. A cell across the antimeridian (±180°) is drawn twice, shifted by
    360°, so that each copy runs off one side of the map and is clipped there; a vertex
    at a pole becomes a stretch of the pole line; a cell around a pole becomes a cap
    that reaches the pole line. Returns (polygons, cells): a list of (m, 2) arrays and
    the cell index of each polygon (a cell appears once or, cut at ±180°, twice).
    """
    P = np.asarray(mesh.points, float)
    C = np.asarray(mesh.cells)
    a, b = P[C], P[np.roll(C, -1, axis=1)]  # (nc, 3, 3): the three edges a -> b
    h = float(np.max(np.arccos(np.clip(np.sum(a * b, axis=2), -1.0, 1.0))))
    k = int(np.clip(math.ceil(h / max_step), 1, 16))  # points per edge
    s = (np.arange(k) / k)[None, None, :, None]
    ring = (1 - s) * a[:, :, None, :] + s * b[:, :, None, :]
    ring = ring.reshape(len(C), 3 * k, 3)
    ring /= np.linalg.norm(ring, axis=2, keepdims=True)
    lon = np.degrees(np.arctan2(ring[..., 1], ring[..., 0]))
    lat = np.degrees(np.arcsin(np.clip(ring[..., 2], -1.0, 1.0)))
    pole = np.abs(ring[..., 2]) > 1.0 - 1e-12
    step = (np.diff(lon, axis=1, append=lon[:, :1]) + 180.0) % 360.0 - 180.0  # includes the closing step
    winding = np.round(step.sum(axis=1) / 360.0).astype(int)
    special = pole.any(axis=1) | (winding != 0)
    polys, cells = [], []

    def emit(c, lo, la):
        xy = np.column_stack([lo, la])
        for off in (0.0, -360.0, 360.0):
            if off == 0.0 or (lo.max() + off > -180.0 and lo.min() + off < 180.0):
                polys.append(xy + [off, 0.0])
                cells.append(c)

    reg = np.flatnonzero(~special)
    lon_u = lon[reg, :1] + np.concatenate([np.zeros((len(reg), 1)), np.cumsum(step[reg, :-1], axis=1)], axis=1)
    for i, c in enumerate(reg):
        emit(int(c), lon_u[i], lat[c])
    for c in np.flatnonzero(special):
        lo, la, po = lon[c], lat[c], pole[c]
        ql, qa = [], []
        n = len(lo)
        for i in range(n):
            if not po[i]:
                ql.append(lo[i])
                qa.append(la[i])
                continue
            prev = next(lo[(i - j) % n] for j in range(1, n) if not po[(i - j) % n])
            nxt = next(lo[(i + j) % n] for j in range(1, n) if not po[(i + j) % n])
            ql += [prev, nxt]
            qa += [la[i], la[i]]
        ql, qa = np.asarray(ql), np.asarray(qa)
        d = (np.diff(ql, append=ql[:1]) + 180.0) % 360.0 - 180.0
        u = ql[0] + np.concatenate([[0.0], np.cumsum(d[:-1])])
        turn = d.sum()
        if abs(turn) > 180.0:  # the cell goes round a pole: close it along the pole line
            cap = 90.0 if np.mean(P[C[c], 2]) > 0 else -90.0
            u = np.concatenate([u, [u[0] + turn, u[0] + turn, u[0]]])
            qa = np.concatenate([qa, [qa[0], cap, cap]])
        emit(int(c), u, qa)
    return polys, np.asarray(cells, int)


def draw_cells(ax, mesh, values, *, radians: bool = False, norm=None, cmap: str = "viridis", rasterized: bool | None = None):
    """Draw cell values on a map axes as the mesh's own (projected) cells
    (:func:`cell_polygons`): one flat-coloured polygon per cell (two for a cell cut at
    ±180°), no resampling. Returns the :class:`~matplotlib.collections.PolyCollection`;
    its ``spherepde_cells`` attribute holds the cell index of each polygon."""
    from matplotlib.collections import PolyCollection

    polys, cells = cell_polygons(mesh)
    kw = {}
    if radians:  # a geographic axes (Mollweide): project the vertices once, here; matplotlib
        # would otherwise resample every edge 75 times on the way (seconds per map)
        sizes = [len(q) for q in polys]
        xy = ax.transProjection.transform(np.radians(np.vstack(polys)))
        polys = np.split(xy, np.cumsum(sizes)[:-1])
        kw["transform"] = ax.transAffine + ax.transAxes
    if rasterized is None:
        rasterized = mesh.n_cells > 20000  # vector output stays small
    pc = PolyCollection(polys, array=np.asarray(values, float)[cells], cmap=cmap, norm=norm, edgecolors="face", linewidths=0.3, rasterized=rasterized, **kw)
    pc.spherepde_cells = cells
    ax.add_collection(pc, autolim=not radians)
    return pc


#: Meridians and parallels of the maps (degrees).
_LON_TICKS = (-120, -60, 0, 60, 120)


def _map_axes(fig, projection: str):
    if projection in ("mollweide", "moll"):
        from matplotlib.ticker import NullFormatter

        ax = fig.add_subplot(projection="mollweide")
        ax.grid(True, alpha=0.35)
        ax.tick_params(labelsize=7)
        # matplotlib writes the longitudes along the equator, on the data: write them
        # under the map instead, where each meridian meets the equator's x position
        ax.xaxis.set_major_formatter(NullFormatter())
        for lon in _LON_TICKS:
            ax.text(0.5 + lon / 360.0, -0.015, f"{lon}°", transform=ax.transAxes, ha="center", va="top", fontsize=7)
        ax.text(0.5, -0.075, "longitude (°), marked at the equator", transform=ax.transAxes, ha="center", va="top", fontsize=8)
        ax.set_ylabel("latitude (°)")
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
    t : time for the title. log, clim : colour scale (default: up to the peak, on a log
    scale when the dynamic range is large, :func:`~spherepde.viz.common.auto_color_limits`);
    values beyond the range are drawn in its end colours and the colour bar's arrows
    (``extend``) say so. tokens : optional (n, 3) tokens drawn as dots.

    The map draws the mesh's own cells, projected (:func:`draw_cells`: one flat colour
    per cell, as the finite-volume solution is; no resampling on a grid), so cell edges
    are sharp at any resolution; longitude labels sit outside the map. Returns the Figure.
    """
    from matplotlib.colors import LogNorm, Normalize
    from matplotlib.figure import Figure

    rho = np.asarray(rho, float)
    if rho.shape != (mesh.n_cells,):
        raise ValueError(f"density has shape {rho.shape}, expected ({mesh.n_cells},)")
    from spherepde.viz.common import auto_color_limits, clip_extend

    if clim is None:
        (lo, hi), log = auto_color_limits(rho, log=True if log else None)
    else:
        lo, hi = float(clim[0]), float(clim[1])
    extend = clip_extend(rho, (lo, hi), log=log)
    fig = Figure(figsize=(7.2, 4.2), layout="constrained")
    ax, radians = _map_axes(fig, projection)
    values = np.maximum(rho, lo) if log else rho
    norm = LogNorm(lo, hi) if log else Normalize(lo, hi)
    k = 1.0 if radians else 180.0 / np.pi
    pc = draw_cells(ax, mesh, values, radians=radians, norm=norm, cmap=cmap)
    if tokens is not None:
        lon, lat = lon_lat(np.asarray(tokens)[:, :3])
        ax.scatter(lon * k, lat * k, s=4, c="crimson", edgecolors="none", label="tokens")
    label = RHO_LABEL + ("; arrows: values beyond the range" if extend != "neither" else "")
    fig.colorbar(pc, ax=ax, orientation="horizontal", shrink=0.7, pad=0.02, aspect=35, label=label, extend=extend)
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
    lon, lat = lon_lat(X)
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

    ``energy``, ``G2``, ``energy_balance``, ``edi`` (gradient heads), ``mean_resultant``,
    ``mesh_invariants`` (mesh runs), ``distances`` (coupled runs: mesh versus tokens), and
    for single runs at ``times`` (nearest snapshots, with a warning when a time is not a
    snapshot time; times outside the snapshots raise ValueError; default first, middle,
    last) ``density_map_t<time>_<projection>_<lin|log>`` (mesh, the mesh's cells drawn
    with one colour range for all maps, up to the peak over all snapshots, on a log scale
    when their dynamic range is large (``log``: always);
    coupled runs with the tokens as dots) or ``tokens_map_t<time>_<projection>``
    (particles, d = 3). Coupled runs overlay mesh and tokens in
    energy, G2, edi and mean_resultant. Each in every format of ``formats`` (png, pdf,
    svg). ``out_dir`` defaults to ``run_dir/figures``. Returns the paths.
    """
    formats = [f.lower().lstrip(".") for f in formats]
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise ValueError(f"unknown figure format(s) {bad}; choose from {', '.join(FORMATS)}")
    folder = Path(run_dir)
    s = load_series(folder)
    snaps = None
    if s.kind != MONTE_CARLO:  # read and check every input (snapshots, mesh, times) before writing anything
        from spherepde.runs.runfolder import load_snapshots
        from spherepde.viz.common import snap_times

        try:
            snaps = load_snapshots(folder, strict=True)  # a damaged snapshots.npz or mesh.npz: ValueError naming it
        except FileNotFoundError:
            if times:
                raise
        if times:
            snap_times(snaps.t, [float(t) for t in times], source=str(folder))
    out = Path(out_dir) if out_dir is not None else folder / "figures"
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    makers = [("energy", plot_energy), ("G2", plot_dissipation), ("energy_balance", plot_energy_balance), ("edi", plot_edi_residuals), ("mean_resultant", plot_mean_resultant)]
    if s.has("mass"):
        makers.append(("mesh_invariants", plot_mesh_invariants))
    if s.has("n_clusters"):
        makers.append(("clusters", plot_clusters))
    if distance_columns(s.columns):
        makers.append(("distances", plot_distances))
    for stem, fn in makers:
        try:
            fig = fn(s)
        except ValueError as exc:
            _log.info("skipping %s: %s", stem, exc)
            continue
        written += _save(fig, out, stem, formats, dpi)
    if s.kind == MONTE_CARLO:
        if times:
            _log.warning("density maps are drawn for single runs; draw one of the path-NNN folders")
        return written
    from spherepde.viz.common import _time_digits, resolve_clim, snap_times

    if snaps is None:
        _log.warning("%s wrote no snapshots: no maps", folder)
        return written
    if not times:
        idx = sorted({0, (len(snaps) - 1) // 2, len(snaps) - 1})
    else:
        idx = list(dict.fromkeys(snap_times(snaps.t, [float(t) for t in times], source=str(folder), logger=_log)))
    digits = max(3, _time_digits(snaps.t))
    if _on_circle(snaps):
        return written + _circle_figures(snaps, idx, out, formats, dpi, digits, log=log)
    proj = "mollweide" if projection in ("mollweide", "moll") else "equirectangular"
    if snaps.rho is not None:
        clim, log = resolve_clim(None, snaps.rho, log=log)  # one range for all maps, up to the peak (log when the range is large)
        for k in idx:
            tokens = snaps.X[k] if snaps.X is not None and snaps.X.shape[2] == 3 else None  # coupled runs: tokens over the density
            fig = plot_density_map(snaps.mesh, snaps.rho[k], t=float(snaps.t[k]), projection=projection, log=log, clim=clim, tokens=tokens)
            written += _save(fig, out, f"density_map_t{snaps.t[k]:.{digits}f}_{proj}_{'log' if log else 'lin'}", formats, dpi)
    elif snaps.X is not None and snaps.X.shape[2] == 3:
        for k in idx:
            fig = plot_token_map(snaps.X[k], t=float(snaps.t[k]), projection=projection)
            written += _save(fig, out, f"tokens_map_t{snaps.t[k]:.{digits}f}_{proj}", formats, dpi)
    return written


def _on_circle(snaps) -> bool:
    """Whether a run's snapshots live on the circle S^1 (tokens or mesh nodes with 2 coordinates)."""
    if snaps.X is not None:
        return snaps.X.shape[2] == 2
    if snaps.rho is not None and snaps.mesh is not None:
        from spherepde.geometry.protocol import geometry_of

        return geometry_of(snaps.mesh).nodes.shape[1] == 2
    return False


def _circle_points(snaps) -> list | None:
    """Per snapshot (mass, x_1, x_2) rows: the point masses of a mesh run, else the token clusters
    (:func:`spherepde.model.clusters.cluster_table`), else None."""
    from spherepde.model.clusters import cluster_table

    if snaps.atom_x is not None and snaps.atom_m is not None and snaps.atom_x.shape[-1] == 2:
        return [np.column_stack([snaps.atom_m[k], snaps.atom_x[k]]) for k in range(len(snaps.t))]
    if snaps.X is not None:
        n = snaps.X.shape[1]
        return [cluster_table(snaps.X[k], np.full(n, 1.0 / n)) for k in range(len(snaps.t))]
    return None


def _circle_figures(snaps, idx, out: Path, formats, dpi: int, digits: int, *, log: bool) -> list[Path]:
    """``kymograph`` (theta-t map, tokens and clusters over it) and ``profiles_t<t0>-<t1>`` (density
    against theta at the snapshots ``idx``) of a run on the circle (:mod:`spherepde.viz.circle`)."""
    from spherepde.geometry.protocol import geometry_of
    from spherepde.viz.circle import plot_kymograph, plot_profiles

    theta = None
    if snaps.rho is not None:
        nodes = geometry_of(snaps.mesh).nodes
        theta = np.mod(np.arctan2(nodes[:, 1], nodes[:, 0]), 2 * np.pi)
    points = _circle_points(snaps)
    if snaps.rho is not None:  # a log scale when the densities span a large range (as the sphere's maps)
        from spherepde.viz.common import resolve_clim

        _, log = resolve_clim(None, snaps.rho, log=log)
    predicted = _predicted_angles(snaps.folder)
    fig = plot_kymograph(snaps.t, theta=theta, rho=snaps.rho, tokens=snaps.X, points=points, log=log, predicted=predicted)
    written = _save(fig, out, "kymograph", formats, dpi)
    fig = plot_profiles(theta, snaps.rho, snaps.t, idx, tokens=snaps.X, points=points)
    span = f"t{snaps.t[idx[0]]:.{digits}f}-{snaps.t[idx[-1]]:.{digits}f}"
    return written + _save(fig, out, f"profiles_{span}", formats, dpi)


def _predicted_angles(folder) -> np.ndarray | None:
    """The nucleation prediction of a circle run (summary.json ``circle_nucleation``), if it has one."""
    import json

    from spherepde.runs.runfolder import SUMMARY_FILE

    try:
        entry = json.loads((Path(folder) / SUMMARY_FILE).read_text()).get("circle_nucleation") or {}
        return np.asarray(entry["predicted"]["angles"], dtype=np.float64)
    except (OSError, ValueError, KeyError, TypeError):
        return None
