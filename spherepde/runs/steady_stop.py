"""Stopping a run when its density is stationary (``solver.steady_tol``).

The model is py-pde's ``SteadyStateTracker`` (zwicker-group/py-pde, ``pde/trackers/trackers.py``): a
run ends when its field changes less than a tolerance per unit time. Here the field is the cell
density ρ_c (mesh runs; the mesh of ``both`` runs, whose tokens stop with it), checked at the
records t_0 < t_1 < ... of the run: at record r ≥ 1 the rate

    rate_r = max_c |ρ_c(t_r) − ρ_c(t_{r−1})| / (t_r − t_{r−1}) / max_c ρ_c(t_r)

(the largest change of a cell's density per unit time, relative to the largest density: units
1/time, independent of the mesh's normalisation) is compared with the tolerance, and the run ends,
completed, at the first record where ``rate_r < steady_tol``. That record's row, snapshot and
checkpoint are written as at T, and ``summary.json`` says ``"stopped": "stationary"`` with the time.

A point mass (``solver.atoms``) counts as its mass deposited in its nearest cell, as in the
snapshots (:meth:`spherepde.solvers.mesh.MeshSolver.density`).

The density of the previous record is part of every checkpoint (``steady_rho``, ``steady_t``), so a
resumed run checks the same differences and stops at the same record as an uninterrupted one.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["SteadyStop", "STATE_KEYS", "steady_rate", "tracker"]

#: The checkpoint's arrays of the tracker: the density at the last record and its time.
STATE_KEYS = ("steady_rho", "steady_t")


def tracker(tol: float) -> SteadyStop | None:
    """The check of ``solver.steady_tol``: None when it is 0 (off)."""
    return SteadyStop(tol) if tol > 0 else None


def steady_rate(rho_prev: np.ndarray, t_prev: float, rho: np.ndarray, t: float) -> float:
    """max_c |rho_c - rho_prev_c| / (t - t_prev) / max_c rho_c (inf when t <= t_prev or max rho <= 0)."""
    dt = float(t) - float(t_prev)
    top = float(np.max(rho)) if rho.size else 0.0
    if not (dt > 0 and top > 0):
        return math.inf
    return float(np.max(np.abs(rho - rho_prev))) / dt / top


class SteadyStop:
    """The stationarity check of a run: :meth:`observe` at every record, True once stationary.

    Parameters
    ----------
    tol : float
        ``solver.steady_tol`` (> 0), in 1/time.
    """

    def __init__(self, tol: float):
        if not tol > 0:
            raise ValueError(f"steady_tol must be > 0, got {tol}")
        self.tol = float(tol)
        self.rho: np.ndarray | None = None
        self.t = math.nan
        self.rate = math.nan
        self.stopped_at: float | None = None  # the record time where the run ended as stationary

    def observe(self, t: float, rho: np.ndarray) -> bool:
        """Record the density ``rho`` (nc,) at the record time ``t``; True when its rate since the last record is below ``tol``."""
        rho = np.array(rho, dtype=np.float64)
        stationary = False
        if self.rho is not None and t > self.t:
            self.rate = steady_rate(self.rho, self.t, rho, t)
            stationary = self.rate < self.tol
        self.rho, self.t = rho, float(t)
        return stationary

    def summary(self) -> dict:
        """summary.json's entry of a run that ended as stationary (empty otherwise)."""
        if self.stopped_at is None:
            return {}
        return {"stopped": "stationary", "stationary": {"t": self.stopped_at, "rate": self.rate, "steady_tol": self.tol}}

    def state(self) -> dict:
        """The arrays a checkpoint holds (:data:`STATE_KEYS`); empty before the first record."""
        return {} if self.rho is None else {"steady_rho": self.rho.copy(), "steady_t": self.t}

    def restore(self, state: dict) -> None:
        """Take the tracker's arrays out of a checkpoint's ``state`` (they are removed from it); ValueError if absent."""
        missing = [k for k in STATE_KEYS if k not in state]
        if missing:
            raise ValueError(f"it has no {', '.join(missing)} (the density at the last record, needed by solver.steady_tol)")
        self.rho = np.asarray(state.pop("steady_rho"), dtype=np.float64).copy()
        self.t = float(state.pop("steady_t"))
