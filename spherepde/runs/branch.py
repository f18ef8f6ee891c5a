"""Starting a run from another run's state (``initial.kind = "run"``).

A study often equilibrates once and then branches: ``initial.run = "runs/x"`` and
``initial.time = t`` start the new run from the density (mesh runs) or the tokens
(particle runs) that run ``x`` saved in its snapshot nearest to ``t``; the new run has its
own weights and time axis (it starts at t = 0) and, between runs of one solver kind, the
source's discretisation (the solver keys it does not set itself:
:data:`spherepde.runs.config.BRANCH_INHERITED`). Which snapshot was used is logged and
recorded in the new run's ``summary.json``. A time outside the source's snapshots, or a
snapshot that cannot be read, is refused (ValueError): the requested state does not exist.

Across solvers:

* mesh run <- mesh run: the cell densities, on the same mesh (refused otherwise, with the
  mesh file to use);
* particle run <- particle run: the tokens (``initial.n`` must match, or be the source's);
* particle run <- mesh run: ``initial.n`` tokens drawn from the density (seed ``initial.seed``);
* mesh run <- particle run: the tokens' histogram density on this run's mesh.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from spherepde.runs.folders import NotARunFolderError, load_snapshots

__all__ = ["BranchPoint", "branch_point", "initial_density_from_run", "initial_tokens_from_run"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BranchPoint:
    """The snapshot a run starts from: the source folder, the requested and the used time."""

    run: str
    requested_time: float
    time: float
    index: int
    kind: str  # "mesh" or "particles": what the source run saved

    def describe(self) -> str:
        exact = abs(self.time - self.requested_time) <= 1e-9 * max(1.0, abs(self.requested_time))
        return (f"initial state from run {self.run} at t = {self.time:.6g}"
                + ("" if exact else f" (the snapshot nearest to the requested t = {self.requested_time:.6g})"))

    def to_dict(self) -> dict:
        return {"run": self.run, "requested_time": self.requested_time, "time": self.time, "snapshot": self.index, "kind": self.kind}


def _snapshots(run_dir):
    folder = Path(run_dir)
    if not folder.is_dir():
        raise FileNotFoundError(f"initial.run: {folder} is not a folder; give the run folder to start from (e.g. runs/paper-ou-mesh)")
    try:
        return load_snapshots(folder, strict=True)
    except NotARunFolderError as exc:
        raise ValueError(f"initial.run: {exc}") from None
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"initial.run: {exc}") from None


def _point(snaps, run_dir, t: float) -> BranchPoint:
    t0, t1 = float(snaps.t[0]), float(snaps.t[-1])
    tol = 1e-9 * max(1.0, abs(t1))
    if not t0 - tol <= float(t) <= t1 + tol:
        span = f"t = {t0:.6g}" if t0 == t1 else f"t = {t0:.6g} to {t1:.6g}"
        raise ValueError(f"initial.time = {float(t):.6g} is outside the run {run_dir}: its snapshots span {span}; give a time in that range")
    k = snaps.nearest(t)
    bp = BranchPoint(str(run_dir), float(t), float(snaps.t[k]), k, snaps.kind)
    log.info("%s", bp.describe())
    return bp


def branch_point(run_dir, t: float) -> BranchPoint:
    """Which snapshot of ``run_dir`` a branch at time ``t`` starts from."""
    snaps = _snapshots(run_dir)
    return _point(snaps, run_dir, t)


def initial_density_from_run(run_dir, t: float, mesh) -> tuple[np.ndarray, BranchPoint]:
    """Cell densities on ``mesh`` from the snapshot of ``run_dir`` nearest to ``t``."""
    snaps = _snapshots(run_dir)
    bp = _point(snaps, run_dir, t)
    if snaps.rho is not None:
        src = snaps.mesh
        same = src.n_cells == mesh.n_cells and np.allclose(src.points, mesh.points, atol=1e-12) and np.array_equal(src.cells, mesh.cells)
        if not same:
            raise ValueError(
                f"initial.run: {run_dir} was run on a mesh with {src.n_cells} cells, this run's mesh has {mesh.n_cells}; "
                f"branch on the same mesh (set mesh.file = \"{Path(run_dir) / 'mesh.npz'}\")"
            )
        rho = np.array(snaps.rho[bp.index], float)
    else:
        from spherepde.geometry.densities import from_particles

        rho = from_particles(mesh, snaps.X[bp.index])
    return rho, bp


def initial_tokens_from_run(run_dir, t: float, n: int, *, seed: int = 0) -> tuple[np.ndarray, BranchPoint]:
    """Tokens from the snapshot of ``run_dir`` nearest to ``t`` (drawn from its density for a mesh run)."""
    snaps = _snapshots(run_dir)
    bp = _point(snaps, run_dir, t)
    if snaps.X is not None:
        X = np.array(snaps.X[bp.index], float)
        if n != X.shape[0]:
            raise ValueError(f"initial.n = {n}, but {run_dir} has {X.shape[0]} tokens; set initial.n = {X.shape[0]} to branch from it")
        return X, bp
    from spherepde.solvers.distances import sample_from_density

    return sample_from_density(snaps.mesh, snaps.rho[bp.index], n, seed=seed), bp
