"""Time steppers: the one registry of the package's time schemes, kept as data (docs/model.md §4).

:data:`STEPPERS` holds every scheme a user can name as ``solver.integrator``; each entry is a
small frozen data class that says which solvers it serves (``"particles"``, ``"mesh"``), its
order and its aliases, and takes the step itself. The config's choices, the studies' ranges
and both solvers read this registry; a new scheme is one :class:`ExplicitScheme` and one
:func:`register_stepper` call (``tests/solvers/test_extend_scheme.py`` does it in a test file).

Explicit schemes (:class:`ExplicitScheme`) are Runge--Kutta methods in Shu--Osher form
(Shu & Osher 1988; Gottlieb, Shu & Tadmor, SIAM Review 43, 2001):

    u^(0) = u_n,
    u^(i) = sum_{j<i} ( alpha_ij u^(j) + dt beta_ij L(u^(j), t_n + c_j dt) ),  i = 1..s,
    u_{n+1} = u^(s).

With non-negative coefficients every stage is a convex combination of forward-Euler steps
of size (beta_ij/alpha_ij) dt <= dt, so positivity of one Euler step under the CFL bound
carries over (SSP coefficient 1 for the three shipped schemes). Each scheme also stores its
Butcher weights ``b`` (u_{n+1} = u_n + dt sum_j b_j L(u^(j), t_n + c_j dt)) and stage times
``c``; ``b`` are the quadrature weights of the energy balance's time integrals (the same
method applied to the augmented system (u, E) gives E_{n+1} = E_n + dt sum_j b_j E'(u^(j)),
so the balance residual is O(dt^p)).

On the mesh (:class:`~spherepde.solvers.mesh.MeshSolver`) an explicit step is
cfl * (CFL bound of the state at its start) (:func:`spherepde.solvers.fv.cfl_bound`), or the
fixed ``dt``, which must not exceed it (:class:`~spherepde.solvers.mesh.CFLViolation`); a
later stage whose own bound is below an adaptive step rejects it and the step is retried
with cfl * that bound. Steps end at min(t + dt, next grid point of the weight path, t_stop),
exactly on grid points and on t_stop; stage j evaluates the weights at t + c_j dt. At the
start of a step on grid point k < K the Ito martingale increment is booked (left point). Every
mesh stepper books the energy's change through the weights by the trapezoid rule over the
step's first and last state (:meth:`~spherepde.model.energy.EnergyBalance.add_weights_change`;
an explicit step evaluates its end state for it, the evaluation the next step starts from).

For tokens (:class:`~spherepde.solvers.particles.ParticleSolver`) an explicit scheme is its
Butcher form with retraction to the sphere after every stage: X^(i) = retract(X + dt sum_j
A_ij v_j), X_{n+1} = retract(X + dt sum_j b_j v_j) (``euler``: the paper's scheme; ``heun``:
Heun's method).

:class:`ImplicitUpwind` is the linearly implicit upwind Euler step of the mesh
(:mod:`spherepde.solvers.implicit`, order 1) with local-error step control, a peer of the
explicit schemes in the same registry.

Shipped schemes:

* ``euler``  -- forward Euler, order 1, b = (1,), c = (0,); both solvers;
* ``heun`` (alias ``ssprk2``) -- Heun / SSP-RK(2,2), order 2, b = (1/2, 1/2), c = (0, 1); both solvers;
* ``ssprk3`` -- Shu--Osher SSP-RK(3,3), order 3, b = (1/6, 1/6, 2/3), c = (0, 1, 1/2); mesh:
  u1 = u + dt L(u, t); u2 = 3/4 u + 1/4 (u1 + dt L(u1, t + dt));
  u_new = 1/3 u + 2/3 (u2 + dt L(u2, t + dt/2));
* ``implicit`` -- linearly implicit upwind, steps from a local error estimate; mesh, order 1;
* ``rk23`` (alias ``adaptive``) -- the Bogacki--Shampine 3(2) pair with error-controlled steps
  (:class:`EmbeddedPair`); tokens, order 3.

Error-controlled token steps (:class:`EmbeddedPair`, ``rk23``): the Bogacki--Shampine 3(2) pair
(P. Bogacki & L. F. Shampine, "A 3(2) pair of Runge--Kutta formulas", Appl. Math. Lett. 2 (1989)
321--325; MATLAB's ode23, SciPy's RK23), chosen over a Heun--Euler 2(1) pair because it propagates
a third-order solution, its error estimate is of second order (so the step follows the error of
a method one order higher than the shipped Heun), its stability interval on the negative real
axis is longer (about -2.51 against -2, which matters on collapsed clusters where the step is
bounded by stability, not by accuracy), and it is first-same-as-last: the fourth evaluation, at
the new state, is the next step's first, so an accepted step costs three evaluations::

    c = (0, 1/2, 3/4, 1)
    k1 = v(X, t),  k2 = v(R(X + h/2 k1), t + h/2),  k3 = v(R(X + 3h/4 k2), t + 3h/4)
    X_new = R(X + h (2/9 k1 + 1/3 k2 + 4/9 k3))                 (order 3, propagated)
    k4 = v(X_new, t + h)                                          (FSAL)
    X_hat = R(X + h (7/24 k1 + 1/4 k2 + 1/3 k3 + 1/8 k4))        (order 2, embedded)

(R: retraction x -> x/|x| to the sphere after every stage). The error of token i is the chord
e_i = |X_new_i - X_hat_i|; the step is accepted when err = max_i e_i / (atol + rtol |X_new_i - X_i|)
<= 1 (relative to the chord the token moved in the step; on the sphere |x| = 1, so the usual
relative term in |x| would only rescale atol) and a token moves at most ``max_move`` radians;
the next step is h * min(FAC_MAX, max(FAC_MIN, SAFETY err^(-0.7/3) err_prev^(0.4/3))), err_prev the previous
accepted step's (Gustafsson's PI control: Hairer & Wanner, Solving ODEs II, Section IV.2; it damps the
accept/reject cycles where the step is bounded by stability), a retry h * max(FAC_MIN, SAFETY err^(-1/3))
(Hairer, Norsett & Wanner, Solving ODEs I, Section II.4), and at most h (no growth) right after a rejection. The energy
balance's quadrature weights are b = (2/9, 1/3, 4/9, 0) of the four evaluations.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np

from spherepde._registry import Registry
from spherepde.model.energy import weights_change
from spherepde.model.fused import martingale_from_moments
from spherepde.solvers.errors import CFLViolation, OptionError, PositivityError, SolverError
from spherepde.solvers.fv import face_values, scheme_g2
from spherepde.solvers.implicit import face_weights, implicit_flux, implicit_upwind_step

__all__ = [
    "STEPPERS", "EmbeddedPair", "ExplicitScheme", "ImplicitUpwind", "OptionError", "Stepper", "get_stepper", "integrator_names", "register_stepper",
]

log = logging.getLogger(__name__)

#: Every time scheme of the package by name (``solver.integrator``); entries are :class:`Stepper` objects.
STEPPERS = Registry("time stepper", key="solver.integrator")

#: Relative (to the weight grid step) distance within which times snap to grid points.
SNAP_TOL = 1e-9
#: Relative tolerance on negative densities (round-off) before PositivityError.
NEGATIVE_TOL = 1e-14


@dataclass(frozen=True)
class Stepper:
    """A time scheme: its name, order of accuracy and the solvers it serves.

    A mesh stepper implements :meth:`mesh_step`; a token stepper :meth:`token_step`.
    ``cfl_limited``: the explicit CFL bound limits its steps (the mesh solver's step hint);
    ``moves_point_masses``: it carries point masses (:mod:`spherepde.solvers.atoms`).
    """

    name: str
    order: int
    solvers: tuple = ("mesh",)

    cfl_limited = True
    moves_point_masses = False
    #: the step follows a local error estimate (tokens: :class:`EmbeddedPair`), not a fixed dt
    adaptive = False

    def check_options(self, *, order: int = 1) -> None:
        """Raise :class:`OptionError` if this scheme cannot run with these solver options."""

    def mesh_step(self, ms, t_stop: float) -> float:
        """One step of the mesh solver ``ms`` towards ``t_stop``; returns the step taken."""
        raise NotImplementedError(f"{self.name} does not step the mesh")

    def token_step(self, X, t, dt, first, evaluate, retract):
        """One token step; returns (new tokens, the evaluations of its stages, their quadrature weights)."""
        raise NotImplementedError(f"{self.name} does not step tokens")


def register_stepper(stepper: Stepper, *, aliases: tuple = (), about: str = "", replace: bool = False) -> Stepper:
    """Register ``stepper`` in :data:`STEPPERS` under its name (its order and solvers go into the entry's info)."""
    return STEPPERS.register(stepper.name, stepper, aliases=aliases, about=about, replace=replace,
                             order=stepper.order, solvers=tuple(stepper.solvers))


def integrator_names(solver: str | None = None) -> tuple[str, ...]:
    """Every accepted name (with aliases), or those of one solver (``"particles"`` / ``"mesh"``)."""
    return STEPPERS.names(aliases=True, where=None if solver is None else (lambda e: solver in e.obj.solvers))


def get_stepper(name, solver: str) -> Stepper:
    """The stepper called ``name`` (an alias allowed; a :class:`Stepper` is returned as it is) for ``solver``.

    Raises
    ------
    OptionError
        (option ``integrator``) if no stepper has that name, or ``solver`` is not among those it
        serves; the message lists the names that solver accepts.
    """
    valid = ", ".join(repr(n) for n in integrator_names(solver))
    if isinstance(name, Stepper):
        stepper, about = name, name.name
    elif isinstance(name, str) and name in STEPPERS:
        e = STEPPERS.entry(name)
        stepper, about = e.obj, e.about
    else:
        raise OptionError("integrator", f"unknown time integrator {name!r}; the {solver} solver accepts {valid}")
    if solver not in stepper.solvers:
        raise OptionError("integrator", f"{name!r} ({about}) is not implemented for the {solver} solver; it accepts {valid}")
    return stepper


# ------------------------------------------------------------------ what every mesh stepper shares
def _snap(path, t: float) -> float:
    """t, or the weight-grid point k * path.dt within SNAP_TOL grid steps of it."""
    pdt = path.dt
    k = round(t / pdt)
    if abs(t - k * pdt) <= SNAP_TOL * pdt:
        return k * pdt
    return t


def _end_time(ms, t: float, h: float, t_stop: float) -> float:
    """t + h cut at t_stop and (unless Theta_t is constant) at the next weight-grid point."""
    pdt = ms.path.dt
    t_end = min(t + h, t_stop)
    if not ms.path.is_constant:
        t_next = ms.path.next_grid_time(t)
        t_end = min(t_end, t_next)
        if t_next - t_end <= SNAP_TOL * pdt:
            t_end = t_next
    if abs(t_stop - t_end) <= SNAP_TOL * pdt:
        return t_stop
    return _snap(ms.path, t_end)


def _martingale(ms, ev0) -> float:
    """The Ito martingale increment at the grid point a step from the current state starts on (0 elsewhere)."""
    k = ms.path.grid_index(ms.t)
    if ms._has_energy and ms.path.sigma > 0 and k is not None and k < ms.path.K:
        return martingale_from_moments(ev0.rates["M"], ms.path.dM[k])
    return 0.0


def _check_floor(ms, dt: float, what: str, advice: str) -> None:
    """SolverError when the step ``dt`` tried is below the solver's ``dt_min``."""
    if dt < ms.dt_min:
        raise SolverError(f"{what} collapsed to dt = {dt:.3g} at t = {ms.t:.6g} (step {ms.step_count}), below the floor "
                          f"{ms.dt_min:.3g}: {advice}")


def _check_state(ms, rho: np.ndarray, t_end: float) -> None:
    """The invariants of a step's new density: finite (SolverError) and rho_min >= -NEGATIVE_TOL max rho (PositivityError)."""
    where = f"at t = {t_end:.6g} (step {ms.step_count + 1}, dt = {t_end - ms.t:.3g})"
    if not np.all(np.isfinite(rho)):
        raise SolverError(f"the density became non-finite {where}; reduce cfl or dt, or check the weight path for blow-up")
    rmax = float(np.max(rho))
    rmin = float(np.min(rho))
    if rmin < -NEGATIVE_TOL * max(rmax, 0.0):
        raise PositivityError(f"the density became negative {where}: min rho = {rmin:.3e} (max {rmax:.3e}); reduce cfl "
                              f"(now {ms.cfl:g}), use adaptive steps (solver.dt = 0), or use order = 1")


def _positive_step(ms, t_end: float, dt: float, t_stop: float) -> float:
    """The step t_end - t, which must be positive (SolverError naming the step ``dt`` tried)."""
    h = t_end - ms.t
    if not h > 0:
        raise SolverError(f"zero time step at t = {ms.t:.6g}, step {ms.step_count} (dt = {dt:.3g}, t_stop = {t_stop:.6g})")
    return h


# ------------------------------------------------------------------ explicit Runge--Kutta schemes
@dataclass(frozen=True)
class ExplicitScheme(Stepper):
    """An explicit Runge--Kutta scheme in Shu--Osher form.

    Attributes
    ----------
    alpha : tuple of rows; ``alpha[i-1][j]`` (j < i) multiplies the stage value u^(j) in u^(i).
    beta : tuple of rows; ``beta[i-1][j]`` multiplies dt L(u^(j), t + c_j dt) in u^(i).
    c : stage times (fractions of dt) at which L is evaluated, one per stage value u^(0)..u^(s-1).
    b : equivalent Butcher weights of L(u^(j)), used as quadrature weights (sum to 1).
    """

    alpha: tuple = ()
    beta: tuple = ()
    c: tuple = ()
    b: tuple = ()

    @property
    def stages(self) -> int:
        """Number of evaluations of L per step."""
        return len(self.c)

    def butcher(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Butcher tableau (A, b, c) derived from the Shu--Osher coefficients.

        Stage value u^(i) = u_n + dt sum_j A_ij L(u^(j)); computed recursively from
        u^(i) = sum_j alpha_ij u^(j) + dt beta_ij L(u^(j)). Returns A (s, s), b (s,)
        (the row of the final combination) and c = A.sum(axis=1).
        """
        s = self.stages
        rows = np.zeros((s + 1, s))  # row i: coefficients of dt L(u^(j)) in u^(i) - u_n
        for i in range(1, s + 1):
            for j, (a, bt) in enumerate(zip(self.alpha[i - 1], self.beta[i - 1])):
                rows[i] += a * rows[j]
                rows[i, j] += bt
        return rows[:s], rows[s], rows[:s].sum(axis=1)

    # -------------------------------------------------------------- tokens
    def token_step(self, X, t, dt, first, evaluate, retract):
        """Butcher form with retraction: X^(i) = retract(X + dt sum_j A_ij v_j) evaluated at t + c_i dt
        by ``evaluate(X, t) -> {"v": (n, d), ...}`` (``first``: the evaluation at (X, t)), and
        X_new = retract(X + dt sum_j b_j v_j). Returns (X_new, the stage evaluations, b)."""
        A = self.butcher()[0]
        evals = [first]
        for i in range(1, self.stages):
            evals.append(evaluate(retract(X + _combine(A[i], dt, evals)), t + self.c[i] * dt))
        return retract(X + _combine(self.b, dt, evals)), evals, self.b

    # -------------------------------------------------------------- mesh
    def mesh_step(self, ms, t_stop: float) -> float:
        """One explicit step of the mesh solver ``ms`` (module docstring); returns the step taken."""
        t = ms.t
        pdt = ms.path.dt
        ev0 = ms._current()
        dt = self._first_step(ms, ev0)
        t_next = ms.path.next_grid_time(t)
        dmart = _martingale(ms, ev0)  # added on success
        for _attempt in range(20):
            _check_floor(ms, dt, "the time step", "the velocity is too large for this mesh -- check the weights "
                            "(e.g. weights.kappa, weights.sigma, weights.beta) or use a coarser mesh")
            t_end = min(t + dt, t_next, t_stop)
            if t_next - t_end <= SNAP_TOL * pdt:
                t_end = t_next
            if abs(t_stop - t_end) <= SNAP_TOL * pdt:
                t_end = t_stop  # land exactly on t_stop
            else:
                t_end = _snap(ms.path, t_end)  # or exactly on a grid point k * path.dt
            h = _positive_step(ms, t_end, dt, t_stop)
            new, stage_rates, stage_bound = self._mesh_stages(ms, ev0, t, h)
            # adaptive steps: every stage must respect the CFL bound of its own input state
            # (SSP positivity); otherwise retry with the smaller bound
            if ms.dt is None and h > stage_bound * (1.0 + 1e-12) + SNAP_TOL * pdt:
                log.debug("step %d at t = %.6g: dt = %.3g exceeds a later stage's bound %.3g; retrying", ms.step_count, t, h, stage_bound)
                dt = ms.cfl * stage_bound
                continue
            break
        else:  # pragma: no cover - the bound would have to shrink 20 times in a row
            raise SolverError(f"no admissible time step found at t = {t:.6g}, step {ms.step_count}; reduce cfl")
        if ms.check:
            _check_state(ms, new, t_end)
        ev1 = None
        if ms._has_energy:
            ms.balance.add_martingale(dmart)
            ms.balance.add_stages(h, self.b, stage_rates)
            dD = weights_change(ms.path, t, t_end)
            if dD is not None:  # the end state's evaluation, kept for the next step
                ev1 = ms._evaluate(new, t_end)
                ms.balance.add_weights_change(dD, ev0.rates["M"], ev1.rates["M"])
        ms._commit(new, t_end, h, ev1=ev1)
        return h

    @staticmethod
    def _first_step(ms, ev0) -> float:
        """cfl * bound of the state at the step's start, or the fixed dt (CFLViolation above that)."""
        bound = ev0.bound
        allowed = ms.cfl * bound
        if ms.dt is None:
            return allowed
        if ms.dt > allowed * (1.0 + 1e-12):
            raise CFLViolation(
                f"fixed dt = {ms.dt:.6g} exceeds cfl * bound = {ms.cfl:g} * {bound:.6g} = {allowed:.6g} "
                f"(order {ms.order}) at t = {ms.t:.6g}, step {ms.step_count}; reduce dt, raise cfl (<= 1) "
                "or use adaptive steps (solver.dt = 0)"
            )
        return ms.dt

    def _mesh_stages(self, ms, ev0, t: float, h: float):
        """The stages of one step of size h from (ms.rho, t); returns (rho_new, stage rates, min later-stage bound)."""
        U = [ms.rho]
        L = [ev0.rhs]
        stage_rates = [ev0.rates]
        bound = math.inf
        new = ms.rho
        for i in range(1, self.stages + 1):
            new = np.zeros_like(ms.rho)
            for j, (a, b) in enumerate(zip(self.alpha[i - 1], self.beta[i - 1])):
                if a != 0.0:
                    new += a * U[j]
                if b != 0.0:
                    new += (b * h) * L[j]
            if i < self.stages:
                ev = ms._evaluate(new, t + self.c[i] * h)
                U.append(new)
                L.append(ev.rhs)
                stage_rates.append(ev.rates)
                bound = min(bound, ev.bound)
        return new, stage_rates, bound


def _combine(coeffs, dt: float, evals):
    """dt sum_j coeffs_j v_j, the velocities sharing a coefficient summed first: (c dt) (v_j + v_k + ...)."""
    total = None
    for c in dict.fromkeys(x for x in coeffs if x != 0.0):
        s = None
        for x, e in zip(coeffs, evals):
            if x == c:
                s = e["v"] if s is None else s + e["v"]
        term = (c * dt) * s
        total = term if total is None else total + term
    return total


# ------------------------------------------------------------------ error-controlled token steps
#: Step-size control of :class:`EmbeddedPair`: safety factor and the limits of one step's growth / shrink.
SAFETY, FAC_MAX, FAC_MIN = 0.9, 5.0, 0.2
#: Gustafsson's PI step control (times 1/k, k the order): exponents of this and of the previous error, and the latter's floor.
PI_ALPHA, PI_BETA, ERR_FLOOR = 0.7, 0.4, 1e-4


@dataclass(frozen=True)
class EmbeddedPair(Stepper):
    """An explicit embedded Runge--Kutta pair for tokens with error-controlled steps (module docstring).

    Attributes
    ----------
    a : Butcher rows of the stages, ``a[i]`` the coefficients of k_1..k_i in stage i + 1 (the
        last row, FSAL, equals ``b``).
    b : weights of the propagated solution (order ``order``), one per evaluation, FSAL's 0.
    bhat : weights of the embedded solution (order ``order - 1``).
    c : stage times (fractions of the step), the last 1 (FSAL: the new state at t + h).
    """

    a: tuple = ()
    b: tuple = ()
    bhat: tuple = ()
    c: tuple = ()

    cfl_limited = False
    adaptive = True

    @property
    def stages(self) -> int:
        """Evaluations per attempted step, the FSAL one included (one fewer per accepted step after the first)."""
        return len(self.c)

    def token_attempt(self, X, t, h, t_end, first, evaluate, retract):
        """One attempted step of size h = t_end - t from tokens X at t (``first``: the evaluation at (X, t)).

        Stage i evaluates ``evaluate(retract(X + h sum_j a_ij k_j), t + c_i h)``; the last (FSAL) stage is the
        evaluation at (X_new, t_end), ``t_end`` passed in so that it is exactly the time the step lands on.
        Returns (X_new, the evaluations (the last at X_new), the quadrature weights ``b``, the per-token chord
        |X_new - X_hat| between the propagated and the embedded solution)."""
        evals = [first]
        for i in range(1, self.stages - 1):
            evals.append(evaluate(retract(X + _combine(self.a[i - 1], h, evals)), t + self.c[i] * h))
        Xn = retract(X + _combine(self.b[:-1], h, evals))
        evals.append(evaluate(Xn, t_end))
        Xhat = retract(X + _combine(self.bhat, h, evals))
        return Xn, evals, self.b, np.linalg.norm(Xn - Xhat, axis=-1)

    def error_norm(self, X, Xn, chord_err, atol: float, rtol: float) -> float:
        """max_i chord_err_i / (atol + rtol |X_new_i - X_i|): <= 1 accepts the step (inf when not finite)."""
        scale = atol + rtol * np.linalg.norm(Xn - X, axis=-1)
        err = float(np.max(chord_err / scale)) if len(chord_err) else 0.0
        return err if math.isfinite(err) else math.inf

    def factor(self, err: float, *, err_prev: float | None = None, after_reject: bool = False) -> float:
        """The next step over this one, within [FAC_MIN, FAC_MAX] (at most 1 right after a rejection).

        An accepted step (err <= 1) with ``err_prev`` (the previous accepted step's err, floored at ERR_FLOOR):
        Gustafsson's PI controller SAFETY err^(-0.7/k) err_prev^(0.4/k), k = ``order`` (Hairer & Wanner, Solving
        ODEs II, Section IV.2, eq. (2.43)): it damps the accept/reject cycles of steps bounded by stability.
        Otherwise (a rejection, or no previous step) the elementary SAFETY err^(-1/k)."""
        k = float(self.order)
        if err == 0.0:
            fac = FAC_MAX
        elif err <= 1.0 and err_prev is not None:
            fac = SAFETY * err ** (-PI_ALPHA / k) * max(err_prev, ERR_FLOOR) ** (PI_BETA / k)
        else:
            fac = SAFETY * err ** (-1.0 / k)
        return min(1.0 if after_reject else FAC_MAX, max(FAC_MIN, fac))


# ------------------------------------------------------------------ the implicit upwind stepper
@dataclass(frozen=True)
class ImplicitUpwind(Stepper):
    """The linearly implicit upwind Euler step of the mesh (docs/model.md §4.5) with local-error control.

    The velocity u^n of (rho^n, t_n) is frozen over the step and (C + h K(u^n)) rho^{n+1} =
    C rho^n is solved (:func:`spherepde.solvers.implicit.implicit_upwind_step`, by one upwind sweep where
    the matrix is triangular; ``legacy``: by sparse LU). The error estimate
    err = (h/2) sum_c |C_c| |r^{n+1}_c - r^n_c| (r = the explicit d rho/dt of each end state, the
    second derivative of the backward-Euler local error; point masses add (h/2) sum_k m_k |v_k^{n+1}
    - v_k^n|, and where the cells' sums at some cells were skipped the bound of that skip on the step,
    :meth:`PointMasses.skip_error <spherepde.solvers.atoms.PointMasses.skip_error>`) accepts the step when err <= ``ms.tol``, else the step is retried with
    h * max(0.2, 0.9 sqrt(tol/err)); the next step is proposed the same way (growth <= 5x). The
    first step starts from the explicit CFL step; a fixed ``dt`` is taken unchecked. Energy balance
    over the step: d_tE and the energy's change through the weights
    (:func:`~spherepde.model.energy.weights_work` of D(t_{n+1}) - D(t_n)) by the trapezoid rule; transport by the discrete chain rule
    (1/2)(xi^n + xi^{n+1}) . (m^{n+1} - m^n), exact for a frozen quadratic energy; G^2 as the mean
    of :func:`spherepde.solvers.fv.scheme_g2` with the step's flux and the velocities of both ends,
    which equals s * transport for one head. Token noise (``ms.noise`` > 0): the Scharfetter--Gummel matrix (still an
    M-matrix, :mod:`spherepde.solvers.implicit`); the error estimate's explicit d rho/dt includes the diffusion, and its
    work and the free energy's dissipation D_F are booked by the trapezoid rule.
    """

    #: the previous route, kept for side-by-side timing (``spherepde.studies.bench_implicit``): the sparse LU solve
    #: instead of the upwind sweep, and with point masses one attention sum over cells and point masses together
    #: at every evaluation (docs/model.md §4.6, §4.10)
    legacy: bool = False

    cfl_limited = False
    moves_point_masses = True

    def check_options(self, *, order: int = 1) -> None:
        if order not in (1, 2):
            raise OptionError("order", f"integrator = {self.name!r} takes order 1 (upwind) or 2 (frozen-weight reconstruction), got {order!r}")

    def mesh_step(self, ms, t_stop: float) -> float:
        t = ms.t
        g = ms.geom
        ev0 = ms._current()
        h_try = self._first_try(ms, ev0, t, t_stop)
        dmart = _martingale(ms, ev0)
        pts = ms.points if ev0.atom_v is not None else None
        r0_mass = g.areas * ev0.rhs
        w = face_weights(g, ms.rho, face_values(g, ms.rho, 2)) if ms.order == 2 else None
        for _attempt in range(60):
            _check_floor(ms, h_try, "the implicit step", f"the local error tolerance tol = {ms.tol:g} cannot be met -- raise tol"
                         + (f", or lower model.noise = {ms.noise:g} (diffusion this fast relaxes the density within the floor)" if ms.noise > 0 else ""))
            t_end = _end_time(ms, t, h_try, t_stop)
            h = _positive_step(ms, t_end, h_try, t_stop)
            new = implicit_upwind_step(g, ms.rho, ev0.u, h, ms.noise, w, solve="lu" if self.legacy else "sweep")
            new_x = None if pts is None else pts.predict(h, ev0.atom_v)
            ev1 = ms._evaluate(new, t_end, new_x)
            err = 0.5 * h * float(np.sum(np.abs(g.areas * ev1.rhs - r0_mass)))
            if pts is not None:  # the positions' error, and the bound of cell sums skipped (PointMasses._sums)
                err += pts.error(h, ev0.atom_v, ev1.atom_v) + pts.skip_error((ev0, ev1), new, h, w)
            fac = 5.0 if err == 0.0 else min(5.0, max(0.2, 0.9 * math.sqrt(ms.tol / err)))
            if ms.dt is not None or err <= ms.tol:
                break
            h_try = h * fac
        else:  # pragma: no cover - the error would have to stay above tol 60 times in a row
            raise SolverError(f"no step meets the local error tolerance at t = {t:.6g}, step {ms.step_count}; raise tol")
        truncated = h < h_try * (1.0 - 1e-12)
        ms.h_next = max(h_try, h * fac) if (truncated and fac >= 1.0) else h * fac
        if pts is not None:  # Heun for the point masses: the corrected positions, evaluated once the next step is proposed
            # (the evaluation that starts the next step sizes its skipped cell sums by that proposal, as after a resume)
            new_x = pts.correct(h, ev0.atom_v, ev1.atom_v)
            ev1 = ms._evaluate(new, t_end, new_x)
        if ms.check:
            _check_state(ms, new, t_end)
        if ms._has_energy:
            self._book_energy(ms, ev0, ev1, new, t_end, dmart, w)
        if pts is not None:  # the step's interpolant locates the merges found after it
            pts.remember_step(t, t_end, pts.x, ev0.atom_v, new_x, ev1.atom_v)
        ms._commit(new, t_end, h, ev1=ev1, atom_x=new_x)
        if ms.atoms:
            ms.points.after_step(ms)
        return h

    @staticmethod
    def _first_try(ms, ev0, t: float, t_stop: float) -> float:
        """The fixed dt, else the proposed next step, else (first step) the explicit CFL step; at most dt_max."""
        if ms.dt is not None:
            h_try = ms.dt
        elif math.isfinite(ms.h_next):
            h_try = ms.h_next
        else:
            h_try = ms.cfl * ev0.bound if math.isfinite(ev0.bound) else t_stop - t
        if ms.dt_max is not None:
            h_try = min(h_try, ms.dt_max)
        return h_try

    @staticmethod
    def _book_energy(ms, ev0, ev1, new, t_end: float, dmart: float, w=None) -> None:
        """Book the step from (ms.rho, ms.t) to (new, t_end) into the balance (class docstring; the weights' change by the trapezoid rule too)."""
        g = ms.geom
        h = t_end - ms.t
        r0, r1 = ev0.rates, ev1.rates
        dm = g.areas * (new - ms.rho)
        transport = 0.5 * float(np.sum((r0["xi"] + r1["xi"]) * dm))
        flux = implicit_flux(g, new, ev0.u, ms.noise, w)
        G2 = 0.5 * (scheme_g2(g, r0["logZ"], ev0.u, flux, normalised=ms.normalised) + scheme_g2(g, r1["logZ"], ev1.u, flux, normalised=ms.normalised))
        G2 += 0.5 * (r0.get("G2_atoms", 0.0) + r1.get("G2_atoms", 0.0))
        transport += 0.5 * h * (r0.get("transport_atoms", 0.0) + r1.get("transport_atoms", 0.0))
        ms.balance.add_martingale(dmart)
        ms.balance.add_integrals(0.5 * h * (r0["dEdt_partial"] + r1["dEdt_partial"]), transport,
                                 0.5 * h * (r0["G2"] + r1["G2"]), h * G2)
        ms.balance.add_weights_change(weights_change(ms.path, ms.t, t_end), r0["M"], r1["M"])
        if ms.noise > 0:  # token noise: the diffusion's work and the free energy's dissipation by the trapezoid rule (order 1)
            ms.balance.add_noise(0.5 * h * (r0["diffusion"] + r1["diffusion"]), 0.5 * h * (r0["DF"] + r1["DF"]))


# ------------------------------------------------------------------ the shipped schemes
register_stepper(ExplicitScheme("euler", 1, ("particles", "mesh"), alpha=((1.0,),), beta=((1.0,),), c=(0.0,), b=(1.0,)),
                 about="forward Euler (tokens: then renormalised, the paper's scheme)")
register_stepper(ExplicitScheme("heun", 2, ("particles", "mesh"), alpha=((1.0,), (0.5, 0.5)), beta=((1.0,), (0.0, 0.5)), c=(0.0, 1.0), b=(0.5, 0.5)),
                 aliases=("ssprk2",), about="Heun's method = SSP-RK2 (explicit trapezoid)")
register_stepper(ExplicitScheme("ssprk3", 3, ("mesh",), alpha=((1.0,), (0.75, 0.25), (1.0 / 3.0, 0.0, 2.0 / 3.0)),
                                beta=((1.0,), (0.0, 0.25), (0.0, 0.0, 2.0 / 3.0)), c=(0.0, 1.0, 0.5), b=(1.0 / 6.0, 1.0 / 6.0, 2.0 / 3.0)),
                 about="Shu--Osher SSP-RK3")
register_stepper(EmbeddedPair("rk23", 3, ("particles",), a=((0.5,), (0.0, 0.75), (2.0 / 9.0, 1.0 / 3.0, 4.0 / 9.0)),
                              b=(2.0 / 9.0, 1.0 / 3.0, 4.0 / 9.0, 0.0), bhat=(7.0 / 24.0, 0.25, 1.0 / 3.0, 0.125), c=(0.0, 0.5, 0.75, 1.0)),
                 aliases=("adaptive",), about="Bogacki--Shampine 3(2) pair, error-controlled steps from solver.tol (tokens, order 3)")
register_stepper(ImplicitUpwind("implicit", 1, ("mesh",)),
                 about="linearly implicit upwind, steps from a local error estimate (mesh, order 1)")
