"""Readable Matplotlib figures: legends beside the data, tick labels on short log axes,
and a check of both (used by the validation studies' figures and by the tests).

Figures are built one way: :class:`matplotlib.figure.Figure` objects made without
``pyplot`` (:func:`new_figure`, :func:`subplots`), so no GUI backend or global figure
state is touched; ``fig.savefig`` writes them.

Matplotlib is imported only inside the functions.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["data_ticks", "figure_problems", "finish_figure", "legend_outside", "new_figure", "readable_log_ticks", "subplots"]


def new_figure(**fig_kw):
    """A :class:`matplotlib.figure.Figure` (``fig_kw``: ``figsize``, ``layout``, ...), made without pyplot."""
    from matplotlib.figure import Figure

    return Figure(**fig_kw)


def subplots(nrows: int = 1, ncols: int = 1, *, squeeze: bool = True, **fig_kw):
    """``(fig, axes)`` as ``pyplot.subplots`` gives them, made without pyplot: a :func:`new_figure`
    and its grid of axes (:meth:`matplotlib.figure.Figure.subplots`)."""
    fig = new_figure(**fig_kw)
    return fig, fig.subplots(nrows, ncols, squeeze=squeeze)


def legend_outside(ax, *, fontsize: float = 7, ncol: int = 1, **kw):
    """The axes' legend to the right of its plotting area, so that it hides no data
    (a figure with ``layout="constrained"`` makes room for it). Returns the legend, or
    None when nothing is labelled."""
    if not ax.get_legend_handles_labels()[0]:
        return None
    return ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, fontsize=fontsize, ncol=ncol, frameon=False, **kw)


def _plain(v: float, _pos=None) -> str:
    if v == 0 or not math.isfinite(v):
        return ""
    e = math.floor(math.log10(abs(v)) + 1e-9)
    if -3 <= e <= 3:
        return f"{v:.3g}"
    m = v / 10.0**e
    return rf"${m:.2g}\times10^{{{e}}}$" if abs(m - 1) > 1e-9 else rf"$10^{{{e}}}$"


def _decades(lo: float, hi: float) -> int:
    """Integer powers of ten in [lo, hi]."""
    if not (lo > 0 and hi > 0):
        return 0
    lo, hi = sorted((lo, hi))
    return int(math.floor(math.log10(hi) + 1e-9) - math.ceil(math.log10(lo) - 1e-9) + 1)


def readable_log_ticks(ax) -> None:
    """Give every log axis of ``ax`` at least two labelled ticks: an axis over fewer than
    two powers of ten (e.g. mesh sizes h = 0.11 ... 0.33, where Matplotlib labels no
    tick at all) gets ticks at 1, 2, 5 x 10^k (or at every integer multiple, for a
    range under a factor 2.5), labelled in plain numbers; minor tick labels are off."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter

    for axis, lim in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
        if axis.get_scale() != "log" or _decades(*lim) >= 2 or isinstance(axis.get_major_locator(), FixedLocator):
            continue  # linear, long enough for Matplotlib's own labels, or ticks set by hand
        lo, hi = sorted(lim)
        for subs in ((1.0, 2.0, 5.0), "all"):
            loc = LogLocator(base=10.0, subs=subs, numticks=30)
            ticks = [v for v in loc.tick_values(lo, hi) if lo * (1 - 1e-9) <= v <= hi * (1 + 1e-9)]
            if len(ticks) >= 2:
                break
        if len(ticks) > 8:  # every integer multiple is too many: keep every other one
            ticks = ticks[::2]
        if len(ticks) < 2:  # under a factor 1.1: the ends
            ticks = list(np.geomspace(lo, hi, 3))
        axis.set_ticks(ticks)
        axis.set_major_formatter(FuncFormatter(_plain))
        axis.set_minor_formatter(NullFormatter())
        (ax.set_xlim if axis is ax.xaxis else ax.set_ylim)(lim)


def data_ticks(ax, which: str, values, fmt: str = "{:.3g}") -> None:
    """Ticks at the given data values (e.g. the mesh sizes or token counts of a study),
    labelled with ``fmt``; minor tick labels off. For short log axes."""
    from matplotlib.ticker import NullFormatter

    vals = sorted({float(v) for v in values if np.isfinite(v) and (v > 0 or getattr(ax, f"get_{which}scale")() != "log")})
    if len(vals) < 2:
        return
    axis = ax.xaxis if which == "x" else ax.yaxis
    lim = ax.get_xlim() if which == "x" else ax.get_ylim()
    axis.set_ticks(vals, labels=[fmt.format(v) for v in vals])
    axis.set_minor_formatter(NullFormatter())
    (ax.set_xlim if which == "x" else ax.set_ylim)(lim)


def finish_figure(fig) -> None:
    """:func:`readable_log_ticks` on every axes of ``fig`` (call after plotting)."""
    for ax in fig.axes:
        if not _is_colorbar(ax):
            readable_log_ticks(ax)


def _is_colorbar(ax) -> bool:
    return getattr(ax, "_colorbar", None) is not None or ax.get_label() == "<colorbar>"


def _visible_ticklabels(axis, lim) -> list[str]:
    lo, hi = sorted(lim)
    out = []
    for tick in axis.get_major_ticks() + axis.get_minor_ticks():
        v = tick.get_loc()
        lab = tick.label1
        if lab.get_visible() and tick.get_visible() and lab.get_text().strip() and lo - 1e-12 * abs(lo) <= v <= hi + 1e-12 * abs(hi):
            out.append(lab.get_text())
    return out


def figure_problems(fig) -> list[str]:
    """What makes ``fig`` hard to read, as sentences (empty when nothing): an axes without
    an x or y label, an axis with fewer than two visible tick labels, a legend that covers
    part of any plotting area. Colour bars are left out; 3-D axes are checked for labels
    only. Draws the figure (on an Agg canvas if it has none that draws)."""
    if not hasattr(fig.canvas, "buffer_rgba"):  # a Figure made without pyplot
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        FigureCanvasAgg(fig)
    fig.canvas.draw()
    problems = []
    axes = [ax for ax in fig.axes if not _is_colorbar(ax)]
    boxes = [ax.get_window_extent() for ax in axes]
    for i, ax in enumerate(axes):
        name = f"axes {i} ({ax.get_title() or 'untitled'})"
        if not ax.get_xlabel().strip():
            problems.append(f"{name}: no x label")
        if not ax.get_ylabel().strip():
            problems.append(f"{name}: no y label")
        if ax.name == "3d":
            continue
        for which, axis, lim in (("x", ax.xaxis, ax.get_xlim()), ("y", ax.yaxis, ax.get_ylim())):
            labels = _visible_ticklabels(axis, lim)
            if len(labels) < 2:
                problems.append(f"{name}: {len(labels)} tick label(s) on the {which} axis ({axis.get_scale()} scale)")
    legends = [(ax, ax.get_legend()) for ax in axes if ax.get_legend() is not None] + [(None, lg) for lg in fig.legends]
    for owner, lg in legends:
        bb = lg.get_window_extent()
        for j, box in enumerate(boxes):
            if bb.overlaps(box):
                problems.append(f"the legend of {'the figure' if owner is None else repr(owner.get_title())} covers part of axes {j} ({axes[j].get_title()})")
    return problems
