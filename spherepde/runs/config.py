"""Run configuration: typed, frozen dataclasses loaded from TOML.

One schema for every run (particles or mesh). Every field has a default and a one-line
description (``spherepde config --show`` prints them all as a commented TOML file).
Loading validates everything before any work starts: unknown keys (with the closest
valid name suggested), wrong types, out-of-range values and inconsistent options all
raise :class:`ConfigError` with a one-line message naming the key. No value is ever
evaluated as code.
"""

from __future__ import annotations

import difflib
import math
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

__all__ = ["Config", "ConfigError", "load_config", "default_config", "config_to_toml", "parse_override", "config_from_dict"]


class ConfigError(ValueError):
    """A configuration problem; the message names the key and what to do."""


def _f(default, doc, **checks):
    return field(default=default, metadata={"doc": doc, **checks})


def _fl(default, doc, **checks):
    return field(default_factory=lambda: list(default), metadata={"doc": doc, **checks})


@dataclass(frozen=True)
class RunSection:
    solver: str = _f("mesh", "which solver: 'particles' (tokens), 'mesh' (finite-volume density) or 'both' (mesh + tokens sampled from it, same weight path)", choices=("particles", "mesh", "both"))
    name: str = _f("", "run folder name inside 'out' (empty: <solver>-<process>-H<H>-seed<seed>)")
    out: str = _f("runs", "parent folder for run folders")


@dataclass(frozen=True)
class ModelSection:
    d: int = _f(3, "ambient dimension: tokens live on S^{d-1} (the mesh solver needs d = 3)", min=2)
    H: int = _f(4, "number of heads (velocities are averaged over heads)", min=1)
    heads: str = _f("gradient", "'gradient' (A = D, V = s D, energy defined) or 'general' (A, V evolve separately)", choices=("gradient", "general"))
    sign: int = _f(-1, "s = -1: the paper's energy-descent convention; s = +1: clustering (attention) convention", choices=(-1, 1))


@dataclass(frozen=True)
class WeightsSection:
    process: str = _f("ou", "weight process: 'ou', 'oscillating', 'frozen' or 'file'", choices=("ou", "oscillating", "frozen", "file"))
    mean: float = _f(1.0, "ou: mean matrix M = mean * I")
    kappa: float = _f(1.0, "ou: mean-reversion rate kappa", min=0.0)
    sigma: float = _f(math.sqrt(2.0), "noise level sigma (paper: sigma^2 = 2 for ou); used by 'ou' only", min=0.0)
    phase: str = _f("shift", "oscillating: per-head phase convention 'shift', 'figure' or 'in-phase'", choices=("shift", "figure", "in-phase"))
    scheme: str = _f("euler", "weight time stepping: 'euler' (Euler-Maruyama, the paper) or 'exact' (exact OU / relaxation)", choices=("euler", "exact"))
    init: str = _f("gaussian", "initial matrices: 'gaussian' (G + G^T), 'identity', 'beta' (beta I) or 'file'", choices=("gaussian", "identity", "beta", "file"))
    beta: float = _f(1.0, "beta for init = 'beta'")
    init_file: str = _f("", "init = 'file': .npy/.npz with (H, d, d) or (d, d) matrices")
    path_file: str = _f("", "process = 'file': .npz with D (K+1, H, d, d) on the grid t_k = k dt, or a saved spherepde weight path")
    value_init: str = _f("identity", "general heads: initial value matrices V_h(0): 'gaussian', 'identity' or 'beta'", choices=("gaussian", "identity", "beta"))
    seed: int = _f(0, "seed of the weight noise (and of the initial draw unless init_seed >= 0)", min=0)
    init_seed: int = _f(-1, "seed of the initial matrix draw; -1: derived from 'seed'", min=-1)
    dt: float = _f(0.01, "grid step of the weight path (paper: 5e-3)", gt=0.0)


@dataclass(frozen=True)
class InitialSection:
    kind: str = _f("octahedral", "initial tokens/density: 'octahedral' (paper), 'uniform', 'vmf', 'harmonic' (mesh only: uniform + eps Y_lm), 'file'", choices=("octahedral", "uniform", "vmf", "harmonic", "file"))
    n: int = _f(200, "number of tokens (particle solver)", min=1)
    seed: int = _f(0, "seed of the initial tokens", min=0)
    sigma: float = _f(0.05, "octahedral: per-coordinate Gaussian spread", gt=0.0)
    means: list = _fl([[0.0, 0.0, 1.0]], "vmf: mean directions, a list of d-vectors")
    kappas: list = _fl([20.0], "vmf: concentrations, one per mean")
    weights: list = _fl([], "vmf: mixture weights (empty: equal)")
    l: int = _f(2, "harmonic: degree l", min=0)
    m: int = _f(0, "harmonic: order m (-l <= m <= l)")
    eps: float = _f(0.1, "harmonic: amplitude eps of uniform * (1 + eps Y_lm)")
    file: str = _f("", "kind = 'file': .npy tokens (n, d) or cell densities (n_cells,)")


@dataclass(frozen=True)
class MeshSection:
    level: int = _f(8, "icosphere subdivision n (20 n^2 cells; 8 -> 1280, 16 -> 5120 cells)", min=1)
    file: str = _f("", "read the mesh from this file instead (.npz/.vtp/.vtk/.ply/.obj/.stl)")


@dataclass(frozen=True)
class SolverSection:
    T: float = _f(2.0, "final time", gt=0.0)
    dt: float = _f(0.0, "particles: step (0: the weight grid step); mesh: fixed step (0: adaptive from cfl)", min=0.0)
    integrator: str = _f("", "particles: 'euler' (paper) or 'heun'; mesh: 'euler', 'ssprk2', 'ssprk3' (empty: euler / ssprk3)", choices=("", "euler", "heun", "ssprk2", "ssprk3"))
    order: int = _f(1, "mesh: spatial order, 1 (upwind) or 2 (limited linear reconstruction)", choices=(1, 2))
    velocity: str = _f("potential", "mesh: edge velocity from 'potential' differences (gradient heads) or v at the 'midpoint'", choices=("potential", "midpoint"))
    cfl: float = _f(0.5, "mesh: CFL number in (0, 1]", gt=0.0, max=1.0)
    summation: str = _f("auto", "mesh: attention sums 'direct', 'fast' (spherical harmonics, O(N L^2)) or 'auto' (fast where it pays and meets summation_tol)", choices=("direct", "fast", "auto"))
    summation_tol: float = _f(1e-10, "mesh: accuracy of the fast sums (relative error of Z_h and error of the softmax average)", gt=0.0)


@dataclass(frozen=True)
class OutputSection:
    record_dt: float = _f(0.05, "time between diagnostics rows (a multiple of the weight grid step)", gt=0.0)
    snapshot_dt: float = _f(0.5, "time between snapshots of tokens/density (a multiple of record_dt)", gt=0.0)
    vtk: bool = _f(True, "mesh runs: also write a VTK series (.vtp per snapshot + .pvd index)")
    checkpoint_every: int = _f(200, "write a checkpoint every N records", min=1)
    checkpoint_minutes: float = _f(5.0, "... or after this many minutes of wall time", gt=0.0)


@dataclass(frozen=True)
class MonteCarloSection:
    paths: int = _f(1, "number of weight-noise paths (seeds weights.seed, weights.seed + 1, ...); > 1 writes means and stds", min=1)


@dataclass(frozen=True)
class Config:
    run: RunSection = field(default_factory=RunSection)
    model: ModelSection = field(default_factory=ModelSection)
    weights: WeightsSection = field(default_factory=WeightsSection)
    initial: InitialSection = field(default_factory=InitialSection)
    mesh: MeshSection = field(default_factory=MeshSection)
    solver: SolverSection = field(default_factory=SolverSection)
    output: OutputSection = field(default_factory=OutputSection)
    montecarlo: MonteCarloSection = field(default_factory=MonteCarloSection)

    def to_dict(self) -> dict:
        return {f.name: {g.name: getattr(getattr(self, f.name), g.name) for g in fields(getattr(self, f.name))} for f in fields(self)}

    def with_overrides(self, overrides: dict[str, Any]) -> Config:
        d = self.to_dict()
        for key, value in overrides.items():
            sec, _, name = key.partition(".")
            d.setdefault(sec, {})[name] = value
        return config_from_dict(d)

    @property
    def integrator(self) -> str:
        if self.solver.integrator:
            return self.solver.integrator
        return "euler" if self.run.solver == "particles" else "ssprk3"


SECTIONS = {f.name: f.default_factory for f in fields(Config)}  # type: ignore[misc]


def _suggest(name: str, options) -> str:
    close = difflib.get_close_matches(name, list(options), n=1, cutoff=0.5)
    return f" (did you mean '{close[0]}'?)" if close else f" (valid: {', '.join(sorted(options))})"


def _check_type(key: str, value, default):
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true or false, got {value!r}")
        return value
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return value
    if isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        value = float(value)
        if not math.isfinite(value):
            raise ConfigError(f"{key}: must be finite, got {value!r}")
        return value
    if isinstance(default, str):
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return value
    if isinstance(default, list):
        if not isinstance(value, list):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        return value
    return value


def _check_range(key: str, value, meta):
    if "choices" in meta and value not in meta["choices"]:
        raise ConfigError(f"{key}: {value!r} is not allowed; choose one of {', '.join(repr(c) for c in meta['choices'])}")
    if "min" in meta and value < meta["min"]:
        raise ConfigError(f"{key}: must be >= {meta['min']}, got {value!r}")
    if "gt" in meta and not value > meta["gt"]:
        raise ConfigError(f"{key}: must be > {meta['gt']}, got {value!r}")
    if "max" in meta and value > meta["max"]:
        raise ConfigError(f"{key}: must be <= {meta['max']}, got {value!r}")


def config_from_dict(data: dict, *, base_dir: Path | None = None) -> Config:
    """Build and validate a :class:`Config` from a nested dict (e.g. parsed TOML)."""
    if not isinstance(data, dict):
        raise ConfigError("configuration must be a table of sections")
    sections = {}
    for sec_name, value in data.items():
        if sec_name not in SECTIONS:
            raise ConfigError(f"unknown section [{sec_name}]" + _suggest(sec_name, SECTIONS))
        if not isinstance(value, dict):
            raise ConfigError(f"[{sec_name}] must be a table of keys, got {value!r}")
    for sec_name, factory in SECTIONS.items():
        given = data.get(sec_name, {})
        proto = factory()
        valid = {f.name: f for f in fields(proto)}
        kwargs = {}
        for key, value in given.items():
            full = f"{sec_name}.{key}"
            if key not in valid:
                raise ConfigError(f"unknown key {full}" + _suggest(key, valid))
            value = _check_type(full, value, getattr(proto, key))
            _check_range(full, value, valid[key].metadata)
            kwargs[key] = value
        sections[sec_name] = replace(proto, **kwargs)
    cfg = Config(**sections)
    _check_consistency(cfg, base_dir)
    return _absolute_paths(cfg, base_dir or Path.cwd())


_FILE_KEYS = (("weights", "init_file"), ("weights", "path_file"), ("initial", "file"), ("mesh", "file"))


def _absolute_paths(cfg: Config, base: Path) -> Config:
    """Make every relative file path absolute (against ``base``), so a run folder's config.toml
    stays valid wherever it is loaded from."""
    for sec, key in _FILE_KEYS:
        value = getattr(getattr(cfg, sec), key)
        if value and not Path(value).is_absolute():
            cfg = replace(cfg, **{sec: replace(getattr(cfg, sec), **{key: str((base / value).resolve())})})
    return cfg


def _is_multiple(a: float, b: float) -> bool:
    r = a / b
    return abs(r - round(r)) < 1e-9 * max(1.0, r) and round(r) >= 1


def _check_consistency(cfg: Config, base_dir: Path | None) -> None:
    solver, model, w, ini, out = cfg.run.solver, cfg.model, cfg.weights, cfg.initial, cfg.output
    if solver == "both" and cfg.solver.dt:
        raise ConfigError("solver.dt: with run.solver = 'both' the mesh step is adaptive (dt = 0) and tokens use the weight grid step")
    if solver in ("mesh", "both") and model.d != 3:
        raise ConfigError(f"model.d: the mesh solver works on S^2 (d = 3), got d = {model.d}; use run.solver = 'particles' for other d")
    integ = cfg.integrator
    if solver == "particles" and integ not in ("euler", "heun"):
        raise ConfigError(f"solver.integrator: {integ!r} is a mesh integrator; particles use 'euler' or 'heun'")
    if solver in ("mesh", "both") and integ not in ("euler", "ssprk2", "ssprk3"):
        raise ConfigError(f"solver.integrator: {integ!r} is a particle integrator; the mesh solver uses 'euler', 'ssprk2' or 'ssprk3'")
    if solver in ("mesh", "both") and model.heads == "general" and cfg.solver.velocity == "potential":
        raise ConfigError("solver.velocity: 'potential' needs gradient heads; use velocity = 'midpoint' for model.heads = 'general'")
    if ini.kind == "harmonic" and solver == "particles":
        raise ConfigError("initial.kind: 'harmonic' is a mesh density; particles use 'octahedral', 'uniform', 'vmf' or 'file'")
    if ini.kind == "harmonic" and abs(ini.m) > ini.l:
        raise ConfigError(f"initial.m: need |m| <= l, got m = {ini.m}, l = {ini.l}")
    if ini.kind == "vmf":
        try:
            means = [[float(x) for x in row] for row in ini.means]
            kappas = [float(k) for k in ini.kappas]
            weights = [float(x) for x in ini.weights]
        except (TypeError, ValueError):
            raise ConfigError("initial.means/kappas/weights: must be lists of numbers (means: a list of d-vectors)") from None
        if not means or any(len(m) != model.d for m in means):
            raise ConfigError(f"initial.means: each mean must have d = {model.d} components")
        if len(kappas) not in (1, len(means)):
            raise ConfigError(f"initial.kappas: give one kappa or one per mean ({len(means)})")
        if weights and (len(weights) != len(means) or min(weights) < 0 or sum(weights) <= 0):
            raise ConfigError("initial.weights: one non-negative weight per mean, not all zero")
        if any(k < 0 for k in kappas):
            raise ConfigError("initial.kappas: concentrations must be >= 0")
    if cfg.solver.T < w.dt or not _is_multiple(cfg.solver.T, w.dt):
        raise ConfigError(f"solver.T: T = {cfg.solver.T} must be a whole multiple of weights.dt = {w.dt}")
    if not _is_multiple(out.record_dt, w.dt):
        raise ConfigError(f"output.record_dt: {out.record_dt} must be a whole multiple of weights.dt = {w.dt}")
    if solver == "particles":
        pdt = cfg.solver.dt or w.dt
        if not _is_multiple(pdt, w.dt):
            raise ConfigError(f"solver.dt: the particle step {pdt} must be a whole multiple of weights.dt = {w.dt}")
        if not _is_multiple(out.record_dt, pdt):
            raise ConfigError(f"output.record_dt: {out.record_dt} must be a whole multiple of the particle step {pdt}")
        if not _is_multiple(cfg.solver.T, pdt):
            raise ConfigError(f"solver.T: T = {cfg.solver.T} must be a whole multiple of the particle step {pdt}")
    if not _is_multiple(out.snapshot_dt, out.record_dt):
        raise ConfigError(f"output.snapshot_dt: {out.snapshot_dt} must be a whole multiple of output.record_dt = {out.record_dt}")
    if w.process == "oscillating" and w.phase and model.d < 2:
        raise ConfigError("weights.process: oscillating weights need d >= 2")
    if w.process == "ou" and w.kappa == 0 and w.scheme == "exact":
        raise ConfigError("weights.scheme: the exact OU transition needs kappa > 0")
    base = base_dir or Path.cwd()
    for key, needed, value in (
        ("weights.init_file", w.init == "file", w.init_file),
        ("weights.path_file", w.process == "file", w.path_file),
        ("initial.file", ini.kind == "file", ini.file),
        ("mesh.file", bool(cfg.mesh.file), cfg.mesh.file),
    ):
        if needed:
            if not value:
                raise ConfigError(f"{key}: a file is required here; give its path")
            p = Path(value) if Path(value).is_absolute() else base / value
            if not p.is_file():
                raise ConfigError(f"{key}: file not found: {p}")
    if cfg.montecarlo.paths > 1 and w.process == "file":
        raise ConfigError("montecarlo.paths: Monte-Carlo over noise paths needs a generated weight process, not 'file'")


def _parse_toml_text(text: str, origin: str) -> dict:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{origin}: malformed TOML: {exc}") from None


def load_config(path, overrides: dict | None = None) -> Config:
    """Read and validate a TOML configuration file (relative file paths are resolved against its folder)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"configuration file not found: {path}")
    data = _parse_toml_text(path.read_text(), str(path))
    data = _resolve_paths(data, path.parent)
    for key, value in (overrides or {}).items():
        sec, _, name = key.partition(".")
        data.setdefault(sec, {})
        if not isinstance(data[sec], dict):
            raise ConfigError(f"[{sec}] must be a table")
        if (sec, name) in _FILE_KEYS and isinstance(value, str) and value and not Path(value).is_absolute():
            value = str((Path.cwd() / value).resolve())  # a path given on the command line is relative to the working folder
        data[sec][name] = value
    return config_from_dict(data, base_dir=path.parent)


def _resolve_paths(data: dict, base: Path) -> dict:
    for sec, key in _FILE_KEYS:
        v = data.get(sec, {}).get(key) if isinstance(data.get(sec), dict) else None
        if isinstance(v, str) and v and not Path(v).is_absolute():
            data[sec][key] = str((base / v).resolve())
    return data


def default_config() -> Config:
    return Config()


def parse_override(text: str) -> tuple[str, Any]:
    """Parse ``section.key=value`` (value in TOML syntax; bare words are strings)."""
    if "=" not in text:
        raise ConfigError(f"--set {text!r}: expected section.key=value, e.g. --set solver.T=2")
    key, _, raw = text.partition("=")
    key = key.strip()
    if key.count(".") != 1 or not all(part.strip() for part in key.split(".")):
        raise ConfigError(f"--set {text!r}: the key must be section.key, e.g. weights.seed")
    raw = raw.strip()
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return key, value


def _toml_value(value) -> str:
    """One TOML value on one line (lists inline, so each key keeps its comment on its line)."""
    import tomli_w

    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return tomli_w.dumps({"v": value}).strip()[4:]


def config_to_toml(cfg: Config, *, comments: bool = True) -> str:
    """The configuration as TOML text; with ``comments`` every key carries its description."""
    lines = []
    for sec in fields(cfg):
        obj = getattr(cfg, sec.name)
        lines.append(f"[{sec.name}]")
        for f in fields(obj):
            value = _toml_value(getattr(obj, f.name))
            line = f"{f.name} = {value}"
            if comments:
                line = f"{line:<40} # {f.metadata['doc']}"
            lines.append(line)
        lines.append("")
    return "\n".join(lines)
