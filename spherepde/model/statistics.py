"""Statistics of runs: time averages, log-log fits and the bootstrap interval of an exponent.

The one owner of these estimators: the validation studies (``paper_section6``,
``mesh_convergence``), the sweep analysis (:mod:`spherepde.runs.sweep.analysis`), run
comparison and the scripts under ``validation/`` all call these functions, so the same data
and seed give the same numbers whatever the entry point. Imports only NumPy.

* :func:`time_average` -- trapezoid-rule mean of y(t) over t0 <= t <= t1,
  (1 / (t_b - t_a)) * sum_k (t_{k+1} - t_k) (y_k + y_{k+1}) / 2 over the selected samples.
* :func:`fit_power_law` -- least squares of log y = log a + b log x; the standard error of
  b is s / sqrt(sum (log x_i - mean)^2) with s^2 the residual variance on n - 2 degrees of
  freedom (nan with two points).
* :func:`fit_rate` -- the slope of log err against log h (an observed order of convergence).
* :func:`growth_rate` -- the slope of log|y| against t (an exponential growth rate).
* :func:`bootstrap_exponent` -- the percentile bootstrap interval of the exponent b of
  mean_g ~ a x_g^b over groups g of replicates (paths, seeds, runs), see its docstring for
  the resampling scheme and the seed; :func:`exponent_fit` -- the fit with its interval,
  what every entry point reports.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "MIN_BOOTSTRAP_RUNS",
    "bootstrap_exponent",
    "exponent_fit",
    "fit_power_law",
    "fit_rate",
    "growth_rate",
    "log_slope",
    "time_average",
]

#: The sweep analysis asks for at least this many replicates at every x before it quotes an
#: interval (with two, the resampled means take three values and the "95 %" is a fiction);
#: the validation studies, which run two paths per H at their quick size, pass ``min_runs=2``.
MIN_BOOTSTRAP_RUNS = 3

#: Tolerance of the time window: a sample at t0 - 1e-9 counts as t >= t0 (record times are
#: sums of steps and miss the grid by rounding).
TIME_TOL = 1e-9


def time_average(t, y, t0: float | None = None, t1: float | None = None) -> float:
    """Trapezoid-rule time average of ``y(t)`` over ``t0 <= t <= t1`` (both ends optional).

    ``t`` (n,) increasing sample times, ``y`` (n,) values; samples within :data:`TIME_TOL`
    of an end count as inside. Over the selected samples t_a..t_b the average is
    int y dt / (t_b - t_a) with the trapezoid rule. No sample: nan; one sample, or a window of
    zero length: the plain mean of the selected values. Non-finite values are not removed
    (the average is then non-finite; drop them first where a gap is meant).
    """
    t = np.asarray(t, float)
    y = np.asarray(y, float)
    sel = np.ones(t.shape, bool)
    if t0 is not None:
        sel &= t >= t0 - TIME_TOL
    if t1 is not None:
        sel &= t <= t1 + TIME_TOL
    ts, ys = t[sel], y[sel]
    if ts.size == 0:
        return float("nan")
    if ts.size == 1 or ts[-1] <= ts[0]:
        return float(np.mean(ys))
    return float(np.sum(0.5 * (ys[1:] + ys[:-1]) * np.diff(ts)) / (ts[-1] - ts[0]))


def fit_power_law(x, y) -> dict:
    """Fit y = a x^b by least squares in log-log (x, y > 0).

    Returns ``{"a", "b", "b_stderr"}``; ``b_stderr`` is the standard error of the slope
    (residual variance on n - 2 degrees of freedom), nan with two points.
    """
    x = np.log(np.asarray(x, float))
    y = np.log(np.asarray(y, float))
    n = x.size
    A = np.vstack([x, np.ones(n)]).T
    coef, *_ = np.linalg.lstsq(A, y, rcond=None)
    b, loga = coef
    if n > 2:
        resid = y - A @ coef
        s2 = float(resid @ resid) / (n - 2)
        se = math.sqrt(s2 / float(((x - x.mean()) ** 2).sum()))
    else:
        se = float("nan")
    return {"a": float(math.exp(loga)), "b": float(b), "b_stderr": se}


def fit_rate(h, err) -> float:
    """Slope of log(err) against log(h) by least squares: the observed order of convergence.

    Pairs with h <= 0, err <= 0 or a non-finite err are left out; nan with fewer than two left.
    """
    h = np.asarray(h, float)
    err = np.asarray(err, float)
    ok = (h > 0) & (err > 0) & np.isfinite(err)
    if ok.sum() < 2:
        return float("nan")
    return float(np.polyfit(np.log(h[ok]), np.log(err[ok]), 1)[0])


def growth_rate(t, y) -> float:
    """Exponential rate gamma of y ~ c exp(gamma t): the least-squares slope of log|y| against t
    (all samples used; a zero or non-finite y makes it non-finite)."""
    t = np.asarray(t, float)
    return float(np.polyfit(t, np.log(np.abs(np.asarray(y, float))), 1)[0])


def log_slope(logx, logy) -> np.ndarray:
    """Least-squares slope of ``logy`` (..., n) against ``logx`` (n,), vectorised over the
    leading axes: sum (lx - mean lx)(ly - mean ly) / sum (lx - mean lx)^2."""
    logx = np.asarray(logx, float)
    logy = np.asarray(logy, float)
    xc = logx - logx.mean()
    return ((logy - logy.mean(axis=-1, keepdims=True)) * xc).sum(axis=-1) / (xc @ xc)


def bootstrap_exponent(x, groups, *, resamples: int, seed: int = 0, level: float = 0.95,
                       min_runs: int = MIN_BOOTSTRAP_RUNS) -> tuple[float, float]:
    """Percentile bootstrap interval of the exponent b in mean_g ~ a x_g^b.

    ``x`` (G,) positive abscissae (e.g. the head counts H); ``groups`` G sequences of
    replicate values at each x (e.g. the time-averaged G^2 of each weight path at that H).

    Estimator: b is the least-squares slope of log(mean of group g) against log x_g
    (:func:`log_slope`; the point estimate itself is :func:`fit_power_law` on the group
    means).

    Resampling: paths are resampled with replacement *within* each group, independently
    across groups. The groups are taken in increasing x (ties in the order given); for each
    group in turn one draw of ``rng.integers(0, n_g, size=(resamples, n_g))`` picks its
    resampled replicates, with ``rng = np.random.default_rng(seed)``, so the interval depends
    only on the data, ``resamples`` and ``seed`` (not on the order of the groups).
    Resamples in which some group mean is <= 0 (no logarithm) are dropped. The interval is
    the (1 - level)/2 and (1 + level)/2 percentiles (NumPy's linear interpolation) of the
    remaining slopes.

    Returns ``(lo, hi)``; ``(nan, nan)`` with fewer than two groups, fewer than ``min_runs``
    replicates in some group, ``resamples`` < 1, or no usable resample.
    """
    nan = (float("nan"), float("nan"))
    xs = np.asarray(x, float)
    vals = [np.asarray(g, float).ravel() for g in groups]
    if xs.size != len(vals):
        raise ValueError(f"bootstrap_exponent: {xs.size} x values but {len(vals)} groups")
    if xs.size < 2 or int(resamples) < 1 or min(v.size for v in vals) < max(int(min_runs), 1):
        return nan
    order = np.argsort(xs, kind="stable")
    rng = np.random.default_rng(seed)
    boot = np.stack([vals[i][rng.integers(0, vals[i].size, size=(int(resamples), vals[i].size))].mean(axis=1) for i in order], axis=1)
    good = np.all(boot > 0, axis=1)
    if not good.any():
        return nan
    bs = log_slope(np.log(xs[order]), np.log(boot[good]))
    q = round(50.0 * (1.0 - level), 9)  # 2.5 exactly for level 0.95
    lo, hi = np.percentile(bs, [q, 100.0 - q])
    return float(lo), float(hi)


def exponent_fit(x, groups, *, resamples: int, seed: int = 0, level: float = 0.95,
                 min_runs: int = MIN_BOOTSTRAP_RUNS) -> dict:
    """The power-law fit mean_g = a x_g^b over groups of replicates, with its bootstrap interval.

    Returns ``{"a", "b", "b_stderr", "ci95"}``: :func:`fit_power_law` on the group means and
    ``ci95`` = :func:`bootstrap_exponent` (``resamples``, ``seed``, ``level``,
    ``min_runs``). With fewer than two groups or a group mean <= 0 the fit and the interval
    are nan.
    """
    means = [float(np.mean(np.asarray(g, float))) for g in groups]
    nan = float("nan")
    if len(means) < 2 or not all(m > 0 for m in means):
        return {"a": nan, "b": nan, "b_stderr": nan, "ci95": [nan, nan]}
    f = fit_power_law(x, means)
    f["ci95"] = list(bootstrap_exponent(x, groups, resamples=resamples, seed=seed, level=level, min_runs=min_runs))
    return f
