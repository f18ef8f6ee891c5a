"""Mesh and particles side by side, driven by the identical weight path Theta_t.

:class:`CoupledSolver` advances a :class:`~spherepde.solvers.mesh.MeshSolver` and a
:class:`~spherepde.solvers.particles.ParticleSolver` whose tokens are sampled from the mesh's
initial density, and records, at every record time, the mesh diagnostics (the usual
columns), the particle diagnostics with the prefix ``p_``, and the distances between
the two measures: ``w_sphere`` (Wasserstein-1 with geodesic cost, exact or sliced --
chosen once per run and recorded in the column ``w_exact`` -- see
:func:`spherepde.solvers.distances.wasserstein_sphere`) and ``l1_hist`` (L1 distance to the
smoothed token histogram, :func:`spherepde.solvers.distances.l1_to_particles`).
"""

from __future__ import annotations

import numpy as np

from spherepde.solvers.distances import l1_to_particles, sample_from_density, wasserstein_sphere

__all__ = ["CoupledSolver", "PARTICLE_PREFIX"]

PARTICLE_PREFIX = "p_"
_PARTICLE_COLUMNS = ("energy", "G2", "edi_paper", "edi_exact", "mean_resultant", "n_clusters")


class CoupledSolver:
    """A mesh solver and a particle solver sharing one weight path (same protocol as both).

    Parameters
    ----------
    mesh_solver : the MeshSolver (already holding the initial density).
    n : number of tokens sampled from the initial density (seeded by ``seed``).
    particle_integrator : ``euler`` or ``heun``; the particle step is the path's grid step.
    w_method : method of the Wasserstein distance (``auto``, ``exact``, ``sliced``).
    """

    def __init__(self, mesh_solver, n: int, *, seed: int = 0, particle_integrator: str = "euler", w_method: str = "auto"):
        from spherepde.solvers.particles import ParticleSolver

        self.mesh_solver = mesh_solver
        self.mesh = mesh_solver.mesh
        X0 = sample_from_density(self.mesh, mesh_solver.rho, n, seed=seed)
        self.particle_solver = ParticleSolver(X0, mesh_solver.path, integrator=particle_integrator)
        if w_method == "auto":  # decided once, so the column means the same thing all run long
            w_method = "exact" if self.mesh.n_cells * n <= 4_000_000 else "sliced"
        if w_method not in ("exact", "sliced"):
            raise ValueError(f"unknown Wasserstein method {w_method!r}; use 'auto', 'exact' or 'sliced'")
        self.w_method = w_method

    @property
    def step_count(self) -> int:
        return self.mesh_solver.step_count

    @property
    def t(self) -> float:
        return self.mesh_solver.t

    @property
    def rho(self):
        return self.mesh_solver.rho

    def advance(self, t_stop: float) -> None:
        self.mesh_solver.advance(t_stop)
        self.particle_solver.advance(t_stop)

    def record(self) -> dict:
        row = dict(self.mesh_solver.record())
        prow = self.particle_solver.record()
        for k in _PARTICLE_COLUMNS:
            row[PARTICLE_PREFIX + k] = prow[k]
        X = self.particle_solver.X
        row["w_sphere"] = wasserstein_sphere(self.mesh, self.mesh_solver.rho, X, method=self.w_method)
        row["l1_hist"] = l1_to_particles(self.mesh, self.mesh_solver.rho, X)
        row["w_exact"] = 1.0 if self.w_method == "exact" else 0.0  # 1: exact W1, 0: sliced spherical W1
        return row

    def snapshot(self) -> dict:
        return {"rho": np.array(self.mesh_solver.rho, copy=True), "X": self.particle_solver.X.copy()}

    def get_state(self) -> dict:
        st = {"mesh_" + k: v for k, v in self.mesh_solver.get_state().items()}
        st.update({"part_" + k: v for k, v in self.particle_solver.get_state().items()})
        return st

    def set_state(self, st: dict) -> None:
        self.mesh_solver.set_state({k[5:]: v for k, v in st.items() if k.startswith("mesh_")})
        self.particle_solver.set_state({k[5:]: v for k, v in st.items() if k.startswith("part_")})
