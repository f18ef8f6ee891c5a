"""Executing a sweep: one task per run on Dask (a LocalCluster or an existing scheduler)
or serially in this process, with a folder lock, progress and resume.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from spherepde.runs.config import Config
from spherepde.runs.files import FolderLock
from spherepde.runs.progress import ProgressBar
from spherepde.runs.sweep.analysis import analyse
from spherepde.runs.sweep.plan import INSTALL_HINT, LOCK_FILE, RESULTS_FILE, SUMMARY_COLUMNS, DaskUnavailableError, Sweep, SweepError, SweepRun, load_sweep
from spherepde.runs.sweep.state import _config_matches, _folder_state, _prepare_folder, _State, summarise_run

log = logging.getLogger(__name__)

__all__ = ["execute_run", "SweepResult", "run_sweep"]


def _fresh_run(cfg: Config, folder: Path):
    from spherepde.runs import montecarlo, runner

    if cfg.montecarlo.paths > 1:
        return montecarlo.monte_carlo(cfg, out=folder, force=True, progress=False)
    return runner.run(cfg, out=folder, force=True, progress=False)


def execute_run(task: dict) -> dict:
    """Run (or skip, or resume) one combination; never raises for a failing run.

    ``task``: index, folder, config, t_min, columns, numba_threads. Returns the row of
    ``results.csv`` plus ``action`` (run/resumed/skipped), ``traceback``, host and pid.
    This is the function each Dask task executes; it decides from the folder itself, so
    a task retried on another worker (after a worker died) does the right thing.
    """
    t0 = time.monotonic()
    index, folder, cfg = task["index"], Path(task["folder"]), task["config"]
    if task.get("numba_threads"):
        try:
            import numba

            numba.set_num_threads(max(1, min(int(task["numba_threads"]), numba.config.NUMBA_NUM_THREADS)))
        except Exception:  # pragma: no cover - numba is a dependency
            pass
    out = {"index": index, "action": "run", "error": "", "traceback": "", "host": socket.gethostname(), "pid": os.getpid()}
    try:
        state = _folder_state(folder)
        if state == "completed" and _config_matches(folder, cfg):
            out["action"] = "skipped"
        elif state == "resumable" and _config_matches(folder, cfg):
            from spherepde.runs import montecarlo

            out["action"] = "resumed"
            try:
                montecarlo.resume(folder, progress=False)
            except (FileNotFoundError, ValueError, KeyError) as exc:  # no usable checkpoint: start again
                log.warning("run %d: cannot resume %s (%s); running it again from the start", index, folder, exc)
                out["action"] = "run"
                _fresh_run(cfg, folder)
        else:
            _fresh_run(cfg, folder)
        out.update(summarise_run(folder, task.get("t_min", 0.0), task.get("columns", SUMMARY_COLUMNS)))
    except Exception as exc:
        out.update(status="failed", error=_one_line(exc), traceback=traceback.format_exc(), wall_time_s=None)
    if out.get("wall_time_s") is None:
        out["wall_time_s"] = time.monotonic() - t0
    return out


def _one_line(exc: BaseException) -> str:
    msg = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__


def _warm_numba(runs: list[SweepRun]) -> None:
    """Compile (or load from the cache) the kernels each kind of run needs, once, in this
    process, before the workers start: they then load the cached machine code instead of
    all compiling at the same time."""
    from spherepde.runs.runner import build_solver, build_weight_path

    seen = set()
    for r in runs:
        cfg = r.config
        key = (cfg.run.solver, cfg.integrator, cfg.model.heads, cfg.model.d, cfg.solver.order, cfg.solver.velocity)
        if key in seen:
            continue
        seen.add(key)
        try:
            step = cfg.solver.dt or cfg.weights.dt
            small = {"solver.T": step, "output.record_dt": step, "output.snapshot_dt": step, "montecarlo.paths": 1, "initial.n": min(cfg.initial.n, 8)}
            if not cfg.mesh.file:
                small["mesh.level"] = min(cfg.mesh.level, 2)
            tiny = cfg.with_overrides(small)
            solver = build_solver(tiny, build_weight_path(tiny))
            solver.advance(tiny.solver.T)
            solver.record()
        except Exception as exc:  # the real run will report any problem
            log.debug("numba warm-up for %s skipped: %s", key, exc)


def _estimated_cost(cfg: Config) -> float:
    """Relative cost of a run (for submitting the long runs first)."""
    n = cfg.initial.n if cfg.run.solver == "particles" else 20 * cfg.mesh.level**2
    steps = cfg.solver.T / (cfg.solver.dt or cfg.weights.dt)
    return float(cfg.model.H) * n * n * steps * cfg.montecarlo.paths


# ===================================================================== the driver
@dataclass
class SweepResult:
    """The outcome of :func:`run_sweep`.

    folder : the sweep folder OUT; ``results_csv`` (alias ``path``) is ``OUT/results.csv``.
    table : one dict per run (the rows of results.csv, index order).
    status : 'completed' (every run completed), 'failed' (some failed) or 'interrupted'.
    counts : what this call did: run, resumed, skipped (already complete), failed.
    analysis : the contents of analysis.json (None without an [analysis] table).
    """

    folder: Path
    table: list[dict]
    status: str
    counts: dict = field(default_factory=dict)
    analysis: dict | None = None
    wall_time_s: float = 0.0

    @property
    def results_csv(self) -> Path:
        return self.folder / RESULTS_FILE

    @property
    def path(self) -> Path:
        return self.results_csv

    @property
    def failed(self) -> list[dict]:
        return [r for r in self.table if r.get("status") == "failed"]

    def __repr__(self) -> str:
        return f"SweepResult(folder={str(self.folder)!r}, status={self.status!r}, runs={len(self.table)}, counts={self.counts})"


def _import_distributed(option: str):
    try:
        import distributed
    except ImportError:
        raise DaskUnavailableError(
            f"{option} needs Dask, which is not installed: {INSTALL_HINT} -- or run the sweep in this process with --serial (serial=True)"
        ) from None
    return distributed


class _Bar:
    """Runs done / running / failed on the shared :class:`~spherepde.runs.progress.ProgressBar`."""

    def __init__(self, total: int, done: int, enabled: bool):
        self.failed = 0
        self.running = 0
        self.bar = ProgressBar(total, done, enabled=enabled, unit="run", desc="sweep",
                               bar_format="{desc}: {n}/{total} runs done |{bar}| [{elapsed}<{remaining}{postfix}]")
        self._post()

    def _post(self):
        self.bar.postfix(f"running {self.running}, failed {self.failed}")

    def set_running(self, n: int):
        self.running = n
        self._post()

    def done(self, failed: bool):
        self.failed += int(failed)
        self.bar.advance(1)
        self._post()

    def close(self):
        self.bar.close()


def run_sweep(
    sweep,
    out: str | Path | None = None,
    *,
    workers: int | None = None,
    scheduler: str | None = None,
    serial: bool = False,
    progress: bool | None = None,
    force: bool = False,
    retry_failed: bool = True,
) -> SweepResult:
    """Run every combination of a sweep and gather the results.

    Parameters
    ----------
    sweep : a sweep file (path) or the parsed dict (see the module docstring).
    out : the sweep folder (default: the sweep's ``out`` key, else ``sweeps/<file stem>``).
    workers : run on a local Dask cluster of this many single-threaded worker processes
        (default when neither ``scheduler`` nor ``serial`` is given: one per CPU core).
    scheduler : address of a running Dask scheduler, e.g. ``"tcp://head:8786"``.
    serial : run in this process, one run after another, without Dask.
    progress : a progress bar on stderr (default: when stderr is a terminal).
    force : discard a different (or any previous) sweep's runs in ``out`` and start again.
    retry_failed : run again the runs that failed last time (default); False keeps them failed.

    Raises :class:`SweepError` (bad sweep file or configuration, a different sweep in
    ``out``, Dask missing or unreachable) before any run starts. A run that fails is
    reported in the table (status 'failed', error) and does not stop the others.
    """
    t_start = time.monotonic()
    if sum([workers is not None, scheduler is not None, bool(serial)]) > 1:
        raise SweepError("choose one of workers=N (a local Dask cluster), scheduler=ADDRESS or serial=True")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise SweepError(f"workers: expected a positive number of worker processes, got {workers!r}")
    sw = load_sweep(sweep)
    client = None
    if not serial and workers is None and scheduler is None:
        try:  # the default path without Dask (a plain 'pip install -e .'): one run after another, with a note
            import distributed  # noqa: F401
        except ImportError:
            serial = True
            log.warning("Dask is not installed: running the %d runs one after another in this process; for parallel runs: %s", len(sw.runs), INSTALL_HINT)
    if not serial:
        distributed = _import_distributed("--scheduler" if scheduler is not None else "--workers" if workers is not None else "running a sweep on Dask")
        if scheduler is not None:  # connect before writing anything
            try:
                client = distributed.Client(scheduler, timeout="20s")
            except (OSError, TimeoutError, ValueError, TypeError) as exc:  # ValueError: an address Dask cannot parse
                raise SweepError(f"cannot reach the Dask scheduler at {scheduler}: {_one_line(exc)}") from None
    if out is None:
        stem = Path(sw.source).stem if sw.source != "<dict>" else "sweep"
        out = sw.out or str(Path("sweeps") / stem)
    folder = Path(out).resolve()
    from spherepde.runs.sweep.plan import check_out

    try:
        check_out(folder)  # a file, an unwritable folder or a run folder: one line, nothing written
        folder.mkdir(parents=True, exist_ok=True)
        lock = FolderLock(folder, LOCK_FILE, error=SweepError, what="sweep")
        lock.acquire()
        try:
            old = _prepare_folder(folder, sw, force)
            return _run_locked(sw, folder, old, workers=workers, client=client, serial=serial, progress=progress, retry_failed=retry_failed, t_start=t_start)
        finally:
            lock.release()
    finally:
        if client is not None:
            client.close()


def _run_locked(sw: Sweep, folder: Path, old, *, workers, client, serial, progress, retry_failed, t_start) -> SweepResult:
    columns = list(SUMMARY_COLUMNS)
    if sw.analysis and sw.analysis["y"] not in columns:
        columns.append(sw.analysis["y"])
    (folder / "runs").mkdir(exist_ok=True)
    state = _State(folder, sw, columns)
    if old is not None:
        state.adopt(old)
    old_status = {e.get("index"): e.get("status") for e in (old or {}).get("runs", [])}
    counts = {"run": 0, "resumed": 0, "skipped": 0, "failed": 0}

    # completed runs are summarised here; failed ones are kept unless retried; the rest are tasks
    todo = []
    for r in sw.runs:
        rf = folder / "runs" / r.name
        fs = _folder_state(rf)
        if fs == "completed" and _config_matches(rf, r.config):
            try:
                res = summarise_run(rf, sw.t_min, columns)
            except (OSError, ValueError, KeyError) as exc:
                log.warning("run %d: cannot read %s (%s); running it again", r.index, rf, exc)
            else:
                state.update({"index": r.index, "action": "skipped", "error": "", **res})
                counts["skipped"] += 1
                continue
        if not retry_failed and old_status.get(r.index) == "failed" and fs != "resumable":
            continue
        state.mark(r.index, "pending")
        todo.append({"index": r.index, "folder": str(rf), "config": r.config, "t_min": sw.t_min, "columns": columns})
    state.write()
    n_done = len(sw.runs) - len(todo)
    if progress is None:
        progress = sys.stderr.isatty()
    bar = _Bar(len(sw.runs), n_done, bool(progress))
    interrupted = False

    def finish(result: dict) -> None:
        nonlocal interrupted
        state.update(result)
        st = result.get("status")
        if st == "failed":
            counts["failed"] += 1
            log.info("run %d failed: %s", result["index"], result.get("error"))
        elif st == "interrupted":
            interrupted = True
        counts[result.get("action", "run")] = counts.get(result.get("action", "run"), 0) + 1
        state.write()
        bar.done(st == "failed")

    try:
        if todo and serial:
            for task in todo:
                state.mark(task["index"], "running")
                bar.set_running(1)
                finish(execute_run(task))
                if interrupted:
                    break
        elif todo:
            interrupted = _run_dask(todo, sw, state, bar, finish, workers=workers, client=client)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        bar.close()
        for task in todo:
            if state.rows[task["index"]]["status"] in ("pending", "running"):
                state.mark(task["index"], "interrupted" if interrupted else "pending")

    table = state.table()
    analysis = None
    if not interrupted and sw.analysis is not None:
        try:
            analysis = analyse(table, sw.analysis["x"], sw.analysis["y"], out=folder, t_min=sw.t_min, bootstrap=sw.analysis["bootstrap"], seed=sw.analysis["bootstrap_seed"])
        except Exception as exc:  # never lose the results table to a plotting problem
            log.warning("analysis failed: %s", _one_line(exc))
            analysis = {"error": _one_line(exc)}
    statuses = {r["status"] for r in table}
    state.status = "interrupted" if interrupted else ("failed" if "failed" in statuses else "completed")
    state.write()
    return SweepResult(folder, table, state.status, counts, analysis, time.monotonic() - t_start)


def _run_dask(todo: list[dict], sw: Sweep, state: _State, bar: _Bar, finish, *, workers, client) -> bool:
    """Submit one task per run (to ``client``, else to a new local cluster) and gather them
    as they finish; returns True if interrupted."""
    import distributed

    cluster = None
    own_client = client is None
    warm = threading.Thread(target=_warm_numba, args=([sw.runs[t["index"]] for t in todo],), daemon=True)
    warm.start()  # overlaps with the cluster start-up
    numba_threads = None  # an external cluster: the workers' own settings
    futures: dict = {}
    try:
        if own_client:
            n = workers or _cpu_count()
            cluster = distributed.LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=logging.ERROR)
            client = distributed.Client(cluster)
            numba_threads = max(1, _cpu_count() // n)
    except BaseException:
        warm.join()
        raise
    try:
        warm.join()
        slots = max(1, sum(client.nthreads().values()))
        order = sorted(todo, key=lambda t: -_estimated_cost(t["config"]))  # longest first: better packing
        for prio, task in enumerate(order):
            task = dict(task, numba_threads=numba_threads)
            fut = client.submit(execute_run, task, pure=False, priority=len(order) - prio, key=f"spherepde-run-{task['index']}-{os.urandom(4).hex()}")
            futures[fut] = task["index"]
            state.mark(task["index"], "pending")
        remaining = len(futures)
        bar.set_running(min(remaining, slots))
        for fut in distributed.as_completed(futures):
            idx = futures[fut]
            try:
                result = fut.result()
            except Exception as exc:  # the task itself never raises: the worker died, or the task was lost
                result = {"index": idx, "status": "failed", "action": "run", "error": _one_line(exc), "traceback": traceback.format_exc()}
            remaining -= 1
            bar.running = min(remaining, slots)
            finish(result)
        return False
    except KeyboardInterrupt:
        log.warning("interrupted: stopping the workers; run the same sweep again to continue")
        try:
            client.cancel(list(futures))
        except Exception:  # pragma: no cover - the cluster may be going down already
            pass
        return True
    finally:
        if own_client:
            try:
                client.close()
            finally:
                if cluster is not None:
                    cluster.close()


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1

