"""What every solver offers, written down once, and the one loop that drives a solver along
a list of times (:func:`advance_through`; :func:`integrate` gathers what it yields).

The particle solver (:class:`spherepde.solvers.particles.ParticleSolver`), the mesh solver
(:class:`spherepde.solvers.mesh.MeshSolver`) and the coupled mesh-and-tokens solver
(:class:`spherepde.solvers.coupled.CoupledSolver`) all satisfy :class:`Solver`; the run
driver, the validation studies, the examples and the README use :func:`integrate` (or the
same calls) instead of probing for methods.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

__all__ = ["Solver", "Trajectory", "advance_through", "integrate", "TIME_TOL"]

#: Two times closer than this are the same record time (no step is taken between them).
TIME_TOL = 1e-12


@runtime_checkable
class Solver(Protocol):
    """A solver of the Transformer PDE driven by a weight path (docs/model.md §1, §4).

    Attributes
    ----------
    t : float
        The current time.
    step_count : int
        The number of time steps taken so far.
    path : WeightPath
        The weight path Theta_t the solver is driven by.
    may_be_nan : frozenset of str
        Columns that hold NaN by design in some rows (e.g. distances between their records).
    """

    t: float
    step_count: int
    path: object
    may_be_nan: frozenset

    def step_hint(self) -> float | None:
        """The step an adaptive explicit solver takes from the current state (at most the weight
        grid step), for step-count estimates and the step budget; None where steps are fixed or
        follow a local error estimate (no estimate can be made from the state)."""
        ...

    def reference_step(self) -> float | None:
        """For a solver whose steps follow a local error estimate: the explicit step of the current
        state, the yardstick of its step budget; None otherwise."""
        ...

    def last_step(self) -> float:
        """The size of the last step taken (0 before the first)."""
        ...

    def events(self) -> dict:
        """Events for summary.json, e.g. ``{"merges": [...]}`` for a mesh with point masses; {} when none are tracked."""
        ...

    def notes(self) -> list[str]:
        """One-line facts about how the solver will step, for run.log at the start (may be empty)."""
        ...

    def advance(self, t_stop: float, *, should_stop: Callable[[], bool] | None = None) -> bool:
        """Step until ``t == t_stop`` (True), or stop early when ``should_stop()`` says so (False).
        At the solver's own time (to its time grid's tolerance) no step is taken."""
        ...

    def record(self) -> dict:
        """The diagnostics row of the current state (the solver's columns, spherepde.model.columns)."""
        ...

    def snapshot(self) -> dict:
        """Arrays of the current state for snapshot files (``rho`` (nc,) and/or ``X`` (n, d), ``clusters``)."""
        ...

    def get_state(self) -> dict:
        """Everything needed to continue bit for bit (arrays, floats and ints only)."""
        ...

    def set_state(self, state: dict) -> None:
        """Restore a state from :meth:`get_state`."""
        ...


@dataclass
class Trajectory:
    """Records of a solver at a list of times (:func:`integrate`).

    Attributes
    ----------
    t : numpy.ndarray
        The record times, shape (k,).
    rows : list of dict
        ``rows[i]`` is the solver's ``record()`` at ``t[i]``.
    snapshots : list of dict
        ``snapshots[i]`` is its ``snapshot()`` there (empty unless asked for).
    steps : int
        The time steps taken.

    ``traj["G2"]`` is a column as an array of shape (k,).
    """

    t: np.ndarray
    rows: list[dict]
    snapshots: list[dict] = field(default_factory=list)
    steps: int = 0

    def __getitem__(self, column: str) -> np.ndarray:
        return np.array([r[column] for r in self.rows], dtype=float)

    @property
    def columns(self) -> list[str]:
        return list(self.rows[0]) if self.rows else []


def advance_through(solver: Solver, times: Iterable[float], *, should_stop: Callable[[], bool] | None = None) -> Iterator[tuple[int, float, dict | None]]:
    """The one time loop: advance ``solver`` to each of ``times`` in turn and yield ``(i, t, row)``
    there, ``row`` the solver's ``record()`` at ``t = times[i]``.

    ``solver.advance(t)`` is called for every time not before the solver's own: at its own time
    a solver takes no step (a coupled solver stopped between its parts completes them there);
    a time before it (:func:`integrate` allows :data:`TIME_TOL`) records without stepping.
    ``times`` may be produced lazily (a caller that stops early never asks for the rest); they
    are not checked here (:func:`integrate` checks them). When ``should_stop()`` (asked between
    steps, :meth:`Solver.advance`) stops the solver before ``times[i]``, the last item is
    ``(i, t, None)`` with the solver between two times, and the loop ends.
    """
    for i, t in enumerate(times):
        t = float(t)
        if t >= solver.t and solver.advance(t, should_stop=should_stop) is False:
            yield i, t, None
            return
        yield i, t, solver.record()


def integrate(solver: Solver, times: Iterable[float], *, snapshots: bool = False) -> Trajectory:
    """Advance ``solver`` through ``times`` and record at each.

    Parameters
    ----------
    solver : Solver
        A particle, mesh or coupled solver.
    times : iterable of float
        Non-decreasing record times, none before ``solver.t`` by more than :data:`TIME_TOL`;
        a time at (or that close before) the solver's time records without stepping.
    snapshots : bool
        Also keep the solver's ``snapshot()`` at each time.

    Returns
    -------
    Trajectory
        The rows (and snapshots) at ``times`` and the number of steps taken.

    Examples
    --------
    >>> import spherepde as sp
    >>> path = sp.generate_weight_path(sp.OUProcess(), H=2, d=3, T=0.1, dt=0.01, seed=0)
    >>> traj = sp.integrate(sp.ParticleSolver(sp.initial_tokens("octahedral", 30, seed=0), path), (0.05, 0.1))
    >>> [float(t) for t in traj.t]
    [0.05, 0.1]
    >>> sorted(traj.rows[-1])[:3]
    ['G2', 'dEdt_partial', 'edi_exact']
    """
    ts = np.asarray(list(times), dtype=float)
    if ts.ndim != 1 or not np.all(np.isfinite(ts)):
        raise ValueError("integrate: times must be a 1-D sequence of finite numbers")
    if ts.size and (np.any(np.diff(ts) < 0) or ts[0] < solver.t - TIME_TOL):
        raise ValueError(f"integrate: times must be non-decreasing and start at or after the solver's time t = {solver.t}")
    rows, snaps = [], []
    steps0 = int(solver.step_count)
    for _, _, row in advance_through(solver, ts):
        rows.append(row)
        if snapshots:
            snaps.append(solver.snapshot())
    return Trajectory(ts, rows, snaps, int(solver.step_count) - steps0)
