"""Starting a run from another run: its state (``initial.kind = "run"``) or its weight path.

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
  mesh file to use), and the point masses of a run with ``solver.atoms`` exactly (positions and
  masses; :func:`initial_state_from_run`) -- the branch needs ``solver.atoms = true`` then
  (refused otherwise: depositing them in cells would change the state). The source's merge
  events stay in its own summary; the branch records the merges after its start;
* particle run <- particle run: the tokens (``initial.n`` must match, or be the source's);
* particle run <- mesh run: ``initial.n`` tokens drawn from the density (seed ``initial.seed``),
  a point mass's share (multinomial) placed at its position;
* mesh run <- particle run: the tokens' histogram density on this run's mesh.

A run driven by a saved weight path (``weights.process = "file"``, e.g. another run's
``weights.npz``) must fit it: :func:`path_fit_error` says, with the keys to set, why not.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from spherepde.runs.runfolder import NotARunFolderError, load_snapshots, run_config

__all__ = ["BranchPoint", "branch_point", "initial_density_from_run", "initial_state_from_run", "initial_tokens_from_run", "path_fit_error"]

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
        return (f"initial state from run {self.run} at t = {self.time:.6g} (its snapshot {self.index})"
                + ("" if exact else f", the snapshot nearest to the requested t = {self.requested_time:.6g}"))

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
    """Cell densities on ``mesh`` from the snapshot of ``run_dir`` nearest to ``t`` (point masses
    drawn in their nearest cells: :func:`initial_state_from_run` keeps them)."""
    snaps = _snapshots(run_dir)
    bp = _point(snaps, run_dir, t)
    return _density(snaps, bp, run_dir, mesh), bp


def initial_state_from_run(run_dir, t: float, mesh, *, atoms: bool) -> tuple[np.ndarray, tuple | None, BranchPoint]:
    """The state on ``mesh`` at the snapshot of ``run_dir`` nearest to ``t``: (cell densities (nc,),
    point masses (positions (k, 3), masses (k,)) or None, the branch point).

    A source with point masses gives its cells alone and its point masses exactly; the branch
    must carry them (``atoms``), else ValueError naming the key to set. A point-mass run whose
    snapshots predate point-mass snapshots gives its drawn density (point masses in their
    nearest cells), with a warning."""
    snaps = _snapshots(run_dir)
    bp = _point(snaps, run_dir, t)
    pm = snaps.point_masses(bp.index)
    if pm is None or not len(pm[1]):
        if pm is None and snaps.rho is not None and run_config(run_dir).get("solver", {}).get("atoms"):
            log.warning("initial.run: the snapshots of %s hold no point-mass arrays (written by an older spherepde): "
                        "its point masses start deposited in their nearest cells, not at their positions", run_dir)
        rho = _density(snaps, bp, run_dir, mesh) if pm is None else _density(snaps, bp, run_dir, mesh, snaps.rho_cells)
        return rho, None, bp
    from spherepde.solvers.atoms import check_point_masses

    problem = check_point_masses(*pm)
    if problem:
        raise ValueError(f"initial.run: the snapshot of {run_dir} at t = {bp.time:.6g} holds impossible point masses ({problem}); "
                         "the run folder is damaged: branch from another time or run")
    if not atoms:
        raise ValueError(
            f"initial.run: {run_dir} carries {len(pm[1])} point mass(es) (mass {float(pm[1].sum()):.6g}) at t = {bp.time:.6g}, "
            "but this run has solver.atoms = false and would smear them into cells; set solver.atoms = true (solver.integrator = \"implicit\")"
        )
    return _density(snaps, bp, run_dir, mesh, snaps.rho_cells), pm, bp


def _density(snaps, bp: BranchPoint, run_dir, mesh, rho_all=None) -> np.ndarray:
    """The cell densities of snapshot ``bp`` on ``mesh`` (``rho_all``: which array of the source, default its rho)."""
    if snaps.rho is not None:
        src = snaps.mesh
        same = src.n_cells == mesh.n_cells and np.allclose(src.points, mesh.points, atol=1e-12) and np.array_equal(src.cells, mesh.cells)
        if not same:
            raise ValueError(
                f"initial.run: {run_dir} was run on a mesh with {src.n_cells} cells, this run's mesh has {mesh.n_cells}; "
                f"branch on the same mesh (set mesh.file = \"{Path(run_dir) / 'mesh.npz'}\")"
            )
        return np.array((snaps.rho if rho_all is None else rho_all)[bp.index], float)
    from spherepde.geometry.densities import from_particles

    return from_particles(mesh, snaps.X[bp.index])


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

    pm = snaps.point_masses(bp.index)
    if pm is None or not len(pm[1]):
        return sample_from_density(snaps.mesh, snaps.rho[bp.index], n, seed=seed), bp
    x, m = pm  # the measure rho_cells dsigma + sum_k m_k delta_{x_k}: a multinomial share of the tokens at each point mass
    cells = max(1.0 - float(m.sum()), 0.0)
    counts = np.random.default_rng(seed).multinomial(n, np.append(m, cells) / (m.sum() + cells))
    X = np.repeat(x, counts[:-1], axis=0)
    if counts[-1]:
        X = np.concatenate([X, sample_from_density(snaps.mesh, snaps.rho_cells[bp.index], int(counts[-1]), seed=seed)])
    return X, bp


# ================================================================ a saved weight path
def _fmt(x: float) -> str:
    return f"{float(x):.12g}"


def _is_multiple(a: float, b: float) -> bool:
    r = a / b
    return abs(r - round(r)) < 1e-9 * max(1.0, r) and round(r) >= 1


def _suggest_record(record_dt: float, snapshot_dt: float, dt: float) -> tuple[float, float]:
    """The smallest output.record_dt >= record_dt on the grid dt that divides snapshot_dt
    (else snapshot_dt rounded up to a multiple of it)."""
    k0 = max(1, math.ceil(record_dt / dt - 1e-9))
    for k in range(k0, k0 + 10_000):
        r = k * dt
        if r > snapshot_dt + 1e-12:
            break
        if _is_multiple(snapshot_dt, r):
            return r, snapshot_dt
    r = k0 * dt
    return r, math.ceil(snapshot_dt / r - 1e-9) * r


def path_fit_error(wp, cfg, file=None) -> str | None:
    """Why the saved weight path ``wp`` cannot drive the configuration ``cfg``, as one line
    that names every key to set (None when it fits).

    The path fixes H, d and the grid step; the run needs ``weights.dt`` equal to the
    path's step, ``output.record_dt`` (and ``snapshot_dt``, particles ``solver.dt``) on
    that grid, and ``solver.T`` no later than the path's end.
    """
    m, w, out = cfg.model, cfg.weights, cfg.output
    problems, fixes = [], []
    if wp.H != m.H:
        problems.append(f"it has H = {wp.H} heads but model.H = {m.H}")
        fixes.append(f"--set model.H={wp.H}")
    if wp.d != m.d:
        problems.append(f"it lives in d = {wp.d} but model.d = {m.d}")
        fixes.append(f"--set model.d={wp.d}")
    dt = float(wp.dt)
    if abs(dt - w.dt) > 1e-12 * max(1.0, dt):
        problems.append(f"its grid step is {_fmt(dt)} but weights.dt = {_fmt(w.dt)}")
        fixes.append(f"--set weights.dt={_fmt(dt)}")
    if not _is_multiple(out.record_dt, dt) or not _is_multiple(out.snapshot_dt, out.record_dt):
        r, sn = _suggest_record(out.record_dt, out.snapshot_dt, dt)
        if not _is_multiple(out.record_dt, dt):
            problems.append(f"output.record_dt = {_fmt(out.record_dt)} is not a multiple of that step")
        fixes.append(f"--set output.record_dt={_fmt(r)}")
        if abs(sn - out.snapshot_dt) > 1e-12:
            fixes.append(f"--set output.snapshot_dt={_fmt(sn)}")
    sdt = getattr(cfg.solver, "dt", 0.0)
    if cfg.run.solver == "particles" and sdt and not _is_multiple(sdt, dt):
        problems.append(f"solver.dt = {_fmt(sdt)} is not a multiple of that step")
        fixes.append("--set solver.dt=0")
    if wp.T < cfg.solver.T - 1e-9 * max(1.0, wp.T):
        problems.append(f"it ends at t = {_fmt(wp.T)} but solver.T = {_fmt(cfg.solver.T)}")
        fixes.append(f"--set solver.T={_fmt(math.floor(wp.T / dt + 1e-9) * dt)}")
    if not problems:
        return None
    where = f" {file}" if file else ""
    return f"weights.path_file: the saved path{where} does not fit this run: {'; '.join(problems)}; add {' '.join(fixes)}"
