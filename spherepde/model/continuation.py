"""Continuation of the stationary states of :mod:`spherepde.model.stationary` in nu or beta.

Two complementary tools, both on the axially symmetric reduction (:class:`~spherepde.model.stationary.ReducedGrid`):

* :func:`sweep` -- natural-parameter continuation of the *stable* state, as a slow parameter ramp of the
  noisy dynamics would see it: at each value, the state of the previous value plus a small nonuniform seed is
  the start of :func:`~spherepde.model.stationary.solve_stable`. Run up and down, it shows hysteresis where
  the transition is discontinuous (the down sweep leaves the uniform state at the linear threshold, the up
  sweep returns to it at the fold).
* :func:`trace_branch` -- pseudo-arclength continuation (Keller; as in AUTO and pde2path) of the nonuniform
  branch that bifurcates from the uniform state at the linear threshold, through folds. Unknowns y = (m, mu),
  m = rho/rho_uniform at the nodes, mu = log(lambda) for the parameter lambda (nu or beta); the corrector
  solves F(m, mu) = m - T(m) = 0 with the arclength condition <t, y - y_pred> = 0, <a, b> = sum_j (W_j/|S|)
  a_j b_j + a_mu b_mu; the tangent solves [dF/dy; t_old] t = [0; 1]. At the pitchfork the branch leaves along
  (P_l - mean, 0). Folds are where d mu/ds changes sign; each is refined by the vertex of the parabola
  lambda(r) through the three points around it.

A transition is *continuous* when the branch leaves the threshold into the side where the uniform state is
unstable (nu < nu_c; beta > beta_c) and has no fold in the range, *discontinuous* when it has a fold (the
branch first leaves into the stable side, turns at the fold and gains stability there).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from spherepde.model import stationary as st
from spherepde.model.stationary import ReducedGrid, SteadyProblem, SteadyState

__all__ = ["Branch", "Fold", "PARAMETERS", "Sweep", "sweep", "threshold", "trace_branch"]

#: the parameters a branch can be continued in
PARAMETERS = ("nu", "beta")


def threshold(p: SteadyProblem, param: str, mode: int = 1) -> float:
    """The linear threshold in ``param`` at the other parameters of ``p`` (nan for s = -1: no mode grows)."""
    if p.s < 0:
        return math.nan
    if param == "nu":
        return st.critical_nu(p.beta, p.attention, p.d, mode)
    return st.critical_beta(p.nu, p.attention, p.d, mode)


@dataclass(frozen=True)
class Sweep:
    """States of a natural-parameter sweep, in the order computed (``direction`` "up" or "down")."""

    param: str
    direction: str
    values: np.ndarray
    states: tuple[SteadyState, ...]

    @property
    def order(self) -> np.ndarray:
        return np.array([s.order for s in self.states])


def sweep(p: SteadyProblem, param: str, values, *, grid: ReducedGrid | None = None, mode: int = 1, seed: float = 1e-3, start=None) -> Sweep:
    """Follow the stable state through ``values`` of ``param`` in the order given (module docstring)."""
    grid = grid or ReducedGrid(p.d)
    values = np.asarray(values, dtype=np.float64)
    rho = st.uniform(grid) if start is None else np.asarray(start, dtype=np.float64)
    states = []
    for v in values:
        state = st.solve_stable(grid, p.with_(**{param: float(v)}), st.seeded(grid, rho, mode, seed), mode=mode)
        states.append(state)
        rho = state.rho
    direction = "up" if values.size < 2 or values[-1] >= values[0] else "down"
    return Sweep(param, direction, values, tuple(states))


@dataclass(frozen=True)
class Fold:
    """A turning point of the branch: the parameter value and the order parameter there."""

    value: float
    order: float


@dataclass(frozen=True)
class Branch:
    """The nonuniform branch from the threshold: parameter values, order parameters, stability, folds."""

    param: str
    threshold: float
    values: np.ndarray
    order: np.ndarray
    stable: np.ndarray
    converged: bool
    residual: np.ndarray
    folds: tuple[Fold, ...] = field(default=())

    @property
    def transition(self) -> str:
        """'continuous', 'discontinuous' (a fold) or 'none' (s = -1, no branch)."""
        if not self.values.size:
            return "none"
        return "discontinuous" if self.folds else "continuous"


def _F(grid: ReducedGrid, p: SteadyProblem, m):
    return m - st.self_consistent_map(grid, p, m / grid.measure) * grid.measure


def _dF_dmu(grid, p, param, m, lam, h=1e-6):
    up = _F(grid, p.with_(**{param: lam * math.exp(h)}), m)
    dn = _F(grid, p.with_(**{param: lam * math.exp(-h)}), m)
    return (up - dn) / (2 * h)


def _jac(grid, p, param, m, lam):
    """dF/dm (n, n) and dF/dmu (n,) at (m, lam) (m = rho |S|: dT/drho is the same matrix in m)."""
    _, J = st.map_jacobian(grid, p.with_(**{param: lam}), m / grid.measure)
    return np.eye(grid.n) - J, _dF_dmu(grid, p, param, m, lam)


def _correct(grid, p, param, y_pred, t, omega, maxiter=12, tol=1e-11):
    """Newton on [F(y); <t, y - y_pred>] = 0 from the predictor; (y, iterations) or (None, maxiter)."""
    y = y_pred.copy()
    n = grid.n
    row = np.append(omega * t[:n], t[n])
    for it in range(1, maxiter + 1):
        lam = math.exp(y[n])
        if not (np.all(y[:n] > 0) and 1e-8 < lam < 1e6):
            return None, it
        Fm, Fmu = _jac(grid, p, param, y[:n], lam)
        F = _F(grid, p.with_(**{param: lam}), y[:n])
        G = np.append(F, row @ (y - y_pred))
        if np.max(np.abs(G)) / np.max(y[:n]) < tol:
            return y, it
        A = np.zeros((n + 1, n + 1))
        A[:n, :n], A[:n, n], A[n] = Fm, Fmu, row
        y = y - np.linalg.solve(A, G)
    return None, maxiter


def _tangent(grid, p, param, y, t_old, omega):
    n = grid.n
    lam = math.exp(y[n])
    Fm, Fmu = _jac(grid, p, param, y[:n], lam)
    A = np.zeros((n + 1, n + 1))
    A[:n, :n], A[:n, n], A[n] = Fm, Fmu, np.append(omega * t_old[:n], t_old[n])
    t = np.linalg.solve(A, np.append(np.zeros(n), 1.0))
    return t / math.sqrt(np.sum(omega * t[:n] ** 2) + t[n] ** 2)


def _refine_fold(values, order, i) -> Fold:
    """Vertex of the parabola lambda(r) through points i-1, i, i+1 (the middle one is the extreme)."""
    r, lam = order[i - 1:i + 2], values[i - 1:i + 2]
    try:
        a, b, c = np.polyfit(r, lam, 2)
    except (np.linalg.LinAlgError, ValueError):
        return Fold(float(lam[1]), float(r[1]))
    if a == 0 or not (min(r) <= -b / (2 * a) <= max(r)):
        return Fold(float(lam[1]), float(r[1]))
    rv = -b / (2 * a)
    return Fold(float(c - b * b / (4 * a)), float(rv))


def trace_branch(p: SteadyProblem, param: str, lo: float, hi: float, *, grid: ReducedGrid | None = None, mode: int = 1,
                 ds: float = 0.05, ds_max: float = 0.5, max_steps: int = 400, r_max: float = 0.995) -> Branch:
    """Pseudo-arclength continuation of the branch from the threshold in ``param`` (module docstring), until
    the parameter leaves [lo, hi] (with 10 % margin), the order parameter passes ``r_max`` or ``max_steps``."""
    grid = grid or ReducedGrid(p.d)
    lam_c = threshold(p, param, mode)
    empty = np.zeros(0)
    if not math.isfinite(lam_c):
        return Branch(param, lam_c, empty, empty, np.zeros(0, bool), True, empty)
    n, omega = grid.n, grid.weights / grid.measure
    phi = grid.mode_function(mode)
    phi = phi - np.sum(omega * phi)
    t = np.append(phi / math.sqrt(np.sum(omega * phi**2)), 0.0)
    y = np.append(np.ones(n), math.log(lam_c))
    vals, orders, stab, mus, res = [lam_c], [0.0], [False], [0.0], [0.0]
    converged, steps = True, 0
    while steps < max_steps:
        y_new, its = _correct(grid, p, param, y + ds * t, t, omega)
        if y_new is None:
            ds *= 0.5
            if ds < 1e-6:
                converged = False
                break
            continue
        steps += 1
        t = _tangent(grid, p, param, y_new, t, omega)
        y = y_new
        lam = math.exp(y[n])
        q = p.with_(**{param: lam})
        rho = y[:n] / grid.measure
        _, J = st.map_jacobian(grid, q, rho)
        vals.append(lam)
        orders.append(grid.order(rho, mode))
        stab.append(float(np.max(np.linalg.eigvals(J).real)) < 1.0 + st.MARGINAL)
        mus.append(t[n])
        res.append(st.residual(grid, q, rho))
        if its <= 4:
            ds = min(1.5 * ds, ds_max)
        if not (lo / 1.1 <= lam <= hi * 1.1) or orders[-1] > r_max:
            break
    values, order = np.array(vals), np.array(orders)
    folds = []
    for i in range(1, len(mus) - 2):
        if mus[i] * mus[i + 1] < 0:  # d mu/ds changes sign between points i and i + 1: the extreme is one of them
            j = i + int((values[i + 1] > values[i]) == (mus[i] > 0))
            fold = _refine_fold(values, order, j)
            if lo <= fold.value <= hi:
                folds.append(fold)
    return Branch(param, lam_c, values, order, np.array(stab), converged, np.array(res), tuple(folds))
