"""Mesh and particles side by side, driven by the identical weight path Theta_t.

:class:`CoupledSolver` advances a :class:`~spherepde.solvers.mesh.MeshSolver` and a
:class:`~spherepde.solvers.particles.ParticleSolver` whose tokens are sampled from the mesh's
initial density, and records, at every record time, the mesh diagnostics (the usual
columns), the particle diagnostics with the prefix ``p_`` and the distances between the
two measures, chosen by ``distances`` (the columns and their order:
:func:`spherepde.model.columns.solver_columns`):

* ``l1_hist`` -- L1 distance between the mesh density and a smoothed histogram of the
  tokens (:func:`spherepde.solvers.distances.l1_to_particles`), dimensionless in [0, 2];
* ``w1_sliced`` -- sliced spherical W1 over :data:`SLICED_PROJECTIONS` random great
  circles, in radians (:class:`spherepde.solvers.distances.SlicedW1`);
* ``w1_exact`` -- the exact W1 with geodesic cost, in radians (network simplex,
  :func:`spherepde.solvers.distances.wasserstein_sphere`), only with ``distances = "all"``.

``distances = "cheap"`` records the first two, ``"all"`` all three (the exact W1 solves a
transport problem between the cells and the tokens at every record, by far the dearest;
docs/guide/mesh-vs-tokens.md), ``"none"`` none. With ``distance_every = N`` the distances
are computed at every N-th record (and at the last one, ``t_end``); the other rows hold NaN.
"""

from __future__ import annotations

import math

from spherepde.model.columns import DISTANCE_MODES, PARTICLE_PREFIX, TOKEN_COLUMNS, TOKEN_NOISE_COLUMNS
from spherepde.solvers.distances import SlicedW1, l1_to_particles, sample_from_density, wasserstein_sphere

__all__ = ["CoupledSolver", "SLICED_PROJECTIONS"]

#: Number of great circles of the sliced W1 column.
SLICED_PROJECTIONS = 100


class CoupledSolver:
    """A mesh solver and a particle solver sharing one weight path (same protocol as both).

    Parameters
    ----------
    mesh_solver : the MeshSolver (already holding the initial density).
    n : number of tokens sampled from the initial density (seeded by ``seed``).
    tokens : the initial tokens (n, d) instead of that sample (a start from a token file, whose
        histogram is the mesh's initial density); ``n`` is then their number.
    particle_integrator : ``euler`` or ``heun``.
    particle_dt : the particle step (default: the path's grid step).
    distances : ``"cheap"`` (l1_hist, w1_sliced), ``"all"`` (also w1_exact) or ``"none"``.
    distance_every : compute the distances at every N-th record only (NaN in between).
    t_end : the run's final time (the distances are always computed there).
    noise : token noise nu >= 0 of the tokens (their Brownian step, seeded by ``seed``:
        :class:`~spherepde.solvers.particles.ParticleSolver`); with nu > 0 the rows add ``p_entropy``.
    """

    def __init__(self, mesh_solver, n: int, *, seed: int = 0, particle_integrator: str = "euler", distances: str = "cheap",
                 distance_every: int = 1, t_end: float | None = None, particle_dt: float | None = None, tokens=None, noise: float = 0.0):
        from spherepde.solvers.particles import ParticleSolver

        if distances not in DISTANCE_MODES:
            raise ValueError(f"output.distances: unknown setting {distances!r}; use {', '.join(repr(k) for k in DISTANCE_MODES)}")
        if int(distance_every) < 1:
            raise ValueError(f"output.distance_every: must be >= 1, got {distance_every!r}")
        self.mesh_solver = mesh_solver
        self.mesh = mesh_solver.mesh
        if tokens is None:
            X0 = sample_from_density(self.mesh, mesh_solver.density(), n, seed=seed)  # point masses included
        else:
            X0 = tokens
        self.particle_solver = ParticleSolver(X0, mesh_solver.path, dt=particle_dt, integrator=particle_integrator,
                                              attention=mesh_solver.attention, noise=noise, noise_seed=seed)
        self.token_columns = TOKEN_COLUMNS + (TOKEN_NOISE_COLUMNS if noise > 0 else ())
        self.distances = distances
        self.distance_columns = DISTANCE_MODES[distances]
        self.distance_every = int(distance_every)
        self.t_end = t_end
        self.records = 0  # rows recorded so far (kept in the checkpoint: the cadence survives a resume)
        self._sliced = SlicedW1(self.mesh, n_projections=SLICED_PROJECTIONS, seed=seed) if "w1_sliced" in self.distance_columns else None

    @property
    def may_be_nan(self) -> frozenset:
        """Columns that hold NaN by design in some rows (distances between their records; the mesh's
        split of the energy balance after a resume from a checkpoint written before it was kept)."""
        dist = frozenset(self.distance_columns) if self.distance_every > 1 else frozenset()
        return dist | self.mesh_solver.may_be_nan

    @property
    def path(self):
        return self.mesh_solver.path

    def step_hint(self) -> float | None:
        return self.mesh_solver.step_hint()

    def reference_step(self) -> float | None:
        return self.mesh_solver.reference_step()

    def last_step(self) -> float:
        return self.mesh_solver.last_step()

    def events(self) -> dict:
        return self.mesh_solver.events()

    def notes(self) -> list[str]:
        return self.mesh_solver.notes() + self.particle_solver.notes()

    @property
    def step_count(self) -> int:
        return self.mesh_solver.step_count

    @property
    def t(self) -> float:
        return self.mesh_solver.t

    @property
    def rho(self):
        """The mesh density with any point masses deposited in their cells (MeshSolver.density)."""
        return self.mesh_solver.density()

    def advance(self, t_stop: float, *, should_stop=None) -> bool:
        """Advance both solvers to t_stop (True), or stop early when ``should_stop()`` says so (False);
        each solver continues from its own time at the next ``advance``."""
        if not self.mesh_solver.advance(t_stop, should_stop=should_stop):
            return False
        return self.particle_solver.advance(t_stop, should_stop=should_stop)

    def _distances_due(self) -> bool:
        if self.records % self.distance_every == 0:
            return True
        return self.t_end is not None and math.isclose(self.t, self.t_end, rel_tol=0.0, abs_tol=1e-9 * max(1.0, abs(self.t_end)))

    def record(self) -> dict:
        row = dict(self.mesh_solver.record())
        prow = self.particle_solver.record()
        for k in self.token_columns:
            row[PARTICLE_PREFIX + k] = prow[k]
        due = self._distances_due()
        X, rho = self.particle_solver.X, self.mesh_solver.density()
        for c in self.distance_columns:
            if not due:
                row[c] = float("nan")
            elif c == "l1_hist":
                row[c] = l1_to_particles(self.mesh, rho, X)
            elif c == "w1_sliced":
                row[c] = self._sliced(rho, X)
            else:
                row[c] = wasserstein_sphere(self.mesh, rho, X, method="exact")
        self.records += 1
        return row

    def snapshot(self) -> dict:
        snap = self.mesh_solver.snapshot()  # rho with point masses deposited, and the mesh's cluster table
        return {**snap, "X": self.particle_solver.X.copy()}

    def get_state(self) -> dict:
        st = {"mesh_" + k: v for k, v in self.mesh_solver.get_state().items()}
        st.update({"part_" + k: v for k, v in self.particle_solver.get_state().items()})
        st["coupled_records"] = int(self.records)
        return st

    def set_state(self, st: dict) -> None:
        self.mesh_solver.set_state({k[5:]: v for k, v in st.items() if k.startswith("mesh_")})
        self.particle_solver.set_state({k[5:]: v for k, v in st.items() if k.startswith("part_")})
        if "coupled_records" in st:
            self.records = int(st["coupled_records"])
