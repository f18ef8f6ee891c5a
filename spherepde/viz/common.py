"""Helpers shared by the PyVista and the Matplotlib pictures: colour ranges, time labels,
token arrays, the density's colour-bar title. No PyVista or Matplotlib import here.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["RHO_TITLE", "color_limits"]


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


def _time_format(times) -> str:
    """A format for times that tells neighbouring frames apart (at least 2 decimals)."""
    t = np.unique(np.asarray(times, float))
    gaps = np.diff(t)
    gaps = gaps[gaps > 0]
    digits = 2
    if gaps.size:
        digits = int(min(8, max(2, math.ceil(-math.log10(gaps.min())) + 1)))
    return f"t = {{:.{digits}f}}"


def _tokens3(X) -> np.ndarray:
    X = np.asarray(X, float)
    if X.ndim != 2:
        raise ValueError(f"tokens must have shape (n, d), got {X.shape}")
    if X.shape[1] == 3:
        return X
    if X.shape[1] == 2:  # S^1 drawn as the equator of S^2
        return np.column_stack([X, np.zeros(len(X))])
    raise ValueError(f"tokens live on S^{X.shape[1] - 1}; only d = 2 or 3 can be drawn on the sphere")

