"""The aggregate study of a sweep: a time-averaged diagnostic against a parameter, a
power-law fit y = a x^b with a bootstrap interval for b, and its figure.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from spherepde._base import atomic_write_text
from spherepde.model.columns import COLUMNS, PARTICLE_PREFIX, is_token_column
from spherepde.model.statistics import MIN_BOOTSTRAP_RUNS, exponent_fit
from spherepde.runs.files import jsonable
from spherepde.runs.sweep.state import _finite

__all__ = ["analyse", "axis_label", "MIN_BOOTSTRAP_RUNS"]

#: Axis labels of the common sweep keys (others: the key's last part, then the key).
AXIS_LABELS = {
    "model.H": "H (heads)", "model.d": "d (dimension)", "initial.n": "n (tokens)", "mesh.level": "mesh level (20·level² cells)",
    "weights.sigma": "σ (weight noise)", "weights.beta": "β (initial scale of the weights)", "weights.kappa": "κ (OU rate)",
    "weights.mean": "OU mean", "weights.dt": "Δt of the weight path", "weights.seed": "seed of the weight noise", "solver.T": "T (final time)",
    "solver.cfl": "CFL number", "solver.dt": "Δt", "initial.sigma": "σ of the initial clusters", "G2": "G²", "energy": "energy E",
}


def axis_label(key: str) -> str:
    """A readable axis label for a config key or a diagnostics column: "H (heads)" for model.H."""
    if key in AXIS_LABELS:
        return AXIS_LABELS[key]
    if key in COLUMNS:  # a diagnostics column: its units from the registry (the tokens of a both run named so)
        token = is_token_column(key)
        base = key[len(PARTICLE_PREFIX):] if token else key
        name = AXIS_LABELS.get(base, base) + (" of the tokens" if token else "")
        return name if COLUMNS[key].units == "1" else f"{name} ({COLUMNS[key].units})"
    last = key.rsplit(".", 1)[-1]
    return f"{last} ({key})" if last != key else key


def interval_note(res: dict) -> str:
    """Why a result has no interval for b (empty when it has one)."""
    if res.get("b_ci95") or math.isfinite(res.get("b_stderr", math.nan)):
        return ""
    if not math.isfinite(res.get("b", math.nan)):
        return ""
    return f"interval undefined: need >= {MIN_BOOTSTRAP_RUNS} runs per point"


# ==================================================================== the analysis
def analyse(table: list[dict], x: str, y: str, *, out=None, t_min: float | None = None, bootstrap: int = 1000, seed: int = 0, formats=("png", "pdf")) -> dict:
    """The aggregate study: time-averaged ``y`` against ``x`` with a power-law fit.

    ``table`` holds rows with the key ``x`` and the column ``mean_<y>`` (the rows of
    results.csv; only rows with status 'completed' and a finite value are used). The
    values are grouped by x and averaged over the other axes (e.g. seeds); the fit
    y = a x^b is made on the group means. A
    bootstrap over the replicates of each group (:func:`spherepde.model.statistics.exponent_fit`,
    ``bootstrap`` resamples, seed ``seed``) gives a 95 %
    interval for b when every group has at least :data:`MIN_BOOTSTRAP_RUNS` runs (else
    ``b_ci95`` is None and ``interval_note`` says why). With ``out``, writes ``analysis.json`` and ``analysis.png/.pdf``
    (log-log: every run, per x the mean with its standard error and the 5-95 % quantile
    range of the runs, the fit). Each point of ``points`` holds mean, std, sem (standard
    error of the mean), q05, q95 and n.
    """
    col = f"mean_{y}"
    groups: dict[float, list[float]] = {}
    excluded = 0
    for r in table:
        v = _finite(r.get(col))
        xv = _finite(r.get(x))
        if r.get("status", "completed") != "completed" or v is None or xv is None:
            excluded += 1
            continue
        groups.setdefault(xv, []).append(v)
    xs = np.array(sorted(groups), float)
    vals = [np.array(groups[v], float) for v in xs]
    means = np.array([g.mean() for g in vals])
    stds = np.array([g.std(ddof=1) if g.size > 1 else 0.0 for g in vals])
    ns = [int(g.size) for g in vals]
    sems = np.array([s / math.sqrt(n) if n > 1 else 0.0 for s, n in zip(stds, ns)])
    q05 = np.array([np.quantile(g, 0.05) for g in vals])
    q95 = np.array([np.quantile(g, 0.95) for g in vals])
    ok = (xs > 0) & (means > 0)
    nan = float("nan")
    fit = {"a": nan, "b": nan, "b_stderr": nan}
    ci = None
    if ok.sum() >= 2:
        fit = exponent_fit(xs[ok], [g for g, k in zip(vals, ok) if k], resamples=bootstrap, seed=seed, min_runs=MIN_BOOTSTRAP_RUNS)
        if all(math.isfinite(v) for v in fit["ci95"]):
            ci = fit["ci95"]
    result = {
        "x": x, "y": y, "column": col, "t_min": t_min,
        "a": fit["a"], "b": fit["b"], "b_stderr": fit["b_stderr"], "b_ci95": ci, "bootstrap": bootstrap, "bootstrap_seed": seed,
        "points": [{"x": float(a), "mean": float(m), "std": float(s), "sem": float(e), "q05": float(lo), "q95": float(hi), "n": n}
                   for a, m, s, e, lo, hi, n in zip(xs, means, stds, sems, q05, q95, ns)],
        "runs_used": int(sum(ns)), "runs_excluded": excluded,
    }
    if ok.sum() < 2:
        result["note"] = "fewer than two x values with a positive mean: no power-law fit"
    result["interval_note"] = interval_note(result)
    if out is not None:
        out = Path(out)
        atomic_write_text(out / "analysis.json", json.dumps(jsonable(result), indent=2))
        if xs.size:
            _analysis_figure(result, groups, out, formats)
    return result


def _analysis_figure(res: dict, groups: dict, out: Path, formats) -> list[Path]:
    fig = analysis_figure(res, groups)
    written = []
    for fmt in formats:
        p = out / f"analysis.{fmt}"
        fig.savefig(p, dpi=150)
        written.append(p)
    return written


def analysis_figure(res: dict, groups: dict):
    """The figure of :func:`analyse`'s result ``res`` and its runs ``groups`` (x -> values)."""
    from matplotlib.figure import Figure

    xs = np.array([p["x"] for p in res["points"]])
    means = np.array([p["mean"] for p in res["points"]])
    sems = np.array([p.get("sem", 0.0) for p in res["points"]])
    q05 = np.array([p.get("q05", m) for p, m in zip(res["points"], means)])
    q95 = np.array([p.get("q95", m) for p, m in zip(res["points"], means)])
    fig = Figure(figsize=(6.0, 4.4), layout="constrained")
    ax = fig.add_subplot()
    allx = np.concatenate([[k] * len(v) for k, v in groups.items()])
    ally = np.concatenate([v for v in groups.values()])
    ax.scatter(allx, ally, s=12, color="0.6", alpha=0.6, label="runs", zorder=1)
    n_text = "/".join(sorted({str(p["n"]) for p in res["points"]}, key=int))
    if max(p["n"] for p in res["points"]) > 1:
        ax.vlines(xs, q05, q95, color="C0", alpha=0.3, lw=6, label="5–95 % of the runs", zorder=2)
        ax.errorbar(xs, means, yerr=sems, fmt="o", color="C0", capsize=4, label=f"mean ± standard error ({n_text} runs per point)", zorder=3)
    else:
        ax.plot(xs, means, "o", color="C0", label="one run per point", zorder=3)
    logx = bool(np.all(xs > 0))
    logy = bool(np.all(ally > 0))
    if math.isfinite(res["b"]):
        xx = np.geomspace(xs[xs > 0].min(), xs.max(), 100)
        label = f"fit a·x^b: b = {res['b']:.3f}"
        if math.isfinite(res["b_stderr"]):
            label += f" ± {res['b_stderr']:.3f} (s.e. of the fit)"
        if res["b_ci95"]:
            label += f", 95 % bootstrap CI [{res['b_ci95'][0]:.3f}, {res['b_ci95'][1]:.3f}]"
        note = interval_note(res) if "interval_note" not in res else res["interval_note"]
        if note:
            label += f" ({note})"
        ax.plot(xx, res["a"] * xx ** res["b"], "-", color="C3", label=label, zorder=2)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    if np.all(np.isclose(xs, np.round(xs), rtol=0, atol=1e-9)):  # integer x (H, n, a level): integer ticks at the values, not 2x10^0
        from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator, StrMethodFormatter

        ax.xaxis.set_major_locator(FixedLocator(xs))
        ax.xaxis.set_major_formatter(StrMethodFormatter("{x:.0f}"))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_minor_formatter(NullFormatter())
    tm = res.get("t_min")
    ax.set_xlabel(axis_label(res["x"]))
    ax.set_ylabel(f"time average of {axis_label(res['y'])}" + (f" over t ≥ {tm:g}" if tm else ""))
    ax.set_title(f"{axis_label(res['y'])} against {axis_label(res['x'])}")
    ax.legend(fontsize=8)
    return fig

