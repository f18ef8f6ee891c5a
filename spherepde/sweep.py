"""Parameter sweeps: many runs of one base configuration, on Dask or in this process.

A *sweep file* (TOML) names a base run configuration, fixed overrides and the axes to
vary::

    base_example = "paper-ou-particles"   # or: base = "my-run.toml" (relative to this file)
    [set]                                 # fixed overrides of the base configuration
    "solver.T" = 20.0
    [grid]                                # cartesian product of the axes
    "model.H" = [1, 10, 100]
    "weights.seed" = [0, 1, 2, 3, 4]
    [list]                                # zipped axes (equal lengths; optional)
    [analysis]                            # optional: y (time-averaged) against x, log-log
    x = "model.H"
    y = "G2"
    t_min = 2.5

Top-level keys: ``base`` (a config file, or an inline ``[base]`` table) or
``base_example`` (a shipped example), ``description``, ``out`` (default output folder,
relative to the working folder), ``t_min`` (start of the time averages in
``results.csv``; may be given in ``[analysis]`` instead), and the tables ``set``,
``grid``, ``list``, ``analysis``. Keys of ``set``/``grid``/``list`` are configuration
keys ``section.key`` (quoted, or as TOML dotted keys); relative file paths in them are
resolved against the sweep file's folder. ``[list]`` axes are zipped into one axis that
varies slowest; ``[grid]`` axes vary in the order given (the last fastest).

Every combination becomes one run folder ``OUT/runs/<index>-<key=value...>`` (the same
layout as ``spherepde run``); every combination's configuration is validated before
anything starts. Results are gathered into ``OUT/results.csv`` (one row per run: the
varied parameters, status, wall time, error, final values and time averages over
t >= t_min of the summary diagnostics), the state of the sweep into
``OUT/sweep_state.json`` (written atomically after every run) and, with
``[analysis]``, ``OUT/analysis.{png,pdf,json}``.

Running the same sweep again into the same OUT skips completed runs, resumes runs that
have a checkpoint and reruns failed ones; a *changed* sweep (different resolved run
configurations) is refused unless ``force=True``, which discards the old runs.

Execution: one Dask task per run on a ``distributed.LocalCluster`` (``workers``
processes, one thread each), on an existing scheduler (``scheduler="tcp://host:8786"``;
run folders must then be on a file system shared by the workers), or ``serial=True``
in this process without Dask.
"""

from __future__ import annotations

import csv
import difflib
import hashlib
import itertools
import json
import logging
import math
import os
import re
import socket
import sys
import threading
import time
import tomllib
import traceback
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path

import numpy as np

from spherepde import __version__
from spherepde.config import Config, ConfigError, config_from_dict, load_config

__all__ = [
    "run_sweep",
    "load_sweep",
    "analyse",
    "Sweep",
    "SweepRun",
    "SweepResult",
    "SweepError",
    "SweepChangedError",
    "DaskUnavailableError",
    "SUMMARY_COLUMNS",
    "INSTALL_HINT",
]

log = logging.getLogger(__name__)

#: Diagnostics summarised in ``results.csv`` (final value and time average of each).
SUMMARY_COLUMNS = ("energy", "G2", "edi_paper", "edi_exact", "mean_resultant")
#: Every diagnostics column a run may write (``[analysis] y`` must be one of them).
KNOWN_COLUMNS = (
    "t", "step", "energy", "dEdt_partial", "martingale", "transport", "G2", "int_dEdt", "int_transport", "int_G2",
    "edi_paper", "edi_exact", "mean_resultant", "speed_rms", "n_clusters", "mass", "rho_min", "rho_max", "dt_last",
)
INSTALL_HINT = 'pip install "spherepde[distributed]"'
STATE_FILE = "sweep_state.json"
RESULTS_FILE = "results.csv"
LOCK_FILE = "sweep.lock"
STATE_FORMAT = 1

_TOP_KEYS = ("base", "base_example", "description", "out", "t_min", "set", "grid", "list", "analysis")
_ANALYSIS_KEYS = ("x", "y", "t_min", "bootstrap", "bootstrap_seed")
_FILE_KEYS = ("weights.init_file", "weights.path_file", "initial.file", "mesh.file")
_RESERVED_KEYS = ("run.name", "run.out")  # the sweep names the run folders


class SweepError(ConfigError):
    """A problem with a sweep file, its runs' configurations or the sweep folder (one line)."""


class SweepChangedError(SweepError):
    """The output folder holds a different sweep (pass force=True / --force to start over)."""


class DaskUnavailableError(SweepError):
    """Dask/distributed is not installed (install the extra, or run serially)."""


# ======================================================================== the sweep
@dataclass(frozen=True)
class SweepRun:
    """One combination: its index, folder name, varied values and validated configuration."""

    index: int
    name: str
    params: dict  # varied key -> value as written in the sweep file
    config: Config


@dataclass
class Sweep:
    """A validated sweep: every run's configuration, the axes and the analysis settings."""

    source: str
    base: str
    fixed: dict
    axes: dict  # key -> list of values (the zipped [list] axes first, then [grid])
    runs: list[SweepRun]
    analysis: dict | None
    t_min: float
    out: str | None
    description: str = ""
    hash: str = ""

    @property
    def keys(self) -> list[str]:
        return list(self.axes)

    def describe(self) -> dict:
        """A JSON-able description (stored in ``sweep_state.json``)."""
        return {
            "source": self.source, "base": self.base, "description": self.description, "set": self.fixed, "axes": self.axes,
            "analysis": self.analysis, "t_min": self.t_min, "runs": len(self.runs),
        }


def _suggest(name: str, options) -> str:
    close = difflib.get_close_matches(name, list(options), n=1, cutoff=0.5)
    return f" (did you mean '{close[0]}'?)" if close else f" (valid: {', '.join(options)})"


def _config_keys() -> list[str]:
    cfg = Config()
    return [f"{s.name}.{f.name}" for s in fields(cfg) for f in fields(getattr(cfg, s.name))]


def _flatten(table: dict, where: str) -> dict:
    """``{"solver.T": 2}`` and ``{"solver": {"T": 2}}`` (a TOML dotted key) both give ``solver.T``."""
    out = {}
    for key, value in table.items():
        if isinstance(value, dict):
            for sub, v in value.items():
                if isinstance(v, dict):
                    raise SweepError(f"{where}: '{key}.{sub}' is not a configuration key; keys are section.key, e.g. \"model.H\"")
                out[f"{key}.{sub}"] = v
        else:
            out[key] = value
    return out


def _check_key(key: str, where: str) -> None:
    valid = _config_keys()
    if key not in valid:
        close = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
        hint = f" (did you mean '{close[0]}'?)" if close else " (see 'spherepde config --show' for every key)"
        if key.count(".") != 1:
            raise SweepError(f"{where}: {key!r} is not a configuration key; write section.key, e.g. \"model.H\"{hint}")
        raise SweepError(f"{where}: unknown configuration key {key!r}{hint}")
    if key in _RESERVED_KEYS:
        raise SweepError(f"{where}: {key} cannot be set in a sweep; run folders are OUT/runs/<index>-<key=value...>")


def _example_names() -> dict[str, Path]:
    files = resources.files("spherepde.examples")
    return {p.name[:-5]: Path(str(p)) for p in files.iterdir() if p.name.endswith(".toml")}


def _shipped(kind: str) -> dict[str, Path]:
    """Shipped run-config examples (kind 'config') or sweep files (kind 'sweep')."""
    ex = _example_names()
    is_sweep = {n: n.startswith("sweep-") for n in ex}
    return {n: p for n, p in ex.items() if is_sweep[n] == (kind == "sweep")}


def example_sweep_path(name: str) -> Path:
    """The path of a shipped sweep file, e.g. ``sweep-paper-G2-vs-H``."""
    ex = _shipped("sweep")
    if name not in ex:
        raise SweepError(f"unknown sweep example {name!r}; available: {', '.join(sorted(ex)) or 'none'}")
    return ex[name]


def _fmt_value(key: str, value) -> str:
    """A value as it appears in a run folder name (file paths: their stem)."""
    if key in _FILE_KEYS and isinstance(value, str):
        value = Path(value).stem or "none"
    if isinstance(value, bool):
        s = str(value).lower()
    elif isinstance(value, float):
        s = repr(value)
    elif isinstance(value, (list, dict)):
        s = json.dumps(value, separators=(",", ":"))
    else:
        s = str(value)
    return re.sub(r"[^A-Za-z0-9._+-]", "_", s)[:40]


def _run_name(index: int, width: int, params: dict) -> str:
    name = f"{index:0{width}d}" + "".join(f"-{k}={_fmt_value(k, v)}" for k, v in params.items())
    return name[:150]


def _resolve_file(key: str, value, base_dir: Path):
    if key in _FILE_KEYS and isinstance(value, str) and value and not Path(value).is_absolute():
        return str((base_dir / value).resolve())
    return value


def _load_base(data: dict, base_dir: Path) -> tuple[Config, str]:
    has_base, has_example = "base" in data, "base_example" in data
    if has_base == has_example:
        raise SweepError("give the base configuration: base = \"run.toml\" (relative to the sweep file) or base_example = \"paper-ou-particles\" (exactly one of them)")
    if has_example:
        name = data["base_example"]
        ex = _shipped("config")
        if not isinstance(name, str) or name not in ex:
            raise SweepError(f"base_example: unknown example {name!r}; available: {', '.join(sorted(ex))}")
        try:
            return load_config(ex[name]), f"example:{name}"
        except ConfigError as exc:  # pragma: no cover - shipped examples are tested
            raise SweepError(f"base_example {name}: {exc}") from None
    base = data["base"]
    if isinstance(base, dict):
        try:
            return config_from_dict(_resolve_inline_paths(base, base_dir), base_dir=base_dir), "inline [base] table"
        except ConfigError as exc:
            raise SweepError(f"[base]: {exc}") from None
    if not isinstance(base, str) or not base:
        raise SweepError(f"base: expected the path of a run configuration (TOML), got {base!r}")
    path = Path(base) if Path(base).is_absolute() else base_dir / base
    if not path.is_file():
        raise SweepError(f"base: configuration file not found: {path}")
    try:
        return load_config(path), str(path.resolve())
    except ConfigError as exc:
        raise SweepError(f"base {path}: {exc}") from None


def _resolve_inline_paths(base: dict, base_dir: Path) -> dict:
    out = {sec: dict(v) if isinstance(v, dict) else v for sec, v in base.items()}
    for key in _FILE_KEYS:
        sec, _, name = key.partition(".")
        if isinstance(out.get(sec), dict) and name in out[sec]:
            out[sec][name] = _resolve_file(key, out[sec][name], base_dir)
    return out


def _axis(key: str, values, table: str) -> list:
    if not isinstance(values, list) or not values:
        raise SweepError(f"[{table}] {key}: expected a non-empty list of values, got {values!r}")
    seen = set()
    for v in values:
        token = json.dumps(v, sort_keys=True, default=str)
        if token in seen:
            raise SweepError(f"[{table}] {key}: value {v!r} appears twice")
        seen.add(token)
    return values


def _check_analysis(table, axes: dict, where: str = "[analysis]") -> dict:
    if not isinstance(table, dict):
        raise SweepError(f"{where} must be a table (x = ..., y = ...)")
    for k in table:
        if k not in _ANALYSIS_KEYS:
            raise SweepError(f"{where}: unknown key {k!r}" + _suggest(k, _ANALYSIS_KEYS))
    for k in ("x", "y"):
        if k not in table:
            raise SweepError(f"{where}: '{k}' is required (x: a varied key such as \"model.H\"; y: a diagnostics column such as \"G2\")")
    x, y = table["x"], table["y"]
    if x not in axes:
        raise SweepError(f"{where} x: {x!r} is not a varied key" + (_suggest(str(x), list(axes)) if axes else ""))
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in axes[x]):
        raise SweepError(f"{where} x: the values of {x} must be numbers for a log-log fit")
    if y not in KNOWN_COLUMNS or y in ("t", "step"):
        raise SweepError(f"{where} y: {y!r} is not a diagnostics column" + _suggest(str(y), [c for c in KNOWN_COLUMNS if c not in ("t", "step")]))
    out = {"x": x, "y": y, "bootstrap": 1000, "bootstrap_seed": 0}
    for k, lo in (("bootstrap", 0), ("bootstrap_seed", 0)):
        if k in table:
            v = table[k]
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise SweepError(f"{where} {k}: expected an integer >= {lo}, got {v!r}")
            out[k] = v
    return out


def _check_t_min(value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise SweepError(f"{where}: expected a number >= 0, got {value!r}")
    return float(value)


def load_sweep(sweep, *, base_dir: str | Path | None = None) -> Sweep:
    """Read and validate a sweep (a TOML file path or an already parsed dict).

    Every combination's configuration is built and validated; any problem raises
    :class:`SweepError` with a one-line message naming the table, key or run. Relative
    paths in a dict are resolved against ``base_dir`` (default: the working folder).
    """
    if isinstance(sweep, (str, Path)):
        path = Path(sweep)
        if not path.is_file():
            raise SweepError(f"sweep file not found: {path}")
        try:
            data = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise SweepError(f"{path}: malformed TOML: {exc}") from None
        source, base_dir, shown = str(path.resolve()), path.resolve().parent, str(path)
    elif isinstance(sweep, dict):
        data, source = sweep, "<dict>"
        base_dir = Path(base_dir).resolve() if base_dir is not None else Path.cwd()
    else:
        raise SweepError(f"a sweep is a TOML file path or a dict, got {type(sweep).__name__}")
    try:
        return _build_sweep(data, source, Path(base_dir))
    except SweepError as exc:
        if source != "<dict>":
            raise type(exc)(f"{shown}: {exc}") from None
        raise


def _build_sweep(data: dict, source: str, base_dir: Path) -> Sweep:
    for k in data:
        if k not in _TOP_KEYS:
            raise SweepError(f"unknown key {k!r}" + _suggest(k, _TOP_KEYS))
    for k in ("set", "grid", "list", "analysis"):
        if k in data and not isinstance(data[k], dict):
            raise SweepError(f"[{k}] must be a table, got {data[k]!r}")
    description = data.get("description", "")
    if not isinstance(description, str):
        raise SweepError(f"description: expected a string, got {description!r}")
    out = data.get("out")
    if out is not None and (not isinstance(out, str) or not out):
        raise SweepError(f"out: expected a folder name, got {out!r}")
    base_cfg, base_name = _load_base(data, base_dir)

    fixed = _flatten(data.get("set", {}), "[set]")
    grid = _flatten(data.get("grid", {}), "[grid]")
    zipped = _flatten(data.get("list", {}), "[list]")
    for table, d in (("set", fixed), ("grid", grid), ("list", zipped)):
        for key in d:
            _check_key(key, f"[{table}] {key}")
    for a, b in (("set", "grid"), ("set", "list"), ("grid", "list")):
        both = set({"set": fixed, "grid": grid, "list": zipped}[a]) & set({"set": fixed, "grid": grid, "list": zipped}[b])
        if both:
            raise SweepError(f"{sorted(both)[0]} is given in both [{a}] and [{b}]; give it in one table")
    for key, values in grid.items():
        _axis(key, values, "grid")
    if zipped:
        lengths = {k: len(v) if isinstance(v, list) else -1 for k, v in zipped.items()}
        for key, values in zipped.items():
            if not isinstance(values, list) or not values:
                raise SweepError(f"[list] {key}: expected a non-empty list of values, got {values!r}")
        if len(set(lengths.values())) > 1:
            raise SweepError("[list]: the lists are zipped and must have equal lengths; got " + ", ".join(f"{k}: {n}" for k, n in lengths.items()))
        combos_list = list(zip(*zipped.values()))
        if len({json.dumps(c, sort_keys=True, default=str) for c in combos_list}) < len(combos_list):
            raise SweepError("[list]: two entries of the zipped lists are identical")
    if not grid and not zipped:
        raise SweepError("nothing to vary: give at least one axis in [grid] (cartesian product) or [list] (zipped)")

    axes = {**zipped, **grid}
    analysis = _check_analysis(data["analysis"], axes) if "analysis" in data else None
    t_min = 0.0
    if "t_min" in data and analysis is not None and "t_min" in data["analysis"]:
        raise SweepError("t_min is given both at the top level and in [analysis]; give it once")
    if "t_min" in data:
        t_min = _check_t_min(data["t_min"], "t_min")
    elif analysis is not None and "t_min" in data["analysis"]:
        t_min = _check_t_min(data["analysis"]["t_min"], "[analysis] t_min")
    if analysis is not None:
        analysis["t_min"] = t_min

    fixed_resolved = {k: _resolve_file(k, v, base_dir) for k, v in fixed.items()}
    zipped_rows = list(zip(*zipped.values())) if zipped else [()]
    grid_rows = list(itertools.product(*grid.values())) if grid else [()]
    combos = [dict(zip(zipped, a)) | dict(zip(grid, b)) for a in zipped_rows for b in grid_rows]
    width = max(3, len(str(len(combos) - 1)))
    runs = []
    try:
        base_fixed = base_cfg.with_overrides(fixed_resolved) if fixed_resolved else base_cfg
    except ConfigError as exc:
        raise SweepError(f"[set]: {exc}") from None
    for i, params in enumerate(combos):
        overrides = {k: _resolve_file(k, v, base_dir) for k, v in params.items()}
        label = ", ".join(f"{k}={v!r}" for k, v in params.items())
        try:
            cfg = base_fixed.with_overrides(overrides)
        except ConfigError as exc:
            raise SweepError(f"run {i} ({label}): {exc}") from None
        if t_min >= cfg.solver.T:
            raise SweepError(f"t_min = {t_min:g} must be below the final time solver.T = {cfg.solver.T:g} (run {i}: {label})")
        runs.append(SweepRun(i, _run_name(i, width, params), params, cfg))
    sw = Sweep(source, base_name, fixed, axes, runs, analysis, t_min, out, description)
    sw.hash = sweep_hash(sw)
    return sw


def sweep_hash(sw: Sweep) -> str:
    """SHA-256 of the runs (folder names and fully resolved configurations). The analysis
    settings and t_min are not part of it: they only change how results are summarised."""
    h = hashlib.sha256()
    payload = [[r.name, r.config.to_dict()] for r in sw.runs]
    h.update(json.dumps(payload, sort_keys=True, default=str).encode())
    return h.hexdigest()


# ================================================================== one run (a task)
def _folder_state(folder: Path) -> str:
    """'completed', 'resumable' (a checkpoint to continue from) or 'fresh'."""
    summary_file = folder / "summary.json"
    if not summary_file.is_file():
        return "fresh"
    try:
        summary = json.loads(summary_file.read_text())
    except (OSError, ValueError):
        return "fresh"
    status = summary.get("status") if isinstance(summary, dict) else None
    if status == "completed" and ((folder / "diagnostics.csv").is_file() or (folder / "diagnostics_mean.csv").is_file()):
        return "completed"
    if status in ("running", "interrupted"):
        if "paths" in summary or (folder / "checkpoint.npz").is_file() or (folder / "checkpoint.prev.npz").is_file():
            return "resumable"
    return "fresh"


def _config_matches(folder: Path, cfg: Config) -> bool:
    try:
        return load_config(folder / "config.toml").to_dict() == cfg.to_dict()
    except (ConfigError, OSError, ValueError):
        return False


def _time_average(t: np.ndarray, y: np.ndarray) -> float:
    if t.size == 0:
        return float("nan")
    if t.size == 1 or t[-1] <= t[0]:
        return float(y[-1])
    return float(np.sum(0.5 * (y[1:] + y[:-1]) * np.diff(t)) / (t[-1] - t[0]))


def _finite(v) -> float | None:
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def summarise_run(folder, t_min: float = 0.0, columns=SUMMARY_COLUMNS) -> dict:
    """Final values and time averages over t >= t_min of ``columns`` of a run folder
    (a Monte-Carlo folder: of its mean over paths), plus status and wall time."""
    from spherepde.runner import read_diagnostics

    folder = Path(folder)
    summary = json.loads((folder / "summary.json").read_text())
    csv_file = folder / "diagnostics.csv"
    if not csv_file.is_file():
        csv_file = folder / "diagnostics_mean.csv"
    diag = read_diagnostics(csv_file)
    t = diag["t"]
    sel = t >= t_min - 1e-9
    row = {"status": summary.get("status", "unknown"), "wall_time_s": _finite(summary.get("wall_time_s")), "t_end": float(t[-1]) if t.size else None}
    for c in columns:
        y = diag.get(c)
        row[f"final_{c}"] = _finite(y[-1]) if y is not None and y.size else None
        row[f"mean_{c}"] = _finite(_time_average(t[sel], y[sel])) if y is not None else None
    return row


def _fresh_run(cfg: Config, folder: Path):
    from spherepde import runner

    if cfg.montecarlo.paths > 1:
        return runner.monte_carlo(cfg, out=folder, force=True, progress=False)
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
            from spherepde import runner

            out["action"] = "resumed"
            try:
                runner.resume(folder, progress=False)
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
    from spherepde.runner import build_solver, build_weight_path

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


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", newline="") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    tmp.replace(path)


def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (float, np.floating)):
        return _finite(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, Path):
        return str(obj)
    return obj


class _Lock:
    """OUT/sweep.lock: refuses a second sweep writing into the same folder at the same time."""

    def __init__(self, folder: Path):
        self.path = folder / LOCK_FILE
        self.held = False

    def acquire(self) -> None:
        me = {"pid": os.getpid(), "host": socket.gethostname()}
        if self.path.is_file():
            try:
                other = json.loads(self.path.read_text())
            except (OSError, ValueError):
                other = {}
            pid = other.get("pid")
            if other.get("host") == me["host"] and isinstance(pid, int) and pid != me["pid"] and _alive(pid):
                raise SweepError(f"another sweep (pid {pid}) is writing into {self.path.parent}; wait for it to finish or stop it (remove {self.path} if it is stale)")
        _atomic_write(self.path, json.dumps(me))
        self.held = True

    def release(self) -> None:
        if self.held:
            self.path.unlink(missing_ok=True)
            self.held = False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _row_template(run: SweepRun, folder: Path, columns) -> dict:
    row = {"index": run.index, "folder": f"runs/{run.name}"}
    row.update(run.params)
    row.update({"status": "pending", "wall_time_s": None, "error": ""})
    for c in columns:
        row[f"final_{c}"] = None
        row[f"mean_{c}"] = None
    return row


class _State:
    """The sweep's own state, OUT/sweep_state.json, rewritten atomically after every run."""

    def __init__(self, folder: Path, sw: Sweep, columns):
        self.folder, self.sw, self.columns = folder, sw, columns
        self.rows = {r.index: _row_template(r, folder, columns) for r in sw.runs}
        self.extra = {r.index: {} for r in sw.runs}
        self.status = "running"
        self.created = time.strftime("%Y-%m-%dT%H:%M:%S")
        self.lock = threading.Lock()

    def adopt(self, old: dict) -> None:
        """Keep the previous records (used for failed runs that are not retried)."""
        for entry in old.get("runs", []):
            i = entry.get("index")
            if i in self.rows and isinstance(entry.get("row"), dict):
                self.rows[i].update({k: v for k, v in entry["row"].items() if k in self.rows[i]})
                self.extra[i] = {k: entry.get(k) for k in ("action", "traceback", "host", "pid", "finished") if k in entry}
        self.created = old.get("created", self.created)

    def update(self, result: dict) -> None:
        with self.lock:
            i = result["index"]
            row = self.rows[i]
            for k in list(row):
                if k not in ("index", "folder") and k not in self.sw.axes:
                    row[k] = result.get(k, "" if k == "error" else None)
            self.extra[i] = {k: result.get(k) for k in ("action", "traceback", "host", "pid")}
            self.extra[i]["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")

    def mark(self, index: int, status: str) -> None:
        with self.lock:
            self.rows[index]["status"] = status

    def table(self) -> list[dict]:
        return [dict(self.rows[i]) for i in sorted(self.rows)]

    def write(self) -> None:
        with self.lock:
            doc = {
                "format": STATE_FORMAT,
                "spherepde": __version__,
                "sweep_hash": self.sw.hash,
                "status": self.status,
                "created": self.created,
                "updated": time.strftime("%Y-%m-%dT%H:%M:%S"),
                "sweep": self.sw.describe(),
                "counts": _status_counts(self.rows.values()),
                "runs": [{"index": i, "folder": self.rows[i]["folder"], "params": self.sw.runs[i].params, "status": self.rows[i]["status"], **self.extra[i], "row": self.rows[i]} for i in sorted(self.rows)],
            }
            text = json.dumps(_jsonable(doc), indent=1)
        _atomic_write(self.folder / STATE_FILE, text)
        self.write_csv()

    def write_csv(self) -> None:
        rows = self.table()
        if not rows:
            return
        header = list(rows[0])
        import io

        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(header)
        for r in rows:
            w.writerow([_csv_cell(r[h]) for h in header])
        _atomic_write(self.folder / RESULTS_FILE, buf.getvalue())


def _csv_cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else ""
    if isinstance(v, (list, dict)):
        return json.dumps(v)
    return str(v)


def _status_counts(rows) -> dict:
    counts: dict = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    return counts


def read_results(path) -> list[dict]:
    """Read ``results.csv`` back (numbers as floats, empty cells as None)."""
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))

    def conv(k, v):
        if v == "":
            return None
        if k in ("folder", "status", "error"):
            return v
        try:
            return int(v) if re.fullmatch(r"-?\d+", v) else float(v)
        except ValueError:
            return v

    return [{k: conv(k, v) for k, v in r.items()} for r in rows]


class _Bar:
    def __init__(self, total: int, done: int, enabled: bool):
        self.bar = None
        self.failed = 0
        self.running = 0
        if enabled:
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=done, unit="run", desc="sweep", file=sys.stderr, dynamic_ncols=True,
                            bar_format="{desc}: {n}/{total} runs done |{bar}| [{elapsed}<{remaining}{postfix}]")
            self._post()

    def _post(self):
        if self.bar is not None:
            self.bar.set_postfix_str(f"running {self.running}, failed {self.failed}", refresh=True)

    def set_running(self, n: int):
        self.running = n
        self._post()

    def done(self, failed: bool):
        self.failed += int(failed)
        if self.bar is not None:
            self.bar.update(1)
        self._post()

    def close(self):
        if self.bar is not None:
            self.bar.close()


def _describe_change(old: dict, sw: Sweep) -> str:
    """What differs between a stored sweep and this one, in a few words."""
    prev = old.get("sweep", {}) if isinstance(old.get("sweep"), dict) else {}
    now = _jsonable(sw.describe())
    if prev.get("axes") != now["axes"]:
        if list(prev.get("axes") or {}) != list(now["axes"]):
            return f"varied keys were {', '.join(prev.get('axes') or {}) or '?'}, now {', '.join(now['axes'])}"
        changed = [k for k in now["axes"] if prev["axes"].get(k) != now["axes"][k]]
        return "; ".join(f"{k} was {prev['axes'][k]}, now {now['axes'][k]}" for k in changed)
    if prev.get("set") != now["set"]:
        keys = sorted(set(prev.get("set") or {}) | set(now["set"]))
        changed = [k for k in keys if (prev.get("set") or {}).get(k) != now["set"].get(k)]
        return "[set] changed: " + ", ".join(f"{k} was {(prev.get('set') or {}).get(k, 'unset')!r}, now {now['set'].get(k, 'unset')!r}" for k in changed)
    if prev.get("base") != now["base"]:
        return f"base was {prev.get('base')}, now {now['base']}"
    return f"the base configuration {now['base']} (or a default) changed since the runs were made"


def _prepare_folder(folder: Path, sw: Sweep, force: bool) -> dict | None:
    """Check OUT against a previous sweep; returns the previous state (None: a new sweep)."""
    state_file = folder / STATE_FILE
    old = None
    if state_file.is_file():
        try:
            old = json.loads(state_file.read_text())
        except (OSError, ValueError):
            old = None
        if not isinstance(old, dict) or "sweep_hash" not in old:
            if not force:
                raise SweepError(f"{state_file} is unreadable; pass --force to discard the folder's runs and start again")
            old = None
    elif not force and folder.is_dir() and not (folder / "runs").is_dir() and any(p.name != LOCK_FILE for p in folder.iterdir()):
        raise SweepError(f"{folder} exists and is not a sweep folder; choose another --out")
    if old is not None and old.get("sweep_hash") != sw.hash and not force:
        raise SweepChangedError(
            f"{folder} holds a different sweep ({_describe_change(old, sw)}); choose another --out, or pass --force to discard its runs and start again"
        )
    if force:
        import shutil

        if (folder / "runs").is_dir():
            log.warning("--force: discarding the previous runs in %s", folder)
        shutil.rmtree(folder / "runs", ignore_errors=True)
        for name in (STATE_FILE, RESULTS_FILE, "analysis.png", "analysis.pdf", "analysis.json"):
            (folder / name).unlink(missing_ok=True)
        old = None
    return old


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
    if not serial:
        distributed = _import_distributed("--scheduler" if scheduler is not None else "--workers" if workers is not None else "running a sweep on Dask")
        if scheduler is not None:  # connect before writing anything
            try:
                client = distributed.Client(scheduler, timeout="20s")
            except (OSError, TimeoutError) as exc:
                raise SweepError(f"cannot reach the Dask scheduler at {scheduler}: {_one_line(exc)}") from None
    if out is None:
        stem = Path(sw.source).stem if sw.source != "<dict>" else "sweep"
        out = sw.out or str(Path("sweeps") / stem)
    folder = Path(out).resolve()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        lock = _Lock(folder)
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


# ==================================================================== the analysis
def _slope(logx: np.ndarray, logy: np.ndarray) -> np.ndarray:
    """Least-squares slope of logy (..., n) against logx (n,)."""
    xc = logx - logx.mean()
    return ((logy - logy.mean(axis=-1, keepdims=True)) * xc).sum(axis=-1) / (xc @ xc)


def analyse(table: list[dict], x: str, y: str, *, out=None, t_min: float | None = None, bootstrap: int = 1000, seed: int = 0, formats=("png", "pdf")) -> dict:
    """The aggregate study: time-averaged ``y`` against ``x`` with a power-law fit.

    ``table`` holds rows with the key ``x`` and the column ``mean_<y>`` (the rows of
    results.csv; only rows with status 'completed' and a finite value are used). The
    values are grouped by x and averaged over the other axes (e.g. seeds); the fit
    y = a x^b (:func:`validation.common.fit_power_law`) is made on the group means. A
    bootstrap over the replicates of each group (``bootstrap`` resamples) gives a 95 %
    interval for b. With ``out``, writes ``analysis.json`` and ``analysis.png/.pdf``
    (log-log: every run, mean +- std per x, the fit).
    """
    from validation.common import fit_power_law

    col = f"mean_{y}"
    groups: dict[float, list[float]] = {}
    excluded = 0
    for r in table:
        v = _finite(r.get(col))
        xv = _finite(r.get(x))
        if r.get("status", "completed") != "completed" or v is None or xv is None:
            excluded += 1
            continue
        groups.setdefault(xv, []).append(v)
    xs = np.array(sorted(groups), float)
    vals = [np.array(groups[v], float) for v in xs]
    means = np.array([g.mean() for g in vals])
    stds = np.array([g.std(ddof=1) if g.size > 1 else 0.0 for g in vals])
    ns = [int(g.size) for g in vals]
    ok = (xs > 0) & (means > 0)
    nan = float("nan")
    fit = {"a": nan, "b": nan, "b_stderr": nan}
    ci = None
    if ok.sum() >= 2:
        fit = fit_power_law(xs[ok], means[ok])
        reps = [g for g, k in zip(vals, ok) if k]
        if bootstrap > 0 and any(g.size > 1 for g in reps):
            rng = np.random.default_rng(seed)
            boot = np.stack([g[rng.integers(0, g.size, size=(bootstrap, g.size))].mean(axis=1) for g in reps], axis=1)
            good = np.all(boot > 0, axis=1)
            if good.any():
                bs = _slope(np.log(xs[ok]), np.log(boot[good]))
                ci = [float(np.percentile(bs, 2.5)), float(np.percentile(bs, 97.5))]
    result = {
        "x": x, "y": y, "column": col, "t_min": t_min,
        "a": fit["a"], "b": fit["b"], "b_stderr": fit["b_stderr"], "b_ci95": ci, "bootstrap": bootstrap, "bootstrap_seed": seed,
        "points": [{"x": float(a), "mean": float(m), "std": float(s), "n": n} for a, m, s, n in zip(xs, means, stds, ns)],
        "runs_used": int(sum(ns)), "runs_excluded": excluded,
    }
    if ok.sum() < 2:
        result["note"] = "fewer than two x values with a positive mean: no power-law fit"
    if out is not None:
        out = Path(out)
        _atomic_write(out / "analysis.json", json.dumps(_jsonable(result), indent=2))
        if xs.size:
            _analysis_figure(result, groups, out, formats)
    return result


def _analysis_figure(res: dict, groups: dict, out: Path, formats) -> list[Path]:
    from matplotlib.figure import Figure

    xs = np.array([p["x"] for p in res["points"]])
    means = np.array([p["mean"] for p in res["points"]])
    stds = np.array([p["std"] for p in res["points"]])
    fig = Figure(figsize=(6.0, 4.4), layout="constrained")
    ax = fig.add_subplot()
    allx = np.concatenate([[k] * len(v) for k, v in groups.items()])
    ally = np.concatenate([v for v in groups.values()])
    ax.scatter(allx, ally, s=12, color="0.6", alpha=0.6, label="runs", zorder=1)
    n_text = "/".join(sorted({str(p["n"]) for p in res["points"]}))
    ax.errorbar(xs, means, yerr=stds, fmt="o", color="C0", capsize=4, label=f"mean ± std (n = {n_text} per point)", zorder=3)
    logx = bool(np.all(xs > 0))
    logy = bool(np.all(ally > 0))
    if math.isfinite(res["b"]):
        xx = np.geomspace(xs[xs > 0].min(), xs.max(), 100)
        label = f"fit a·x^b: b = {res['b']:.3f}"
        if math.isfinite(res["b_stderr"]):
            label += f" ± {res['b_stderr']:.3f}"
        if res["b_ci95"]:
            label += f", 95% CI [{res['b_ci95'][0]:.3f}, {res['b_ci95'][1]:.3f}]"
        ax.plot(xx, res["a"] * xx ** res["b"], "-", color="C3", label=label, zorder=2)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    tm = res.get("t_min")
    ax.set_xlabel(res["x"])
    ax.set_ylabel(f"time average of {res['y']}" + (f" over t ≥ {tm:g}" if tm else ""))
    ax.set_title(f"{res['y']} against {res['x']}")
    ax.legend(fontsize=8)
    written = []
    for fmt in formats:
        p = out / f"analysis.{fmt}"
        fig.savefig(p, dpi=150)
        written.append(p)
    return written
