"""The finite-volume mesh solver of the Transformer PDE on S^2 (docs/model.md §1.3, §3 and §4).

    d_t rho + div_S(rho v[rho, Theta_t]) = 0,   v = (1/H) sum_h P_x V_h Y_h / Z_h,

discretised by cell averages rho_c on a :class:`~spherepde.geometry.mesh.SphereMesh` with the
upwind finite-volume scheme of :mod:`spherepde.solvers.fv` (first order, or second order with a
limited linear reconstruction) and an SSP Runge--Kutta integrator from
:mod:`spherepde.solvers.integrators`. The nonlocal sums use the cell masses m_c = rho_c |C_c|
placed at the cell nodes x_c = ``geom.nodes`` -- the circumcentres on well-centred
meshes such as icospheres, where the two-point potential flux is consistent, else the
barycentres (:func:`spherepde.solvers.fv.cell_nodes`) -- with the same weighted-point
diagnostics as the particle solver (:mod:`spherepde.model.energy`).

Time stepping
-------------
* ``dt=None``: adaptive, dt = cfl * (CFL bound of the state at the start of the step)
  (:func:`spherepde.solvers.fv.cfl_bound`; order 2 uses its own bound, in practice half the
  first-order one). A later SSP stage whose own bound is below the step is rejected and
  the step retried with cfl * that bound, so every forward-Euler stage of the SSP scheme
  obeys its positivity bound;
* fixed ``dt``: every step checks dt <= cfl * bound (of the state at the start of the
  step) and raises :class:`CFLViolation` with both numbers otherwise.
* A step ends at min(t + dt, next grid point of the weight path, t_stop): steps never
  cross a grid point of Theta_t (where the piecewise-linear weights have a kink and the
  martingale increment is applied), and land exactly on grid points and on t_stop.
* Stage j of the SSP scheme evaluates the weights at t + c_j dt.

Energy balance (gradient heads, docs/model.md §3)
---------------------------------------------------
* At the start of a step that begins on grid point k (< K) the Ito martingale increment
  (1/(2H)) sum_h sum_cc' m_c m_c' e^{x_c D_h x_c'} x_c^T dM_k x_c' is added (left point).
* Per stage: d_tE (drift f_h = ``path.drift_at(t_stage)`` plus the Ito correction when
  sigma > 0), the transport rate and G^2 are accumulated with the Butcher weights b of
  the integrator (:class:`~spherepde.model.energy.EnergyBalance`).
* ``transport`` on the mesh is the discrete chain-rule rate sum_c xi_c dm_c/dt with
  xi_c = (1/H) sum_h Z_h(x_c) and dm_c/dt = |C_c| d rho_c/dt from the FV update, so the
  exact balance residual ``edi_exact`` vanishes as dt -> 0 at a fixed mesh (it is
  O(dt^p) for an order-p integrator with frozen weights); G^2 uses v at the cell centres.
* For general heads (``path.is_gradient`` False) energy-based columns are NaN.

Invariants checked after every step (``check=True``): finite values
(:class:`SolverError`) and rho_min >= -1e-14 max rho (:class:`PositivityError`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from spherepde.attention import SUMMATION_MODES
from spherepde.model.energy import DIAGNOSTIC_COLUMNS, EnergyBalance, state_rates
from spherepde.model.fused import fused_rates, martingale_from_moments
from spherepde.model.velocity import HeadFields, velocity_from_fields
from spherepde.model.weights import WeightPath
from spherepde.solvers.fv import (
    VELOCITY_FORMS,
    cell_fields,
    cfl_bound,
    face_values,
    fv_geometry,
    fv_rhs,
    midpoint_edge_velocity,
    potential_edge_velocity,
)
from spherepde.solvers.integrators import get_integrator

__all__ = ["MESH_COLUMNS", "CFLViolation", "MeshSolver", "PositivityError", "SolverError"]

log = logging.getLogger(__name__)

#: Columns of :meth:`MeshSolver.record`: the common diagnostics plus mesh-only ones.
MESH_COLUMNS = DIAGNOSTIC_COLUMNS + ("mass", "rho_min", "rho_max", "dt_last")

#: Relative tolerance on negative densities (round-off) before PositivityError.
NEGATIVE_TOL = 1e-14
#: Relative (to the weight grid step) distance within which times snap to grid points.
SNAP_TOL = 1e-9


class SolverError(RuntimeError):
    """The mesh solver cannot continue (non-finite values, invalid step)."""


class CFLViolation(SolverError):
    """A fixed time step exceeds the CFL bound of the current velocity."""


class PositivityError(SolverError):
    """The density became negative beyond round-off."""


@dataclass
class _Stage:
    """Everything evaluated at one (rho, t)."""

    u: np.ndarray  # (ne,) edge normal velocities
    rhs: np.ndarray  # (nc,) d rho/dt
    bound: float  # CFL bound of this stage (fv.cfl_bound)
    rates: dict | None  # energy rates, Phi, xi and the moments M (model.fused.fused_rates)


class MeshSolver:
    """Finite-volume solver of the Transformer PDE on a sphere mesh (see module docstring).

    Parameters
    ----------
    mesh : SphereMesh.
    rho0 : (nc,) initial cell densities, non-negative with sum rho |C| = 1 (an
        unnormalised density is normalised, with a warning).
    path : WeightPath with d = 3.
    velocity : ``"potential"`` (gradient heads only; default) or ``"midpoint"``
        (:mod:`spherepde.solvers.fv`).
    order : 1 (upwind) or 2 (limited linear reconstruction).
    integrator : ``"euler"``, ``"ssprk2"`` or ``"ssprk3"`` (:data:`spherepde.solvers.integrators.INTEGRATORS`).
    cfl : safety factor in (0, 1] multiplying the CFL bound.
    dt : fixed step (checked against cfl * bound every step) or None for adaptive steps.
    check : check finiteness and positivity after every step.
    velocity_field : test hook -- a callable ``t -> (ne,)`` of prescribed edge normal
        velocities (along ``mesh.edge_normals``) replacing the attention velocity
        (pure transport; energy columns are NaN), e.g.
        :func:`spherepde.solvers.fv.rigid_rotation_edge_velocity`.
    summation : attention sums ``"direct"``, ``"fast"`` (spherical-harmonic expansion,
        :mod:`spherepde.attention.harmonic`) or ``"auto"`` (fast where it pays and meets the
        tolerance); see :func:`spherepde.attention.attention_moments`.
    summation_tol : accuracy of the fast sums (relative error of Z_h, error of Y_h/Z_h).
    diagnostics_tol : accuracy of the fast sums' moments Y_h/Z_h and Q_h/Z_h, which feed
        only the energy diagnostics G^2, d_tE and the martingale (the potential velocity
        uses log Z_h alone, at ``summation_tol``); the larger of the two is used, None
        means ``summation_tol``. The default 1e-6 lowers their expansion degree (about
        20 % less work at H = 100) and sits five orders below the O(dt) floor of the
        EDI residual; the measured change of G^2 is ~1e-10 relative.

    Attributes
    ----------
    t : float, step_count : int, rho : (nc,) array, dt_last : float.
    """

    #: use the NumPy route (velocity_from_fields, state_rates) instead of the fused kernel
    #: :func:`spherepde.model.fused.fused_rates` (a reference for tests and benchmarks)
    _numpy_rates = False

    def __init__(
        self,
        mesh,
        rho0,
        path: WeightPath,
        *,
        velocity: str = "potential",
        order: int = 1,
        integrator: str = "ssprk3",
        cfl: float = 0.5,
        dt: float | None = None,
        check: bool = True,
        velocity_field: Callable[[float], np.ndarray] | None = None,
        summation: str = "auto",
        summation_tol: float = 1e-10,
        diagnostics_tol: float | None = 1e-6,
    ):
        if not isinstance(path, WeightPath):
            raise TypeError(f"path must be a WeightPath, got {type(path).__name__}")
        if path.d != 3:
            raise ValueError(f"the mesh solver works on S^2 (d = 3), but the weight path has d = {path.d}")
        if velocity not in VELOCITY_FORMS:
            raise ValueError(f"unknown velocity form {velocity!r}; use one of {VELOCITY_FORMS}")
        if velocity == "potential" and not path.is_gradient and velocity_field is None:
            raise ValueError(
                "velocity = 'potential' needs gradient heads (A_h = D_h, V_h = s D_h); this weight path has "
                "general heads -- use velocity = 'midpoint'"
            )
        if order not in (1, 2):
            raise ValueError(f"order must be 1 (upwind) or 2 (limited linear reconstruction), got {order!r}")
        cfl = float(cfl)
        if not (0.0 < cfl <= 1.0):
            raise ValueError(f"cfl must lie in (0, 1] (positivity is guaranteed only up to the CFL bound), got {cfl}")
        if summation not in SUMMATION_MODES:
            raise ValueError(f"unknown summation {summation!r}; use one of {SUMMATION_MODES}")
        summation_tol = float(summation_tol)
        if not (summation_tol > 0.0 and math.isfinite(summation_tol)):
            raise ValueError(f"summation_tol must be a positive number, got {summation_tol}")
        if diagnostics_tol is not None:
            diagnostics_tol = float(diagnostics_tol)
            if not (diagnostics_tol > 0.0 and math.isfinite(diagnostics_tol)):
                raise ValueError(f"diagnostics_tol must be a positive number (or None for summation_tol), got {diagnostics_tol}")
        if dt is not None:
            dt = float(dt)
            if not (dt > 0.0 and math.isfinite(dt)):
                raise ValueError(f"dt must be a positive number (or None for adaptive steps), got {dt}")
        self.mesh = mesh
        self.geom = fv_geometry(mesh)
        self.path = path
        self.velocity = velocity
        self.order = int(order)
        self.scheme = get_integrator(integrator)
        self.integrator = self.scheme.name
        self.cfl = cfl
        self.dt = dt
        self.check = bool(check)
        self.velocity_field = velocity_field
        self.summation = summation
        self.summation_tol = summation_tol
        self.diagnostics_tol = diagnostics_tol
        self.rho = self._validate_density(rho0)
        self.t = 0.0
        self.step_count = 0
        self.dt_last = 0.0
        #: floor on the time step: a step below it raises SolverError (0: no floor)
        self.dt_min = 0.0
        self._cache: tuple | None = None
        self.balance = EnergyBalance(sign=path.sign)
        if self._has_energy:
            self.balance.E0 = self._current().rates["energy"]

    # ------------------------------------------------------------------ helpers
    @property
    def _has_energy(self) -> bool:
        return self.path.is_gradient and self.velocity_field is None

    def _validate_density(self, rho0) -> np.ndarray:
        rho = np.array(rho0, dtype=np.float64, copy=True)
        nc = self.mesh.n_cells
        if rho.shape != (nc,):
            raise ValueError(f"initial density has shape {rho.shape}, but the mesh has {nc} cells; expected ({nc},)")
        if not np.all(np.isfinite(rho)):
            raise ValueError(f"initial density contains {int(np.sum(~np.isfinite(rho)))} NaN/inf value(s)")
        if np.any(rho < 0):
            i = int(np.argmin(rho))
            raise ValueError(f"initial density must be non-negative; rho[{i}] = {rho[i]:.3e} ({int(np.sum(rho < 0))} negative cells)")
        mass = float(np.sum(rho * self.geom.areas))
        if not mass > 0:
            raise ValueError("initial density has zero mass")
        if abs(mass - 1.0) > 1e-10:
            log.warning("initial density has mass %.6g; normalising to 1", mass)
            rho /= mass
        return rho

    def _evaluate(self, rho: np.ndarray, t: float) -> _Stage:
        """Edge velocities, the FV right-hand side and (gradient heads) the energy rates at (rho, t)."""
        g = self.geom
        faces = face_values(g, rho, self.order)
        if self.velocity_field is not None:
            u = np.asarray(self.velocity_field(t), dtype=np.float64)
            if u.shape != (g.n_edges,):
                raise ValueError(f"velocity_field returned shape {u.shape}, expected ({g.n_edges},)")
            return _Stage(u, fv_rhs(g, faces, u), self._bound(u, rho, faces), None)
        masses = rho * g.areas
        A, V = self.path.matrices(t)
        if not self.path.is_gradient:
            u = midpoint_edge_velocity(g, masses, A, V, summation=self.summation, tol=self.summation_tol)
            return _Stage(u, fv_rhs(g, faces, u), self._bound(u, rho, faces), None)
        sigma = self.path.sigma
        logZ, Ybar, Qbar = cell_fields(g, masses, A, want_q=sigma > 0, summation=self.summation, tol=self.summation_tol,
                                       tol_moments=self.diagnostics_tol)
        if self._numpy_rates:  # the NumPy route (reference of the fused kernel; tests and benchmarks)
            Z = np.exp(logZ)
            fields = HeadFields(Z, Ybar * Z[:, :, None], None if Qbar is None else Qbar * Z)
            v = velocity_from_fields(g.nodes, fields, V)
            rates = state_rates(g.nodes, masses, fields, A, self.path.drift_at(t), sigma, v)
            del rates["grad_xi"]
            rates["Phi"] = logZ.mean(axis=1)
            rates["M"] = np.einsum("i,id,ihe->hde", masses, g.nodes, fields.Y, optimize=True)
        else:
            rates = fused_rates(g.nodes, masses, logZ, Ybar, Qbar, V, self.path.drift_at(t), sigma)
        if self.velocity == "potential":
            u = potential_edge_velocity(g, rates["Phi"], self.path.sign)
        else:
            u = midpoint_edge_velocity(g, masses, A, V, summation=self.summation, tol=self.summation_tol)
        rhs = fv_rhs(g, faces, u)
        rates["transport"] = float(np.sum(rates["xi"] * g.areas * rhs))
        return _Stage(u, rhs, self._bound(u, rho, faces), rates)

    def _bound(self, u, rho, faces) -> float:
        return cfl_bound(self.geom, u, self.order, rho, faces)

    def _current(self) -> _Stage:
        key = (self.step_count, self.t)
        if self._cache is None or self._cache[0] != key:
            self._cache = (key, self._evaluate(self.rho, self.t))
        return self._cache[1]

    def _snap(self, t: float) -> float:
        pdt = self.path.dt
        k = round(t / pdt)
        if abs(t - k * pdt) <= SNAP_TOL * pdt:
            return k * pdt
        return t

    # ------------------------------------------------------------------ stepping
    def step(self, t_stop: float) -> float:
        """Take one step, ending at min(t + dt, next weight-grid time, t_stop); return the dt taken."""
        t = self.t
        t_stop = float(t_stop)
        pdt = self.path.dt
        if t_stop > self.path.T + SNAP_TOL * pdt:
            raise ValueError(f"t_stop = {t_stop} lies beyond the end of the weight path (T = {self.path.T})")
        if not t_stop > t + SNAP_TOL * pdt:
            raise ValueError(f"t_stop = {t_stop} must lie after the current time t = {t}")
        ev0 = self._current()
        bound = ev0.bound
        allowed = self.cfl * bound
        if self.dt is not None:
            if self.dt > allowed * (1.0 + 1e-12):
                raise CFLViolation(
                    f"fixed dt = {self.dt:.6g} exceeds cfl * bound = {self.cfl:g} * {bound:.6g} = {allowed:.6g} "
                    f"(order {self.order}) at t = {t:.6g}, step {self.step_count}; reduce dt, raise cfl (<= 1) "
                    "or use adaptive steps (dt = None)"
                )
            dt = self.dt
        else:
            dt = allowed
        t_next = self.path.next_grid_time(t)

        # Ito martingale increment at the grid point the step starts on (added on success)
        dmart = 0.0
        k = self.path.grid_index(t)
        if self._has_energy and self.path.sigma > 0 and k is not None and k < self.path.K:
            dmart = martingale_from_moments(ev0.rates["M"], self.path.dM[k])

        for _attempt in range(20):
            if dt < self.dt_min:
                raise SolverError(
                    f"the time step collapsed to dt = {dt:.3g} at t = {t:.6g} (step {self.step_count}), below the floor "
                    f"{self.dt_min:.3g}: the velocity is too large for this mesh -- check the weights (e.g. weights.kappa, "
                    "weights.sigma, weights.beta) or use a coarser mesh"
                )
            t_end = min(t + dt, t_next, t_stop)
            if t_next - t_end <= SNAP_TOL * pdt:
                t_end = t_next
            if abs(t_stop - t_end) <= SNAP_TOL * pdt:
                t_end = t_stop  # land exactly on t_stop
            else:
                t_end = self._snap(t_end)  # or exactly on a grid point k * path.dt
            h = t_end - t
            if not h > 0:
                raise SolverError(f"zero time step at t = {t:.6g}, step {self.step_count} (dt = {dt:.3g}, t_stop = {t_stop:.6g})")
            new, stage_rates, stage_bound = self._stages(ev0, t, h)
            # adaptive steps: every stage must respect the CFL bound of its own input state
            # (SSP positivity); otherwise retry with the smaller bound
            if self.dt is None and h > stage_bound * (1.0 + 1e-12) + SNAP_TOL * pdt:
                log.debug("step %d at t = %.6g: dt = %.3g exceeds a later stage's bound %.3g; retrying", self.step_count, t, h, stage_bound)
                dt = self.cfl * stage_bound
                continue
            break
        else:  # pragma: no cover - the bound would have to shrink 20 times in a row
            raise SolverError(f"no admissible time step found at t = {t:.6g}, step {self.step_count}; reduce cfl")
        if self.check:
            self._check_state(new, t_end)
        if self._has_energy:
            self.balance.add_martingale(dmart)
            self.balance.add_stages(h, self.scheme.b, stage_rates)
        self.rho = new
        self.t = t_end
        self.step_count += 1
        self.dt_last = h
        self._cache = None
        return h

    def _stages(self, ev0: _Stage, t: float, h: float):
        """One SSP-RK step of size h from (self.rho, t); returns (rho_new, stage rates, min later-stage bound)."""
        sch = self.scheme
        U = [self.rho]
        L = [ev0.rhs]
        stage_rates = [ev0.rates]
        bound = math.inf
        new = self.rho
        for i in range(1, sch.stages + 1):
            new = np.zeros_like(self.rho)
            for j, (a, b) in enumerate(zip(sch.alpha[i - 1], sch.beta[i - 1])):
                if a != 0.0:
                    new += a * U[j]
                if b != 0.0:
                    new += (b * h) * L[j]
            if i < sch.stages:
                ev = self._evaluate(new, t + sch.c[i] * h)
                U.append(new)
                L.append(ev.rhs)
                stage_rates.append(ev.rates)
                bound = min(bound, ev.bound)
        return new, stage_rates, bound

    def _check_state(self, rho: np.ndarray, t_end: float) -> None:
        where = f"at t = {t_end:.6g} (step {self.step_count + 1}, dt = {t_end - self.t:.3g})"
        if not np.all(np.isfinite(rho)):
            raise SolverError(
                f"the density became non-finite {where}; reduce cfl or dt, or check the weight path for blow-up"
            )
        rmax = float(np.max(rho))
        rmin = float(np.min(rho))
        if rmin < -NEGATIVE_TOL * max(rmax, 0.0):
            raise PositivityError(
                f"the density became negative {where}: min rho = {rmin:.3e} (max {rmax:.3e}); reduce cfl "
                f"(now {self.cfl:g}), use adaptive steps (dt = None), or use order = 1"
            )

    def advance(self, t_stop: float, *, should_stop: Callable[[], bool] | None = None) -> bool:
        """Step until t == t_stop; returns True there.

        ``should_stop`` (optional) is called before every step; when it returns True the
        solver stops early, at the end of the last step taken, and ``advance`` returns
        False (continue later with another ``advance(t_stop)``: the steps are the same).
        """
        t_stop = float(t_stop)
        if t_stop < self.t - SNAP_TOL * self.path.dt:
            raise ValueError(f"cannot advance backwards: t = {self.t}, t_stop = {t_stop}")
        while t_stop - self.t > SNAP_TOL * self.path.dt:
            if should_stop is not None and should_stop():
                return False
            self.step(t_stop)
        return True

    def cfl_step(self) -> float:
        """The adaptive step cfl * (CFL bound) of the current state (the fixed ``dt`` if set)."""
        return self.dt if self.dt is not None else self.cfl * self._current().bound

    # ------------------------------------------------------------------ output
    def record(self) -> dict:
        """The diagnostics row at the current state (:data:`MESH_COLUMNS`)."""
        g = self.geom
        masses = self.rho * g.areas
        row: dict = {"t": float(self.t), "step": int(self.step_count)}
        row.update(self.balance.columns(self._current().rates if self._has_energy else None))
        row["mean_resultant"] = float(np.linalg.norm(masses @ g.nodes))
        row["mass"] = float(np.sum(masses))
        row["rho_min"] = float(self.rho.min())
        row["rho_max"] = float(self.rho.max())
        row["dt_last"] = float(self.dt_last)
        return {k: row[k] for k in MESH_COLUMNS}

    def snapshot(self) -> dict:
        """Arrays of the current state for snapshot files: ``{"rho": (nc,)}``."""
        return {"rho": self.rho.copy()}

    def get_state(self) -> dict:
        """Everything needed for a bit-for-bit resume (numpy arrays, floats and ints only)."""
        st = {"rho": self.rho.copy(), "t": float(self.t), "step_count": int(self.step_count), "dt_last": float(self.dt_last)}
        st.update({"balance_" + k: (float("nan") if v is None else float(v)) for k, v in self.balance.state().items()})
        return st

    def set_state(self, st: dict) -> None:
        """Restore a state from :meth:`get_state`."""
        rho = np.asarray(st["rho"], dtype=np.float64)
        if rho.shape != (self.mesh.n_cells,):
            raise ValueError(f"state density has shape {rho.shape}, expected ({self.mesh.n_cells},)")
        missing = [k for k in ("t", "step_count", "dt_last") if k not in st]
        if missing:
            raise ValueError(f"state is missing {missing}")
        self.rho = rho.copy()
        self.t = float(st["t"])
        self.step_count = int(st["step_count"])
        self.dt_last = float(st["dt_last"])
        self.balance.restore({k: float(st["balance_" + k]) for k in self.balance.state()})
        self._cache = None
