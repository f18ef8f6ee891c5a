"""The finite-volume mesh solver of the Transformer PDE on S^2 (docs/model.md §1.3, §3 and §4).

    d_t rho + div_S(rho v[rho, Theta_t]) = nu Delta_S rho,   v = (1/H) sum_h P_x V_h Y_h / Z_h  (unnormalised attention: no / Z_h),

discretised by cell averages rho_c on a :class:`~spherepde.geometry.mesh.SphereMesh` with the upwind finite-volume scheme of
:mod:`spherepde.solvers.fv` (first order, or second order with a limited linear reconstruction; token noise nu > 0 by
Scharfetter--Gummel fluxes, :mod:`spherepde.solvers.diffusion`). The nonlocal sums use the cell masses m_c = rho_c |C_c|
placed at the cell nodes x_c = ``geom.nodes`` -- the circumcentres on well-centred meshes such as icospheres, where the
two-point potential flux is consistent, else the barycentres (:func:`spherepde.geometry.surface.cell_nodes`) -- with the
same weighted-point diagnostics as the particle solver (:mod:`spherepde.model.energy`).

:class:`MeshSolver` owns the state (density, time, energy balance), the evaluation of a state and the diagnostics row; the
step itself is its time stepper's (a :class:`~spherepde.solvers.integrators.Stepper` from
:data:`~spherepde.solvers.integrators.STEPPERS`: explicit Runge--Kutta under the CFL bound, or the implicit upwind step with
error control), and point masses are a component of their own (:class:`~spherepde.solvers.atoms.PointMasses`).

Energy balance (gradient heads, docs/model.md §3)
---------------------------------------------------
* The Ito martingale increment (1/(2H)) sum_h sum_cc' m_c m_c' e^{x_c D_h x_c'} x_c^T dM_k x_c' is added at the start of a
  step that begins on grid point k (< K); per stage d_tE (drift f_h = ``path.drift_at(t_stage)`` plus the Ito correction
  when sigma > 0), the transport rate and G^2 go into :class:`~spherepde.model.energy.EnergyBalance` (the stepper's weights).
* ``transport`` on the mesh is the discrete chain-rule rate sum_c xi_c dm_c/dt with xi_c = (1/H) sum_h Z_h(x_c) and
  dm_c/dt = |C_c| d rho_c/dt from the FV update (with noise: its diffusion too, whose part is ``diffusion``), so the exact
  balance residual ``edi_exact`` vanishes as dt -> 0 at a fixed mesh (O(dt^p) for an order-p integrator with frozen
  weights); G^2 uses v at the cell centres. With noise, the free energy's balance ``edi_free`` (docs/model.md).
* The energy's change through the weights (``int_dE_weights``) is booked by the trapezoid rule over each step's first and
  last state, and the energy jumps of point masses (``int_collapse_energy``) after each step, so ``edi_exact`` splits into
  the solver's ``edi_transport`` and the weight path's ``edi_weights`` (docs/model.md §3.6).
* For general heads (``path.is_gradient`` False) energy-based columns are NaN.

Invariants checked after every step (``check=True``): finite values (:class:`SolverError`) and rho_min >= -1e-14 max rho (:class:`PositivityError`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from spherepde.attention import SUMMATION_MODES
from spherepde.geometry.protocol import check_dimension, geometry_of, mesh_spacing
from spherepde.model.clusters import MERGE_ANGLE, MIN_CLUSTER_MASS, cluster_table, weighted_clusters
from spherepde.model.columns import solver_columns
from spherepde.model.energy import EnergyBalance, state_rates
from spherepde.model.velocity import DEFAULT_ATTENTION, HeadFields, is_normalised, velocity_from_fields
from spherepde.model.weights import WeightPath
from spherepde.solvers.atoms import DENSE_FLOOR, PointMasses, initial_point_masses
from spherepde.solvers.diffusion import MeshDiffusion, entropy, noise_rates
from spherepde.solvers.errors import CFLViolation, PositivityError, SolverError, initial_density, positive
from spherepde.solvers.fv import (
    VELOCITY_FORMS,
    cfl_bound,
    face_values,
    fv_rhs,
    midpoint_edge_velocity,
    potential_edge_velocity,
    with_scheme_g2,
)
from spherepde.solvers.head_rates import cell_rates
from spherepde.solvers.integrators import SNAP_TOL, OptionError, Stepper, get_stepper

__all__ = ["CFLViolation", "DENSE_FLOOR", "MeshSolver", "PositivityError", "SolverError"]

log = logging.getLogger(__name__)


@dataclass
class _Stage:
    """Everything evaluated at one (rho, t)."""

    u: np.ndarray  # (ne,) edge normal velocities
    rhs: np.ndarray  # (nc,) d rho/dt
    bound: float  # CFL bound of this stage (fv.cfl_bound)
    rates: dict | None  # energy rates, Phi, xi and the moments M (model.fused.fused_rates)
    atom_v: np.ndarray | None = None  # (k, 3) velocities of the point masses


class MeshSolver:
    """Finite-volume solver of the Transformer PDE on a sphere mesh (see module docstring).

    Parameters
    ----------
    mesh : SphereMesh, or any mesh whose ``geometry()`` is a :class:`~spherepde.geometry.protocol.Geometry`.
    rho0 : (nc,) initial cell densities, non-negative with sum rho |C| = 1 (an unnormalised density is normalised, with a warning).
    path : WeightPath with d = 3.
    velocity : ``"potential"`` (gradient heads only; default) or ``"midpoint"`` (:mod:`spherepde.solvers.fv`).
    order : 1 (upwind) or 2 (limited linear reconstruction).
    integrator : a mesh stepper of :data:`spherepde.solvers.integrators.STEPPERS` by name (or a
        :class:`~spherepde.solvers.integrators.Stepper`): ``"euler"``, ``"heun"`` (= ``"ssprk2"``),
        ``"ssprk3"`` or ``"implicit"`` (:class:`~spherepde.solvers.integrators.ImplicitUpwind`, order 1).
    tol, dt_max : implicit stepper: the local error allowed per step (mass moved) and the largest step (None: none).
    cfl : safety factor in (0, 1] multiplying the CFL bound.
    dt : fixed step (checked against cfl * bound every step) or None for adaptive steps.
    check : check finiteness and positivity after every step.
    velocity_field : test hook -- a callable ``t -> (ne,)`` of prescribed edge normal velocities (along ``mesh.edge_normals``)
        replacing the attention velocity (pure transport; energy columns are NaN), e.g.
        :func:`spherepde.solvers.fv.rigid_rotation_edge_velocity`.
    summation : attention sums ``"direct"``, ``"fast"`` (spherical-harmonic expansion, :mod:`spherepde.attention.harmonic`) or
        ``"auto"`` (fast where it pays and meets the tolerance); see :func:`spherepde.attention.attention_moments`.
    summation_tol : accuracy of the fast sums (relative error of Z_h, error of Y_h/Z_h).
    diagnostics_tol : accuracy of the fast sums' moments Y_h/Z_h and Q_h/Z_h, which feed only the energy diagnostics G^2, d_tE
        and the martingale (the potential velocity uses log Z_h alone, at ``summation_tol``); the larger of the two is used,
        None means ``summation_tol``.
    atoms, atom_spread, atom_radius, atom_min_mass, merge_radius : point masses
        (:class:`~spherepde.solvers.atoms.PointMasses`; ``atoms`` needs the implicit stepper).
    point_masses : initial point masses ``(positions (k, 3), masses (k,))`` beside ``rho0`` (needs ``atoms``; e.g. a branch of
        a point-mass run): unit positions, positive masses, and the cells' mass plus theirs is 1 (the cells are rescaled, with
        a warning, if not).
    attention : ``"softmax"`` or ``"unnormalised"`` (ATTENTION_KINDS; unnormalised: flux potential xi = (1/H) sum_h Z_h, mobility 1).
    noise : token noise nu >= 0, the diffusion nu Delta_S rho (:class:`~spherepde.solvers.diffusion.MeshDiffusion`; 0: none).

    Attributes
    ----------
    t : float, step_count : int, rho : (nc,) array, dt_last : float, stepper : Stepper, points : PointMasses (empty without ``atoms``).
    """

    #: use the NumPy route (velocity_from_fields, state_rates) instead of fused_rates (a reference for tests, benchmarks)
    _numpy_rates = False
    _degree_rule, _moments_by_mass = "synthesis", True  # the fast sums' degree rule (synthesis: where it applies) and moments_by_mass

    def __init__(self, mesh, rho0, path: WeightPath, *, velocity: str = "potential", order: int = 1, integrator: str = "ssprk3",
                 cfl: float = 0.5, dt: float | None = None, check: bool = True, velocity_field: Callable[[float], np.ndarray] | None = None,
                 summation: str = "auto", summation_tol: float = 1e-10, diagnostics_tol: float | None = 1e-6, tol: float = 1e-3,
                 dt_max: float | None = None, atoms: bool = False, atom_spread: float | None = None, atom_radius: float | None = None,
                 atom_min_mass: float = MIN_CLUSTER_MASS, merge_radius: float = MERGE_ANGLE, point_masses=None,
                 attention: str = DEFAULT_ATTENTION, noise: float = 0.0):
        if not isinstance(path, WeightPath):
            raise TypeError(f"path must be a WeightPath, got {type(path).__name__}")
        geom = geometry_of(mesh)
        check_dimension(geom.d, path.d)
        self.stepper = self.check_options(integrator=integrator, order=order, velocity=velocity, gradient=path.is_gradient,
                                          atoms=bool(atoms), prescribed=velocity_field is not None)
        self.integrator = self.stepper.name
        cfl = float(cfl)
        if not (0.0 < cfl <= 1.0):
            raise ValueError(f"cfl must lie in (0, 1] (positivity is guaranteed only up to the CFL bound), got {cfl}")
        if summation not in SUMMATION_MODES:
            raise ValueError(f"unknown summation {summation!r}; use one of {', '.join(repr(n) for n in SUMMATION_MODES.names())}")
        self.summation_tol = positive("summation_tol", summation_tol)
        self.diagnostics_tol = positive("diagnostics_tol", diagnostics_tol, none=" (or None for summation_tol)")
        self.dt = positive("dt", dt, none=" (or None for adaptive steps)")
        self.tol = positive("tol", tol)
        self.dt_max = positive("dt_max", dt_max, none=" (or None)")
        self.mesh, self.geom, self.path = mesh, geom, path
        self.diffusion = MeshDiffusion.create(geom, noise, int(order), atoms=bool(atoms))
        self.noise = 0.0 if self.diffusion is None else self.diffusion.nu
        self.velocity, self.order, self.cfl, self.check = velocity, int(order), cfl, bool(check)
        self.velocity_field, self.summation = velocity_field, summation
        self.atoms, self.attention, self.normalised = bool(atoms), attention, is_normalised(attention)
        self.points = PointMasses(self.geom, mesh_spacing(geom), spread=atom_spread, radius=atom_radius,
                                  min_mass=atom_min_mass, merge_radius=merge_radius)
        #: implicit integrator: the step proposed for the next step (NaN: not yet chosen)
        self.h_next = float("nan")
        if point_masses is not None:
            self.points.x, self.points.m = initial_point_masses(*point_masses, atoms=self.atoms, d=geom.d)
        self.rho = initial_density(rho0, self.geom.areas, float(np.sum(self.points.m)))
        self.t, self.step_count, self.dt_last = 0.0, 0, 0.0
        #: floor on the time step: a step below it raises SolverError (0: no floor)
        self.dt_min = 0.0
        self._cache: tuple | None = None
        self.balance = EnergyBalance(sign=path.sign, noise=self.noise, free=not self.normalised)
        if self.atoms:
            self._collapse()
        if self._has_energy:
            self.balance.start(self._current().rates)

    @staticmethod
    def check_options(*, integrator="ssprk3", order: int = 1, velocity: str = "potential", gradient: bool = True,
                      atoms: bool = False, prescribed: bool = False) -> Stepper:
        """The mesh stepper called ``integrator``, after checking that these options fit together (the one
        place the mesh's option rules are written; the config calls it too). ``gradient``: the heads are
        gradient heads; ``prescribed``: a velocity field replaces the attention velocity.

        Raises
        ------
        OptionError
            (a ValueError) naming the option (``velocity``, ``order``, ``integrator``, ``atoms``).
        """
        if velocity not in VELOCITY_FORMS:
            raise OptionError("velocity", f"unknown velocity form {velocity!r}; use one of {VELOCITY_FORMS}")
        if velocity == "potential" and not gradient and not prescribed:
            raise OptionError("velocity", "velocity = 'potential' needs gradient heads (A_h = D_h, V_h = s D_h); these are "
                                          "general heads -- use velocity = 'midpoint'")
        if order not in (1, 2):
            raise OptionError("order", f"order must be 1 (upwind) or 2 (limited linear reconstruction), got {order!r}")
        stepper = get_stepper(integrator, "mesh")
        stepper.check_options(order=order)
        PointMasses.check_options(atoms=atoms, stepper=stepper, gradient=gradient, velocity=velocity, prescribed=prescribed)
        return stepper

    # ------------------------------------------------------------------ helpers
    @property
    def _has_energy(self) -> bool:
        return self.path.is_gradient and self.velocity_field is None

    def _evaluate(self, rho: np.ndarray, t: float, atom_x: np.ndarray | None = None) -> _Stage:
        """Edge velocities, the FV right-hand side and (gradient heads) the energy rates at (rho, t)."""
        if self.atoms and len(self.points.m):
            u, rhs, faces, rates, v = self.points.evaluate(self, rho, t, self.points.x if atom_x is None else atom_x)
            return _Stage(u, rhs, self._bound(u, rho, faces), rates, v)
        g = self.geom
        faces = face_values(g, rho, self.order)
        if self.velocity_field is not None:
            u = np.asarray(self.velocity_field(t), dtype=np.float64)
            if u.shape != (g.n_edges,):
                raise ValueError(f"velocity_field returned shape {u.shape}, expected ({g.n_edges},)")
            return _Stage(u, self._rhs(rho, faces, u)[0], self._bound(u, rho, faces), None)
        masses = rho * g.areas
        A, V = self.path.matrices(t)
        if not self.path.is_gradient:
            u = midpoint_edge_velocity(g, masses, A, V, summation=self.summation, tol=self.summation_tol, normalised=self.normalised)
            return _Stage(u, self._rhs(rho, faces, u)[0], self._bound(u, rho, faces), None)
        sigma = self.path.sigma
        logZ, rates = cell_rates(self, masses, A, V, t, sigma)  # per-cell moments or synthesis (spherepde.solvers.head_rates)
        if self.velocity == "potential":  # Phi (softmax) or xi (unnormalised attention)
            u = potential_edge_velocity(g, rates["Phi" if self.normalised else "xi"], self.path.sign)
        else:
            u = midpoint_edge_velocity(g, masses, A, V, summation=self.summation, tol=self.summation_tol, normalised=self.normalised)
        rhs, flux, drhs = self._rhs(rho, faces, u)
        rates["transport"] = float(np.sum(rates["xi"] * g.areas * rhs))
        if drhs is not None:  # token noise: the diffusion's work, the free energy's dissipation, the entropy
            rates.update(noise_rates(g, rho, rates["xi"], drhs, flux, self.noise, self.path.sign))
        # G^2 of the scheme (closes the paper-form balance) beside the nodal G2 (the estimate of the continuum value)
        rates = with_scheme_g2(rates, g, logZ, u, flux, self.normalised, now=getattr(self.stepper, "legacy", False), Z=rates.pop("Z", None))
        rates["logZ"] = logZ
        return _Stage(u, rhs, self._bound(u, rho, faces), rates)

    def _numpy_route(self, masses, logZ, Ybar, Qbar, A, V, t, X=None) -> dict:
        """The rates by velocity_from_fields and state_rates at the nodes or at ``X`` (reference of fused_rates; d != 3)."""
        X = self.geom.nodes if X is None else X
        Z = np.exp(logZ)
        fields = HeadFields(Z, Ybar * Z[:, :, None], None if Qbar is None else Qbar * Z)
        v = velocity_from_fields(X, fields, V, kind=self.attention)
        rates = state_rates(X, masses, fields, A, self.path.drift_at(t), self.path.sigma, v, attention=self.attention)
        del rates["grad_xi"]
        rates["Phi"] = logZ.mean(axis=1)
        return rates

    def _rhs(self, rho, faces, u):
        """(d rho/dt, the face fluxes F_e, the diffusion's part of d rho/dt or None without noise)."""
        flux = np.empty(self.geom.n_edges)
        rhs = fv_rhs(self.geom, faces, u, flux=flux)
        return rhs, flux, None if self.diffusion is None else self.diffusion.add(rho, u, rhs, flux)[1]

    def _bound(self, u, rho, faces) -> float:
        return cfl_bound(self.geom, u, self.order, rho, faces) if self.diffusion is None else self.diffusion.bound(u, rho, faces)

    def _current(self) -> _Stage:
        key = (self.step_count, self.t)
        if self._cache is None or self._cache[0] != key:
            self._cache = (key, self._evaluate(self.rho, self.t))
        return self._cache[1]

    def _commit(self, rho: np.ndarray, t_end: float, h: float, *, ev1: _Stage | None = None, atom_x: np.ndarray | None = None) -> None:
        """Take the new state of a step of size h ending at t_end (``ev1``: its evaluation, kept for the next step)."""
        self.rho = rho
        if atom_x is not None:
            self.points.x = atom_x
        self.t, self.step_count, self.dt_last = t_end, self.step_count + 1, h
        self._cache = None if ev1 is None else ((self.step_count, self.t), ev1)

    def _collapse(self) -> bool:
        """:meth:`PointMasses.collapse <spherepde.solvers.atoms.PointMasses.collapse>` of the current density; True if it changed."""
        changed = self.points.collapse(self.rho, self.t)
        if changed:
            self._cache = None
        return changed

    # ------------------------------------------------------------------ stepping
    def step(self, t_stop: float) -> float:
        """Take one step with the stepper, ending at or before t_stop (and never across a weight-grid point); return the dt taken."""
        t_stop = float(t_stop)
        pdt = self.path.dt
        if t_stop > self.path.T + SNAP_TOL * pdt:
            raise ValueError(f"t_stop = {t_stop} lies beyond the end of the weight path (T = {self.path.T})")
        if not t_stop > self.t + SNAP_TOL * pdt:
            raise ValueError(f"t_stop = {t_stop} must lie after the current time t = {self.t}")
        return self.stepper.mesh_step(self, t_stop)

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
        """The adaptive step cfl * (CFL bound) of the current state (the fixed ``dt`` if set;
        a stepper not limited by the CFL bound: its proposed next step, once one was taken)."""
        if self.dt is not None:
            return self.dt
        if not self.stepper.cfl_limited and math.isfinite(self.h_next):
            return self.h_next
        return self.cfl * self._current().bound

    @property
    def may_be_nan(self) -> frozenset:
        """Columns NaN by design: the split of the energy balance after a resume from a checkpoint
        written before it was kept (:meth:`~spherepde.model.energy.EnergyBalance.unknown_columns`)."""
        return self.balance.unknown_columns()

    def _explicit_step(self) -> float | None:
        """cfl * (CFL bound) of the current state, at most the weight grid step (None if not positive)."""
        h = min(float(self.cfl * self._current().bound), float(self.path.dt))
        return h if h > 0 and math.isfinite(h) else None

    def step_hint(self) -> float | None:
        """The adaptive explicit step of the current state; None for a fixed ``dt`` or a stepper not limited by the CFL bound."""
        return self._explicit_step() if self.dt is None and self.stepper.cfl_limited else None

    def reference_step(self) -> float | None:
        """For an adaptive stepper whose steps follow the local error: the explicit step of the current state, the yardstick of
        its step budget (an error-controlled run far slower than an explicit one is stopped); else None (:meth:`step_hint`)."""
        return self._explicit_step() if self.dt is None and not self.stepper.cfl_limited else None

    def last_step(self) -> float:
        return float(self.dt_last)

    def events(self) -> dict:
        """``{"merges": [{t, m1, m2, angle_rad}, ...]}`` with point masses; {} without."""
        return self.points.events() if self.atoms else {}

    def notes(self) -> list[str]:
        return []

    # ------------------------------------------------------------------ output
    def record(self) -> dict:
        """The diagnostics row at the current state (:func:`spherepde.model.columns.solver_columns` of ``"mesh"``)."""
        g = self.geom
        masses = self.rho * g.areas
        row: dict = {"t": float(self.t), "step": int(self.step_count)}
        row.update(self.balance.columns(self._current().rates if self._has_energy else None))
        row["mean_resultant"] = float(np.linalg.norm(masses @ g.nodes + self.points.m @ self.points.x))
        row["G2_scheme"] = float(self._current().rates["G2_scheme"]) if self._has_energy else float("nan")
        row["int_G2_scheme"] = float(self.balance.int_G2_scheme) if self._has_energy else float("nan")
        row["mass"] = float(np.sum(masses) + np.sum(self.points.m))
        row["atom_mass"] = float(np.sum(self.points.m))
        row["n_clusters"] = len(weighted_clusters(*self.points.cluster_points(self.rho))[1])
        row["rho_min"] = float(self.rho.min())
        row["rho_max"] = float(self.rho.max())
        row["dt_last"] = float(self.dt_last)
        if self.diffusion is not None:
            row.update(self.balance.noise_columns(self._current().rates if self._has_energy else None, entropy(self.rho, g.areas)))
        return {k: row[k] for k in solver_columns("mesh", noise=self.noise > 0)}

    def snapshot(self) -> dict:
        """Arrays of the current state for snapshot files: ``rho`` (nc,), in which a point mass is drawn as its mass spread over
        the cell whose node is nearest (:meth:`density`), and the cluster table ``clusters`` (mass, centre;
        :func:`spherepde.model.clusters.cluster_table`). With ``atoms`` also the state itself: ``rho_cells`` (nc,) the cells
        alone, ``atom_x`` (k, 3) and ``atom_m`` (k,) the point masses (rho_cells dsigma + sum_k m_k delta_{x_k} is the measure)."""
        snap = {"rho": self.density(), "clusters": cluster_table(*self.points.cluster_points(self.rho))}
        if self.atoms:
            snap.update(rho_cells=self.rho.copy(), atom_x=self.points.x.copy(), atom_m=self.points.m.copy())
        return snap

    def density(self) -> np.ndarray:
        """The cell densities with every point mass deposited in its nearest cell, (nc,)."""
        return self.points.deposit(self.rho)

    def get_state(self) -> dict:
        """Everything needed for a bit-for-bit resume (numpy arrays, floats and ints only)."""
        st = {"rho": self.rho.copy(), "t": float(self.t), "step_count": int(self.step_count), "dt_last": float(self.dt_last),
              "h_next": float(self.h_next)}
        st.update({"balance_" + k: (float("nan") if v is None else float(v)) for k, v in self.balance.state().items()})
        if self.atoms:
            st.update(self.points.state())
        return st

    def set_state(self, st: dict) -> None:
        """Restore a state from :meth:`get_state`."""
        rho = np.asarray(st["rho"], dtype=np.float64)
        if rho.shape != (self.mesh.n_cells,):
            raise ValueError(f"state density has shape {rho.shape}, expected ({self.mesh.n_cells},)")
        missing = [k for k in ("t", "step_count", "dt_last") if k not in st]
        if missing:
            raise ValueError(f"state is missing {missing}")
        self.rho, self.t, self.step_count, self.dt_last = rho.copy(), float(st["t"]), int(st["step_count"]), float(st["dt_last"])
        self.h_next = float(st.get("h_next", float("nan")))
        self.balance.restore({k: float(st["balance_" + k]) for k in self.balance.state() if "balance_" + k in st})
        self.points.restore(st)
        self._cache = None
