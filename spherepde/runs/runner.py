"""Runs: from a :class:`~spherepde.runs.config.Config` to a self-describing run folder.

A run folder holds

* ``config.toml`` -- the resolved configuration (every key);
* ``summary.json`` -- status, versions, seed, wall time, final diagnostics;
* ``diagnostics.csv`` -- one row per record (columns of
  :data:`spherepde.model.energy.DIAGNOSTIC_COLUMNS` and solver extras);
* ``weights.npz`` -- the weight path Theta_t that drove the run;
* ``snapshots/NNNNNN.npz`` -- tokens ``X`` or cell densities ``rho`` with time ``t``;
  ``snapshots.npz`` gathers them (``t``, ``X``/``rho``) when the run ends;
* mesh runs: ``mesh.npz`` and ``vtk/density_NNNNNN.vtp`` + ``density.pvd`` (ParaView);
* ``checkpoint.npz`` (and the previous one, ``checkpoint.prev.npz``) -- written
  atomically; ``run.log`` -- the log.

An existing folder is never overwritten unless ``force=True``. :func:`resume` continues
an interrupted run from its last checkpoint and gives the same numbers as an
uninterrupted run.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import os
import platform
import shutil
import signal
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from spherepde import __version__
from spherepde.model.weights import (
    FrozenProcess,
    OscillatingProcess,
    OUProcess,
    WeightPath,
    generate_weight_path,
    weight_path_from_arrays,
)
from spherepde.runs.config import Config, config_to_toml, load_config
from spherepde.runs.files import atomic_savez, atomic_write_text
from spherepde.runs.progress import ProgressBar

__all__ = ["run", "resume", "build_weight_path", "build_solver", "RunResult", "RunExistsError", "monte_carlo", "read_diagnostics"]

log = logging.getLogger(__name__)


class RunExistsError(FileExistsError):
    """The run folder exists already (use --force to overwrite, or resume it)."""


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
    """The weight path of a configuration (seed overrides ``weights.seed``)."""
    with _FileContext("weights.path_file", cfg.weights.path_file, cfg.weights.process == "file"), _FileContext(
        "weights.init_file", cfg.weights.init_file, cfg.weights.init == "file" and cfg.weights.process != "file"
    ):
        return _build_weight_path(cfg, seed=seed)


def _build_weight_path(cfg: Config, *, seed: int | None = None) -> WeightPath:
    w, m = cfg.weights, cfg.model
    seed = w.seed if seed is None else seed
    if w.process == "file":
        path = Path(w.path_file)
        with np.load(path, allow_pickle=False) as z:
            is_saved_path = {"A", "V", "drift", "dM"} <= set(z.files)
        if is_saved_path:
            wp = WeightPath.load(path)
        else:
            from spherepde.model.weights import _read_array

            wp = weight_path_from_arrays(_read_array(path, key="D"), w.dt, sign=m.sign)
        if wp.H != m.H or wp.d != m.d:
            raise ValueError(f"weights.path_file: path has H = {wp.H}, d = {wp.d}, but model has H = {m.H}, d = {m.d}")
        if wp.T < cfg.solver.T - 1e-12 or abs(wp.dt - w.dt) > 1e-12:
            raise ValueError(f"weights.path_file: path covers T = {wp.T} with dt = {wp.dt}; the run needs T = {cfg.solver.T}, dt = {w.dt}")
        return wp
    if w.process == "ou":
        proc = OUProcess(mean=w.mean, kappa=w.kappa, sigma=w.sigma)
    elif w.process == "oscillating":
        proc = OscillatingProcess(phase=w.phase)
    else:
        proc = FrozenProcess()
    return generate_weight_path(
        proc,
        H=m.H,
        d=m.d,
        T=cfg.solver.T,
        dt=w.dt,
        seed=seed,
        init=w.init,
        beta=w.beta,
        init_file=w.init_file or None,
        init_seed=None if w.init_seed < 0 else w.init_seed,
        heads=m.heads,
        sign=m.sign,
        scheme=w.scheme,
        value_init=w.value_init,
    )


def build_mesh(cfg: Config):
    from spherepde.geometry.meshio import icosphere, read_mesh

    if cfg.mesh.file:
        with _FileContext("mesh.file", cfg.mesh.file):
            return read_mesh(cfg.mesh.file)
    return icosphere(cfg.mesh.level)


def build_initial_density(cfg: Config, mesh):
    from spherepde.geometry import densities

    ini = cfg.initial
    if ini.kind == "uniform":
        return densities.uniform(mesh)
    if ini.kind == "octahedral":
        return densities.octahedral(mesh, sigma=ini.sigma)
    if ini.kind == "vmf":
        means = np.asarray(ini.means, float)
        kappas = np.broadcast_to(np.asarray(ini.kappas, float), (means.shape[0],))
        weights = np.asarray(ini.weights, float) if ini.weights else None
        return densities.vmf_mixture(mesh, means, kappas, weights)
    if ini.kind == "harmonic":
        return densities.spherical_harmonic(mesh, ini.l, ini.m, ini.eps)
    with _FileContext("initial.file", ini.file):
        return densities.from_file(mesh, ini.file)


def build_initial_tokens(cfg: Config):
    from spherepde.solvers.particles import initial_tokens

    ini = cfg.initial
    kappas = np.broadcast_to(np.asarray(ini.kappas, float), (len(ini.means),)) if ini.kind == "vmf" else None
    with _FileContext("initial.file", ini.file, ini.kind == "file"):
        return initial_tokens(
            ini.kind, ini.n, cfg.model.d, seed=ini.seed, sigma=ini.sigma, means=ini.means if ini.kind == "vmf" else None,
            kappas=kappas, weights=ini.weights or None, file=ini.file or None,
        )


def build_solver(cfg: Config, path: WeightPath, *, mesh=None):
    """The solver object (ParticleSolver or MeshSolver) for a configuration and a path."""
    if cfg.run.solver == "particles":
        from spherepde.solvers.particles import ParticleSolver

        return ParticleSolver(build_initial_tokens(cfg), path, dt=cfg.solver.dt or None, integrator=cfg.integrator)
    from spherepde.solvers.mesh import MeshSolver

    mesh = mesh if mesh is not None else build_mesh(cfg)
    if cfg.run.solver == "both":
        from spherepde.solvers.coupled import CoupledSolver

        ms = MeshSolver(
            mesh, build_initial_density(cfg, mesh), path, velocity=cfg.solver.velocity, order=cfg.solver.order,
            integrator=cfg.integrator, cfl=cfg.solver.cfl, dt=None,
            summation=cfg.solver.summation, summation_tol=cfg.solver.summation_tol,
        )
        return CoupledSolver(ms, cfg.initial.n, seed=cfg.initial.seed)
    return MeshSolver(
        mesh, build_initial_density(cfg, mesh), path, velocity=cfg.solver.velocity, order=cfg.solver.order,
        integrator=cfg.integrator, cfl=cfg.solver.cfl, dt=cfg.solver.dt or None,
        summation=cfg.solver.summation, summation_tol=cfg.solver.summation_tol,
    )


def default_run_name(cfg: Config) -> str:
    return f"{cfg.run.solver}-{cfg.weights.process}-H{cfg.model.H}-seed{cfg.weights.seed}"


# --------------------------------------------------------------------- small I/O
def read_diagnostics(path) -> dict:
    """Read a diagnostics CSV into a dict of float arrays (column -> values)."""
    path = Path(path)
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    if not rows:
        raise ValueError(f"{path} is empty")
    header, body = rows[0], rows[1:]
    data = np.array([[float(x) for x in r] for r in body], dtype=float).reshape(len(body), len(header))
    return {h: data[:, i] for i, h in enumerate(header)}


def _versions() -> dict:
    import numba
    import scipy

    return {"spherepde": __version__, "python": platform.python_version(), "numpy": np.__version__, "scipy": scipy.__version__, "numba": numba.__version__, "platform": platform.platform()}


# ------------------------------------------------------------------- the run loop
class _RunFolder:
    def __init__(self, folder: Path):
        self.folder = folder
        self.csv = folder / "diagnostics.csv"
        self.snapdir = folder / "snapshots"
        self.vtkdir = folder / "vtk"

    def checkpoint_paths(self):
        return self.folder / "checkpoint.npz", self.folder / "checkpoint.prev.npz"

    def write_checkpoint(self, state: dict, meta: dict) -> None:
        cur, prev = self.checkpoint_paths()
        arrays = {"state_" + k: np.asarray(v) for k, v in state.items()}
        arrays["meta"] = np.array(json.dumps(meta))
        tmp = cur.with_name("checkpoint.tmp.npz")
        with open(tmp, "wb") as fh:
            np.savez(fh, **arrays)
            fh.flush()
            os.fsync(fh.fileno())
        if cur.exists():
            cur.replace(prev)
        tmp.replace(cur)

    def read_checkpoint(self) -> tuple[dict, dict]:
        errors = []
        for p in self.checkpoint_paths():
            if not p.exists():
                continue
            try:
                with np.load(p, allow_pickle=False) as z:
                    meta = json.loads(str(z["meta"]))
                    state = {k[6:]: np.array(z[k]) for k in z.files if k.startswith("state_")}
                return state, meta
            except (zipfile.BadZipFile, OSError, ValueError, KeyError, EOFError) as exc:
                errors.append(f"{p.name}: {exc}")
                log.warning("checkpoint %s is unreadable (%s); trying the previous one", p, exc)
        raise FileNotFoundError(f"no usable checkpoint in {self.folder}" + (f" ({'; '.join(errors)})" if errors else ""))


def _state_scalars(state: dict) -> dict:
    out = {}
    for k, v in state.items():
        a = np.asarray(v)
        out[k] = a.item() if a.ndim == 0 else a
    return out


def _write_snapshot(rf: _RunFolder, index: int, t: float, solver, mesh) -> None:
    snap = solver.snapshot() if hasattr(solver, "snapshot") else {"rho": solver.rho.copy()}
    rf.snapdir.mkdir(exist_ok=True)
    atomic_savez(rf.snapdir / f"{index:06d}.npz", t=np.float64(t), **snap)
    if mesh is not None and "rho" in snap and rf.vtkdir is not None:
        from spherepde.geometry.vtk import write_density_vtp

        rf.vtkdir.mkdir(exist_ok=True)
        write_density_vtp(mesh, snap["rho"], rf.vtkdir / f"density_{index:06d}.vtp", t=t)


def _finalise_snapshots(rf: _RunFolder, cfg: Config) -> None:
    files = sorted(rf.snapdir.glob("[0-9]*.npz"))
    if not files:
        return
    ts, vals = [], {}
    for f in files:
        with np.load(f, allow_pickle=False) as z:
            ts.append(float(z["t"]))
            for k in z.files:
                if k != "t":
                    vals.setdefault(k, []).append(np.array(z[k]))
    atomic_savez(rf.folder / "snapshots.npz", t=np.array(ts), **{k: np.stack(v) for k, v in vals.items()})
    if "rho" in vals and cfg.output.vtk:
        from spherepde.geometry.vtk import write_pvd

        write_pvd(rf.folder / "density.pvd", [(t, f"vtk/density_{i:06d}.vtp") for i, t in enumerate(ts)])


class _SigintGuard:
    """Turns the first Ctrl-C into a flag checked between records (a second one aborts)."""

    def __init__(self):
        self.flag = False
        self._old = None

    def __enter__(self):
        try:
            self._old = signal.signal(signal.SIGINT, self._handler)
        except ValueError:  # not in the main thread
            self._old = None
        return self

    def _handler(self, signum, frame):
        if self.flag:
            raise KeyboardInterrupt
        self.flag = True

    def __exit__(self, *exc):
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)
        return False


def _attach_log(folder: Path):
    handler = logging.FileHandler(folder / "run.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    pkg = logging.getLogger("spherepde")
    pkg.addHandler(handler)
    if pkg.level == logging.NOTSET or pkg.level > logging.INFO:
        pkg.setLevel(logging.INFO)
    return handler


def _n_records(cfg: Config) -> int:
    """Number of record intervals: records at t = r * record_dt, the last one at T."""
    return max(1, math.ceil(cfg.solver.T / cfg.output.record_dt - 1e-9))


def _loop(cfg: Config, rf: _RunFolder, solver, path: WeightPath, mesh, *, start_record: int, wall0: float, progress: bool) -> str:
    """Advance the solver record by record; returns 'completed' or 'interrupted'."""
    T = cfg.solver.T
    rdt = cfg.output.record_dt
    n_records = _n_records(cfg)
    snap_every = int(round(cfg.output.snapshot_dt / rdt))
    columns = None
    bar = ProgressBar(round(T, 10), round(start_record * rdt, 10), enabled=progress, unit="t",
                      bar_format="{l_bar}{bar}| t={n:.3f}/{total:.3f} [{elapsed}<{remaining}{postfix}]")
    last_ckpt_wall = time.monotonic()
    status = "completed"
    try:
        with _SigintGuard() as guard, open(rf.csv, "a", newline="") as fh:
            writer = csv.writer(fh)
            for r in range(start_record, n_records + 1):
                t_r = T if r == n_records else min(r * rdt, T)
                if r > 0:
                    solver.advance(t_r)
                row = solver.record()
                if columns is None:
                    columns = list(row)
                    if fh.tell() == 0:
                        writer.writerow(columns)
                writer.writerow([repr(float(row[c])) for c in columns])
                fh.flush()
                if r % snap_every == 0 or r == n_records:
                    _write_snapshot(rf, r // snap_every if r % snap_every == 0 else (n_records + snap_every - 1) // snap_every, t_r, solver, mesh if cfg.output.vtk else None)
                dt_last = row.get("dt_last")
                bar.set(round(t_r, 10), f"step={solver.step_count}" + (f", dt={dt_last:.2e}" if dt_last else ""))
                due = (r > 0 and r % cfg.output.checkpoint_every == 0) or (time.monotonic() - last_ckpt_wall > 60 * cfg.output.checkpoint_minutes)
                if guard.flag or due or r == n_records:
                    rf.write_checkpoint(solver.get_state(), {"record": r, "t": t_r, "step": solver.step_count, "wall": time.monotonic() - wall0})
                    last_ckpt_wall = time.monotonic()
                if guard.flag and r < n_records:
                    log.warning("interrupted at t = %.6g (step %d); checkpoint written -- continue with: spherepde resume %s", t_r, solver.step_count, rf.folder)
                    status = "interrupted"
                    break
    finally:
        bar.close()
    return status


def _write_summary(rf: _RunFolder, cfg: Config, status: str, wall: float, extra: dict | None = None) -> dict:
    diag = read_diagnostics(rf.csv) if rf.csv.exists() and rf.csv.stat().st_size else {}
    final = {k: float(v[-1]) for k, v in diag.items()} if diag else {}
    summary = {
        "status": status,
        "solver": cfg.run.solver,
        "seed": cfg.weights.seed,
        "wall_time_s": wall,
        "records": len(diag.get("t", [])),
        "final": {k: (None if not math.isfinite(v) else v) for k, v in final.items()},
        "versions": _versions(),
        "resume_command": f"spherepde resume {rf.folder}",
    }
    if extra:
        summary.update(extra)
    atomic_write_text(rf.folder / "summary.json", json.dumps(summary, indent=2))
    return summary


def run(cfg: Config, *, out: str | Path | None = None, force: bool = False, progress: bool | None = None, seed: int | None = None) -> RunResult:
    """Run a configuration into its own folder and return the result.

    Parameters
    ----------
    cfg : the validated configuration.
    out : the run folder (default: ``cfg.run.out / (cfg.run.name or a derived name)``).
    force : overwrite an existing folder (otherwise :class:`RunExistsError`).
    progress : show a progress bar (default: when stderr is a terminal).
    seed : override ``weights.seed`` (used by Monte-Carlo).
    """
    if seed is not None and seed != cfg.weights.seed:
        cfg = cfg.with_overrides({"weights.seed": seed})
    folder = Path(out) if out is not None else Path(cfg.run.out) / (cfg.run.name or default_run_name(cfg))
    exists = folder.exists() and any(folder.iterdir())
    if exists and not force:
        raise RunExistsError(f"run folder {folder} exists already; choose another name, pass --force to overwrite it, or 'spherepde resume {folder}' to continue it")
    progress = sys.stderr.isatty() if progress is None else progress
    wall0 = time.monotonic()
    # build everything before writing (or deleting) anything, so bad input leaves the disk as it was
    path = build_weight_path(cfg)
    mesh = build_mesh(cfg) if cfg.run.solver in ("mesh", "both") else None
    solver = build_solver(cfg, path, mesh=mesh)
    if exists:
        shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rf = _RunFolder(folder)
    handler = _attach_log(folder)
    try:
        atomic_write_text(folder / "config.toml", config_to_toml(cfg))
        path.save(folder / "weights.npz")
        if mesh is not None:
            mesh.save(folder / "mesh.npz")
        _write_summary(rf, cfg, "running", 0.0)
        log.info("run %s: solver %s, H = %d, T = %g", folder, cfg.run.solver, cfg.model.H, cfg.solver.T)
        status = "failed"
        try:
            status = _loop(cfg, rf, solver, path, mesh, start_record=0, wall0=wall0, progress=progress)
        except Exception as exc:
            log.error("run failed: %s", exc)
            _write_summary(rf, cfg, "failed", time.monotonic() - wall0, {"error": f"{type(exc).__name__}: {exc}"})
            raise
        if status == "completed":
            _finalise_snapshots(rf, cfg)
        _write_summary(rf, cfg, status, time.monotonic() - wall0)
        log.info("run %s: %s in %.1f s", folder, status, time.monotonic() - wall0)
    finally:
        logging.getLogger("spherepde").removeHandler(handler)
        handler.close()
    return RunResult(folder, status, read_diagnostics(rf.csv))


def resume(folder, *, progress: bool | None = None) -> RunResult:
    """Continue a run from its last checkpoint (bit-for-bit equal to an uninterrupted run)."""
    folder = Path(folder)
    if not (folder / "config.toml").is_file():
        raise FileNotFoundError(f"{folder} is not a spherepde run folder (no config.toml)")
    summary_file = folder / "summary.json"
    if summary_file.is_file():
        try:
            summary = json.loads(summary_file.read_text())
        except ValueError:
            summary = {}
        if isinstance(summary, dict) and "paths" in summary:  # a Monte-Carlo folder
            return _resume_monte_carlo(folder, summary, progress=progress)
    cfg = load_config(folder / "config.toml")
    rf = _RunFolder(folder)
    state, meta = rf.read_checkpoint()
    path = WeightPath.load(folder / "weights.npz")
    mesh = None
    if cfg.run.solver in ("mesh", "both"):
        from spherepde.geometry.mesh import SphereMesh

        mesh = SphereMesh.load(folder / "mesh.npz")
    solver = build_solver(cfg, path, mesh=mesh)
    solver.set_state(_state_scalars(state))
    r0 = int(meta["record"])
    n_records = _n_records(cfg)
    # drop rows written after the checkpoint
    with open(rf.csv, newline="") as fh:
        rows = list(csv.reader(fh))
    with open(rf.csv, "w", newline="") as fh:
        csv.writer(fh).writerows(rows[: r0 + 2])
    progress = sys.stderr.isatty() if progress is None else progress
    handler = _attach_log(folder)
    wall0 = time.monotonic() - float(meta.get("wall", 0.0))
    try:
        if r0 >= n_records:
            status = "completed"
        else:
            log.info("resuming %s at t = %g (record %d)", folder, meta["t"], r0)
            status = _loop(cfg, rf, solver, path, mesh, start_record=r0 + 1, wall0=wall0, progress=progress)
        if status == "completed":
            _finalise_snapshots(rf, cfg)
        _write_summary(rf, cfg, status, time.monotonic() - wall0)
    finally:
        logging.getLogger("spherepde").removeHandler(handler)
        handler.close()
    return RunResult(folder, status, read_diagnostics(rf.csv))


def monte_carlo(cfg: Config, *, paths: int | None = None, out=None, force: bool = False, progress: bool | None = None) -> RunResult:
    """Run ``paths`` weight-noise paths (seeds weights.seed + 0, 1, ...) and aggregate.

    Each path is a complete run folder ``path-NNN`` inside the Monte-Carlo folder;
    ``diagnostics_mean.csv`` and ``diagnostics_std.csv`` hold the mean and standard
    deviation (ddof = 1) of every diagnostic over the paths at each record time. A Ctrl-C
    stops after the current path's checkpoint (status ``interrupted``); :func:`resume` on
    the Monte-Carlo folder finishes the remaining paths and aggregates.
    """
    paths = cfg.montecarlo.paths if paths is None else paths
    folder = Path(out) if out is not None else Path(cfg.run.out) / (cfg.run.name or default_run_name(cfg).replace("-seed", "-mc-seed"))
    exists = folder.exists() and any(folder.iterdir())
    if exists and not force:
        raise RunExistsError(f"Monte-Carlo folder {folder} exists already; choose another name or pass --force")
    # check the inputs (files, shapes) before writing or deleting anything
    path0 = build_weight_path(cfg)
    build_solver(cfg, path0, mesh=build_mesh(cfg) if cfg.run.solver in ("mesh", "both") else None)
    del path0
    if exists:
        shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(folder / "config.toml", config_to_toml(cfg))
    _write_mc_summary(folder, cfg, paths, "running")
    return _monte_carlo_paths(cfg, folder, paths, progress=progress)


def _mc_seeds(cfg: Config, paths: int) -> list[int]:
    return [cfg.weights.seed + i for i in range(paths)]


def _write_mc_summary(folder: Path, cfg: Config, paths: int, status: str, extra: dict | None = None) -> None:
    summary = {"status": status, "paths": paths, "seeds": _mc_seeds(cfg, paths), "versions": _versions()}
    if status != "completed":
        summary["resume_command"] = f"spherepde resume {folder}"
    summary.update(extra or {})
    atomic_write_text(folder / "summary.json", json.dumps(summary, indent=2, default=lambda x: None))


def _monte_carlo_paths(cfg: Config, folder: Path, paths: int, *, progress, resuming: bool = False) -> RunResult:
    results = []
    for i, seed in enumerate(_mc_seeds(cfg, paths)):
        sub = folder / f"path-{i:03d}"
        status = None
        if resuming and (sub / "summary.json").is_file():
            status = json.loads((sub / "summary.json").read_text()).get("status")
        if status == "completed":
            res = RunResult(sub, "completed", read_diagnostics(sub / "diagnostics.csv"))
        elif resuming and any(p.is_file() for p in _RunFolder(sub).checkpoint_paths()):
            res = resume(sub, progress=progress)
        else:
            res = run(cfg, out=sub, force=resuming, progress=progress, seed=seed)
        if res.status != "completed":
            log.warning("Monte-Carlo interrupted in path %d; continue with: spherepde resume %s", i, folder)
            _write_mc_summary(folder, cfg, paths, "interrupted", {"paths_completed": i})
            return RunResult(folder, "interrupted", {})
        results.append(res.diagnostics)
    cols = list(results[0])
    stack = {c: np.stack([r[c] for r in results]) for c in cols}
    mean = {c: stack[c].mean(axis=0) for c in cols}
    std = {c: stack[c].std(axis=0, ddof=1) if paths > 1 else np.zeros_like(mean[c]) for c in cols}
    for name, table in (("diagnostics_mean.csv", mean), ("diagnostics_std.csv", std)):
        with open(folder / name, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(cols)
            for k in range(len(table["t"])):
                w.writerow([repr(float(table[c][k])) for c in cols])
    def finite(x) -> float | None:
        return float(x) if math.isfinite(x) else None

    _write_mc_summary(folder, cfg, paths, "completed", {"final_mean": {c: finite(mean[c][-1]) for c in cols}, "final_std": {c: finite(std[c][-1]) for c in cols}})
    return RunResult(folder, "completed", {"mean": mean, "std": std, "paths": stack})


def _resume_monte_carlo(folder: Path, summary: dict, *, progress) -> RunResult:
    cfg = load_config(folder / "config.toml")
    return _monte_carlo_paths(cfg, folder, int(summary["paths"]), progress=progress, resuming=True)
