"""Helpers shared by the PyVista and the Matplotlib pictures: colour ranges, time labels,
token arrays, the density's colour-bar title. No PyVista or Matplotlib import here.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["CLIM_MODES", "LOG_DYNAMIC_RANGE", "RHO_TITLE", "auto_color_limits", "clip_extend", "clip_note", "color_limits", "dynamic_range",
           "resolve_clim", "robust_color_limits", "snap_times"]


#: Colour-bar title of densities (docs/model.md: rho is a density per unit area on S²).
RHO_TITLE = "ρ (density per unit area)"


def color_limits(rho, *, log: bool = False, floor: float = 1e-6) -> tuple[float, float]:
    """One colour range for densities ``rho`` (any shape).

    Linear: (min, max), with min set to 0 when 0 <= min < 0.01 max. Log: (max(smallest
    positive, floor * max), max). A constant density gets a +-1 % range.
    """
    r = np.asarray(rho, float)
    r = r[np.isfinite(r)]
    if r.size == 0:
        return (0.0, 1.0)
    hi = float(r.max())
    if log:
        pos = r[r > 0]
        if pos.size == 0:
            return (floor, 1.0)
        hi = float(pos.max())
        lo = max(float(pos.min()), floor * hi)
    else:
        lo = float(r.min())
        if 0.0 <= lo < 0.01 * hi:  # a density: start the scale at 0 rather than at 1e-56
            lo = 0.0
    if not hi > lo:
        c = hi if hi != 0 else 1.0
        lo, hi = (c / 1.01, c * 1.01) if log else (c - 0.01 * abs(c), c + 0.01 * abs(c))
    return (lo, hi)


#: Automatic colour ranges of ``spherepde render --clim``: up to the peak over all frames,
#: on a log scale when the dynamic range calls for it (``auto``, the default), always on a
#: log scale (``auto-log``), min to max (``minmax``).
CLIM_MODES = ("auto", "auto-log", "minmax")

#: The default colour scale is logarithmic when the peak over all frames is more than this
#: many times their median (positive values): a concentrated density (clusters, a sharp
#: start), whose peaks a linear scale up to a percentile would clip into one saturated cell.
LOG_DYNAMIC_RANGE = 50.0

#: Lowest end of an automatic log scale: the 1st percentile of the positive values, at
#: least this fraction of the peak.
LOG_FLOOR = 1e-6


def dynamic_range(frames) -> float:
    """The peak over the median of the positive finite values of ``frames`` (1 if none):
    a property of the density, not of the mesh (both converge as the mesh is refined)."""
    r = np.asarray(frames, float)
    pos = r[np.isfinite(r) & (r > 0)]
    if pos.size == 0:
        return 1.0
    return float(pos.max() / np.median(pos))


def auto_color_limits(frames, *, log: bool | None = None, floor: float = LOG_FLOOR) -> tuple[tuple[float, float], bool]:
    """The default colour range of ``frames`` (any shape, e.g. (S, n_cells)): ((lo, hi), log).

    The top is the peak over all frames, so no peak is clipped. ``log`` None: a log scale
    when :func:`dynamic_range` exceeds :data:`LOG_DYNAMIC_RANGE` (a density that is high
    on a few cells and low elsewhere shows both). Log: from the 1st percentile of the
    positive values (at least ``floor`` times the peak; lower values are drawn at the low
    end, and the colour bar says so); linear: from 0 for a density (0 <= min < 1 % of the
    peak), else from the minimum.
    """
    r = np.asarray(frames, float)
    if log is None:
        log = dynamic_range(r) > LOG_DYNAMIC_RANGE
    lo, hi = color_limits(r, log=log, floor=floor)
    if log:
        pos = r[np.isfinite(r) & (r > 0)]
        if pos.size and float(pos.max()) > 0:
            lo = min(max(lo, float(np.percentile(pos, 1.0))), hi / 1.01)
    return (lo, hi), bool(log)


def clip_extend(frames, clim, *, log: bool = False) -> str:
    """Matplotlib's ``extend`` for a colour bar of range ``clim`` over ``frames``: 'min',
    'max', 'both' where values lie beyond the range (drawn in its end colours; on a log
    scale zeros and negative values count as below), 'neither' otherwise."""
    r = np.asarray(frames, float)
    r = r[np.isfinite(r)]
    lo, hi = (float(c) for c in clim)
    tol = 1e-9 * max(abs(lo), abs(hi))
    below = bool(r.size) and bool(np.any(r < lo - tol) or (log and np.any(r <= 0)))
    above = bool(r.size) and bool(np.any(r > hi + tol))
    return {(False, False): "neither", (True, False): "min", (False, True): "max", (True, True): "both"}[(below, above)]


def clip_note(frames, clim, *, log: bool = False) -> str:
    """A short note for a colour bar that clips (empty when nothing is clipped), e.g.
    "clipped above 2 (max 18)", "clipped below 1e-06": values beyond the range are drawn
    in its end colours."""
    ext = clip_extend(frames, clim, log=log)
    if ext == "neither":
        return ""
    r = np.asarray(frames, float)
    r = r[np.isfinite(r)]
    lo, hi = (float(c) for c in clim)
    below, above = f"below {lo:.2g}", f"above {hi:.2g} (max {float(r.max()):.2g})"
    return "clipped " + {"max": above, "min": below, "both": f"{below} and {above}"}[ext]

#: Percentiles of all frames' values that bound the default colour range.
ROBUST_PERCENTILES = (1.0, 99.0)


def robust_color_limits(frames, *, log: bool = False, percentiles=ROBUST_PERCENTILES, floor: float = 1e-6) -> tuple[float, float]:
    """One colour range for all frames ``frames`` (any shape, e.g. (S, n_cells)) that a
    single frame's peak cannot set: the ``percentiles`` (default 1st and 99th) of all
    values of all frames (on a log scale: of the positive values, the low end at least
    ``floor`` times the high end). Values outside the range are drawn in the end colours.

    A density that spreads out over time (a peak of 6 at t = 0, 0.4 at the end) gets a
    range that shows the late frames too, instead of (0, 6) that leaves them dark. Linear
    ranges start at 0 when 0 <= low < 0.01 high, as in :func:`color_limits`. Degenerate
    data fall back to :func:`color_limits`: constant values, or a density so concentrated
    that the high percentile is below 1 % of the peak (then the high end is the median of
    the frames' peaks).
    """
    r = np.asarray(frames, float)
    fin = r[np.isfinite(r)]
    if log:
        fin = fin[fin > 0]
    if fin.size == 0:
        return color_limits(r, log=log, floor=floor)
    p_lo, p_hi = (float(q) for q in percentiles)
    if not 0.0 <= p_lo < p_hi <= 100.0:
        raise ValueError(f"percentiles must satisfy 0 <= low < high <= 100, got {percentiles}")
    lo, hi = (float(v) for v in np.percentile(fin, [p_lo, p_hi]))
    peak = float(fin.max())
    if hi < 0.01 * peak:  # mass on fewer cells than the top percentile: the median frame peak
        per_frame = r.reshape(r.shape[0], -1) if r.ndim > 1 else r.reshape(1, -1)
        with np.errstate(invalid="ignore"):
            peaks = np.array([np.nanmax(np.where(np.isfinite(f), f, np.nan)) for f in per_frame])
        hi = float(np.nanmedian(peaks))
    if log:
        lo = max(lo, floor * hi)
    elif 0.0 <= lo < 0.01 * hi:  # a density: start the scale at 0 rather than at 1e-56
        lo = 0.0
    if not hi > lo:
        return color_limits(r, log=log, floor=floor)
    return (lo, hi)


def resolve_clim(clim, frames, *, log: bool = False) -> tuple[tuple[float, float], bool]:
    """The colour range and scale for ``frames`` from a ``clim`` request.

    ``clim``: None or ``"auto"`` (:func:`auto_color_limits`: up to the peak, on a log
    scale when the dynamic range is large or ``log``), ``"auto-log"`` (the same, always
    on a log scale), ``"minmax"`` (:func:`color_limits`: min to max over all frames) or
    explicit ``(lo, hi)``. Returns ((lo, hi), log).
    """
    if clim is None or isinstance(clim, str):
        mode = "auto" if clim is None else clim
        if mode not in CLIM_MODES:
            raise ValueError(f"colour range must be LO HI or one of {', '.join(CLIM_MODES)}, got {clim!r}")
        if mode == "minmax":
            return color_limits(frames, log=bool(log)), bool(log)
        return auto_color_limits(frames, log=True if (log or mode == "auto-log") else None)
    try:
        lo, hi = (float(c) for c in clim)
    except (TypeError, ValueError):
        raise ValueError(f"colour range must be two numbers LO HI or one of {', '.join(CLIM_MODES)}, got {clim!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(f"colour limits must be finite with LO < HI, got {lo:g} {hi:g}")
    return (lo, hi), bool(log)


def snap_times(t_snap, times, *, source: str = "the run", logger=None) -> list[int]:
    """Indices of the snapshots nearest to the requested ``times``, saying when a time is
    not a snapshot time.

    A request within a tolerance (1e-6 of the time scale) of a snapshot is that snapshot;
    any other time inside the snapshots' range is drawn at the nearest snapshot, with a
    warning line on ``logger`` naming the requested and the drawn time; a time before the
    first or after the last snapshot (past T, or past what an unfinished run has written)
    raises ValueError naming the range. The indices keep the order of ``times``.
    """
    t = np.asarray(t_snap, float)
    if t.size == 0:
        raise ValueError(f"{source} has no snapshots")
    scale = max(1.0, float(np.max(np.abs(t))))
    tol = 1e-6 * scale
    fmt = _time_format(t).replace("t = ", "")
    idx = []
    for req in times:
        r = float(req)
        if not math.isfinite(r):
            raise ValueError(f"time {req!r} is not a finite number")
        if r < t[0] - tol or r > t[-1] + tol:
            raise ValueError(
                f"t = {r:g} is outside the snapshots of {source}, which cover t = {fmt.format(t[0])} to {fmt.format(t[-1])}; "
                "choose times in that range"
            )
        k = int(np.argmin(np.abs(t - r)))
        if abs(t[k] - r) > tol and logger is not None:
            logger.warning("t = %g is not a snapshot time of %s: drawing the nearest snapshot, t = %s", r, source, fmt.format(t[k]))
        idx.append(k)
    return idx


def _time_digits(times) -> int:
    """Decimals that tell neighbouring times apart (at least 2, at most 8)."""
    t = np.unique(np.asarray(times, float))
    gaps = np.diff(t)
    gaps = gaps[gaps > 0]
    digits = 2
    if gaps.size:
        digits = int(min(8, max(2, math.ceil(-math.log10(gaps.min())) + 1)))
    return digits


def _time_format(times) -> str:
    """A format for times that tells neighbouring frames apart (at least 2 decimals)."""
    return f"t = {{:.{_time_digits(times)}f}}"


def _tokens3(X) -> np.ndarray:
    X = np.asarray(X, float)
    if X.ndim != 2:
        raise ValueError(f"tokens must have shape (n, d), got {X.shape}")
    if X.shape[1] == 3:
        return X
    if X.shape[1] == 2:  # S^1 drawn as the equator of S^2
        return np.column_stack([X, np.zeros(len(X))])
    raise ValueError(f"tokens live on S^{X.shape[1] - 1}; only d = 2 or 3 can be drawn on the sphere")

