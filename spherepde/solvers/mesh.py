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

from spherepde.attention import SUMMATION_MODES, attention_moments
from spherepde.geometry.protocol import check_dimension, geometry_of
from spherepde.model.columns import MESH_COLUMNS
from spherepde.model.energy import EnergyBalance, cluster_table, state_rates, weighted_clusters
from spherepde.model.fused import fused_rates, martingale_from_moments
from spherepde.model.velocity import HeadFields, velocity_from_fields
from spherepde.model.weights import WeightPath
from spherepde.solvers.fv import (
    VELOCITY_FORMS,
    cell_fields,
    cfl_bound,
    face_values,
    fv_rhs,
    midpoint_edge_velocity,
    potential_edge_velocity,
    scheme_g2,
)
from spherepde.solvers.implicit import implicit_flux, implicit_upwind_step
from spherepde.solvers.integrators import IMPLICIT, get_integrator, resolve_integrator

__all__ = ["CFLViolation", "MeshSolver", "PositivityError", "SolverError"]

log = logging.getLogger(__name__)

#: Cells denser than this (5x the uniform density) count as concentrated mass for the cluster count.
DENSE_FLOOR = 5.0 / (4.0 * math.pi)

#: Relative tolerance on negative densities (round-off) before PositivityError.
NEGATIVE_TOL = 1e-14
#: Relative (to the weight grid step) distance within which times snap to grid points.
SNAP_TOL = 1e-9


def _positive(name: str, value, *, none: str = "") -> float | None:
    """``value`` as a float, which must be positive and finite (ValueError naming ``name``);
    None passes through when ``none`` (the message's note on what None means) is given."""
    if value is None and none:
        return None
    v = float(value)
    if not (v > 0.0 and math.isfinite(v)):
        raise ValueError(f"{name} must be a positive number{none}, got {v}")
    return v


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
    atom_v: np.ndarray | None = None  # (k, 3) velocities of the point masses


class MeshSolver:
    """Finite-volume solver of the Transformer PDE on a sphere mesh (see module docstring).

    Parameters
    ----------
    mesh : SphereMesh, or any mesh whose ``geometry()`` is a :class:`~spherepde.geometry.protocol.Geometry`.
    rho0 : (nc,) initial cell densities, non-negative with sum rho |C| = 1 (an
        unnormalised density is normalised, with a warning).
    path : WeightPath with d = 3.
    velocity : ``"potential"`` (gradient heads only; default) or ``"midpoint"``
        (:mod:`spherepde.solvers.fv`).
    order : 1 (upwind) or 2 (limited linear reconstruction).
    integrator : ``"euler"``, ``"ssprk2"`` or ``"ssprk3"`` (:data:`spherepde.solvers.integrators.INTEGRATORS`),
        or ``"implicit"``: the linearly implicit upwind step (:mod:`spherepde.solvers.implicit`;
        order 1), positive and mass-conserving for any step, with steps chosen from the local
        error (``tol``) instead of the CFL bound (or the fixed ``dt``, unchecked).
    tol : implicit integrator only: the local error allowed per step, in mass moved,
        (h/2) sum_c |C_c| |r_c(t + h) - r_c(t)| <= tol with r = d rho/dt (the backward-Euler
        error estimate); default 1e-3. ``dt_max`` bounds the step (default: none).
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
        tol: float = 1e-3,
        dt_max: float | None = None,
        atoms: bool = False,
        atom_spread: float | None = None,
        atom_radius: float | None = None,
        atom_min_mass: float = 1e-3,
        merge_radius: float = 1e-2,
    ):
        if not isinstance(path, WeightPath):
            raise TypeError(f"path must be a WeightPath, got {type(path).__name__}")
        geom = geometry_of(mesh)
        check_dimension(geom.d, path.d)
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
        summation_tol = _positive("summation_tol", summation_tol)
        diagnostics_tol = _positive("diagnostics_tol", diagnostics_tol, none=" (or None for summation_tol)")
        dt = _positive("dt", dt, none=" (or None for adaptive steps)")
        self.mesh = mesh
        self.geom = geom
        self.path = path
        self.velocity = velocity
        self.order = int(order)
        if isinstance(integrator, str):
            integrator = resolve_integrator(integrator, "mesh")  # 'heun' is the mesh's ssprk2
        if integrator == IMPLICIT:
            if order != 1:
                raise ValueError("integrator = 'implicit' is the first-order upwind step; use order = 1")
            self.scheme = None
            self.integrator = IMPLICIT
        else:
            self.scheme = get_integrator(integrator)
            self.integrator = self.scheme.name
        self.tol = _positive("tol", tol)
        self.dt_max = _positive("dt_max", dt_max, none=" (or None)")
        self.atoms = bool(atoms)
        if self.atoms:
            if integrator != IMPLICIT:
                raise ValueError("atoms = True (collapsed clusters carried as point masses) needs integrator = 'implicit'")
            if not path.is_gradient or velocity != "potential" or velocity_field is not None:
                raise ValueError("atoms = True needs gradient heads and the potential velocity")
        h_mesh = float(np.mean(geom.edge_lengths))
        self.atom_spread = _positive("atom_spread", h_mesh if atom_spread is None else atom_spread)
        self.atom_radius = _positive("atom_radius", 2.5 * h_mesh if atom_radius is None else atom_radius)
        self.atom_min_mass = _positive("atom_min_mass", atom_min_mass)
        self.merge_radius = _positive("merge_radius", merge_radius)
        #: point masses (collapsed clusters): positions (k, 3) and masses (k,)
        self.atom_x = np.zeros((0, 3))
        self.atom_m = np.zeros(0)
        #: merge events of the point masses: (t, m1, m2, angle) per merge
        self.merges: list[tuple[float, float, float, float]] = []
        self._tree = None
        #: implicit integrator: the step proposed for the next step (NaN: not yet chosen)
        self.h_next = float("nan")
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
        if self.atoms:
            self._collapse()
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

    def _evaluate(self, rho: np.ndarray, t: float, atom_x: np.ndarray | None = None) -> _Stage:
        """Edge velocities, the FV right-hand side and (gradient heads) the energy rates at (rho, t)."""
        if self.atoms and len(self.atom_m):
            return self._evaluate_atoms(rho, t, self.atom_x if atom_x is None else atom_x)
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
        flux = np.empty(g.n_edges)
        rhs = fv_rhs(g, faces, u, flux=flux)
        rates["transport"] = float(np.sum(rates["xi"] * g.areas * rhs))
        # G^2 of the scheme (closes the paper-form balance) beside the nodal G2 (the estimate of the continuum value)
        rates["G2_scheme"] = scheme_g2(g, logZ, u, flux)
        rates["logZ"] = logZ
        return _Stage(u, rhs, self._bound(u, rho, faces), rates)

    def _evaluate_atoms(self, rho: np.ndarray, t: float, atom_x: np.ndarray) -> _Stage:
        """:meth:`_evaluate` for the measure rho dsigma + sum_k m_k delta_{y_k} (docs/model.md §4.6).

        Cells and point masses are sources and targets of the same attention sums; the cells
        move by the upwind scheme with u_e = s (Phi_n - Phi_c)/d_cn, a point mass with the
        exact token velocity v(y_k) = (1/H) sum_h P_y V_h Y_h/Z_h. Energy, xi and the nodal
        G^2 cover the whole measure; the scheme's G^2 adds the exact point-mass terms
        m_k |v_k|^2 / ((1/H) sum_h 1/Z_h(y_k)) to the cells' :func:`scheme_g2`, and the
        transport rate adds m_k grad xi(y_k) . v_k.
        """
        g = self.geom
        nc = g.n_cells
        faces = face_values(g, rho, 1)
        X = np.concatenate([g.nodes, atom_x])
        m = np.concatenate([rho * g.areas, self.atom_m])
        A, V = self.path.matrices(t)
        sigma = self.path.sigma
        # empty cells add nothing to the sums; neither do the round-off masses the sparse solve
        # leaves in them (below 1e-16 of the total, far below the sums' accuracy)
        src = np.flatnonzero(m > 1e-16)
        logZ, Ybar, Qbar = attention_moments(X, X[src], m[src], A, want_q=sigma > 0, log=True, summation=self.summation,
                                             tol=self.summation_tol, tol_moments=self.diagnostics_tol)
        rates = fused_rates(X, m, logZ, Ybar, Qbar, V, self.path.drift_at(t), sigma)
        u = potential_edge_velocity(g, rates["Phi"][:nc], self.path.sign)
        flux = np.empty(g.n_edges)
        rhs = fv_rhs(g, faces, u, flux=flux)
        # point masses: velocity, grad xi (A = D for gradient heads) and mobility
        H = A.shape[0]
        Yk = Ybar[nc:]  # (k, H, 3)
        a = np.einsum("hij,khj->ki", V, Yk) / H
        y = atom_x
        v = a - np.sum(a * y, axis=1)[:, None] * y
        Zk = np.exp(logZ[nc:])  # (k, H)
        gx = np.einsum("kh,hij,khj->ki", Zk, A, Yk) / H
        gx = gx - np.sum(gx * y, axis=1)[:, None] * y
        mob = np.mean(1.0 / Zk, axis=1)
        rates["transport"] = float(np.sum(rates["xi"][:nc] * g.areas * rhs) + np.sum(self.atom_m * np.sum(gx * v, axis=1)))
        rates["G2_atoms"] = float(np.sum(self.atom_m * np.sum(v * v, axis=1) / mob))
        rates["transport_atoms"] = float(np.sum(self.atom_m * np.sum(gx * v, axis=1)))
        rates["G2_scheme"] = scheme_g2(g, logZ[:nc], u, flux) + rates["G2_atoms"]
        rates["logZ"] = logZ[:nc]
        rates["Phi"] = rates["Phi"][:nc]
        rates["xi"] = rates["xi"][:nc]
        return _Stage(u, rhs, self._bound(u, rho, faces), rates, v)

    # ------------------------------------------------------------------ point masses
    def _node_tree(self):
        if self._tree is None:
            from scipy.spatial import cKDTree

            self._tree = cKDTree(self.geom.nodes)
        return self._tree

    def _collapse(self) -> bool:
        """Carry collapsed clusters as point masses (docs/model.md §4.6); True if the state changed.

        1. absorb: the mass of the cells whose nodes lie within ``atom_spread`` of a point mass
           joins it (at the mass-weighted mean position, projected to the sphere);
        2. merge: point masses closer than ``merge_radius`` (radians) become one (an event);
        3. collapse: around every cell holding a local maximum of rho with
           rho_c >= 5/(4 pi), the cells within ``atom_radius`` whose mass-weighted angular
           spread about their mean is at most ``atom_spread`` and whose mass is at least
           ``atom_min_mass`` become one point mass at that mean.
        Mass is conserved exactly (moved, never created); the first moment of the moved mass is
        kept up to the projection onto the sphere.
        """
        g = self.geom
        tree = self._node_tree()
        changed = False
        masses = self.rho * g.areas
        chord = lambda ang: 2.0 * math.sin(0.5 * min(ang, math.pi))  # noqa: E731
        # 1. absorb
        for k in range(len(self.atom_m)):
            idx = tree.query_ball_point(self.atom_x[k], chord(self.atom_spread))
            idx = [i for i in idx if masses[i] > 1e-16]
            if idx:
                mk = masses[idx]
                tot = self.atom_m[k] + mk.sum()
                p = self.atom_m[k] * self.atom_x[k] + mk @ g.nodes[idx]
                self.atom_x[k] = p / np.linalg.norm(p)
                self.atom_m[k] = tot
                masses[idx] = 0.0
                self.rho[idx] = 0.0
                changed = True
        # 2. merge
        merged = True
        while merged and len(self.atom_m) > 1:
            merged = False
            cosang = np.clip(self.atom_x @ self.atom_x.T, -1.0, 1.0)
            np.fill_diagonal(cosang, -2.0)
            i, j = np.unravel_index(int(np.argmax(cosang)), cosang.shape)
            ang = math.acos(cosang[i, j])
            if ang < self.merge_radius:
                mi, mj = self.atom_m[i], self.atom_m[j]
                p = mi * self.atom_x[i] + mj * self.atom_x[j]
                self.merges.append((float(self.t), float(mi), float(mj), float(ang)))
                log.info("t = %.6g: point masses %.4g and %.4g merge (angle %.3g rad)", self.t, mi, mj, ang)
                self.atom_x[i] = p / np.linalg.norm(p)
                self.atom_m[i] = mi + mj
                self.atom_x = np.delete(self.atom_x, j, axis=0)
                self.atom_m = np.delete(self.atom_m, j)
                merged = changed = True
        # 3. collapse
        floor = DENSE_FLOOR
        nb = g.neighbors
        cand = np.flatnonzero((self.rho >= floor) & np.all(self.rho[:, None] >= self.rho[nb], axis=1))
        for c in cand[np.argsort(-self.rho[cand], kind="stable")]:
            if masses[c] <= 0.0:
                continue
            idx = np.asarray(tree.query_ball_point(g.nodes[c], chord(self.atom_radius)), dtype=np.int64)
            mk = masses[idx]
            tot = float(mk.sum())
            if tot < self.atom_min_mass:
                continue
            p = mk @ g.nodes[idx]
            centre = p / np.linalg.norm(p)
            ang = np.arccos(np.clip(g.nodes[idx] @ centre, -1.0, 1.0))
            spread = math.sqrt(float(mk @ ang**2) / tot)
            if spread > self.atom_spread:
                continue
            self.atom_x = np.concatenate([self.atom_x, centre[None]])
            self.atom_m = np.concatenate([self.atom_m, [tot]])
            masses[idx] = 0.0
            self.rho[idx] = 0.0
            changed = True
            log.info("t = %.6g: a cluster of mass %.4g (spread %.3g rad) becomes a point mass", self.t, tot, spread)
        if changed:
            self._cache = None
        return changed

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
        if self.scheme is None:
            return self._step_implicit(t_stop)
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

    def _end_time(self, t: float, h: float, t_stop: float) -> float:
        """t + h cut at t_stop and (unless Theta_t is constant) at the next weight-grid point."""
        pdt = self.path.dt
        t_end = min(t + h, t_stop)
        if not self.path.is_constant:
            t_next = self.path.next_grid_time(t)
            t_end = min(t_end, t_next)
            if t_next - t_end <= SNAP_TOL * pdt:
                t_end = t_next
        if abs(t_stop - t_end) <= SNAP_TOL * pdt:
            return t_stop
        return self._snap(t_end)

    def _step_implicit(self, t_stop: float) -> float:
        """One linearly implicit upwind step (docs/model.md §4.5) with local-error control.

        The velocity u^n of (rho^n, t_n) is frozen over the step and (C + h K(u^n)) rho^{n+1} =
        C rho^n is solved. The error estimate err = (h/2) sum_c |C_c| |r^{n+1}_c - r^n_c|
        (r = the explicit d rho/dt of each end state, the second derivative of the backward-Euler
        local error) accepts the step when err <= tol, else the step is retried with
        h * max(0.2, 0.9 sqrt(tol/err)); the next step is proposed the same way (growth <= 5x).
        The first step starts from the explicit CFL step. Energy balance over the step:
        d_tE by the trapezoid rule; transport by the discrete chain rule
        (1/2)(xi^n + xi^{n+1}) . (m^{n+1} - m^n), exact for a frozen quadratic energy; G^2 as
        the mean of :func:`spherepde.solvers.fv.scheme_g2` with the step's flux and the
        velocities of both ends, which equals s * transport for one head.
        """
        t = self.t
        t_stop = float(t_stop)
        pdt = self.path.dt
        if t_stop > self.path.T + SNAP_TOL * pdt:
            raise ValueError(f"t_stop = {t_stop} lies beyond the end of the weight path (T = {self.path.T})")
        if not t_stop > t + SNAP_TOL * pdt:
            raise ValueError(f"t_stop = {t_stop} must lie after the current time t = {t}")
        g = self.geom
        ev0 = self._current()
        if self.dt is not None:
            h_try = self.dt
        elif math.isfinite(self.h_next):
            h_try = self.h_next
        else:
            h_try = self.cfl * ev0.bound if math.isfinite(ev0.bound) else t_stop - t
        if self.dt_max is not None:
            h_try = min(h_try, self.dt_max)
        dmart = 0.0
        k = self.path.grid_index(t)
        if self._has_energy and self.path.sigma > 0 and k is not None and k < self.path.K:
            dmart = martingale_from_moments(ev0.rates["M"], self.path.dM[k])
        r0_mass = g.areas * ev0.rhs
        for _attempt in range(60):
            if h_try < self.dt_min:
                raise SolverError(
                    f"the implicit step collapsed to dt = {h_try:.3g} at t = {t:.6g} (step {self.step_count}), below the floor "
                    f"{self.dt_min:.3g}: the local error tolerance tol = {self.tol:g} cannot be met -- raise tol"
                )
            t_end = self._end_time(t, h_try, t_stop)
            h = t_end - t
            if not h > 0:
                raise SolverError(f"zero time step at t = {t:.6g}, step {self.step_count} (dt = {h_try:.3g}, t_stop = {t_stop:.6g})")
            new = implicit_upwind_step(g, self.rho, ev0.u, h)
            new_x = None
            if ev0.atom_v is not None:
                new_x = self.atom_x + h * ev0.atom_v
                new_x /= np.linalg.norm(new_x, axis=1)[:, None]
            ev1 = self._evaluate(new, t_end, new_x)
            err = 0.5 * h * float(np.sum(np.abs(g.areas * ev1.rhs - r0_mass)))
            if ev0.atom_v is not None:
                err += 0.5 * h * float(self.atom_m @ np.linalg.norm(ev1.atom_v - ev0.atom_v, axis=1))
            fac = 5.0 if err == 0.0 else min(5.0, max(0.2, 0.9 * math.sqrt(self.tol / err)))
            if self.dt is not None or err <= self.tol:
                if ev0.atom_v is not None:  # Heun for the point masses: the corrected positions
                    new_x = self.atom_x + (0.5 * h) * (ev0.atom_v + ev1.atom_v)
                    new_x /= np.linalg.norm(new_x, axis=1)[:, None]
                    ev1 = self._evaluate(new, t_end, new_x)
                break
            h_try = h * fac
        else:  # pragma: no cover - the error would have to stay above tol 60 times in a row
            raise SolverError(f"no step meets the local error tolerance at t = {t:.6g}, step {self.step_count}; raise tol")
        truncated = h < h_try * (1.0 - 1e-12)
        self.h_next = max(h_try, h * fac) if (truncated and fac >= 1.0) else h * fac
        if self.check:
            self._check_state(new, t_end)
        if self._has_energy:
            r0, r1 = ev0.rates, ev1.rates
            dm = g.areas * (new - self.rho)
            transport = 0.5 * float(np.sum((r0["xi"] + r1["xi"]) * dm))
            flux = implicit_flux(g, new, ev0.u)
            G2 = 0.5 * (scheme_g2(g, r0["logZ"], ev0.u, flux) + scheme_g2(g, r1["logZ"], ev1.u, flux))
            G2 += 0.5 * (r0.get("G2_atoms", 0.0) + r1.get("G2_atoms", 0.0))
            transport += 0.5 * h * (r0.get("transport_atoms", 0.0) + r1.get("transport_atoms", 0.0))
            self.balance.add_martingale(dmart)
            self.balance.add_integrals(0.5 * h * (r0["dEdt_partial"] + r1["dEdt_partial"]), transport,
                                       0.5 * h * (r0["G2"] + r1["G2"]), h * G2)
        self.rho = new
        if new_x is not None:
            self.atom_x = new_x
        self.t = t_end
        self.step_count += 1
        self.dt_last = h
        self._cache = ((self.step_count, self.t), ev1)
        if self.atoms:
            self._collapse_keeping_balance()
        return h

    def _collapse_keeping_balance(self) -> None:
        """:meth:`_collapse` after a step; the energy jump of a collapse (the self-energy
        difference of the moved mass, O(m spread^2)) is booked into the transport and G^2
        integrals so that the balance columns keep measuring the time stepping."""
        if not self._has_energy:
            self._collapse()
            return
        E_before = self._current().rates["energy"]
        if self._collapse():
            jump = self._current().rates["energy"] - E_before
            self.balance.jumps += jump

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
        """The adaptive step cfl * (CFL bound) of the current state (the fixed ``dt`` if set;
        the implicit integrator: its proposed next step, once one was taken)."""
        if self.dt is not None:
            return self.dt
        if self.scheme is None and math.isfinite(self.h_next):
            return self.h_next
        return self.cfl * self._current().bound

    may_be_nan = frozenset()

    def step_hint(self) -> float | None:
        """The adaptive explicit step of the current state, at most the weight grid step; None for a
        fixed ``dt`` or the implicit integrator (its steps follow the local error, not the state)."""
        if self.dt is not None or self.scheme is None:
            return None
        h = min(float(self.cfl_step()), float(self.path.dt))
        return h if h > 0 and math.isfinite(h) else None

    def last_step(self) -> float:
        return float(self.dt_last)

    def events(self) -> dict:
        """``{"merges": [{t, m1, m2, angle_rad}, ...]}`` with point masses; {} without."""
        if not self.atoms:
            return {}
        return {"merges": [{"t": t, "m1": m1, "m2": m2, "angle_rad": a} for t, m1, m2, a in self.merges]}

    def notes(self) -> list[str]:
        return []

    # ------------------------------------------------------------------ output
    def record(self) -> dict:
        """The diagnostics row at the current state (:data:`spherepde.model.columns.MESH_COLUMNS`)."""
        g = self.geom
        masses = self.rho * g.areas
        row: dict = {"t": float(self.t), "step": int(self.step_count)}
        row.update(self.balance.columns(self._current().rates if self._has_energy else None))
        row["mean_resultant"] = float(np.linalg.norm(masses @ g.nodes + self.atom_m @ self.atom_x))
        row["G2_scheme"] = float(self._current().rates["G2_scheme"]) if self._has_energy else float("nan")
        row["int_G2_scheme"] = float(self.balance.int_G2_scheme) if self._has_energy else float("nan")
        row["mass"] = float(np.sum(masses) + np.sum(self.atom_m))
        row["atom_mass"] = float(np.sum(self.atom_m))
        row["n_clusters"] = len(weighted_clusters(*self._cluster_points())[1])
        row["rho_min"] = float(self.rho.min())
        row["rho_max"] = float(self.rho.max())
        row["dt_last"] = float(self.dt_last)
        return {k: row[k] for k in MESH_COLUMNS}

    def _cluster_points(self) -> tuple[np.ndarray, np.ndarray]:
        """The points and masses the cluster definition sees: point masses and dense cells."""
        dense = self.rho >= DENSE_FLOOR
        masses = self.rho[dense] * self.geom.areas[dense]
        return np.concatenate([self.geom.nodes[dense], self.atom_x]), np.concatenate([masses, self.atom_m])

    def snapshot(self) -> dict:
        """Arrays of the current state for snapshot files: ``rho`` (nc,), in which a point mass
        is drawn as its mass spread over the cell whose node is nearest (:meth:`density`), and
        the cluster table ``clusters`` (mass, centre; :func:`spherepde.model.energy.cluster_table`)."""
        return {"rho": self.density(), "clusters": cluster_table(*self._cluster_points())}

    def density(self) -> np.ndarray:
        """The cell densities with every point mass deposited in its nearest cell, (nc,)."""
        rho = self.rho.copy()
        if len(self.atom_m):
            _, idx = self._node_tree().query(self.atom_x)
            np.add.at(rho, np.atleast_1d(idx), self.atom_m / self.geom.areas[np.atleast_1d(idx)])
        return rho

    def get_state(self) -> dict:
        """Everything needed for a bit-for-bit resume (numpy arrays, floats and ints only)."""
        st = {"rho": self.rho.copy(), "t": float(self.t), "step_count": int(self.step_count), "dt_last": float(self.dt_last),
              "h_next": float(self.h_next)}
        st.update({"balance_" + k: (float("nan") if v is None else float(v)) for k, v in self.balance.state().items()})
        if self.atoms:
            st.update(atom_x=self.atom_x.copy(), atom_m=self.atom_m.copy(), merges=np.asarray(self.merges, dtype=np.float64).reshape(-1, 4))
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
        self.h_next = float(st.get("h_next", float("nan")))
        self.balance.restore({k: float(st["balance_" + k]) for k in self.balance.state() if "balance_" + k in st})
        if "atom_x" in st:
            self.atom_x = np.asarray(st["atom_x"], dtype=np.float64).reshape(-1, 3).copy()
            self.atom_m = np.asarray(st["atom_m"], dtype=np.float64).reshape(-1).copy()
            self.merges = [tuple(float(v) for v in row) for row in np.asarray(st["merges"], dtype=np.float64).reshape(-1, 4)]
        self._cache = None
