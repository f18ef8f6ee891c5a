"""Planning a sweep: reading and checking a sweep file, one resolved configuration per run.

See :mod:`spherepde.runs.sweep` for the sweep file format.
"""

from __future__ import annotations

import difflib
import hashlib
import itertools
import json
import math
import re
from dataclasses import dataclass, fields
from importlib import resources
from pathlib import Path

from spherepde.model.columns import COLUMNS, HEADLINE_COLUMNS, solver_columns, writers
from spherepde.runs.config import Config, ConfigError, config_from_dict, load_config, read_toml_file

__all__ = ["SUMMARY_COLUMNS", "INSTALL_HINT", "STATE_FILE", "RESULTS_FILE", "LOCK_FILE", "STATE_FORMAT", "MAX_RUNS", "check_out", "SweepError", "SweepChangedError", "DaskUnavailableError", "SweepRun", "Sweep", "example_sweep_path", "load_sweep", "sweep_hash"]


#: Diagnostics summarised in ``results.csv`` (final value and time average of each).
SUMMARY_COLUMNS = HEADLINE_COLUMNS


#: The valid ``[analysis] y``: every registered diagnostics column but the record time and step counter.
_ANALYSIS_TARGETS = tuple(c for c in COLUMNS if c not in ("t", "step"))


INSTALL_HINT = 'pip install -e ".[distributed]" in a clone (from PyPI: pip install "spherepde[distributed]")'


STATE_FILE = "sweep_state.json"


RESULTS_FILE = "results.csv"


LOCK_FILE = "sweep.lock"


STATE_FORMAT = 1


_TOP_KEYS = ("base", "base_example", "description", "out", "t_min", "set", "grid", "list", "analysis")


_ANALYSIS_KEYS = ("x", "y", "t_min", "bootstrap", "bootstrap_seed")


_FILE_KEYS = ("weights.init_file", "weights.path_file", "initial.file", "initial.run", "mesh.file")


_RESERVED_KEYS = ("run.name", "run.out")  # the sweep names the run folders


#: Most runs one sweep plans (each is a validated configuration and a run folder).
MAX_RUNS = 10_000


#: Memory of one planned run (its configuration, row and hash input; measured ~19 KB).
RUN_PLAN_BYTES = 32 * 2**10


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
    files = resources.files("spherepde.runs.configs")
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
    if path.is_dir():
        raise SweepError(f"base: {path} is a directory; give the path of a run configuration (TOML)")
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
    if not isinstance(y, str) or y not in _ANALYSIS_TARGETS:
        raise SweepError(f"{where} y: {y!r} is not a diagnostics column" + _suggest(str(y), _ANALYSIS_TARGETS))
    out = {"x": x, "y": y, "bootstrap": 1000, "bootstrap_seed": 0}
    for k, lo in (("bootstrap", 0), ("bootstrap_seed", 0)):
        if k in table:
            v = table[k]
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise SweepError(f"{where} {k}: expected an integer >= {lo}, got {v!r}")
            out[k] = v
    return out


def _not_written(y: str, cfg: Config) -> str:
    """Why the runs of ``cfg`` have no column ``y`` (one line, with what would write it)."""
    if cfg.run.solver in writers(y) and y in set(solver_columns(cfg.run.solver, cfg.output.distances, noise=True)) - set(solver_columns(cfg.run.solver, cfg.output.distances)):
        return f"[analysis] y: {y!r} is written only by runs whose tokens carry noise; it needs model.noise > 0"
    if cfg.run.solver == "both" and y in COLUMNS and "both" in writers(y):
        how = "run.solver = 'both' with output.distances = 'all'" if y == "w1_exact" else "run.solver = 'both' with output.distances = 'cheap' or 'all'"
        return f"[analysis] y: {y!r} is not written with output.distances = {cfg.output.distances!r}; it needs {how}"
    return f"[analysis] y: {y!r} is not written by run.solver = {cfg.run.solver!r}; it is written by run.solver = " + " or ".join(repr(s) for s in writers(y))


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
        data = read_toml_file(path, "sweep file", SweepError)
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
        _check_size(zipped, grid)
        combos_list = list(zip(*zipped.values()))
        if len({json.dumps(c, sort_keys=True, default=str) for c in combos_list}) < len(combos_list):
            raise SweepError("[list]: two entries of the zipped lists are identical")
    if not grid and not zipped:
        raise SweepError("nothing to vary: give at least one axis in [grid] (cartesian product) or [list] (zipped)")

    _check_size(zipped, grid)
    _check_array_files(fixed, grid, zipped, base_dir)
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
    # [set] is validated together with each combination: a [set] value may only be valid
    # with a grid value (initial.kind = "file" with [grid] "initial.file"); one that is
    # wrong whatever the combination is reported as a [set] problem
    try:
        set_problem = None
        base_cfg.with_overrides(fixed_resolved)
    except ConfigError as exc:
        set_problem = str(exc)
    for i, params in enumerate(combos):
        overrides = {k: _resolve_file(k, v, base_dir) for k, v in params.items()}
        label = ", ".join(f"{k}={v!r}" for k, v in params.items())
        try:
            cfg = base_cfg.with_overrides({**fixed_resolved, **overrides})
        except ConfigError as exc:
            if set_problem is not None and str(exc) == set_problem:
                raise SweepError(f"[set]: {exc}") from None
            raise SweepError(f"run {i} ({label}): {exc}") from None
        if t_min >= cfg.solver.T:
            raise SweepError(f"t_min = {t_min:g} must be below the final time solver.T = {cfg.solver.T:g} (run {i}: {label})")
        if analysis is not None and analysis["y"] not in solver_columns(cfg.run.solver, cfg.output.distances, noise=cfg.model.noise > 0):
            raise SweepError(_not_written(analysis["y"], cfg) + f" (run {i}: {label})")
        runs.append(SweepRun(i, _run_name(i, width, params), params, cfg))
    sw = Sweep(source, base_name, fixed, axes, runs, analysis, t_min, out, description)
    sw.hash = sweep_hash(sw)
    return sw


def _count(n: int) -> str:
    return f"{n:,}" if n < 10**15 else f"{float(n):.3g}"


def _check_size(zipped: dict, grid: dict) -> None:
    """Refuse, before any combination is built, a sweep with more runs than :data:`MAX_RUNS`
    or than the memory available can plan (``--dry-run`` too)."""
    n_list = len(next(iter(zipped.values()))) if zipped else 1
    n = n_list * math.prod(len(v) for v in grid.values())
    need = n * RUN_PLAN_BYTES
    from spherepde._base import available_memory, format_bytes

    limit, source = available_memory()
    if n <= MAX_RUNS and need <= limit:
        return
    parts = ([f"[list]: {_count(n_list)} entries"] if zipped else []) + [f"[grid] {k}: {_count(len(v))} values" for k, v in grid.items()]
    why = f"one sweep runs at most {_count(MAX_RUNS)}" if n > MAX_RUNS else f"planning them needs about {format_bytes(need)}, but {format_bytes(limit)} of memory is {source}"
    raise SweepError(f"the sweep has {_count(n)} runs ({' x '.join(parts)}); {why} -- split it into smaller sweeps or give fewer values")


def _check_array_files(fixed: dict, grid: dict, zipped: dict, base_dir: Path) -> None:
    """The .npy/.npz files a sweep names (weights.path_file, initial.file, ...) are looked at
    once, before the sweep starts, with the safe loader's header checks: an object array (a
    pickle) or a header claiming more data than the file holds refuses the sweep instead of
    failing every run. (A file that is merely unreadable is a failure of the runs that use it.)"""
    seen = set()
    for table, d in (("set", fixed), ("grid", grid), ("list", zipped)):
        for key, values in d.items():
            if key not in _FILE_KEYS or key == "initial.run":
                continue
            for v in values if table != "set" else [values]:
                if not isinstance(v, str) or not v:
                    continue
                path = Path(_resolve_file(key, v, base_dir))
                if path in seen or path.suffix.lower() not in (".npy", ".npz") or not path.is_file():
                    continue
                seen.add(path)
                try:
                    _check_headers(path)
                except ValueError as exc:
                    raise SweepError(f"[{table}] {key}: {' '.join(str(exc).split())}; nothing was run") from None


def _check_headers(path: Path) -> None:
    """ValueError for an object array or a forged size in the .npy file or .npz archive ``path``
    (a file whose headers cannot be read is left to the runs that read it)."""
    from spherepde._base import check_array_file

    check_array_file(path, tolerant=True)


def check_out(folder: Path) -> None:
    """The sweep folder must be a folder this process can create or write into, and not lie in
    a run folder; SweepError (one line, nothing written) otherwise."""
    import os

    from spherepde.runs.runfolder import run_folder_above

    try:
        inside = run_folder_above(folder)
        if inside is not None:
            raise SweepError(f"--out {folder} lies inside the run folder {inside}; only 'spherepde run' and 'resume' write into a run folder -- choose another --out")
        if folder.is_dir():
            if not os.access(folder, os.W_OK | os.X_OK):
                raise SweepError(f"cannot write into the sweep folder {folder}: permission denied; choose another --out")
            return
        if folder.exists() or folder.is_symlink():
            raise SweepError(f"cannot use {folder} as a sweep folder: it is a file, not a folder; choose another --out")
        p = folder.parent
        while not (p.exists() or p.is_symlink()) and p != p.parent:
            p = p.parent
        if not p.is_dir():
            raise SweepError(f"cannot create the sweep folder {folder}: {p} is a file, not a folder; choose another --out")
        if not os.access(p, os.W_OK | os.X_OK):
            raise SweepError(f"cannot create the sweep folder {folder}: {p} is not writable; choose another --out")
    except OSError as exc:
        raise SweepError(f"cannot use {folder} as a sweep folder: {exc.strerror or exc}; choose another --out") from None


def sweep_hash(sw: Sweep) -> str:
    """SHA-256 of the runs (folder names and fully resolved configurations). The analysis
    settings and t_min are not part of it: they only change how results are summarised."""
    h = hashlib.sha256()
    payload = [[r.name, r.config.to_dict()] for r in sw.runs]
    h.update(json.dumps(payload, sort_keys=True, default=str).encode())
    return h.hexdigest()

