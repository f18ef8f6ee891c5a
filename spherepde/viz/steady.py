"""The figure of ``spherepde steady``: the order parameter of the stationary states against nu or beta.

Matplotlib is imported only inside the function (through :mod:`spherepde.viz.figstyle`).
"""

from __future__ import annotations

import math

import numpy as np

from spherepde.viz.figstyle import subplots

__all__ = ["plot_steady"]

_LABEL = {"nu": "noise ν", "beta": "inverse temperature β"}


def plot_steady(sweeps, branch, *, title: str = "", mode: int = 1):
    """Order parameter against the parameter: the up and down sweeps of the stable state
    (:class:`spherepde.model.continuation.Sweep`) as markers, the traced branch
    (:class:`spherepde.model.continuation.Branch`) as a line (solid where linearly stable, dashed where
    not), its folds as crosses and the linear threshold as a dotted vertical line."""
    fig, ax = subplots(figsize=(6.4, 4.2), layout="constrained")
    styles = {"down": ("v", "tab:blue"), "up": ("^", "tab:red")}
    for sw in sweeps:
        marker, colour = styles.get(sw.direction, ("o", "k"))
        ax.plot(sw.values, sw.order, marker=marker, color=colour, linestyle="none", markersize=5, alpha=0.8, label=f"stable state, {sw.param} {sw.direction}")
    if branch is not None and branch.values.size > 1:
        v, r, s = branch.values, branch.order, branch.stable
        for k in range(1, v.size):
            ok = bool(s[k] and s[k - 1])
            ax.plot(v[k - 1:k + 1], r[k - 1:k + 1], color="0.35", linewidth=1.2, linestyle="-" if ok else "--")
        ax.plot([], [], color="0.35", linestyle="-", label="branch (stable)")
        if not np.all(s[1:]):
            ax.plot([], [], color="0.35", linestyle="--", label="branch (unstable)")
        for j, f in enumerate(branch.folds):
            ax.plot([f.value], [f.order], "x", color="tab:green", markersize=10, markeredgewidth=2, label="fold" if j == 0 else None)
    if branch is not None and math.isfinite(branch.threshold):
        ax.axvline(branch.threshold, color="0.5", linestyle=":", label="linear threshold")
    lo = min(float(np.min(sw.values)) for sw in sweeps) if sweeps else None
    hi = max(float(np.max(sw.values)) for sw in sweeps) if sweeps else None
    if lo is not None and hi > lo:
        ax.set_xlim(lo - 0.02 * (hi - lo), hi + 0.02 * (hi - lo))
    ax.set_ylim(-0.03, 1.03)
    param = sweeps[0].param if sweeps else (branch.param if branch is not None else "nu")
    ax.set_xlabel(_LABEL.get(param, param))
    ax.set_ylabel("order parameter |∫ x ρ|" if mode == 1 else f"order parameter r_{mode}")
    ax.set_title(title or "stationary states")
    ax.legend(fontsize="small", framealpha=0.7)
    return fig
