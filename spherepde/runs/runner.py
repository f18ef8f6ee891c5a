"""Runs: from a :class:`~spherepde.runs.config.Config` to a self-describing run folder.

A run folder holds (:data:`spherepde.runs.runfolder.LAYOUT` lists every file it can hold)

* ``config.toml`` -- the resolved configuration (every key);
* ``summary.json`` -- status, versions, seed, wall time, final diagnostics;
* ``diagnostics.csv`` -- one row per record (the columns of the solver:
  :func:`spherepde.model.columns.solver_columns`);
* ``weights.npz`` -- the weight path Theta_t that drove the run;
* ``snapshots/NNNNNN.npz`` -- tokens ``X`` or cell densities ``rho`` with time ``t``;
  ``snapshots.npz`` gathers them (``t``, ``X``/``rho``) when the run ends;
* mesh runs: ``mesh.npz`` and ``vtk/density_NNNNNN.vtp`` + ``density.pvd`` (ParaView);
* particle and both runs: ``vtk/tokens_NNNNNN.vtp`` + ``tokens.pvd`` (the tokens as points);
* ``checkpoint.npz`` (and the previous one, ``checkpoint.prev.npz``) -- written
  atomically; ``run.log`` -- the log (and the traceback of a failed run);
* ``.spherepde-run`` -- the marker that makes the folder a run folder (version, creation
  time, the config.toml written at the start); ``run.lock`` while a process writes into it.

An existing folder is never overwritten unless ``force=True``, and then only if it is a
run folder (it has the marker) or empty: nothing outside a run folder is deleted. A
second process on a locked folder is refused (a lock left by a dead process is taken
over). :func:`resume` continues an interrupted run from its last checkpoint -- written
at records, or between two steps after Ctrl-C / SIGTERM -- and gives the same numbers as
an uninterrupted run; it refuses a config.toml edited after the start, drops diagnostics
rows written after the checkpoint, and starts a run killed before its first checkpoint
from t = 0.

Failures while running (a solver error, a non-finite diagnostic, a collapsed time step,
a full disk) raise :class:`RunFailedError` with a one-line message: the folder keeps what
was written, ``summary.json`` says ``"failed"`` and ``run.log`` holds the traceback.

The folder itself (layout, marker, lock, checkpoints, snapshots) is :class:`spherepde.runs.runfolder.RunFolder`;
Monte-Carlo runs are :mod:`spherepde.runs.montecarlo`.
"""

from __future__ import annotations

import csv
import errno
import json
import logging
import math
import platform
import signal
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from spherepde._base import __version__, atomic_write_text, load_arrays, one_line
from spherepde.model.columns import undefined_without_energy
from spherepde.model.weights import PROCESSES, WeightPath, process_from_config
from spherepde.runs import interrupt as _interrupt
from spherepde.runs import nucleation
from spherepde.runs.config import Config, config_to_toml, vmf_means_as_vectors
from spherepde.runs.progress import ProgressBar
from spherepde.runs.runfolder import (
    CONFIG_FILE,
    LOCK_FILE,
    LOG_FILE,
    MARKER,
    MESH_FILE,
    SUMMARY_FILE,
    WEIGHTS_FILE,
    DiagnosticsWriter,
    RunExistsError,
    RunFolder,
    RunFolderError,
    RunLockedError,
    check_run_target,
    read_diagnostics,
    state_scalars,
    writing,
)
from spherepde.runs.steady_stop import STATE_KEYS as STEADY_KEYS
from spherepde.runs.steady_stop import SteadyStop, tracker
from spherepde.solvers.protocol import advance_through

log = logging.getLogger(__name__)

__all__ = ["MARKER", "LOCK_FILE", "RunExistsError", "RunLockedError", "RunFolderError", "DT_FLOOR", "STEP_GROWTH", "MAX_STEPS", "MIN_STEPS_CHECKED", "MASS_TOL", "checkpoint_check", "checkpoint_times", "RunFailedError", "RunAborted", "NonFiniteDiagnostic", "StepBudgetError", "Interrupted", "RunResult", "build_weight_path", "build_mesh", "build_initial_density", "build_initial_state", "build_initial_tokens", "build_token_start", "build_solver", "default_run_name", "run", "EXTEND_KEYS", "resume"]


#: Floor on the mesh solver's time step, relative to T: a smaller step fails the run.
DT_FLOOR = 1e-9


#: A run with adaptive steps fails when, after MIN_STEPS_CHECKED steps, the projected
#: number of steps (steps / t * T) exceeds STEP_GROWTH times the estimate made at the
#: start, or MAX_STEPS.
STEP_GROWTH = 100.0


MAX_STEPS = 1e8


MIN_STEPS_CHECKED = 100


class RunFailedError(RuntimeError):
    """The run failed while running: the folder keeps what was written, ``summary.json``
    says ``"failed"`` and ``run.log`` holds the traceback. The message is one line."""

    def __init__(self, message: str, folder=None):
        super().__init__(message)
        self.folder = None if folder is None else Path(folder)


class RunAborted(KeyboardInterrupt):
    """A second Ctrl-C (or SIGTERM) aborted a run whose folder exists: resume continues it."""

    def __init__(self, folder):
        super().__init__(str(folder))
        self.folder = Path(folder)


class NonFiniteDiagnostic(FloatingPointError):
    """A diagnostic became NaN or infinite."""


class StepBudgetError(RuntimeError):
    """The time step collapsed: the run would take far more steps than estimated."""


class Interrupted(KeyboardInterrupt):
    """The run was interrupted (Ctrl-C); a checkpoint was written."""


@dataclass
class RunResult:
    folder: Path
    status: str
    diagnostics: dict  # column -> np.ndarray

    def __repr__(self) -> str:
        return f"RunResult(folder={str(self.folder)!r}, status={self.status!r}, records={len(self.diagnostics.get('t', []))})"


# ----------------------------------------------------------------- building blocks
class _FileContext:
    """Re-raise a file-reading error (missing file, unreadable or object array, wrong shape)
    as a ValueError that names the configuration key and the file."""

    def __init__(self, key: str, file: str, active: bool = True):
        self.key, self.file, self.active = key, str(file), active

    def __enter__(self):
        return self

    def __exit__(self, etype, exc, tb):
        if not self.active or exc is None or not isinstance(exc, (ValueError, OSError, zipfile.BadZipFile, EOFError)):
            return False
        msg = str(exc)
        where = "" if self.file in msg else f" (file {self.file})"
        prefix = "" if msg.startswith(self.key) else f"{self.key}: "
        raise ValueError(f"{prefix}{msg}{where}") from exc


def build_weight_path(cfg: Config, *, seed: int | None = None) -> WeightPath:
    """The weight path of a configuration (seed overrides ``weights.seed``): the process that
    ``weights.process`` names in :data:`spherepde.model.weights.PROCESSES`, built from the
    ``[weights]`` section by its class, makes the path; a path read from a file is checked to
    fit the run."""
    w, m = cfg.weights, cfg.model
    proc = process_from_config(w)
    with _FileContext("weights.path_file", w.path_file, proc.from_file), _FileContext(
        "weights.init_file", w.init_file, w.init == "file" and not proc.from_file
    ):
        wp = proc.weight_path(
            H=m.H,
            d=m.d,
            T=cfg.solver.T,
            dt=w.dt,
            seed=w.seed if seed is None else seed,
            init=w.init,
            beta=w.beta,
            init_file=w.init_file or None,
            init_seed=None if w.init_seed < 0 else w.init_seed,
            heads=m.heads,
            sign=m.sign,
            scheme=w.scheme,
            value_init=w.value_init,
        )
        if proc.from_file:
            from spherepde.runs.branch import path_fit_error

            problem = path_fit_error(wp, cfg, Path(w.path_file))  # one line naming every key to set (H, d, weights.dt, record_dt, T)
            if problem:
                raise ValueError(problem)
    return wp


def build_mesh(cfg: Config):
    """The mesh of a mesh run: the builder registered as ``mesh.kind`` applied to the mesh section."""
    from spherepde.geometry.protocol import GEOMETRIES

    build = GEOMETRIES.get(cfg.mesh.kind)
    with _FileContext("mesh.file", cfg.mesh.file, active=bool(cfg.mesh.file)):
        return build(cfg.mesh)


def densities_of(cfg: Config):
    """The module of initial densities for ``mesh.kind``: the geometry's own (registered as its entry's
    ``densities``, e.g. :mod:`spherepde.geometry.circle_densities`), else the sphere's
    :mod:`spherepde.geometry.densities`."""
    from spherepde.geometry.protocol import GEOMETRIES

    own = GEOMETRIES.entry(cfg.mesh.kind).info.get("densities")
    if own is not None:
        return own()
    from spherepde.geometry import densities

    return densities


def vmf_means(cfg: Config) -> list:
    """``initial.means`` as d-vectors (with model.d = 2 a mean may be given as an angle in radians)."""
    return vmf_means_as_vectors(cfg.initial.means, cfg.model.d)


def build_initial_density(cfg: Config, mesh):
    """The initial cell densities of a mesh run: the kind's density, or the histogram of the
    token sample (``initial.sample``), times 1 + noise * field (``initial.noise``)."""
    densities = densities_of(cfg)
    ini = cfg.initial
    if ini.sample:
        rho = densities.from_particles(mesh, *build_token_start(cfg))
    else:
        rho = _kind_density(cfg, mesh)
    if ini.noise > 0:
        rho = densities.with_noise(mesh, rho, ini.noise, seed=ini.seed)
    return rho


def build_initial_state(cfg: Config, mesh) -> tuple[np.ndarray, tuple | None]:
    """The initial state of a mesh run: (cell densities (nc,), point masses (positions (k, 3), masses (k,))
    or None). Only a branch of a point-mass run (``initial.kind = "run"``) starts with point masses:
    :func:`spherepde.runs.branch.initial_state_from_run`; else :func:`build_initial_density`."""
    ini = cfg.initial
    if ini.kind != "run" or ini.sample:
        return build_initial_density(cfg, mesh), None
    from spherepde.runs.branch import initial_state_from_run

    densities = densities_of(cfg)
    rho, pm, bp = initial_state_from_run(ini.run, ini.time, mesh, atoms=cfg.solver.atoms)
    if np.all(np.isfinite(rho)) and not np.any(rho < 0):  # else the solver refuses it, in one line
        _say_branch(bp)
    if pm is not None:
        log.info("with its %d point mass(es) (total mass %.6g) at their positions", len(pm[1]), float(np.sum(pm[1])))
    if ini.noise > 0:
        rho = densities.with_noise(mesh, rho, ini.noise, seed=ini.seed)
    return rho, pm


def _kind_density(cfg: Config, mesh):
    densities = densities_of(cfg)
    ini = cfg.initial
    if ini.kind == "uniform":
        return densities.uniform(mesh)
    if ini.kind == "octahedral":
        return densities.octahedral(mesh, sigma=ini.sigma)
    if ini.kind == "vmf":
        means = np.asarray(vmf_means(cfg), float)
        kappas = np.broadcast_to(np.asarray(ini.kappas, float), (means.shape[0],))
        weights = np.asarray(ini.weights, float) if ini.weights else None
        return densities.vmf_mixture(mesh, means, kappas, weights)
    if ini.kind == "harmonic":
        return densities.spherical_harmonic(mesh, ini.l, ini.m, ini.eps)
    if ini.kind == "run":
        from spherepde.runs.branch import initial_density_from_run

        rho, bp = initial_density_from_run(ini.run, ini.time, mesh)
        if np.all(np.isfinite(rho)) and not np.any(rho < 0):  # else the solver refuses it, in one line
            _say_branch(bp)
        return rho
    with _FileContext("initial.file", ini.file):
        return densities.from_file(mesh, ini.file)


def _say_branch(bp) -> None:
    """Where a branch starts: a warning when the nearest snapshot is not the requested time, else a note."""
    exact = abs(bp.time - bp.requested_time) <= 1e-9 * max(1.0, abs(bp.requested_time))
    (log.info if exact else log.warning)("%s", bp.describe())


def build_initial_tokens(cfg: Config):
    """The initial tokens (n, d) of ``cfg`` (:func:`build_token_start` without the weights)."""
    return build_token_start(cfg)[0]


def build_token_start(cfg: Config):
    """The initial tokens (n, d) of ``cfg`` and their weights, (n,) or None for equal weights 1/n
    (a stratified vmf start whose counts n p_j are not whole carries weights p_j / n_j)."""
    from spherepde.solvers.particles import initial_tokens, stratified_tokens

    ini = cfg.initial
    if ini.kind == "run":
        from spherepde.runs.branch import initial_tokens_from_run

        X, bp = initial_tokens_from_run(ini.run, ini.time, ini.n, seed=ini.seed)
        if X.shape[1] != cfg.model.d:
            raise ValueError(f"initial.run: {ini.run} has tokens in d = {X.shape[1]}, this run has model.d = {cfg.model.d}")
        if np.all(np.isfinite(X)):  # else the solver refuses it, in one line
            _say_branch(bp)
        return X, None
    kappas = np.broadcast_to(np.asarray(ini.kappas, float), (len(ini.means),)) if ini.kind == "vmf" else None
    means = vmf_means(cfg) if ini.kind == "vmf" else None
    if ini.placement == "stratified" and ini.kind == "vmf":
        return stratified_tokens(ini.n, means, kappas, ini.weights or None)
    with _FileContext("initial.file", ini.file, ini.kind == "file"):
        return initial_tokens(
            ini.kind, ini.n, cfg.model.d, seed=ini.seed, sigma=ini.sigma, means=means,
            kappas=kappas, weights=ini.weights or None, file=ini.file or None, placement=ini.placement,
            noise=ini.noise if cfg.model.d == 2 and ini.placement == "stratified" else 0.0,
        ), None


def _particle_step(cfg: Config, path: WeightPath) -> float | None:
    """The token step: solver.dt when a token moves at most MAX_DISPLACEMENT per step (else
    ValueError naming the step to use); without one the weight grid step or a stable fraction
    of it (noted in run.log). None means the grid step."""
    from spherepde.solvers.particles import particle_step

    user = cfg.solver.dt if cfg.run.solver == "particles" and cfg.solver.dt else None
    dt = particle_step(path, user, attention=cfg.model.attention, noise=cfg.model.noise)
    _refuse_step_count(cfg, cfg.solver.T / dt, f"the token step {dt:.3g} (a token moves at most 0.2 rad per step)")
    return None if user is None and dt == path.dt else dt


def _refuse_step_count(cfg: Config, steps: float, why: str) -> None:
    """ConfigError (before anything is written) when reaching T would take more than MAX_STEPS
    steps of the start's step ``why``: the weight path (Euler--Maruyama with rate * dt > 2 grows
    by |1 - rate dt| per step, under the overflow check) or the density makes it uncomputable."""
    from spherepde.runs.config import ConfigError

    if not steps > MAX_STEPS:
        return
    w = cfg.weights
    relax = PROCESSES.get(w.process).relaxation(w) if w.scheme == "euler" else None
    grows = relax is not None and relax[0] * w.dt > 2
    fix = (f"rate * weights.dt = {relax[0] * w.dt:g} > 2 ({relax[1]}) makes the Euler-Maruyama weight path grow; use weights.scheme = 'exact' "
           "or a smaller weights.dt" if grows else "use smaller weights (weights.beta, weights.mean, weights.sigma) or a shorter solver.T")
    if not grows and cfg.model.noise > 0 and cfg.run.solver != "particles":
        fix = ("with model.noise > 0 the explicit step is bounded by the diffusion (of order h^2 / nu): use a smaller model.noise, a coarser "
               "mesh or a shorter solver.T, or solver.integrator = 'implicit' (positive for any step; its error control still resolves "
               "the diffusion's fast initial relaxation)")
    raise ConfigError(f"{relax[1] if grows else 'solver.T'}: reaching T = {cfg.solver.T:g} with {why} takes about {steps:.3g} steps, "
                      f"more than the limit of {MAX_STEPS:.3g}; {fix}")


def build_solver(cfg: Config, path: WeightPath, *, mesh=None):
    """The solver object (ParticleSolver or MeshSolver) for a configuration and a path.

    The mesh solver's time step has the floor ``DT_FLOOR * solver.T`` (``dt_min``)."""
    if cfg.run.solver == "particles":
        from spherepde.solvers.particles import ParticleSolver

        X0, w0 = build_token_start(cfg)
        return ParticleSolver(X0, path, dt=_particle_step(cfg, path), integrator=cfg.integrator, weights=w0, attention=cfg.model.attention,
                              noise=cfg.model.noise, noise_seed=cfg.initial.seed, tol=cfg.solver.tol)
    from spherepde.solvers.mesh import MeshSolver

    mesh = mesh if mesh is not None else build_mesh(cfg)
    rho0, point_masses = build_initial_state(cfg, mesh)
    ms = MeshSolver(
        mesh, rho0, path, point_masses=point_masses, velocity=cfg.solver.velocity, order=cfg.solver.order,
        integrator=cfg.integrator, cfl=cfg.solver.cfl, dt=(cfg.solver.dt or None) if cfg.run.solver == "mesh" else None,
        summation=cfg.solver.summation, summation_tol=cfg.solver.summation_tol, diagnostics_tol=cfg.solver.diagnostics_tol,
        tol=cfg.solver.tol, atoms=cfg.solver.atoms, attention=cfg.model.attention, noise=cfg.model.noise,
    )
    ms.dt_min = DT_FLOOR * cfg.solver.T
    if cfg.run.solver == "both":
        from spherepde.solvers.coupled import CoupledSolver

        return CoupledSolver(ms, cfg.initial.n, seed=cfg.initial.seed, distances=cfg.output.distances, distance_every=cfg.output.distance_every, t_end=cfg.solver.T,
                             particle_dt=_particle_step(cfg, path), tokens=_file_tokens(cfg, mesh), noise=cfg.model.noise)
    return ms


def _file_tokens(cfg: Config, mesh):
    """The tokens (n, d) of ``initial.file`` when it holds tokens (a ``both`` run starts its tokens there and
    its mesh from their histogram), else None (cell densities: the tokens are drawn from the density)."""
    if cfg.initial.kind != "file":
        return None
    from spherepde.geometry.densities import read_start_file

    with _FileContext("initial.file", cfg.initial.file):
        if read_start_file(cfg.initial.file, mesh.n_cells, cfg.model.d).ndim != 2:
            return None
    return build_initial_tokens(cfg)


def _build(cfg: Config):
    """The weight path, the mesh (or None), the solver and its step-count estimate of ``cfg``."""
    with np.errstate(all="ignore"):
        path = build_weight_path(cfg)
        mesh = build_mesh(cfg) if cfg.run.solver in ("mesh", "both") else None
        solver = build_solver(cfg, path, mesh=mesh)
        _warn_unresolved_perturbation(cfg)
        estimate = _step_estimate(solver, cfg)
        if estimate is not None:
            _refuse_step_count(cfg, estimate, f"the initial state's step {solver.step_hint():.3g}")
        return path, mesh, solver, estimate


def _warn_unresolved_perturbation(cfg: Config) -> None:
    """Implicit steps bound the mass each step moves wrongly by ``solver.tol`` (an absolute local error):
    a start whose perturbation of the uniform state (``initial.noise``, or ``initial.eps`` of a
    harmonic start) is within 10 x tol is not resolved -- nucleation from it can pick the wrong
    clusters (seen on the circle: 2 clusters instead of 3 at tol 1e-3 from a 6e-4 perturbation)."""
    if cfg.run.solver == "particles" or cfg.solver.integrator != "implicit":
        return
    amp = max(cfg.initial.noise, cfg.initial.eps if cfg.initial.kind == "harmonic" else 0.0)
    if 0 < amp < 10 * cfg.solver.tol:
        log.warning("the start's perturbation (%g) is within 10 x solver.tol = %g of the implicit step's local error: its growth is not "
                    "resolved -- use solver.tol <= %g or an explicit integrator (solver.integrator = 'ssprk3')", amp, cfg.solver.tol, amp / 10)


def default_run_name(cfg: Config) -> str:
    """``<solver>-<process>-H<H>-seed<seed>`` (:func:`spherepde.runs.names.default_run_name`)."""
    from spherepde.runs.names import default_run_name as name

    return name(cfg)


def versions() -> dict:
    import numba
    import scipy

    return {"spherepde": __version__, "python": platform.python_version(), "numpy": np.__version__, "scipy": scipy.__version__, "numba": numba.__version__, "platform": platform.platform()}


class _SigintGuard:
    """Turns the first Ctrl-C (SIGINT) or SIGTERM into a flag checked between steps (a second one, more
    than a second later, aborts; one within a second is the same key press)."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.flag = False
        self._old: dict = {}

    def __enter__(self):
        for sig in self.SIGNALS:
            try:
                self._old[sig] = signal.signal(sig, self._handler)
            except ValueError:  # not in the main thread
                pass
        return self

    def _handler(self, signum, frame):
        if self.flag:
            if _interrupt.recent():  # a double key press: the same request, the loop is stopping
                return
            raise KeyboardInterrupt
        _interrupt.note()  # first: a second signal landing between these two lines must find the first one noted
        self.flag = True

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)
        self._old = {}
        return False


def _attach_log(folder: Path):
    handler = logging.FileHandler(folder / LOG_FILE)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    pkg = logging.getLogger("spherepde")
    pkg.addHandler(handler)
    if pkg.level == logging.NOTSET or pkg.level > logging.INFO:
        pkg.setLevel(logging.INFO)
    return handler


def _log_to_file(handler, msg: str, exc: BaseException | None = None) -> None:
    """An error (with its traceback) in run.log only -- not on the screen."""
    if handler is None:
        return
    exc_info = (type(exc), exc, exc.__traceback__) if exc is not None else None
    record = log.makeRecord(log.name, logging.ERROR, __file__, 0, "%s", (msg,), exc_info)
    try:
        handler.handle(record)
    except Exception:  # pragma: no cover - the log itself cannot be written (a full disk)
        pass


def _n_records(cfg: Config) -> int:
    """Number of record intervals: records at t = r * record_dt, the last one at T."""
    return max(1, math.ceil(cfg.solver.T / cfg.output.record_dt - 1e-9))


def _record_time(cfg: Config, r: int) -> float:
    """Time of record r: r * record_dt rounded to 12 significant digits when that is a
    round-off away (3 * 0.1 is 0.3, not 0.30000000000000004), so that a run to T = 0.3 and a
    longer run record at the same time -- and one extends bit for bit into the other."""
    n = _n_records(cfg)
    if r == n:
        return cfg.solver.T
    t = r * cfg.output.record_dt
    tr = float(f"{t:.12g}")
    return min(tr if abs(tr - t) <= 1e-12 * max(1.0, abs(t)) else t, cfg.solver.T)


def _step_estimate(solver, cfg: Config, t: float = 0.0) -> int | None:
    """Steps a run with adaptive steps takes from ``t`` to T if every step is that of the current
    state (a density that steepens takes more: run.log updates it as the run goes); None for fixed steps."""
    h = solver.step_hint()
    if h is None:
        return None
    # a step never crosses a point of the weight grid (nor a record time, one of those points)
    pdt = float(solver.path.dt)
    return int(math.ceil(max(cfg.solver.T - t, 0.0) / pdt - 1e-9)) * int(math.ceil(pdt / h - 1e-9))


def _reference_estimate(solver, cfg: Config) -> int | None:
    """Steps an explicit scheme would take from the current state to T, for a solver whose steps
    follow a local error (``solver.reference_step()``, e.g. the implicit stepper); None otherwise."""
    h = solver.reference_step()
    if h is None:
        return None
    pdt = float(solver.path.dt)
    return int(math.ceil(max(cfg.solver.T - solver.t, 0.0) / pdt - 1e-9)) * int(math.ceil(pdt / h - 1e-9))


def _fixed_steps(cfg: Config, solver) -> str:
    """The start line's step count of a token run (fixed steps: T / dt of them); '' otherwise."""
    if cfg.run.solver != "particles":
        return ""
    if getattr(solver, "adaptive", False):
        return (f", error-controlled steps ({solver.integrator}, solver.tol = {solver.tol:g}; a fixed step of dt = {solver.dt:.3g} would take "
                f"{int(math.ceil(cfg.solver.T / solver.dt - 1e-9))}; progress below at each quarter of T)")
    return f", {int(math.ceil(cfg.solver.T / solver.dt - 1e-9))} steps of dt = {solver.dt:.3g} (progress below at each quarter of T)"


class _StepBudget:
    """Stops a run whose adaptive time step collapsed (projected steps >> estimate, or > MAX_STEPS).

    The estimate of a CFL-limited run is its own step count at the start; an error-controlled
    (implicit) run is held to the same budget measured against the explicit step count of its
    start (:func:`_reference_estimate`): it exists to take larger steps than that."""

    def __init__(self, solver, cfg: Config, estimate: int | None):
        self.solver = solver
        self.T = cfg.solver.T
        self.estimate = estimate if estimate is not None else _step_estimate(solver, cfg)
        self.reference = False
        self.t0, self._first_seen = float(solver.t), False
        if self.estimate is None:
            self.estimate = _reference_estimate(solver, cfg)
            self.reference = self.estimate is not None
            if self.reference:
                log.info("step budget: an explicit scheme would take about %d steps from t = %g (dt = %.3g); the error-controlled steps "
                         "stop when reaching T would take more than %g x that (loosen solver.tol)", self.estimate, solver.t, solver.reference_step(), STEP_GROWTH)

    def check(self) -> None:
        if self.estimate is None:
            return
        n, t = self.solver.step_count, self.solver.t
        if self.reference and not self._first_seen and n >= 1 and t > self.t0:
            self._first_seen = True
            h = t - self.t0
            log.info("the first error-controlled step took dt = %.3g: about %.0f steps to T = %g at that step (the steps follow the "
                     "dynamics; the projection is updated at each quarter of T)", h, math.ceil((self.T - self.t0) / h), self.T)
        if n < MIN_STEPS_CHECKED or not t > 0:
            return
        projected = n / t * self.T
        if projected > STEP_GROWTH * self.estimate or projected > MAX_STEPS:
            what = "an explicit scheme's" if self.reference else "the"
            limit = f"more than {STEP_GROWTH:g} x {what} {self.estimate} estimated at the start" if projected > STEP_GROWTH * self.estimate else f"more than the limit of {MAX_STEPS:.3g}"
            fix = "loosen solver.tol, or" if self.reference else ""
            raise StepBudgetError(
                f"the time step collapsed (dt = {self.solver.last_step():.3g} at t = {t:.6g}, step {n}): reaching T = {self.T:g} would take about "
                f"{projected:.3g} steps, {limit} -- {fix} check the weights (e.g. weights.kappa, weights.sigma, weights.beta)"
                + (" or use a coarser mesh" if getattr(self.solver, "mesh", None) is not None else "")  # tokens have no mesh to coarsen
            )


def _nonfinite_message(row: dict, bad: list, t: float, r: int) -> str:
    also = f" (also {', '.join(bad[1:4])}{', ...' if len(bad) > 4 else ''})" if len(bad) > 1 else ""
    return (
        f"diagnostic {bad[0]} = {float(row[bad[0]])} at t = {t:.6g} (record {r}){also}: the solution overflowed or blew up "
        "-- smaller weights (e.g. weights.beta, weights.mean) or a smaller time step may help"
    )


def _loop(cfg: Config, rf: RunFolder, solver, path: WeightPath, mesh, *, start_record: int, wall0: float, progress: bool, estimate: int | None = None,
          steady: SteadyStop | None = None) -> str:
    """Advance the solver record by record (:func:`~spherepde.solvers.protocol.advance_through`);
    returns 'completed' or 'interrupted'. With ``steady`` (``solver.steady_tol``) the loop also ends,
    completed, at the first record where the density is stationary (:mod:`spherepde.runs.steady_stop`):
    that record is written as the last one (row, snapshot, checkpoint) and ``steady.stopped_at`` is its time.

    Ctrl-C / SIGTERM is seen between steps: the state is checkpointed where it is (between
    two records if need be) and the loop ends 'interrupted'. A non-finite diagnostic
    raises NonFiniteDiagnostic (after its row is written), a collapsed time step
    StepBudgetError (or the solver's SolverError below the floor ``dt_min``).
    """
    T = cfg.solver.T
    rdt = cfg.output.record_dt
    n_records = _n_records(cfg)
    undefined = (frozenset() if path.is_gradient else undefined_without_energy()) | solver.may_be_nan
    budget = _StepBudget(solver, cfg, estimate)
    bar = ProgressBar(round(T, 10), round(start_record * rdt, 10), enabled=progress, unit="t",
                      bar_format="{l_bar}{bar}| t={n:.3f}/{total:.3f} [{elapsed}<{remaining}{postfix}]")
    status = "completed"
    after = _AfterRecord(cfg, rf, solver, mesh, budget, bar, wall0=wall0, start_record=start_record, steady=steady)
    try:
        with _SigintGuard() as guard, DiagnosticsWriter(rf.csv) as diagnostics:

            def should_stop() -> bool:
                if guard.flag:
                    return True
                budget.check()
                return False

            times = (_record_time(cfg, r) for r in range(start_record, n_records + 1))
            for i, t_r, row in advance_through(solver, times, should_stop=should_stop):
                r = start_record + i
                if row is None:
                    # Ctrl-C / SIGTERM between two steps: checkpoint the state between the records
                    rf.write_checkpoint(after.state(), after.meta(r - 1, t=float(solver.t), partial=True))
                    log.warning("interrupted at t = %.6g (step %d); checkpoint written -- continue with: spherepde resume %s", solver.t, solver.step_count, rf.folder)
                    status = "interrupted"
                    break
                diagnostics.write(row)
                bad = [c for c in diagnostics.columns if c not in undefined and not math.isfinite(float(row[c]))]
                if bad:
                    raise NonFiniteDiagnostic(_nonfinite_message(row, bad, t_r, r))
                stationary = steady is not None and steady.observe(t_r, solver.snapshot()["rho"])
                if stationary:
                    steady.stopped_at = t_r
                after.record(r, t_r, row, guard, last=stationary)
                if stationary:
                    log.info("stationary at t = %.6g (record %d): max |d rho/dt| / max rho = %.3g < solver.steady_tol = %g over the last record "
                             "interval; the run ends here", t_r, r, steady.rate, steady.tol)
                    break
                if guard.flag and r < n_records:
                    log.warning("interrupted at t = %.6g (step %d); checkpoint written -- continue with: spherepde resume %s", t_r, solver.step_count, rf.folder)
                    status = "interrupted"
                    break
    finally:
        bar.close()
    return status


class _AfterRecord:
    """What the run loop does at each record after its diagnostics row: snapshots, run.log's
    step estimate at each quarter of T, the progress bar, checkpoints."""

    def __init__(self, cfg: Config, rf: RunFolder, solver, mesh, budget: _StepBudget, bar, *, wall0: float, start_record: int,
                 steady: SteadyStop | None = None):
        self.cfg, self.rf, self.solver, self.mesh, self.budget, self.bar, self.wall0 = cfg, rf, solver, mesh, budget, bar, wall0
        self.steady = steady
        self.n_records = _n_records(cfg)
        self.snap_every = int(round(cfg.output.snapshot_dt / cfg.output.record_dt))
        self.last_ckpt_wall = time.monotonic()
        self.quarter = 1 + int(4 * start_record / self.n_records)  # run.log notes the progress at each quarter of T
        self.start_t, self.session0 = _record_time(cfg, start_record), time.monotonic()  # this session's rate sets the time to go

    def meta(self, r: int, **extra) -> dict:
        """The checkpoint's metadata at record ``r``."""
        return {"record": r, "t": _record_time(self.cfg, r), "step": self.solver.step_count, "wall": time.monotonic() - self.wall0,
                "step_estimate": self.budget.estimate, **extra}

    def state(self) -> dict:
        """The checkpoint's arrays: the solver's state, and the stationarity check's (the density at the last record)."""
        return {**self.solver.get_state(), **(self.steady.state() if self.steady is not None else {})}

    def _log_progress(self, t_r: float) -> None:
        """run.log's line at a quarter of T: steps so far and, for adaptive explicit steps, the
        estimate at the current step; otherwise (fixed or error-controlled steps) the last step
        and the wall time so far and to go at the mean rate of the run so far."""
        solver, cfg = self.solver, self.cfg
        left = _step_estimate(solver, cfg, t_r) if self.budget.estimate is not None else None
        if left is not None:
            log.info("t = %g: %d steps so far, about %d in all at the current step (dt = %.3g)",
                     t_r, solver.step_count, solver.step_count + left, solver.step_hint())
            return
        now = time.monotonic()
        wall, t0 = now - self.wall0, self.start_t
        to_go = (now - self.session0) / (t_r - t0) * (cfg.solver.T - t_r) if t_r > t0 else float("nan")
        projected = f", about {solver.step_count / t_r * cfg.solver.T:.0f} steps in all at this rate" if self.budget.reference and t_r > 0 else ""
        h_next = getattr(solver, "h_next", None) if getattr(solver, "adaptive", False) else None  # rk23 tokens: the last step landed on t_r
        nxt = f"; next try {h_next:.3g}" if h_next is not None else ""
        log.info("t = %g: %d steps so far (dt = %.3g%s)%s, %.0f s of wall time, about %.0f s to go at this rate",
                 t_r, solver.step_count, solver.last_step(), nxt, projected, wall, to_go)

    def record(self, r: int, t_r: float, row: dict, guard, *, last: bool = False) -> None:
        """After the row of record ``r`` at ``t_r``; ``guard.flag``: Ctrl-C / SIGTERM seen (checkpoint now); ``last``: the run ends
        here before T (stationary), written like the record at T."""
        cfg, solver, n_records, snap_every = self.cfg, self.solver, self.n_records, self.snap_every
        end = r == n_records or last
        if r % snap_every == 0 or end:
            self.rf.write_snapshot(-(-r // snap_every), t_r, solver, self.mesh if cfg.output.vtk else None, tokens_vtk=cfg.output.vtk)
        if 0 < r < n_records and r >= self.quarter * n_records / 4:
            self.quarter = 1 + int(4 * r / n_records)
            self._log_progress(t_r)
        dt_last = row.get("dt_last")
        self.bar.set(round(t_r, 10), f"step={solver.step_count}" + (f", dt={dt_last:.2e}" if dt_last else ""))
        due = (r > 0 and r % cfg.output.checkpoint_every == 0) or (time.monotonic() - self.last_ckpt_wall > 60 * cfg.output.checkpoint_minutes)
        if guard.flag or due or end:
            stop = {"stationary": t_r, "steady_rate": self.steady.rate} if last else {}
            self.rf.write_checkpoint(self.state(), self.meta(r, **stop))
            self.last_ckpt_wall = time.monotonic()


def _write_summary(rf: RunFolder, cfg: Config, status: str, wall: float, extra: dict | None = None, *, session: float | None = None) -> dict:
    """summary.json: ``wall`` is the wall time since the run started (over all sessions), ``session``
    that of this session alone (a resume; None: the same as ``wall``)."""
    try:
        diag = read_diagnostics(rf.csv, malformed="raise") if rf.csv.is_file() and rf.csv.stat().st_size else {}
    except (OSError, ValueError):  # a row cut short by a failed write
        diag = {}
    final = {k: float(v[-1]) for k, v in diag.items() if len(v)} if diag else {}
    summary = {
        "status": status,
        "solver": cfg.run.solver,
        "attention": cfg.model.attention,
        "seed": cfg.weights.seed,
        "wall_time_s": wall,
        "session_wall_time_s": wall if session is None else session,
        "records": len(diag.get("t", [])),
        "final": {k: (None if not math.isfinite(v) else v) for k, v in final.items()},
        "versions": versions(),
        "resume_command": f"spherepde resume {rf.folder}",
    }
    if cfg.initial.kind == "run":
        try:
            from spherepde.runs.branch import branch_point

            summary["initial_from_run"] = branch_point(cfg.initial.run, cfg.initial.time).to_dict()
        except (OSError, ValueError) as exc:  # the source run went away meanwhile: say so, keep the summary
            summary["initial_from_run"] = {"run": cfg.initial.run, "requested_time": cfg.initial.time, "error": one_line(exc)}
    if extra:
        summary.update(extra)
    with writing(rf.folder / SUMMARY_FILE):
        atomic_write_text(rf.folder / SUMMARY_FILE, json.dumps(summary, indent=2))
    return summary


def best_effort(what: str, fn, *args, handler=None, **kwargs) -> None:
    """Best effort (after a failure): a second failure is only logged."""
    try:
        fn(*args, **kwargs)
    except Exception as exc:
        _log_to_file(handler, f"could not write {what}: {exc}", exc)


def failure_message(exc: BaseException, folder: Path, *, t: float | None = None, checkpoint_t: float | None = None) -> str:
    """The one-line message of a run that failed while running."""
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        where = exc.filename or folder
        kept = f" up to its last checkpoint (t = {checkpoint_t:.6g})" if checkpoint_t is not None else ""
        return f"disk full while writing {where}; the run folder {folder} keeps what was written{kept} -- free some space, then continue with: spherepde resume {folder}"
    text = one_line(exc)
    if isinstance(exc, OSError) and exc.filename and exc.strerror:
        text = f"cannot write {exc.filename}: {exc.strerror}"
    elif not (isinstance(exc, ValueError) or type(exc).__module__.startswith("spherepde")):
        text = f"{type(exc).__name__}: {text}"
    at = f" at t = {t:.6g}" if t is not None and "at t =" not in text else ""
    return f"run failed{at}: {text} (the folder {folder} keeps what was written; traceback in {folder / LOG_FILE})"


def _execute(cfg: Config, rf: RunFolder, solver, path: WeightPath, mesh, **kw) -> RunResult:
    """:func:`_run_folder_session`; a Ctrl-C that lands anywhere in it -- also after the loop's
    first one was handled (writing the summary, releasing the lock, reading the diagnostics back)
    -- is RunAborted: the folder exists and can be resumed, so no caller may say that nothing
    was written."""
    try:
        return _run_folder_session(cfg, rf, solver, path, mesh, **kw)
    except RunAborted:
        raise
    except KeyboardInterrupt as exc:
        raise RunAborted(rf.folder) from exc


def _run_folder_session(cfg: Config, rf: RunFolder, solver, path: WeightPath, mesh, *, lock, start_record: int, wall0: float, progress: bool,
                        fresh: bool, estimate: int | None = None, before=None, session0: float | None = None, steady: SteadyStop | None = None) -> RunResult:
    """Write (fresh: the start files), run the loop and the summary, holding ``lock``.

    Any exception is turned into RunFailedError (summary "failed", traceback in run.log) or,
    for a second Ctrl-C, RunAborted (summary "interrupted"); the lock is released."""
    folder = rf.folder
    handler = None
    status = "failed"
    session0 = wall0 if session0 is None else session0  # a resume: wall0 lies before this session's start by the earlier sessions' time

    def session() -> float:
        return time.monotonic() - session0
    try:
        try:
            handler = _attach_log(folder)
            with np.errstate(all="ignore"):
                if before is not None:
                    before()
                if fresh:
                    with writing(folder / CONFIG_FILE):
                        atomic_write_text(folder / CONFIG_FILE, config_to_toml(cfg))
                    with writing(folder / WEIGHTS_FILE):
                        path.save(folder / WEIGHTS_FILE)
                    if mesh is not None:
                        with writing(folder / MESH_FILE):
                            mesh.save(folder / MESH_FILE)
                    _write_summary(rf, cfg, "running", 0.0)
                    log.info("run %s: solver %s, H = %d, T = %g%s", folder, cfg.run.solver, cfg.model.H, cfg.solver.T,
                             f", about {estimate} steps at the initial state's step (dt = {solver.step_hint():.3g}; "
                             "more where the density steepens, updated below as the run goes)" if estimate else _fixed_steps(cfg, solver))
                    for note in solver.notes():
                        log.info("%s", note)
                    if cfg.output.vtk and cfg.run.solver != "mesh" and cfg.model.d > 3:
                        log.info("tokens on S^%d: vtk/tokens_*.vtp hold their first three coordinates (a projection; "
                                 "snapshots.npz holds all %d)", cfg.model.d - 1, cfg.model.d)
                if start_record > _n_records(cfg):
                    status = "completed"
                else:
                    status = _loop(cfg, rf, solver, path, mesh, start_record=start_record, wall0=wall0, progress=progress, estimate=estimate,
                                   steady=steady)
                extra = dict(solver.events() or {})
                if steady is not None:
                    extra.update(steady.summary())
                if status == "completed":
                    rf.finalise_snapshots(cfg)
                    extra.update(nucleation.run_entry(folder, cfg, path))  # circle runs of one frozen isotropic head: predicted and final clusters
                _write_summary(rf, cfg, status, time.monotonic() - wall0, extra or None, session=session())
                steps = solver.step_count
                rejected = getattr(solver, "rejected", None) if getattr(solver, "adaptive", False) else None  # rk23 tokens (checkpointed)
                log.info("run %s: %s in %.1f s%s%s%s", folder, status, session(),
                         f" ({time.monotonic() - wall0:.1f} s since the start, all sessions)" if session0 != wall0 else "",
                         f", {steps} steps" + (f" (estimated at the start: {estimate})" if estimate and fresh else "") if steps is not None else "",
                         f" and {rejected} rejected tries" if rejected is not None else "")
        except KeyboardInterrupt as exc:
            _log_to_file(handler, "aborted by a second interrupt; continue from the last checkpoint with: spherepde resume " + str(folder), exc)
            best_effort(SUMMARY_FILE, _write_summary, rf, cfg, "interrupted", time.monotonic() - wall0, handler=handler, session=session())
            raise RunAborted(folder) from exc
        except Exception as exc:
            msg = failure_message(exc, folder, t=getattr(solver, "t", None), checkpoint_t=rf.last_checkpoint_t)
            _log_to_file(handler, msg, exc)
            best_effort(SUMMARY_FILE, _write_summary, rf, cfg, "failed", time.monotonic() - wall0, {"error": msg}, handler=handler, session=session())
            raise RunFailedError(msg, folder) from exc
    finally:
        if handler is not None:
            logging.getLogger("spherepde").removeHandler(handler)
            handler.close()
        lock.release()
    return RunResult(folder, status, read_diagnostics(rf.csv, malformed="raise"))


def _csv_to_keep(rf: RunFolder, cfg: Config, r0: int) -> str | None:
    """Check diagnostics.csv against a checkpoint at record r0; the text to keep if rows beyond it must go."""
    if not rf.csv.is_file():
        raise rf.damaged("diagnostics.csv is missing")
    try:
        with open(rf.csv, newline="") as fh:
            text = fh.read()
        lines = text.splitlines(keepends=True)
        rows = list(csv.reader(lines[: r0 + 2]))
    except (OSError, ValueError, csv.Error) as exc:
        raise rf.damaged(f"diagnostics.csv cannot be read ({one_line(exc)})") from exc
    if len(rows) < r0 + 2:
        raise rf.damaged(f"diagnostics.csv holds {max(len(rows) - 1, 0)} records, but the checkpoint is at record {r0}")
    header = rows[0]
    if "t" not in header or any(len(r) != len(header) for r in rows[1:]):
        raise rf.damaged("diagnostics.csv has malformed rows before the checkpoint")
    expect = _record_time(cfg, r0)
    try:
        t_row = float(rows[r0 + 1][header.index("t")])
    except ValueError as exc:
        raise rf.damaged(f"diagnostics.csv record {r0} has no valid time") from exc
    if not abs(t_row - expect) <= 1e-9 * max(1.0, cfg.solver.T):
        raise rf.damaged(f"diagnostics.csv record {r0} is at t = {t_row:.6g}, but the checkpoint's record {r0} is at t = {expect:.6g}")
    if len(lines) > r0 + 2 or not lines[r0 + 1].endswith(("\n", "\r")):
        return "".join(lines[: r0 + 2])
    return None


# ------------------------------------------------------------------- the entry points
def run(cfg: Config, *, out: str | Path | None = None, force: bool = False, progress: bool | None = None, seed: int | None = None) -> RunResult:
    """Run a configuration into its own folder and return the result.

    Parameters
    ----------
    cfg : the validated configuration.
    out : the run folder (default: ``cfg.run.out / (cfg.run.name or a derived name)``).
    force : replace an existing run folder (one with the marker; any other non-empty folder
        is refused). Otherwise an existing folder raises :class:`RunExistsError`.
    progress : show a progress bar (default: when stderr is a terminal).
    seed : override ``weights.seed`` (used by Monte-Carlo).

    Raises
    ------
    RunExistsError / RunLockedError / RunFolderError / ValueError : before anything is
        written (bad input).
    RunFailedError : the run failed while running (the folder keeps what was written).
    RunAborted : a second Ctrl-C (the folder can be resumed).
    """
    if seed is not None and seed != cfg.weights.seed:
        cfg = cfg.with_overrides({"weights.seed": seed})
    folder = Path(out) if out is not None else Path(cfg.run.out) / (cfg.run.name or default_run_name(cfg))
    check_run_target(out, folder, cfg)
    rf = RunFolder(folder)
    exists = rf.check_new(force=force)
    progress = sys.stderr.isatty() if progress is None else progress
    wall0 = time.monotonic()
    # build everything before writing (or deleting) anything, so bad input leaves the disk as it was
    path, mesh, solver, estimate = _build(cfg)
    rf.create(cfg, kind="run", replace=exists, force=force)
    return _execute(cfg, rf, solver, path, mesh, lock=rf.lock, start_record=0, wall0=wall0, progress=progress, fresh=True, estimate=estimate,
                    steady=tracker(cfg.solver.steady_tol))


#: The keys ``resume --set`` accepts: extending a run to a later time changes nothing else.
EXTEND_KEYS = ("solver.T",)


def _extended_config(folder: Path, cfg: Config, overrides: dict) -> Config:
    """The configuration of ``folder`` extended to a later ``solver.T`` (RunFolderError otherwise)."""
    bad = sorted(set(overrides) - set(EXTEND_KEYS))
    if bad:
        raise RunFolderError(
            f"resume --set accepts only {', '.join(EXTEND_KEYS)} (to extend a run to a later time), not {', '.join(bad)}; "
            f"to change other keys start a new run from this one's state: initial.kind = \"run\", initial.run = \"{folder}\""
        )
    try:
        new = cfg.with_overrides(overrides)
    except ValueError as exc:
        raise RunFolderError(str(exc)) from None
    T_old, T_new = cfg.solver.T, new.solver.T
    if not T_new > T_old:
        raise RunFolderError(f"solver.T = {T_new:g} does not extend {folder}, which runs to T = {T_old:g}; give a later time")
    n_old = _n_records(cfg)
    if _record_time(new, n_old) != T_old:
        raise RunFolderError(
            f"cannot extend {folder} bit for bit: its final time T = {T_old:g} is not on its record grid "
            f"(output.record_dt = {cfg.output.record_dt:g}); start a new run to T = {T_new:g} instead"
        )
    snap_every = int(round(cfg.output.snapshot_dt / cfg.output.record_dt))
    if n_old % snap_every:
        raise RunFolderError(
            f"cannot extend {folder} bit for bit: its final time T = {T_old:g} is not on its snapshot grid "
            f"(output.snapshot_dt = {cfg.output.snapshot_dt:g}); start a new run to T = {T_new:g} instead"
        )
    return new


def _extended_path(folder: Path, old: WeightPath, cfg_new: Config) -> WeightPath:
    """The weight path of ``cfg_new``, checked to continue ``old`` (the same noise stream) bit for bit."""
    try:
        new = build_weight_path(cfg_new)
    except (ValueError, OSError) as exc:
        raise RunFolderError(f"cannot extend the weight path of {folder} to T = {cfg_new.solver.T:g}: {one_line(exc)}") from None
    K = old.K
    same = new.K >= K and new.dt == old.dt and all(
        np.array_equal(getattr(new, k)[: K + (0 if k == "dM" else 1)], getattr(old, k)) for k in ("A", "V", "drift", "dM")
    )
    if not same:
        raise RunFolderError(
            f"the weight path regenerated to T = {cfg_new.solver.T:g} does not continue the one in {folder / WEIGHTS_FILE} "
            "(was it made by another spherepde version, or from a weights file that ends at the old T?); start a new run instead"
        )
    return new


def resume(folder, *, progress: bool | None = None, overrides: dict | None = None, force: bool = False) -> RunResult:
    """Continue a run from its last checkpoint (bit-for-bit equal to an uninterrupted run).

    Refuses (RunFolderError, nothing written) a config.toml edited after the start and a
    damaged folder; drops diagnostics rows written after the checkpoint; a run killed
    before its first checkpoint starts again from t = 0.

    ``overrides = {"solver.T": T_new}`` *extends* a run (finished or not) to a later time:
    the weight path is regenerated to ``T_new`` from the same seed and checked to continue
    the saved one, and the result is bit-for-bit the run made to ``T_new`` from the start.

    ``force`` takes over a lock written on another host (or a lock file that is not a lock);
    a lock held by a live process on this host is always refused.
    """
    session0 = time.monotonic()
    folder = Path(folder)
    overrides = dict(overrides or {})
    if not folder.exists():
        raise FileNotFoundError(f"run folder {folder} does not exist")
    if not folder.is_dir() or not (folder / CONFIG_FILE).exists():
        raise FileNotFoundError(f"{folder} is not a spherepde run folder ({'a file' if not folder.is_dir() else 'no config.toml'})")
    rf = RunFolder(folder)
    rf.check_layout()
    summary = rf.read_summary()
    if "paths" in summary:  # a Monte-Carlo folder: spherepde.runs.montecarlo.resume continues it
        raise RunFolderError(f"{folder} is a Monte-Carlo folder; continue it with spherepde.resume (spherepde.runs.montecarlo.resume)")
    progress = sys.stderr.isatty() if progress is None else progress
    lock = rf.lock
    rf.acquire(force=force)
    try:
        cfg = rf.load_config()
        rf.check_config_unchanged()
        rf.remove_stale_temporaries()
        cfg_new = _extended_config(folder, cfg, overrides) if overrides else None
        if not rf.has_checkpoint():
            if cfg_new is not None:
                raise RunFolderError(f"{folder} has no checkpoint to extend; resume it first (spherepde resume {folder})")
            return _restart(folder, cfg, rf, summary, lock=lock, progress=progress)
        mesh = _saved_mesh(rf, cfg)
        state, meta = rf.read_checkpoint(check=checkpoint_check(cfg, mesh), check_meta=checkpoint_times(cfg))
        _check_counts(rf, state, meta)
        try:
            r0 = int(meta["record"])
            wall = float(meta.get("wall", 0.0))
            try:  # the end of the last session, when it wrote its summary after the checkpoint
                wall = max(wall, float(summary.get("wall_time_s") or 0.0))
            except (TypeError, ValueError):
                pass
            estimate = meta.get("step_estimate")
            estimate = None if estimate is None else int(estimate)
        except (KeyError, TypeError, ValueError) as exc:
            raise rf.damaged(f"the checkpoint has no valid record number ({one_line(exc)})") from exc
        steady = _steady_from_checkpoint(rf, cfg, state, meta)
        cfg_new = _stationary_end(folder, steady, cfg_new)
        if summary.get("status") == "completed" and (cfg_new is None and r0 >= _n_records(cfg) or steady is not None and steady.stopped_at is not None):
            lock.release()
            if steady is not None and steady.stopped_at is not None:
                log.warning("%s is complete: it ended as stationary at t = %g (solver.steady_tol = %g); nothing to resume", folder, steady.stopped_at, steady.tol)
            else:
                log.warning("%s is complete (T = %g): nothing to resume; extend it with: spherepde resume %s --set solver.T=...",
                            folder, cfg.solver.T, folder)
            try:
                return RunResult(folder, "completed", read_diagnostics(rf.csv, malformed="raise"))
            except (OSError, ValueError) as exc:
                raise rf.damaged(f"diagnostics.csv cannot be read ({one_line(exc)})") from exc
        path = rf.load_part(WEIGHTS_FILE, WeightPath.load)
        if cfg_new is not None:
            path = _extended_path(folder, path, cfg_new)
        with np.errstate(all="ignore"):
            solver = build_solver(cfg_new or cfg, path, mesh=mesh)
        try:
            solver.set_state(state_scalars(state))
        except (KeyError, TypeError, ValueError) as exc:
            raise rf.damaged(f"the checkpoint does not fit the run ({one_line(exc)})") from exc
        keep = _csv_to_keep(rf, cfg, r0)
        _check_snapshots(rf, cfg, r0)
    except BaseException:
        lock.release()
        raise

    def drop_rows():
        if keep is not None:
            with writing(rf.csv):
                atomic_write_text(rf.csv, keep)
            log.info("dropped the diagnostics rows written after the checkpoint (record %d)", r0)
        if cfg_new is not None:  # extend: the new end time, and the path that reaches it
            for name, write in ((WEIGHTS_FILE, lambda: path.save(folder / WEIGHTS_FILE)),
                                (CONFIG_FILE, lambda: atomic_write_text(folder / CONFIG_FILE, config_to_toml(cfg_new))),
                                (MARKER, lambda: rf.write_marker(cfg_new, "run"))):
                with writing(folder / name):
                    write()
            log.info("extending %s from T = %g to T = %g", folder, cfg.solver.T, cfg_new.solver.T)
        if r0 < _n_records(cfg_new or cfg):
            log.info("resuming %s at t = %g (record %d)", folder, meta.get("t", float("nan")), r0)

    rf.last_checkpoint_t = meta.get("t")
    stopped = steady is not None and steady.stopped_at is not None  # ended as stationary, but the summary was not written: write it
    return _execute(cfg_new or cfg, rf, solver, path, mesh, lock=lock, start_record=_n_records(cfg) + 1 if stopped else r0 + 1, wall0=session0 - wall,
                    progress=progress, fresh=False, estimate=estimate, before=drop_rows, session0=session0, steady=steady)


def _stationary_end(folder: Path, steady: SteadyStop | None, cfg_new: Config | None) -> Config | None:
    """The extended configuration a resume goes on with: none for a run that ended as stationary (a run to the later T
    stops at the same record: nothing to extend)."""
    if cfg_new is not None and steady is not None and steady.stopped_at is not None:
        log.warning("%s ended as stationary at t = %g (solver.steady_tol = %g): a run to T = %g stops there too; nothing to extend",
                    folder, steady.stopped_at, steady.tol, cfg_new.solver.T)
        return None
    return cfg_new


def _steady_from_checkpoint(rf: RunFolder, cfg: Config, state: dict, meta: dict) -> SteadyStop | None:
    """The stationarity check of ``solver.steady_tol`` as the checkpoint left it (its arrays are taken out of ``state``);
    ``stopped_at`` is set when the run ended there as stationary. None when the run has no steady_tol."""
    steady = tracker(cfg.solver.steady_tol)
    if steady is None:
        for k in STEADY_KEYS:
            state.pop(k, None)
        return None
    try:
        steady.restore(state)
        if meta.get("stationary") is not None:
            steady.stopped_at, steady.rate = float(meta["stationary"]), float(meta.get("steady_rate", math.nan))
    except (TypeError, ValueError) as exc:
        raise rf.damaged(f"the checkpoint does not fit solver.steady_tol = {cfg.solver.steady_tol:g}: {one_line(exc)}") from exc
    return steady


def _saved_mesh(rf: RunFolder, cfg: Config):
    """The mesh.npz of a mesh (or coupled) run's folder; None for a token run."""
    if cfg.run.solver not in ("mesh", "both"):
        return None
    from spherepde.geometry.meshfiles import load_saved_mesh

    return rf.load_part(MESH_FILE, load_saved_mesh)


#: A checkpoint's total mass (cells and point masses) is 1 within this (round-off of the mass-conserving steps).
MASS_TOL = 1e-8


def checkpoint_check(cfg: Config, mesh):
    """The run's rules for its checkpoints' mesh state, as ``check(state)`` raising ValueError (None
    for a token run): the density has one value per cell; the point-mass arrays (atom_x, atom_m,
    merges) are present exactly when ``solver.atoms``, with the shapes (k, 3), (k,), (n, 4) and finite
    merges (positions on the sphere and positive masses: :func:`~spherepde.runs.runfolder.check_state_values`);
    the cells' mass plus the point masses' is 1 within :data:`MASS_TOL`."""
    if mesh is None:
        return None
    from spherepde.geometry.protocol import geometry_of

    areas = geometry_of(mesh).areas
    pre = "mesh_" if cfg.run.solver == "both" else ""
    names = [pre + k for k in ("atom_x", "atom_m", "merges")]

    def check(state: dict) -> None:
        rho = np.asarray(state.get(pre + "rho", np.zeros(0)), float)
        if rho.shape != areas.shape:
            raise ValueError(f"its density {pre}rho has shape {rho.shape}, but the mesh has {areas.size} cells")
        present = [k for k in names if k in state]
        if cfg.solver.atoms and len(present) < len(names):
            raise ValueError(f"its point-mass arrays {', '.join(k for k in names if k not in state)} are missing, but the run carries "
                             "point masses (solver.atoms = true)")
        if not cfg.solver.atoms and present:
            raise ValueError(f"it holds point-mass arrays ({', '.join(present)}), but the run has none (solver.atoms = false)")
        atom_mass = 0.0
        if present:
            merges = np.asarray(state[names[2]])
            if merges.dtype.kind not in "iuf" or merges.ndim != 2 or merges.shape[1] != 4 or not np.all(np.isfinite(merges)):
                raise ValueError(f"its merge events {names[2]} are not a finite (n, 4) table (shape {merges.shape})")
            atom_mass = float(np.sum(state[names[1]]))
        cells = float(rho @ areas)
        if not abs(cells + atom_mass - 1.0) <= MASS_TOL:
            raise ValueError(f"its total mass is {cells + atom_mass:.6g} (cells {cells:.6g}"
                             + (f" + point masses {atom_mass:.6g}" if present else "") + "), not 1")
    return check


def _time_tol(cfg: Config) -> float:
    """How far a stored time may lie from the record time it belongs to (round-off of the step sums)."""
    return 1e-9 * max(1.0, cfg.solver.T)


#: The solvers' clocks in a checkpoint's state (one solver: "t"; ``run.solver = "both"``: the mesh's and the tokens').
CLOCKS = ("t", "mesh_t", "part_t")


def checkpoint_times(cfg: Config):
    """The run's rules for a checkpoint's times, as ``check(state, meta)`` raising ValueError: its record number r is
    one of the run's (0 .. the number of records); its time ``meta["t"]`` is that record's time (a checkpoint written
    at an interruption between records, ``partial``: between record r's time and the next one's), so never beyond T;
    and the solvers' clocks (:data:`CLOCKS`) are that time (``partial``: within the same interval). A checkpoint whose
    clock disagrees with its record would continue from the wrong time: it is treated as damaged, so the previous one
    serves (:meth:`~spherepde.runs.runfolder.RunFolder.read_checkpoint`)."""
    n = _n_records(cfg)
    tol = _time_tol(cfg)

    def check(state: dict, meta: dict) -> None:
        try:
            r = float(meta["record"])
        except (KeyError, TypeError, ValueError):
            return  # not a number: refused by _check_counts, which names it
        if not (math.isfinite(r) and r >= 0 and r == math.floor(r)):
            return
        if r > n:
            raise ValueError(f"its record number {r:.0f} is beyond the run's last record {n}")
        r = int(r)
        lo = _record_time(cfg, r)
        hi = _record_time(cfg, min(r + 1, n)) if meta.get("partial") else lo
        t = float(meta.get("t", lo))
        if not lo - tol <= t <= hi + tol:
            raise ValueError(f"its time t = {t:.12g} is not that of its record {r} (t = {lo:.12g}" + (f" .. {hi:.12g})" if hi > lo else ")"))
        for k in CLOCKS:  # at a record lo = hi: the record's time
            if k in state:
                c = float(state[k])
                if not lo - tol <= c <= hi + tol:
                    raise ValueError(f"its solver time {k} = {c:.12g} is not its record time t = {t:.12g}")

    return check


def _check_snapshots(rf: RunFolder, cfg: Config, r0: int) -> None:
    """The snapshots a run wrote up to its checkpoint's record r0 (``snapshots/NNNNNN.npz``, one each
    ``output.snapshot_dt``) are all there and readable, each at its record's time: RunFolderError naming the
    first that is not. A resume cannot write them again (the states are gone), and without the check a missing
    one left a gap in snapshots.npz and a damaged one failed the run after all its steps."""
    every = int(round(cfg.output.snapshot_dt / cfg.output.record_dt))
    for i in range(r0 // every + 1):
        f = rf.snapdir / f"{i:06d}.npz"
        want = _record_time(cfg, i * every)
        try:
            with load_arrays(f) as z:
                t = float(z["t"])
            problem = None if abs(t - want) <= _time_tol(cfg) else f"holds t = {t:.12g}, not the record's t = {want:.12g}"
        except FileNotFoundError:
            problem = "is missing"
        except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile) as exc:
            problem = f"cannot be read ({one_line(str(exc)).removeprefix(f'{f}: ')})"
        if problem:
            raise RunFolderError(f"cannot resume {rf.folder}: its snapshot at t = {want:.6g}, snapshots/{f.name}, {problem}; a resume cannot "
                                 f"write it again -- restore the file, or start the run again with: spherepde run {rf.folder / CONFIG_FILE} "
                                 f"--out {rf.folder} --force")


def _check_counts(rf: RunFolder, state: dict, meta: dict) -> None:
    """The checkpoint's counters (record number, step counts) are whole numbers >= 0 (RunFolderError otherwise)."""
    counts = [("record number", meta.get("record")), ("step number", meta.get("step", 0))]
    counts += [("step count" if k == "step_count" else f"step count {k}" if k.endswith("step_count") else f"record count {k}", v)
               for k, v in state.items() if k.endswith(("step_count", "coupled_records"))]
    for name, value in counts:
        a = np.asarray(value) if not isinstance(value, (bool, str)) and value is not None else None
        ok = a is not None and a.ndim == 0 and a.dtype.kind in "iuf" and bool(np.isfinite(a)) and float(a) >= 0 and float(a) == np.floor(float(a))
        if not ok:
            shown = a.item() if a is not None and a.ndim == 0 else value
            raise rf.damaged(f"the checkpoint's {name} is {' '.join(repr(shown).split())[:60]}, not a whole number >= 0")


def _restart(folder: Path, cfg: Config, rf: RunFolder, summary: dict, *, lock, progress) -> RunResult:
    """Resume of a run killed before its first checkpoint: start it again from t = 0 (lock held)."""
    if summary.get("status") == "completed" and rf.csv.is_file():  # checkpoints deleted after the end
        lock.release()
        try:
            return RunResult(folder, "completed", read_diagnostics(rf.csv, malformed="raise"))
        except (OSError, ValueError) as exc:
            raise rf.damaged(f"diagnostics.csv cannot be read ({one_line(exc)})") from exc
    wall0 = time.monotonic()
    path, mesh, solver, estimate = _build(cfg)

    def clear():
        log.warning("%s has no checkpoint (the run was stopped before its first one): starting it again from t = 0", folder)
        rf.clear_generated()
        if not (folder / MARKER).is_file():
            rf.write_marker(cfg, "run")

    return _execute(cfg, rf, solver, path, mesh, lock=lock, start_record=0, wall0=wall0, progress=progress, fresh=True, estimate=estimate, before=clear,
                    steady=tracker(cfg.solver.steady_tol))
