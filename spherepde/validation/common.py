"""Helpers shared by the validation studies: rate fits, tables, JSON."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np

__all__ = ["fit_rate", "fit_power_law", "markdown_table", "to_jsonable", "save_json", "figure_path", "save_figure"]


def fit_rate(h, err) -> float:
    """Slope of log(err) against log(h) by least squares (the observed convergence order)."""
    h = np.asarray(h, float)
    err = np.asarray(err, float)
    ok = (h > 0) & (err > 0) & np.isfinite(err)
    if ok.sum() < 2:
        return float("nan")
    return float(np.polyfit(np.log(h[ok]), np.log(err[ok]), 1)[0])


def fit_power_law(x, y) -> dict:
    """Fit y = a x^b in log-log; returns a, b and the standard error of b (nan with 2 points)."""
    x = np.log(np.asarray(x, float))
    y = np.log(np.asarray(y, float))
    n = x.size
    A = np.vstack([x, np.ones(n)]).T
    coef, res, *_ = np.linalg.lstsq(A, y, rcond=None)
    b, loga = coef
    if n > 2:
        resid = y - A @ coef
        s2 = float(resid @ resid) / (n - 2)
        se = math.sqrt(s2 / float(((x - x.mean()) ** 2).sum()))
    else:
        se = float("nan")
    return {"a": float(math.exp(loga)), "b": float(b), "b_stderr": se}


def markdown_table(headers, rows, fmt: str = "{:.4g}") -> str:
    """A Markdown table; floats formatted with ``fmt``."""
    def cell(v):
        if isinstance(v, float):
            return "nan" if not math.isfinite(v) else fmt.format(v)
        return str(v)

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def to_jsonable(obj):
    """Recursively convert numpy scalars/arrays (and non-finite floats -> None) for JSON."""
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return to_jsonable(obj.tolist())
    if isinstance(obj, (np.floating, float)):
        v = float(obj)
        return v if math.isfinite(v) else None
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.bool_,)):
        return bool(obj)
    if isinstance(obj, Path):
        return str(obj)
    return obj


def save_json(obj, path) -> None:
    Path(path).write_text(json.dumps(to_jsonable(obj), indent=2))


def figure_path(out_dir, name: str) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    return out / name


def save_figure(fig, out_dir, name: str, dpi: int = 120) -> Path:
    """Save a Matplotlib figure as ``out_dir/name``, close it, and return the path."""
    import matplotlib.pyplot as plt

    path = figure_path(out_dir, name)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def progress_logger(verbose: bool):
    """A ``log(msg)`` that prints one progress line to stderr (flushed) when ``verbose``, else does nothing.

    Studies take ``verbose=True`` from ``spherepde validate -v`` so that hour-long ``--full``
    runs say which run they are on.
    """
    if not verbose:
        return lambda *_a, **_k: None

    def log(*args, **kwargs) -> None:
        print(*args, file=sys.stderr, flush=True, **kwargs)

    return log


def study_params(sizes: dict, size: str, overrides: dict, *, strict: bool = False):
    """The parameters of a study's ``run(size, **overrides)`` and its progress ``log``.

    ``sizes[size]`` is copied and updated with ``overrides``; ``verbose`` is taken out of
    the overrides (see :func:`progress_logger`). ``strict`` rejects override keys that the
    size does not define. Raises ValueError on an unknown size or (strict) key.
    """
    if size not in sizes:
        raise ValueError(f"unknown size {size!r}; use one of {sorted(sizes)}")
    overrides = dict(overrides)
    verbose = bool(overrides.pop("verbose", False))
    p = dict(sizes[size])
    bad = set(overrides) - set(p)
    if strict and bad:
        raise ValueError(f"unknown parameter(s) {sorted(bad)}; valid: {sorted(p)}")
    p.update(overrides)
    return p, progress_logger(verbose)


def checks_line(checks: dict) -> str:
    """The closing sentence of a study summary: which checks passed and which failed."""
    ok = [k for k, v in checks.items() if v]
    bad = [k for k, v in checks.items() if not v]
    return f"\nChecks passed: {', '.join(ok) or 'none'}. Failed: {', '.join(bad) or 'none'}."


def print_study(res: dict) -> None:
    """Print a study's tables (if any) and summary: the ``python -m validation.NAME`` output."""
    for t in res.get("tables", []):
        print(t["title"])
        print(markdown_table(t["headers"], t["rows"]))
    if "wall_s" in res:  # seconds, or seconds per part
        print("wall time (s):", res["wall_s"])
    print(res["summary"])
