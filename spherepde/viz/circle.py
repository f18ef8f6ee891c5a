"""Views of runs on the circle S^1 (d = 2): a theta-t density map (kymograph) and density profiles.

On the circle a snapshot is a function of one angle theta = atan2(x_2, x_1) in [0, 2 pi), so a
whole run fits in one picture: the density (cell averages of a mesh run, or the histogram of the
token angles of a particle run, normalised to a probability density in theta) as colour over
(theta, t), with the tokens' angles drawn over it as dots at each snapshot time and the point
masses / clusters as markers. :func:`plot_kymograph` draws it, :func:`plot_profiles` draws the
density against theta at chosen times with the cluster centres marked.

Densities here are with respect to arc length (integral over [0, 2 pi) = 1): a mesh's cell
averages are exactly that; a histogram of n token angles on ``bins`` equal bins is
counts / (n * bin width).
"""

from __future__ import annotations

import numpy as np

__all__ = ["angles", "arc_edges", "token_histograms", "plot_kymograph", "plot_profiles"]

TWO_PI = 2.0 * np.pi

#: Tokens drawn over a kymograph (a seeded, fixed subset beyond this many).
MAX_TOKENS_DRAWN = 300


def angles(P) -> np.ndarray:
    """theta = atan2(x_2, x_1) in [0, 2 pi) of points P (..., 2) on the circle."""
    P = np.asarray(P, dtype=np.float64)
    if P.shape[-1] != 2:
        raise ValueError(f"points on the circle have 2 coordinates, got shape {P.shape}")
    return np.mod(np.arctan2(P[..., 1], P[..., 0]), TWO_PI)


def arc_edges(theta) -> np.ndarray:
    """Edges (nc + 1,) of the arcs around node angles ``theta`` (nc,), sorted, for drawing: the
    midpoints between consecutive nodes (periodic), the first edge repeated + 2 pi at the end.
    (For a uniform circle mesh these are its cell boundaries.)"""
    th = np.sort(np.mod(np.asarray(theta, dtype=np.float64), TWO_PI))
    if th.size < 2:
        raise ValueError("a circle mesh needs at least 2 cells")
    nxt = np.append(th[1:], th[0] + TWO_PI)
    mids = 0.5 * (th + nxt)  # edge after each node
    first = mids[-1] - TWO_PI
    return np.concatenate([[first], mids])


def token_histograms(X, bins: int, weights=None) -> tuple[np.ndarray, np.ndarray]:
    """Densities in theta (S, bins) of token snapshots X (S, n, 2) on ``bins`` equal bins of
    [0, 2 pi), and the bin edges (bins + 1,): counts / (n bin width), so each row integrates to 1."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 3 or X.shape[2] != 2:
        raise ValueError(f"token snapshots on the circle have shape (S, n, 2), got {X.shape}")
    edges = np.linspace(0.0, TWO_PI, int(bins) + 1)
    th = angles(X)
    w = np.full(X.shape[1], 1.0 / X.shape[1]) if weights is None else np.asarray(weights, dtype=np.float64)
    out = np.stack([np.histogram(th[k], bins=edges, weights=w)[0] for k in range(X.shape[0])]) / (TWO_PI / bins)
    return out, edges


def _time_edges(t) -> np.ndarray:
    t = np.asarray(t, dtype=np.float64)
    if t.size == 1:
        return np.array([t[0] - 0.5, t[0] + 0.5])
    mids = 0.5 * (t[1:] + t[:-1])
    return np.concatenate([[t[0] - (mids[0] - t[0])], mids, [t[-1] + (t[-1] - mids[-1])]])


def _sorted_rows(theta, rho):
    order = np.argsort(np.mod(theta, TWO_PI))
    return arc_edges(theta), np.asarray(rho)[:, order]


def plot_kymograph(t, *, theta=None, rho=None, tokens=None, points=None, bins: int = 128, log: bool = False, title: str = "", predicted=None):
    """The theta-t density map of a run on the circle.

    Parameters
    ----------
    t : (S,) snapshot times.
    theta, rho : node angles (nc,) and cell densities (S, nc) of a mesh run; or None.
    tokens : (S, n, 2) token snapshots: their histogram is the colour when ``rho`` is None, and
        their angles are drawn over the map as dots (at most MAX_TOKENS_DRAWN of them).
    points : list of S arrays (k_s, 3) of (mass, x_1, x_2) rows -- point masses or cluster centres
        -- drawn as markers of size ~ mass.
    bins : histogram bins of the tokens (when they give the colour).
    log : colour on a log scale (floor 1e-3 of the peak).
    predicted : angles (k,) drawn as dashed lines (e.g. the nucleation prediction of summary.json).
    """
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm

    t = np.asarray(t, dtype=np.float64)
    if rho is not None:
        if theta is None:
            raise ValueError("a density kymograph needs the node angles theta")
        edges, values = _sorted_rows(theta, rho)
        what = "density (cells)"
    elif tokens is not None:
        values, edges = token_histograms(tokens, bins)
        what = f"density (histogram of the tokens, {bins} bins)"
    else:
        raise ValueError("a kymograph needs densities rho or tokens")
    if values.shape[0] != t.size:
        raise ValueError(f"{values.shape[0]} snapshots for {t.size} times")
    fig, ax = plt.subplots(figsize=(7.0, 4.2), layout="constrained")
    vmax = float(np.nanmax(values)) if np.any(values > 0) else 1.0
    norm = LogNorm(vmin=vmax * 1e-3, vmax=vmax) if log else None
    shown = np.maximum(values, vmax * 1e-3) if log else values
    mesh = ax.pcolormesh(edges, _time_edges(t), shown, cmap="viridis", norm=norm, shading="flat", rasterized=True)
    fig.colorbar(mesh, ax=ax, label=what)
    if tokens is not None:
        X = np.asarray(tokens)
        n = X.shape[1]
        keep = np.sort(np.random.default_rng(0).choice(n, MAX_TOKENS_DRAWN, replace=False)) if n > MAX_TOKENS_DRAWN else np.arange(n)
        th = angles(X[:, keep, :])
        ax.plot(th.ravel(), np.repeat(t, keep.size), ",", color="white", alpha=0.8, label="tokens")
    if points is not None:
        for k, rows in enumerate(points):
            rows = np.asarray(rows, dtype=np.float64).reshape(-1, 3)
            rows = rows[np.isfinite(rows[:, 0]) & (rows[:, 0] > 0)]
            if rows.size:
                ax.scatter(angles(rows[:, 1:]), np.full(len(rows), t[k]), s=4 + 40 * rows[:, 0], marker="x", color="tab:red", linewidths=0.8,
                           label="clusters" if k == 0 else None)
    if predicted is not None:
        for j, th in enumerate(np.mod(np.asarray(predicted, dtype=np.float64), TWO_PI)):
            ax.axvline(th, color="tab:orange", linestyle="--", linewidth=0.9, label="predicted" if j == 0 else None)
    if tokens is not None or points is not None or predicted is not None:
        ax.legend(fontsize="small", loc="lower right", framealpha=0.6)
    ax.set_xlim(0.0, TWO_PI)
    ax.set_xticks(np.arange(5) * np.pi / 2, ["0", "π/2", "π", "3π/2", "2π"])
    ax.set_xlabel("θ")
    ax.set_ylabel("t")
    ax.set_title(title or "density on the circle over time")
    return fig


def plot_profiles(theta, rho, t, idx, *, tokens=None, points=None, bins: int = 128, title: str = ""):
    """Density against theta at the snapshots ``idx`` (one line each), the tokens' histograms as
    steps beside them, the cluster centres / point masses (``points``, as in :func:`plot_kymograph`)
    as vertical ticks. ``theta``/``rho`` may be None for a token run."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.0, 3.8), layout="constrained")
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    hist = token_histograms(tokens, bins) if tokens is not None else None
    for j, k in enumerate(idx):
        c = colors[j % len(colors)]
        if rho is not None:
            order = np.argsort(np.mod(theta, TWO_PI))
            ax.plot(np.mod(theta, TWO_PI)[order], np.asarray(rho)[k][order], color=c, label=f"t = {t[k]:g}")
        if hist is not None:
            ax.stairs(hist[0][k], hist[1], color=c, alpha=0.6, linestyle="--" if rho is not None else "-",
                      label=f"tokens, t = {t[k]:g}" if rho is not None else f"t = {t[k]:g}")
        if points is not None:
            rows = np.asarray(points[k], dtype=np.float64).reshape(-1, 3)
            rows = rows[np.isfinite(rows[:, 0]) & (rows[:, 0] > 0)]
            for th in angles(rows[:, 1:]) if rows.size else []:
                ax.axvline(th, color=c, linewidth=0.8, alpha=0.7, linestyle=":")
    ax.set_xlim(0.0, TWO_PI)
    ax.set_xticks(np.arange(5) * np.pi / 2, ["0", "π/2", "π", "3π/2", "2π"])
    ax.set_xlabel("θ")
    ax.set_ylabel("density in θ")
    ax.set_yscale("symlog", linthresh=1.0)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_title(title or "density against θ (dotted: cluster centres)")
    return fig
