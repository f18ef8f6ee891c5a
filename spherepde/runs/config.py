"""Run configuration: typed, frozen dataclasses loaded from TOML.

One schema for every run (particles or mesh). Every field has a default and a one-line
description (``spherepde config --show`` prints them all as a commented TOML file).
Loading validates everything before any work starts: unknown keys (with the closest
valid name suggested), wrong types, out-of-range values and inconsistent options all
raise :class:`ConfigError` with a one-line message naming the key. No value is ever
evaluated as code.

Memory estimates (will a configuration fit?): :func:`estimate_memory`, checked by
:func:`check_resources` while a configuration is validated, against
:func:`spherepde._base.available_memory`.
"""

from __future__ import annotations

import difflib
import logging
import math
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from spherepde._base import ConfigError, available_memory, format_bytes, load_arrays
from spherepde.attention.sums import SUMMATION_MODES
from spherepde.geometry.protocol import GEOMETRIES, check_dimension, geometry_dimension
from spherepde.model.columns import SOLVERS
from spherepde.model.velocity import ATTENTION_KINDS
from spherepde.model.weights import PROCESSES, configurable_processes
from spherepde.solvers.integrators import OptionError, get_stepper, integrator_names

_log = logging.getLogger(__name__)

__all__ = ["ConfigError", "choices_of", "RunSection", "ModelSection", "WeightsSection", "InitialSection", "MeshSection", "SolverSection", "OutputSection", "MonteCarloSection", "Config", "SECTIONS", "INT_MAX", "config_from_dict", "KAPPA_MAX", "MAX_TOML_BYTES", "read_toml_file", "load_config", "default_config", "parse_override", "config_to_toml", "MESH_BYTES_PER_CELL", "TOKEN_BYTES", "CLUSTER_BYTES_PER_PAIR", "ROW_BYTES", "estimate_memory", "check_resources", "vmf_means_as_vectors"]


def choices_of(meta) -> tuple | None:
    """The allowed values of a field (its metadata's ``choices``), None when any value of its type is allowed.

    ``choices`` is a tuple, or a callable returning one: a field whose values come from a
    :class:`spherepde._registry.Registry` asks it at every check, so an entry registered at
    run time is accepted at once.
    """
    c = meta.get("choices")
    if c is None:
        return None
    return tuple(c() if callable(c) else c)


def _f(default, doc, **checks):
    return field(default=default, metadata={"doc": doc, **checks})


def _fl(default, doc, **checks):
    return field(default_factory=lambda: list(default), metadata={"doc": doc, **checks})


@dataclass(frozen=True)
class RunSection:
    solver: str = _f("mesh", "which solver: 'particles' (tokens), 'mesh' (finite-volume density) or 'both' (mesh + tokens sampled from it, same weight path)", choices=SOLVERS)
    name: str = _f("", "run folder name inside 'out' (empty: <solver>-<process>-H<H>-seed<seed>)")
    out: str = _f("runs", "parent folder for run folders")


@dataclass(frozen=True)
class ModelSection:
    d: int = _f(3, "ambient dimension: tokens live on S^{d-1} (a mesh run: the d its mesh.kind works in, 3 for 'icosphere')", min=2)
    H: int = _f(4, "number of heads (velocities are averaged over heads)", min=1)
    heads: str = _f("gradient", "'gradient' (A = D, V = s D, energy defined) or 'general' (A, V evolve separately)", choices=("gradient", "general"))
    sign: int = _f(-1, "s = -1: the paper's energy-descent convention; s = +1: clustering (attention) convention", choices=(-1, 1))
    attention: str = _f("softmax", "attention kind (spherepde.model.velocity.ATTENTION_KINDS): 'softmax' a_h = V_h Y_h / Z_h (the paper's), 'unnormalised' a_h = V_h Y_h (no division by Z_h; gradient heads: the plain W2 gradient flow of E, mobility 1); both solvers", choices=lambda: ATTENTION_KINDS.names(aliases=True))
    noise: float = _f(0.0, "token noise nu >= 0: Brownian motion of diffusivity nu on S^{d-1} (generator nu Delta_S; the density gains nu Delta_S rho; docs/model.md §10): each token step ends with a projected Brownian step, seeded by initial.seed; mesh runs carry it by Scharfetter-Gummel fluxes (columns entropy, diffusion; free energy for unnormalised attention), token runs add the column entropy; point masses (solver.atoms) refuse it; 0: none", min=0.0)


@dataclass(frozen=True)
class WeightsSection:
    process: str = _f("ou", "weight process registered in spherepde.model.weights.PROCESSES, built from this section: 'ou' (Ornstein-Uhlenbeck) reads mean, kappa, sigma; 'oscillating' (the paper's target) phase; 'file' path_file", choices=configurable_processes)
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
    kind: str = _f("octahedral", "initial tokens/density: 'octahedral' (paper), 'uniform', 'vmf', 'harmonic' (mesh only: uniform + eps Y_lm), 'file', 'run' (another run's snapshot)", choices=("octahedral", "uniform", "vmf", "harmonic", "file", "run"))
    n: int = _f(200, "number of tokens (particle solver)", min=1)
    seed: int = _f(0, "seed of the initial tokens", min=0)
    sigma: float = _f(0.05, "octahedral: per-coordinate Gaussian spread", gt=0.0)
    means: list = _fl([[0.0, 0.0, 1.0]], "vmf: mean directions, a list of d-vectors")
    kappas: list = _fl([20.0], "vmf: concentrations, one per mean")
    weights: list = _fl([], "vmf: mixture weights (empty: equal)")
    l: int = _f(2, "harmonic: degree l", min=0)
    m: int = _f(0, "harmonic: order m (-l <= m <= l)")
    eps: float = _f(0.1, "harmonic: amplitude eps of uniform * (1 + eps Y_lm)")
    file: str = _f("", "kind = 'file': .npy tokens (n, d) on S^{d-1} or cell densities (n_cells,); a mesh run starts from the tokens' histogram (mass 1/n per token in its cell), a 'both' run also starts its tokens there (n from the file)")
    placement: str = _f("random", "tokens of kind 'vmf' / 'uniform' (d = 3): 'random' draws them (initial.seed); 'stratified' places them deterministically, n p_j per bump (token weights p_j / n_j where n p_j is not whole) by the inverse CDF of the polar angle at stratified points and a golden-angle azimuth -- mesh and tokens then start from the same measure up to quadrature; on the circle (d = 2, kind 'uniform') at the n quantiles of (1 + initial.noise f)/(2 pi), the density a mesh run with this noise starts from", choices=("random", "stratified"))
    sample: bool = _f(False, "mesh: start from the histogram of the initial.n tokens (initial.seed) a particle run with this section draws -- the same finite sample, so both levels start alike")
    noise: float = _f(0.0, "mesh: multiply the density by 1 + noise * (a random field of spherical harmonics of degree 1..8 -- Fourier modes 1..8 on the circle --, max |field| = 1, seeded by initial.seed); circle tokens with placement = 'stratified': their quantiles; 0: none", min=0.0, max=0.99)
    run: str = _f("", "kind = 'run': the run folder to start from (its density or tokens at the snapshot nearest 'time')")
    time: float = _f(0.0, "kind = 'run': the time of that run to start from (the nearest snapshot is used, and named in the log)", min=0.0)


@dataclass(frozen=True)
class MeshSection:
    kind: str = _f("icosphere", "the geometry (spherepde.geometry.protocol.GEOMETRIES): 'icosphere' is the triangulated sphere S^2 (icosphere of mesh.level, or mesh.file; model.d = 3), 'circle' the circle S^1 (mesh.cells arcs, or mesh.file; model.d = 2)", choices=lambda: GEOMETRIES.names(aliases=True))
    level: int = _f(8, "icosphere subdivision n (20 n^2 cells; 8 -> 1280, 16 -> 5120 cells)", min=1)
    file: str = _f("", "read the mesh from this file instead (icosphere: .npz/.vtp/.vtk/.ply/.obj/.stl; circle: vertex angles (nc,) or points (nc, 2), .npy or text)")
    cells: int = _f(256, "circle: the number of equal arcs (ignored by 'icosphere', which uses mesh.level)", min=3)


@dataclass(frozen=True)
class SolverSection:
    T: float = _f(2.0, "final time", gt=0.0)
    dt: float = _f(0.0, "particles: step (0: the weight grid step, or a stable fraction of it); mesh: fixed step (0: adaptive from cfl)", min=0.0)
    integrator: str = _f("", "time integrator (spherepde.solvers.integrators.STEPPERS): both solvers 'euler' (tokens: the paper's) and 'heun' (= 'ssprk2'); mesh also 'ssprk3' and 'implicit' (linearly implicit upwind, order 1, steps from solver.tol); tokens also 'rk23' (= 'adaptive': Bogacki--Shampine 3(2) pair, error-controlled steps from solver.tol; not with model.noise); empty: euler for tokens, ssprk3 for the mesh", choices=lambda: ("", *integrator_names()))
    order: int = _f(1, "mesh: spatial order, 1 (upwind) or 2 (limited linear reconstruction)", choices=(1, 2))
    velocity: str = _f("potential", "mesh: edge velocity from 'potential' differences (gradient heads) or v at the 'midpoint'", choices=("potential", "midpoint"))
    cfl: float = _f(0.5, "mesh: CFL number in (0, 1]", gt=0.0, max=1.0)
    tol: float = _f(1e-3, "the local error per step that sets the step of an error-controlled integrator: mesh 'implicit' (mass moved, plus mass x displacement of point masses); tokens 'rk23' (chord between the pair's two solutions per token, atol = rtol = tol, relative to the chord the token moved)", gt=0.0, max=1.0)
    atoms: bool = _f(False, "mesh, integrator 'implicit': carry collapsed clusters as point masses (merge times free of numerical diffusion; docs/model.md)")
    summation: str = _f("auto", "mesh: how the attention sums are evaluated (spherepde.attention.SUMMATION_MODES): 'direct' exactly, 'fast' by spherical harmonics on S^2 (O(N L^2)) or Bessel series / FFT on S^1, 'auto' fast where it pays and meets summation_tol", choices=lambda: SUMMATION_MODES.names(aliases=True))
    summation_tol: float = _f(1e-10, "mesh: accuracy of the fast sums (relative error of Z_h and error of the softmax average)", gt=0.0)
    diagnostics_tol: float = _f(1e-6, "mesh: accuracy of the fast sums' moments Y_h/Z_h and Q_h/Z_h, which feed only the energy diagnostics (G2, d_tE, martingale), not the potential velocity; taken as summation_tol when smaller", gt=0.0)
    steady_tol: float = _f(0.0, "mesh and both runs: end the run (completed) at the first record where the density is stationary, max_c |rho_c(t_r) - rho_c(t_r-1)| / (t_r - t_r-1) / max_c rho_c(t_r) < steady_tol (1/time; checked at the records; the tokens of a both run stop with the mesh); summary.json says when; 0: off", min=0.0)


@dataclass(frozen=True)
class OutputSection:
    record_dt: float = _f(0.05, "time between diagnostics rows (a multiple of the weight grid step)", gt=0.0)
    snapshot_dt: float = _f(0.5, "time between snapshots of tokens/density (a multiple of record_dt)", gt=0.0)
    vtk: bool = _f(True, "write VTK series for ParaView/PyVista: mesh and both runs vtk/density_NNNNNN.vtp + density.pvd, particle and both runs vtk/tokens_NNNNNN.vtp + tokens.pvd")
    distances: str = _f("cheap", "run.solver = 'both': mesh-vs-token distances per record: 'cheap' = l1_hist + w1_sliced, 'all' = also the exact W1 w1_exact (a transport problem of cells x tokens at every record, by far the dearest), 'none'", choices=("cheap", "all", "none"))
    distance_every: int = _f(1, "run.solver = 'both': compute the distances every N records only (and at T); other rows hold NaN", min=1)
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
        return config_from_dict(d, explicit=getattr(self, "_explicit", frozenset()) | set(overrides))

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
            if isinstance(value, float) and math.isfinite(value) and value.is_integer():
                value = int(value)
            elif isinstance(value, float) and not math.isfinite(value):
                raise ConfigError(f"{key}: must be a finite integer, got {value!r}")
            else:
                raise ConfigError(f"{key}: expected an integer, got {value!r}")
        if abs(value) > INT_MAX:
            raise ConfigError(f"{key}: {_short(value)} is too large for an integer key (at most {INT_MAX})")
        return value
    if isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        try:
            value = float(value)
        except OverflowError:
            raise ConfigError(f"{key}: {_short(value)} is too large for a floating-point number") from None
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
        if key in _NUMBER_LISTS:
            _check_number_list(key, value)
        return value
    return value


#: Largest integer a key accepts (a C int64: seeds, counts and sizes beyond it overflow).
INT_MAX = 2**63 - 1


#: List keys that hold numbers (or, for the vMF means, lists of numbers): every entry finite.
_NUMBER_LISTS = ("initial.means", "initial.kappas", "initial.weights")


def _short(value) -> str:
    """A number as it fits in one line of an error message (huge integers in e-notation)."""
    if isinstance(value, int) and abs(value) >= 10**16:
        digits = str(abs(value))
        return f"{'-' if value < 0 else ''}{digits[0]}.{digits[1:4]}e+{len(digits) - 1}"
    return repr(value)


def _check_number_list(key: str, value: list, depth: int = 0) -> None:
    """A list key holds numbers or lists of numbers (vMF means), all finite."""
    for item in value:
        if isinstance(item, list):
            if depth >= 1:
                raise ConfigError(f"{key}: nested too deeply; expected numbers or a list of vectors (lists of numbers)")
            _check_number_list(key, item, depth + 1)
            continue
        if isinstance(item, bool) or not isinstance(item, (int, float)):
            raise ConfigError(f"{key}: every entry must be a number, got {item!r}")
        try:
            ok = math.isfinite(float(item))
        except OverflowError:
            ok = False
        if not ok:
            raise ConfigError(f"{key}: every entry must be a finite number, got {_short(item)}")


def _check_range(key: str, value, meta):
    allowed = choices_of(meta)
    if allowed is not None and value not in allowed:
        raise ConfigError(f"{key}: {value!r} is not allowed; choose one of {', '.join(repr(c) for c in allowed)}")
    if "min" in meta and value < meta["min"]:
        raise ConfigError(f"{key}: must be >= {meta['min']}, got {value!r}")
    if "gt" in meta and not value > meta["gt"]:
        raise ConfigError(f"{key}: must be > {meta['gt']}, got {value!r}")
    if "max" in meta and value > meta["max"]:
        raise ConfigError(f"{key}: must be <= {meta['max']}, got {value!r}")


def config_from_dict(data: dict, *, base_dir: Path | None = None, explicit=None) -> Config:
    """Build and validate a :class:`Config` from a nested dict (e.g. parsed TOML).

    ``explicit``: the keys (``"section.key"``) the user set (default: those in ``data``); a
    branch (``initial.kind = "run"``) takes the solver keys not given from its source run."""
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
    if explicit is None:
        explicit = {f"{sec}.{key}" for sec, table in data.items() for key in table}
    explicit = frozenset(explicit)
    sections = _inherit_discretisation(sections, explicit, base_dir or Path.cwd())
    cfg = Config(**sections)
    _check_consistency(cfg, base_dir)
    cfg = _absolute_paths(cfg, base_dir or Path.cwd())
    object.__setattr__(cfg, "_explicit", explicit)  # not a field: the keys the user set, for with_overrides
    return cfg


#: The solver keys a branch (``initial.kind = "run"``) takes from its source run unless set:
#: the child continues with the parent's discretisation (same solver kind only).
BRANCH_INHERITED = ("integrator", "order", "velocity", "cfl", "dt", "tol", "atoms", "summation", "summation_tol", "diagnostics_tol")


def _inherit_discretisation(sections: dict, explicit: frozenset, base: Path) -> dict:
    ini = sections["initial"]
    if ini.kind != "run" or not ini.run:
        return sections
    src = Path(ini.run) if Path(ini.run).is_absolute() else base / ini.run
    if not (src / "config.toml").is_file():
        return sections  # refused by the consistency check, with the reason
    data = read_toml_file(src / "config.toml", what="run configuration")
    src_run, src_solver = data.get("run", {}), data.get("solver", {})
    if not isinstance(src_run, dict) or not isinstance(src_solver, dict):
        raise ConfigError(f"initial.run: {src / 'config.toml'} has no [run] and [solver] tables; is it a spherepde run folder?")
    if src_run.get("solver", RunSection().solver) != sections["run"].solver:
        return sections  # across solvers the discretisations differ: the child's own (or default) keys
    proto = sections["solver"]
    valid = {f.name: f for f in fields(proto)}
    taken = {}
    for key in BRANCH_INHERITED:
        if f"solver.{key}" in explicit or key not in src_solver:
            continue
        try:
            value = _check_type(f"solver.{key}", src_solver[key], getattr(proto, key))
            _check_range(f"solver.{key}", value, valid[key].metadata)
        except ConfigError as exc:
            raise ConfigError(f"initial.run: {src / 'config.toml'}: {exc}") from None
        if value != getattr(proto, key):
            taken[key] = value
    if taken:
        _log.info("initial.run: %s from %s (set them to change)", ", ".join(f"solver.{k} = {v!r}" for k, v in taken.items()), src)
    return {**sections, "solver": replace(proto, **taken)}


_FILE_KEYS = (("weights", "init_file"), ("weights", "path_file"), ("initial", "file"), ("initial", "run"), ("mesh", "file"))


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
    if not math.isfinite(r):
        return False
    return abs(r - round(r)) < 1e-9 * max(1.0, r) and round(r) >= 1


def _check_solver_options(cfg: Config) -> None:
    """The solvers' own option checks (each rule is written once, by the component it belongs to)."""
    s = cfg.solver
    if cfg.model.noise > 0 and s.atoms:
        raise ConfigError(f"model.noise: point masses and token noise do not mix (a point mass has infinite entropy; diffusion spreads it at once; "
                          f"docs/model.md): set solver.atoms = false, or model.noise = 0 (it is {cfg.model.noise:g})")
    try:
        if cfg.run.solver == "particles":
            stepper = get_stepper(cfg.integrator, "particles")
            if stepper.adaptive and cfg.model.noise > 0:
                raise OptionError("integrator", f"{cfg.integrator!r} takes error-controlled steps of deterministic tokens; with token noise "
                                  f"(model.noise = {cfg.model.noise:g}) use 'heun' or 'euler' (fixed steps), or model.noise = 0")
            if s.atoms:
                raise OptionError("atoms", "point masses are a mesh component (run.solver = 'mesh' with solver.integrator = 'implicit'); a token run has none: remove solver.atoms")
        else:
            from spherepde.solvers.mesh import MeshSolver

            MeshSolver.check_options(integrator=cfg.integrator, order=s.order, velocity=s.velocity, gradient=cfg.model.heads == "gradient", atoms=s.atoms)
    except OptionError as exc:
        raise ConfigError(f"solver.{exc.option}: {exc}") from None
    _check_steady_tol(cfg)


def _check_steady_tol(cfg: Config) -> None:
    """solver.steady_tol stops a run at a stationary density: mesh and both runs of one path."""
    if not cfg.solver.steady_tol:
        return
    if cfg.run.solver == "particles":
        raise ConfigError(f"solver.steady_tol: a token run never becomes stationary (finite n, and with model.noise its tokens keep moving); "
                          f"stationarity is a density criterion: use run.solver = 'mesh' or 'both', or remove solver.steady_tol (it is {cfg.solver.steady_tol:g})")
    if cfg.montecarlo.paths > 1:
        raise ConfigError("solver.steady_tol: the paths of a Monte-Carlo run would stop at different times, and their mean needs every path to T; "
                          "remove solver.steady_tol or set montecarlo.paths = 1")


def _check_placement(cfg: Config) -> None:
    """initial.placement = 'stratified' needs tokens drawn from a vmf / uniform law on S^2."""
    ini = cfg.initial
    if ini.placement != "stratified":
        return
    if ini.kind not in ("vmf", "uniform"):
        raise ConfigError(f"initial.placement: 'stratified' places tokens of kind 'vmf' or 'uniform', not {ini.kind!r}; use placement = 'random'")
    if cfg.model.d != 3 and not (cfg.model.d == 2 and ini.kind == "uniform"):
        raise ConfigError(f"initial.placement: 'stratified' places tokens on S^2 (model.d = 3), or uniform ones on the circle (model.d = 2), this run has model.d = {cfg.model.d}; use placement = 'random'")
    if cfg.run.solver == "both" or (cfg.run.solver == "mesh" and not ini.sample):
        raise ConfigError("initial.placement: only token starts are placed (run.solver = 'particles', or a mesh run with initial.sample = true); remove it")
    n_bumps = len([x for x in (ini.weights or [1.0] * len(ini.means)) if float(x) > 0]) if ini.kind == "vmf" else 1
    if ini.n < n_bumps:
        raise ConfigError(f"initial.n: {ini.n} tokens cannot place {n_bumps} bumps of positive weight; use initial.n >= {n_bumps}")


def _circle_quantiles(cfg: Config) -> bool:
    """Tokens at the quantiles of (1 + initial.noise f)/(2 pi): stratified uniform tokens on the circle."""
    return cfg.initial.placement == "stratified" and cfg.initial.kind == "uniform" and cfg.model.d == 2


def _check_sample_noise(cfg: Config) -> None:
    """initial.sample / initial.noise shape a mesh density; on the circle, stratified uniform tokens take initial.noise."""
    ini = cfg.initial
    if (ini.sample or ini.noise) and cfg.run.solver == "particles" and not (ini.noise and not ini.sample and _circle_quantiles(cfg)):
        raise ConfigError("initial.sample / initial.noise: these shape a mesh density; a particle run draws its tokens directly (remove them; "
                          "on the circle, stratified uniform tokens take initial.noise)")
    if ini.sample and ini.noise and _circle_quantiles(cfg):
        raise ConfigError("initial.noise: these stratified tokens already carry the noise field; drop initial.sample (the mesh then takes "
                          "the cell averages of the same density) or initial.noise")


def _geometry_hint(d: int) -> str:
    """'; for d = ... use mesh.kind = ...' naming the registered geometries of dimension d, if any."""
    kinds = GEOMETRIES.names(where=lambda e: e.info.get("d") == d)
    return f" (for model.d = {d} use mesh.kind = {' or '.join(repr(k) for k in kinds)})" if kinds else ""


def vmf_means_as_vectors(means, d: int) -> list:
    """initial.means as lists of floats; with d = 2 a mean may also be an angle (radians), read as (cos, sin)."""
    if d == 2 and all(isinstance(m, (int, float)) and not isinstance(m, bool) for m in means):
        return [[math.cos(float(m)), math.sin(float(m))] for m in means]
    return [[float(x) for x in row] for row in means]


def _check_consistency(cfg: Config, base_dir: Path | None) -> None:
    solver, model, w, ini, out = cfg.run.solver, cfg.model, cfg.weights, cfg.initial, cfg.output
    _check_run_name(cfg.run.name)
    _check_sanity_bounds(cfg)
    if solver == "both" and cfg.solver.dt:
        raise ConfigError("solver.dt: with run.solver = 'both' the mesh step is adaptive (dt = 0) and tokens use the weight grid step")
    if solver in ("mesh", "both"):
        try:
            check_dimension(geometry_dimension(cfg.mesh.kind), model.d)
        except ValueError as exc:
            raise ConfigError(f"model.d: {exc}{_geometry_hint(model.d)}") from None
    _check_solver_options(cfg)
    _check_sample_noise(cfg)
    if ini.sample and ini.kind in ("harmonic", "run"):
        raise ConfigError(f"initial.sample: kind = {ini.kind!r} has no token sample; use 'octahedral', 'uniform', 'vmf' or 'file' (tokens)")
    if ini.kind == "harmonic" and solver == "particles":
        raise ConfigError("initial.kind: 'harmonic' is a mesh density; particles use 'octahedral', 'uniform', 'vmf' or 'file'")
    if ini.kind == "harmonic" and abs(ini.m) > ini.l:
        raise ConfigError(f"initial.m: need |m| <= l, got m = {ini.m}, l = {ini.l}")
    if ini.kind == "vmf":
        try:
            means = vmf_means_as_vectors(ini.means, model.d)
            kappas = [float(k) for k in ini.kappas]
            weights = [float(x) for x in ini.weights]
        except (TypeError, ValueError):
            raise ConfigError("initial.means/kappas/weights: must be lists of numbers (means: a list of d-vectors, or of angles when model.d = 2)") from None
        if not means or any(len(m) != model.d for m in means):
            raise ConfigError(f"initial.means: each mean must have d = {model.d} components")
        if len(kappas) not in (1, len(means)):
            raise ConfigError(f"initial.kappas: give one kappa or one per mean ({len(means)})")
        if weights and (len(weights) != len(means) or min(weights) < 0 or sum(weights) <= 0):
            raise ConfigError("initial.weights: one non-negative weight per mean, not all zero")
        if weights and abs(math.fsum(weights) - 1.0) > WEIGHT_SUM_TOL:
            raise ConfigError(
                f"initial.weights: the mixture weights {ini.weights!r} sum to {math.fsum(weights):.6g}, not 1; "
                "give weights that sum to 1 (they are the bumps' masses), or leave the list empty for equal weights"
            )
        if any(k < 0 for k in kappas):
            raise ConfigError("initial.kappas: concentrations must be >= 0")
        if max(kappas) > KAPPA_MAX:
            raise ConfigError(
                f"initial.kappas: {max(kappas):g} is too large: above {KAPPA_MAX:g} the spread 1/sqrt(kappa) is below "
                "double precision on the sphere (use a concentration <= 1e30)"
            )
        for i, m in enumerate(means):
            if not any(m):
                raise ConfigError(f"initial.means: mean {i + 1} is the zero vector {ini.means[i]!r}; a vMF mean is a direction, give a non-zero vector")
            square = math.fsum(x * x for x in m)
            if not (math.isfinite(square) and square > 0.0):
                raise ConfigError(
                    f"initial.means: mean {i + 1} = {ini.means[i]!r} cannot be normalised in double precision (its squared length "
                    f"{'overflows' if square > 0 else 'underflows to 0'}); a vMF mean is a direction: give it with components of order 1, e.g. scaled by its largest entry"
                )
    _check_placement(cfg)
    check_resources(cfg)  # before the grid checks below, which need T / dt to be a sane number
    process = PROCESSES.get(w.process)
    process.check_config(cfg)  # the process's own rules (e.g. the Euler-Maruyama path must stay finite)
    if cfg.solver.T < w.dt or not _is_multiple(cfg.solver.T, w.dt):
        raise ConfigError(f"solver.T: T = {cfg.solver.T} must be a whole multiple of weights.dt = {w.dt}")
    if not _is_multiple(out.record_dt, w.dt):
        raise ConfigError(f"output.record_dt: {out.record_dt} must be a whole multiple of weights.dt = {w.dt}")
    if solver == "particles":
        pdt = cfg.solver.dt or w.dt
        if not (_is_multiple(pdt, w.dt) or _is_multiple(w.dt, pdt)):
            raise ConfigError(f"solver.dt: the particle step {pdt} must be a whole multiple or a whole fraction of weights.dt = {w.dt}")
        if not _is_multiple(out.record_dt, pdt):
            raise ConfigError(f"output.record_dt: {out.record_dt} must be a whole multiple of the particle step {pdt}")
        if not _is_multiple(cfg.solver.T, pdt):
            raise ConfigError(f"solver.T: T = {cfg.solver.T} must be a whole multiple of the particle step {pdt}")
    if not _is_multiple(out.snapshot_dt, out.record_dt):
        raise ConfigError(f"output.snapshot_dt: {out.snapshot_dt} must be a whole multiple of output.record_dt = {out.record_dt}")
    base = base_dir or Path.cwd()
    for key, needed, value in (
        ("weights.init_file", w.init == "file", w.init_file),
        ("weights.path_file", process.from_file, w.path_file),
        ("initial.file", ini.kind == "file", ini.file),
        ("mesh.file", bool(cfg.mesh.file), cfg.mesh.file),
    ):
        if needed:
            if not value:
                raise ConfigError(f"{key}: a file is required here; give its path")
            p = Path(value) if Path(value).is_absolute() else base / value
            if p.is_dir():
                raise ConfigError(f"{key}: {p} is a directory; give the path of a file")
            if not p.exists():
                raise ConfigError(f"{key}: file not found: {p}")
            if not p.is_file():
                raise ConfigError(f"{key}: {p} is not a regular file; give the path of a file")
    if ini.kind == "run":
        if not ini.run:
            raise ConfigError("initial.run: initial.kind = 'run' needs the run folder to start from, e.g. initial.run = \"runs/paper-ou-mesh\"")
        src = Path(ini.run) if Path(ini.run).is_absolute() else base / ini.run
        if not (src / "config.toml").is_file():
            raise ConfigError(f"initial.run: {src} is not a spherepde run folder (no config.toml); give the folder of a run")
    if process.from_file:
        _check_path_file(cfg, Path(w.path_file) if Path(w.path_file).is_absolute() else base / w.path_file)
    if cfg.montecarlo.paths > 1 and process.from_file:
        raise ConfigError(f"montecarlo.paths: Monte-Carlo over noise paths needs a generated weight process, not {w.process!r}")


# ------------------------------------------------------------------ sanity and resources
#: How far the vMF mixture weights may sum from 1 (round-off of decimal weights such as 0.45, 0.2, ...).
WEIGHT_SUM_TOL = 1e-9

#: Largest vMF concentration: beyond it the spread 1/sqrt(kappa) is below double precision.
KAPPA_MAX = 1e30


#: Sanity upper bounds of float keys whose larger values cannot be computed with at all
#: (key -> (bound, why)); everything below them is allowed (a run may still stop with a reason).
_SANITY_MAX = {
    "weights.sigma": (1e150, "sigma^2 overflows double precision"),
}


def _check_run_name(name: str) -> None:
    """``run.name`` is one plain folder name inside ``run.out`` (never a path)."""
    if not name:
        return
    bad = (
        "/" in name or "\\" in name or name.strip() in (".", "..") or "\x00" in name
        or Path(name).is_absolute() or name != name.strip() or (len(name) > 1 and name[1] == ":")
        or not name.isprintable()
    )
    if bad:
        raise ConfigError(
            f"run.name: {name!r} must be a plain folder name (no '/', '\\', '..', drive or absolute path, "
            "no control characters such as a newline, no leading or trailing spaces); put the parent folder in run.out"
        )
    if len(name.encode()) > 200:
        raise ConfigError(f"run.name: {len(name.encode())} bytes is too long for a folder name; use at most 200")


def _check_sanity_bounds(cfg: Config) -> None:
    for key, (bound, why) in _SANITY_MAX.items():
        sec, _, name = key.partition(".")
        value = getattr(getattr(cfg, sec), name)
        if abs(value) > bound:
            raise ConfigError(f"{key}: {value:g} is too large ({why}); use at most {bound:g}")


_NPY_MAGIC = b"\x93NUMPY"


def _check_path_file(cfg: Config, path: Path) -> None:
    """weights.path_file: an .npz archive (a bare .npy is refused); a saved spherepde path
    must have the heads and sign of the model (its sign would otherwise silently replace
    model.sign). The arrays themselves are checked when the path is loaded."""
    import zipfile

    try:
        with open(path, "rb") as fh:
            head = fh.read(len(_NPY_MAGIC))
    except OSError as exc:
        raise ConfigError(f"weights.path_file: cannot read {path}: {exc.strerror or exc}") from None
    if head == _NPY_MAGIC:
        raise ConfigError(
            f"weights.path_file: {path} is a single .npy array; a weight path file is an .npz archive: "
            "np.savez(file, D=D) with D of shape (K+1, H, d, d), or a saved spherepde weights.npz"
        )
    if not zipfile.is_zipfile(path):
        raise ConfigError(
            f"weights.path_file: {path} is not an .npz archive (damaged, or another kind of file); give "
            "np.savez(file, D=D) with D of shape (K+1, H, d, d), or a saved spherepde weights.npz"
        )
    try:
        with zipfile.ZipFile(path) as zf:
            names = set(zf.namelist())
            if not {"A.npy", "V.npy", "drift.npy", "dM.npy"} & names:
                if cfg.model.heads == "general":
                    raise ConfigError(
                        f"weights.path_file: {path} holds plain matrices D, which drive gradient heads (V = s D); "
                        "set model.heads = 'gradient', or give a saved path of general heads"
                    )
                return
            scalars = {}
            keys = [k for k in ("sign", "heads") if f"{k}.npy" in names and zf.getinfo(f"{k}.npy").file_size < 4096]  # scalars, not forged giants
            if keys:
                with load_arrays(path) as z:
                    for key in keys:
                        arr = z[key]
                        if arr.ndim == 0:
                            scalars[key] = arr.item()
    except ConfigError:
        raise
    except Exception:  # unreadable: reported with the file's problem when the path is loaded
        return
    sign, heads = scalars.get("sign"), scalars.get("heads")
    if isinstance(sign, (int, float)) and sign in (-1, 1) and int(sign) != cfg.model.sign:
        raise ConfigError(
            f"weights.path_file: {path} is a path with sign s = {int(sign):+d} but model.sign = {cfg.model.sign:+d}; "
            f"set model.sign = {int(sign)} (--set model.sign={int(sign)}) to run it"
        )
    if isinstance(heads, str) and heads in ("gradient", "general") and heads != cfg.model.heads:
        raise ConfigError(
            f"weights.path_file: {path} is a path of {heads} heads but model.heads = {cfg.model.heads!r}; "
            f"set model.heads = '{heads}' (--set model.heads={heads}) to run it"
        )


def _parse_toml_text(text: str, origin: str, error: type[ConfigError] = ConfigError) -> dict:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{origin}: malformed TOML: {' '.join(str(exc).split())}") from None
    except RecursionError:
        raise error(f"{origin}: the TOML is nested too deeply to read; a configuration is a few flat tables") from None


#: Largest TOML file read as a configuration or sweep (a larger one is not a configuration).
MAX_TOML_BYTES = 16 * 2**20


def read_toml_file(path, what: str = "configuration file", error: type[ConfigError] = ConfigError) -> dict:
    """Parse a TOML file; every problem (missing, a directory, unreadable, not UTF-8 text,
    malformed, nested too deeply) is ``error`` with a one-line message naming the file."""
    path = Path(path)
    if path.is_dir():
        raise error(f"{path} is a directory, not a {what}; give the path of a .toml file")
    if not path.exists():
        raise error(f"{what} not found: {path}")
    if not path.is_file():
        raise error(f"{path} is not a regular file; give the path of a .toml {what}")
    try:
        size = path.stat().st_size
        if size > MAX_TOML_BYTES:
            raise error(f"{path}: {format_bytes(size)} is far too large for a {what} (at most {format_bytes(MAX_TOML_BYTES)}); is it the right file?")
        raw = path.read_bytes()
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(
            f"{path} is not a UTF-8 text file (byte 0x{raw[exc.start]:02x} at offset {exc.start}); "
            f"a {what} is TOML text in UTF-8"
        ) from None
    if "\x00" in text:
        raise error(f"{path} is a binary file (it contains NUL bytes), not a TOML {what}")
    return _parse_toml_text(text, str(path), error)


def load_config(path, overrides: dict | None = None) -> Config:
    """Read and validate a TOML configuration file (relative file paths are resolved against its folder)."""
    path = Path(path)
    data = read_toml_file(path)
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
    if raw.lower() in ("nan", "+nan", "-nan", "inf", "+inf", "-inf", "infinity", "+infinity", "-infinity"):
        raw = raw.lower().replace("infinity", "inf")  # TOML spells them in lower case; NaN and Inf are numbers too
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    except RecursionError:
        raise ConfigError(f"--set {key}: the value is nested too deeply to read") from None
    return key, value


def _toml_value(value) -> str:
    """One TOML value on one line (lists inline, so each key keeps its comment on its line)."""
    import tomli_w

    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return tomli_w.dumps({"v": value}).strip()[4:]


def _described(meta) -> str:
    """A field's description; a field whose values come from a registry also names them
    (those registered now, run-time registrations included)."""
    if not callable(meta.get("choices")):
        return meta["doc"]
    return f"{meta['doc']}; one of {', '.join(repr(c) for c in choices_of(meta))}"


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
                line = f"{line:<40} # {_described(f.metadata)}"
            lines.append(line)
        lines.append("")
    return "\n".join(lines)


# ------------------------------------------------------------------ memory estimates
#: Bytes per mesh cell of a mesh run (geometry, state, stages, fluxes): the constant and the
#: per-head part, an upper estimate of the peak of a run with H heads.
MESH_BYTES_PER_CELL = (1024, 256)


#: Bytes per token and coordinate (tokens, integrator stages, velocities) and per token,
#: head and coordinate (the attention sums Z_h, Y_h, Q_h and their products).
TOKEN_BYTES = (32 * 8, 16 * 8)


#: Worst case of the recorded cluster count (model.clusters.weighted_clusters): scipy lists every
#: pair of tokens closer than the linkage radius, n^2 pairs once all tokens gather, at this
#: many bytes per pair.
CLUSTER_BYTES_PER_PAIR = 28


#: Bytes per diagnostics row (read back as text, then floats).
ROW_BYTES = 2048


def estimate_memory(cfg: Config) -> list[tuple[float, str, str, str]]:
    """The largest memory needs of a run, as (bytes, key, what, fix): ``key`` is the
    configuration key that sets the size. Computed in floats, so an impossible size is a
    huge number or ``inf``, never an OverflowError.

    The weight path holds A, V, the drift and the increments on every grid point
    ((T/dt + 1) H d^2 doubles each; general heads generate V with its own drift and noise
    too); tokens and mesh cells are counted with the per-item costs above.
    """
    m, w, out, ini = cfg.model, cfg.weights, cfg.output, cfg.initial
    T, H, d = cfg.solver.T, float(m.H), float(m.d)
    grid = T / w.dt + 1
    arrays = 4 if m.heads == "gradient" else 6
    path = grid * H * d * d * 8 * arrays
    terms = []
    blame = max((H / 4, "model.H"), (d * d / 9, "model.d"), (grid / 201, "steps"))[1]  # the factor furthest above its default
    if blame == "steps":
        key = "weights.dt" if math.log(0.01 / w.dt) > math.log(T / 2) else "solver.T"
        steps = f"{grid - 1:.3g}" if grid < 1e300 else "more than 1e300"
        what = f"solver.T = {T:g} with weights.dt = {w.dt:g} gives {steps} weight-grid steps, and the weight path needs {format_bytes(path)}"
        terms.append((path, key, what, "reduce solver.T or increase weights.dt"))
    else:
        what = f"the weight path ({grid:.3g} grid points x H = {m.H} heads x d^2 = {m.d ** 2} x {arrays} arrays of doubles) needs {format_bytes(path)}"
        terms.append((path, blame, what, f"reduce {blame}"))
    solver = cfg.run.solver
    snap_bytes = 0.0
    if solver in ("particles", "both"):
        n = float(ini.n) if ini.kind != "file" else 0.0  # a token file is checked when it is read
        tokens = n * d * TOKEN_BYTES[0]
        why = ""
        if solver == "particles":
            tokens += CLUSTER_BYTES_PER_PAIR * n * n
            why = f" (the recorded cluster count lists close pairs: up to {CLUSTER_BYTES_PER_PAIR} n^2 bytes)"
        terms.append((tokens, "initial.n", f"initial.n = {ini.n} tokens need {format_bytes(tokens)}{why}", "reduce initial.n"))
        sums = n * H * d * TOKEN_BYTES[1]
        key = "model.H" if H > n else "initial.n"
        terms.append((sums, key, f"the attention sums of initial.n = {ini.n} tokens x model.H = {m.H} heads need {format_bytes(sums)}", f"reduce {key}"))
        snap_bytes += n * d * 8
    elif ini.sample and ini.kind != "file":  # a mesh run starting from the histogram of initial.n drawn tokens
        n = float(ini.n)
        tokens = n * d * TOKEN_BYTES[0]
        terms.append((tokens, "initial.n", f"initial.sample = true draws initial.n = {ini.n} tokens, which need {format_bytes(tokens)}", "reduce initial.n"))
    cells = GEOMETRIES.entry(cfg.mesh.kind).info.get("cells") if solver in ("mesh", "both") else None
    nc = cells(cfg.mesh) if cells is not None else None  # None: not known before the mesh is built (a file)
    if nc is not None:
        mesh = nc * (MESH_BYTES_PER_CELL[0] + MESH_BYTES_PER_CELL[1] * H)
        size_key = GEOMETRIES.entry(cfg.mesh.kind).info.get("size_key", "mesh.level")  # the key that sets the cell count
        key = "model.H" if MESH_BYTES_PER_CELL[1] * H > MESH_BYTES_PER_CELL[0] * 4 else size_key
        size = f"{size_key} = {getattr(cfg.mesh, size_key.split('.')[1])}"
        terms.append((mesh, key, f"{size} ({nc:.3g} cells) with model.H = {m.H} heads needs {format_bytes(mesh)}", f"reduce {key}"))
        snap_bytes += nc * 8
        if solver == "both" and getattr(out, "distances", "") == "all":
            w1 = 24.0 * nc * float(ini.n)
            terms.append((w1, "output.distances", f"output.distances = 'all': the exact W1 cost matrix ({nc:.3g} cells x {ini.n} tokens) needs {format_bytes(w1)}",
                          "use output.distances = 'cheap'"))
    n_snap = T / out.snapshot_dt + 2
    snaps = 2 * n_snap * snap_bytes
    terms.append((snaps, "output.snapshot_dt", f"output.snapshot_dt = {out.snapshot_dt:g} gives {n_snap - 1:.3g} snapshots, gathered at the end in {format_bytes(snaps)}",
                   "increase output.snapshot_dt"))
    n_rec = T / out.record_dt + 1
    paths = max(1, cfg.montecarlo.paths)
    rows = n_rec * ROW_BYTES * paths
    key = "montecarlo.paths" if paths > n_rec else "output.record_dt"
    terms.append((rows, key, f"output.record_dt = {out.record_dt:g} gives {n_rec - 1:.3g} diagnostics rows" + (f" x montecarlo.paths = {paths}" if paths > 1 else "")
                  + f", read back in {format_bytes(rows)}", f"{'reduce' if key == 'montecarlo.paths' else 'increase'} {key}"))
    return terms


def check_resources(cfg: Config) -> None:
    """Refuse (ConfigError naming the key) a run whose memory estimate (:func:`estimate_memory`)
    exceeds the memory available (:func:`available_memory`), before anything is allocated."""
    terms = estimate_memory(cfg)
    total = sum(t[0] for t in terms)
    limit, source = available_memory()
    if total <= limit:
        return
    part, key, what, fix = max(terms, key=lambda t: t[0])
    whole = f" (about {format_bytes(total)} for the whole run)" if total > 1.1 * part else ""
    hint = "" if source == "SPHEREPDE_MAX_MEMORY" else "; or set SPHEREPDE_MAX_MEMORY if the estimate is wrong for this machine"
    raise ConfigError(f"{key}: {what}{whole}, but {format_bytes(limit)} of memory is {source}; {fix}{hint}")

