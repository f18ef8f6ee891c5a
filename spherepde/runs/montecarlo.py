"""Monte-Carlo runs: one configuration over several weight-noise paths.

``OUT/path-NNN`` are ordinary run folders (seeds ``weights.seed + k``); ``OUT`` gathers
their mean, standard deviation and 5-95 % quantiles per record (``diagnostics_mean.csv``
and friends) and a summary. Resuming the folder resumes its unfinished paths.

:func:`resume` continues either kind of folder (``spherepde.resume``, ``spherepde resume``):
Monte-Carlo sits above the single run (:mod:`spherepde.runs.runner`), which never imports it.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import numpy as np

from spherepde._base import atomic_write_text, one_line
from spherepde.runs.config import Config, config_to_toml
from spherepde.runs.runfolder import (
    CONFIG_FILE,
    DIAGNOSTICS_FILE,
    MARKER,
    MC_TABLES,
    MONTE_CARLO,
    SUMMARY_FILE,
    RunFolder,
    RunFolderError,
    check_run_target,
    read_diagnostics,
    write_diagnostics_table,
    writing,
)
from spherepde.runs.runner import (
    RunAborted,
    RunFailedError,
    RunResult,
    best_effort,
    build_mesh,
    build_solver,
    build_weight_path,
    default_run_name,
    failure_message,
    run,
    versions,
)
from spherepde.runs.runner import resume as resume_run

log = logging.getLogger(__name__)

__all__ = ["monte_carlo", "resume"]


def monte_carlo(cfg: Config, *, paths: int | None = None, out=None, force: bool = False, progress: bool | None = None) -> RunResult:
    """Run ``paths`` weight-noise paths (seeds weights.seed + 0, 1, ...) and aggregate.

    Each path is a complete run folder ``path-NNN`` inside the Monte-Carlo folder;
    ``diagnostics_mean.csv`` and ``diagnostics_std.csv`` hold the mean and standard
    deviation (ddof = 1) of every diagnostic over the paths at each record time,
    ``diagnostics_q05.csv`` and ``diagnostics_q95.csv`` its 5 % and 95 % quantiles. A Ctrl-C
    stops after the current path's checkpoint (status ``interrupted``); :func:`resume` on
    the Monte-Carlo folder finishes the remaining paths and aggregates. The Monte-Carlo
    folder carries the run-folder marker and lock too.
    """
    paths = cfg.montecarlo.paths if paths is None else paths
    folder = Path(out) if out is not None else Path(cfg.run.out) / (cfg.run.name or default_run_name(cfg).replace("-seed", "-mc-seed"))
    check_run_target(out, folder, cfg)
    rf = RunFolder(folder)
    exists = rf.check_new(force=force, what="Monte-Carlo folder")
    # check the inputs (files, shapes) before writing or deleting anything
    with np.errstate(all="ignore"):
        path0 = build_weight_path(cfg)
        build_solver(cfg, path0, mesh=build_mesh(cfg) if cfg.run.solver in ("mesh", "both") else None)
    del path0
    rf.create(cfg, kind=MONTE_CARLO, replace=exists, force=force)
    return _mc_execute(cfg, folder, paths, lock=rf.lock, progress=progress, resuming=False)


def _mc_execute(cfg: Config, folder: Path, paths: int, *, lock, progress, resuming: bool) -> RunResult:
    try:
        try:
            if not resuming:
                with writing(folder / CONFIG_FILE):
                    atomic_write_text(folder / CONFIG_FILE, config_to_toml(cfg))
                _write_mc_summary(folder, cfg, paths, "running")
            return _monte_carlo_paths(cfg, folder, paths, progress=progress, resuming=resuming)
        except KeyboardInterrupt as exc:
            best_effort(SUMMARY_FILE, _write_mc_summary, folder, cfg, paths, "interrupted")
            raise RunAborted(folder) from exc
        except RunFailedError as exc:
            best_effort(SUMMARY_FILE, _write_mc_summary, folder, cfg, paths, "failed", {"error": str(exc)})
            raise
        except Exception as exc:
            msg = failure_message(exc, folder)
            best_effort(SUMMARY_FILE, _write_mc_summary, folder, cfg, paths, "failed", {"error": msg})
            raise RunFailedError(msg, folder) from exc
    finally:
        lock.release()


def _mc_seeds(cfg: Config, paths: int) -> list[int]:
    return [cfg.weights.seed + i for i in range(paths)]


def _write_mc_summary(folder: Path, cfg: Config, paths: int, status: str, extra: dict | None = None) -> None:
    summary = {"status": status, "paths": paths, "seeds": _mc_seeds(cfg, paths), "versions": versions()}
    if status != "completed":
        summary["resume_command"] = f"spherepde resume {folder}"
    summary.update(extra or {})
    with writing(folder / SUMMARY_FILE):
        atomic_write_text(folder / SUMMARY_FILE, json.dumps(summary, indent=2, default=lambda x: None))


class _PathInterruptedAsInfo(logging.Filter):
    """While the paths run, a path's own "interrupted at t = ...; resume PATH" warning is logged
    at INFO (its run.log keeps it): the Monte-Carlo warning says it once, naming the folder to resume."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.WARNING and str(record.msg).startswith("interrupted at t"):
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


def _monte_carlo_paths(cfg: Config, folder: Path, paths: int, *, progress, resuming: bool = False) -> RunResult:
    demote = _PathInterruptedAsInfo()
    runner_log = logging.getLogger("spherepde.runs.runner")
    runner_log.addFilter(demote)
    try:
        return _monte_carlo_paths_logged(cfg, folder, paths, progress=progress, resuming=resuming)
    finally:
        runner_log.removeFilter(demote)


def _monte_carlo_paths_logged(cfg: Config, folder: Path, paths: int, *, progress, resuming: bool) -> RunResult:
    results = []
    for i, seed in enumerate(_mc_seeds(cfg, paths)):
        sub = folder / f"path-{i:03d}"
        rf = RunFolder(sub)
        status = rf.read_summary().get("status") if resuming else None
        if status == "completed":
            res = RunResult(sub, "completed", read_diagnostics(sub / DIAGNOSTICS_FILE, malformed="raise"))
        elif resuming and (sub / CONFIG_FILE).is_file() and ((sub / MARKER).is_file() or rf.has_checkpoint()):
            res = resume_run(sub, progress=progress)
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
    q05, q95 = ({c: np.quantile(stack[c], q, axis=0) for c in cols} for q in (0.05, 0.95))  # the 5-95 % band of the plots
    for q, table in (("mean", mean), ("std", std), ("q05", q05), ("q95", q95)):
        write_diagnostics_table(folder / MC_TABLES[q], table)
    def finite(x) -> float | None:
        return float(x) if math.isfinite(x) else None

    _write_mc_summary(folder, cfg, paths, "completed", {"final_mean": {c: finite(mean[c][-1]) for c in cols}, "final_std": {c: finite(std[c][-1]) for c in cols}})
    return RunResult(folder, "completed", {"mean": mean, "std": std, "paths": stack})


def _resume_monte_carlo(folder: Path, summary: dict, *, progress, force: bool = False) -> RunResult:
    rf = RunFolder(folder)
    rf.acquire(force=force)
    try:
        cfg = rf.load_config()
        rf.check_config_unchanged()
        try:
            paths = int(summary["paths"])
        except (TypeError, ValueError) as exc:
            raise rf.damaged(f"summary.json has no valid number of paths ({one_line(exc)})") from exc
    except BaseException:
        rf.release()
        raise
    return _mc_execute(cfg, folder, paths, lock=rf.lock, progress=progress, resuming=True)


def resume(folder, *, progress: bool | None = None, overrides: dict | None = None, force: bool = False) -> RunResult:
    """Continue a run or a Monte-Carlo folder from where it stopped.

    A Monte-Carlo folder resumes its unfinished ``path-NNN`` runs and aggregates them
    (``overrides`` are refused: extend its paths one by one); any other folder is
    :func:`spherepde.runs.runner.resume` (which documents ``overrides`` and ``force``).
    """
    folder = Path(folder)
    if folder.is_dir() and (folder / CONFIG_FILE).exists():
        rf = RunFolder(folder)
        rf.check_layout()
        summary = rf.read_summary()
        if "paths" in summary:  # a Monte-Carlo folder
            if overrides:
                raise RunFolderError(f"{folder} is a Monte-Carlo folder; extend its path-NNN runs one by one (spherepde resume PATH --set solver.T=...)")
            return _resume_monte_carlo(folder, summary, progress=progress, force=force)
    return resume_run(folder, progress=progress, overrides=overrides, force=force)
