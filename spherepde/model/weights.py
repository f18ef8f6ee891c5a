"""Head weight paths Theta_t (docs/model.md §2).

Each head's matrix follows the SDE

    dD_h = f_h(D_h, t) dt + sigma dW^sym_h,     dW^sym = (dW + dW^T) / 2,

independently per head. A :class:`WeightPath` is generated ONCE from a seed on a
uniform time grid t_k = k dt and can then be queried at any time of the run (linear
interpolation between grid points), saved and loaded, so the particle and the mesh
solver are driven by the identical Theta_t.

Stored on the grid (K + 1 points, K steps):

* ``A[k]`` (H, d, d): attention matrices (for gradient heads A_h = D_h);
* ``V[k]`` (H, d, d): value matrices (for gradient heads V_h = s D_h);
* ``drift[k]`` (H, d, d): f_h(D_h(t_k), t_k), the drift at the grid point;
* ``dM[k]`` (H, d, d): the stochastic increment over step k (sigma dW^sym for
  Euler--Maruyama; the Gaussian part of the exact OU transition), used for the
  martingale term of the energy balance (docs/model.md §3).

Processes are :class:`WeightProcess` subclasses, each registered in :data:`PROCESSES` where it
is defined and built from its config section by its own ``from_config``: ``ou`` f = kappa (M - D);
``oscillating`` f = F_h(t) - D (the paper's target, three phase conventions); ``frozen``
f = 0; ``file`` (matrices given on a time grid, or a saved path, read from .npz/.npy); and
``drift`` a user-supplied Python callable (Python API only). A new process is a subclass
and one ``PROCESSES.register(name)``; ``weights.process = name`` then selects it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, is_dataclass
from pathlib import Path

import numpy as np

from spherepde._base import ConfigError, atomic_savez, load_arrays
from spherepde._registry import Registry

__all__ = [
    "OUProcess",
    "OscillatingProcess",
    "FrozenProcess",
    "DriftProcess",
    "FileProcess",
    "WeightProcess",
    "PROCESSES",
    "configurable_processes",
    "process_from_config",
    "WeightPath",
    "initial_matrices",
    "generate_weight_path",
    "oscillating_target",
    "weight_path_from_arrays",
]


# --------------------------------------------------------------------------- processes
#: The weight processes by name: ``weights.process`` names one, and the config's choices,
#: ``spherepde config --show`` and the reference page read this registry. An entry is a
#: :class:`WeightProcess` subclass; ``info`` ``config=False`` keeps it out of the config's
#: choices (a process that cannot be built from a config section).
PROCESSES = Registry("weight process", key="weights.process")


def configurable_processes() -> tuple[str, ...]:
    """The names (and aliases) ``weights.process`` accepts: every registered process a config section can build."""
    return PROCESSES.names(aliases=True, where=lambda e: e.info.get("config", True))


def process_from_config(section) -> WeightProcess:
    """The process that the config section ``section`` (duck-typed: ``process`` plus the keys the
    process reads, e.g. a :class:`spherepde.runs.config.WeightsSection`) names, built by its class."""
    return PROCESSES.get(section.process).from_config(section)


class WeightProcess:
    """The protocol of a weight process dD_h = f_h(D_h, t) dt + sigma dW^sym_h (docs/model.md §2).

    A process has a ``name``, a noise level ``sigma`` and ``drift(D, t)`` -> f, shapes
    (H, d, d). Subclasses override what they know better than the defaults here:

    * :meth:`from_config` -- the process a config section describes (default: ``cls()``);
    * :meth:`stepper` -- the one-step map of a scheme (default: Euler--Maruyama for
      ``euler``; ``exact`` is refused unless the process has an exact transition);
    * :meth:`params` -- the parameters recorded in ``WeightPath.meta`` (default: the dataclass fields);
    * :meth:`weight_path` -- the path itself (default: :func:`generate_weight_path`);
      ``from_file`` is True for a process whose path is read rather than generated.

    A new process is one class and one ``PROCESSES.register(name)``; a config naming it
    (``weights.process = name``) then runs it. Any object with ``name``, ``sigma`` and
    ``drift`` can drive :func:`generate_weight_path` directly (Euler--Maruyama only).
    """

    name: str = ""
    sigma: float = 0.0
    from_file: bool = False

    def drift(self, D: np.ndarray, t: float) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} defines no drift(D, t)")

    @classmethod
    def from_config(cls, section) -> WeightProcess:
        """The process described by a config section (duck-typed; see :func:`process_from_config`)."""
        return cls()

    @classmethod
    def check_config(cls, cfg) -> None:
        """Refuse a run configuration this process cannot make a path for, with a
        :class:`spherepde._base.ConfigError` naming the key; ``cfg`` is duck-typed (sections
        ``weights``, ``model``, ``solver``). The config check calls it; default: no rule."""

    @classmethod
    def relaxation(cls, section) -> tuple[float, str] | None:
        """(rate r, the config key that sets it) of the relaxation dD = r (M - D) dt + ... where the
        process has one: Euler--Maruyama multiplies deviations by (1 - r dt) per step and grows for
        r dt > 2. None (the default): no relaxation."""
        return None

    def stepper(self, scheme: str) -> Callable:
        """The step (D_k, f_k, t_k, dt, rng) -> (D_{k+1}, dM_k or None) of ``scheme``."""
        if scheme == "exact":
            raise ValueError(f"scheme 'exact' is not available for the {self.name!r} process (it has no exact transition); use 'euler'")
        return self.euler_maruyama_step

    def euler_maruyama_step(self, D: np.ndarray, f: np.ndarray, t: float, dt: float, rng):
        """D + dt f + sigma sqrt(dt) dW^sym (the paper's scheme); dM = the noise term or None."""
        sigma = float(self.sigma)
        Dn = D + dt * f
        if sigma > 0:
            dM = sigma * math.sqrt(dt) * _sym_noise(rng, *D.shape[:2])
            Dn += dM
            return Dn, dM
        return Dn, None

    def params(self) -> dict | None:
        """The parameters recorded in the path's ``meta["params"]`` (a dataclass's fields, arrays as
        lists; none for another class); None: nothing recorded."""
        return _fields_of(self) if is_dataclass(self) else {}

    def weight_path(self, **kw) -> WeightPath:
        """The weight path of this process; ``kw`` as for :func:`generate_weight_path`."""
        return generate_weight_path(self, **kw)


def _check_euler_growth(cfg, rate: float, key: str, what: Callable[[], str]) -> None:
    """Euler--Maruyama for dD = r (M - D) dt + ... multiplies deviations by (1 - r dt) per
    step; with r dt > 2 they grow, and a path that grows past double precision (|1 - r dt|^K
    > 1e300) can never be computed: ConfigError naming ``key`` (``what()`` states the product)."""
    w = cfg.weights
    if w.scheme != "euler":
        return
    factor = abs(1.0 - rate * w.dt)
    if factor <= 1.0:
        return
    steps = cfg.solver.T / w.dt
    log_growth = steps * math.log10(factor)
    if log_growth > 300:
        raise ConfigError(
            f"{key}: {what()} > 2 makes the Euler-Maruyama weight path grow like |1 - r dt|^K = 1e{log_growth:.0f} "
            f"over K = {steps:.6g} steps (it overflows); use weights.scheme = 'exact' or weights.dt < {2 / rate:g}"
        )


class _Adopted(WeightProcess):
    """A plain object with ``name``, ``sigma`` and ``drift`` (e.g. a user's dataclass) as a process."""

    def __init__(self, obj):
        self.obj = obj
        self.name = obj.name
        self.sigma = float(getattr(obj, "sigma", 0.0))

    def drift(self, D: np.ndarray, t: float) -> np.ndarray:
        return self.obj.drift(D, t)

    def params(self) -> dict | None:
        return _fields_of(self.obj)


def _fields_of(obj) -> dict:
    return {k: (np.asarray(v).tolist() if isinstance(v, np.ndarray) else v) for k, v in asdict(obj).items()}


def _as_process(process) -> WeightProcess:
    return process if isinstance(process, WeightProcess) else _Adopted(process)


@PROCESSES.register("ou", about="Ornstein-Uhlenbeck: f = kappa (M - D), M = mean * I (keys mean, kappa, sigma)")
@dataclass(frozen=True)
class OUProcess(WeightProcess):
    """Ornstein--Uhlenbeck: dD = kappa (M - D) dt + sigma dW^sym; M = mean * I or a matrix.

    Paper values (Section 6): M = I, kappa = 1, sigma^2 = 2.
    """

    mean: float | np.ndarray = 1.0
    kappa: float = 1.0
    sigma: float = math.sqrt(2.0)
    name = "ou"

    @classmethod
    def from_config(cls, section) -> OUProcess:
        return cls(mean=section.mean, kappa=section.kappa, sigma=section.sigma)

    @classmethod
    def check_config(cls, cfg) -> None:
        """The exact transition needs kappa > 0; an Euler--Maruyama path must stay finite (rate kappa),
        unless it starts at the mean with sigma = 0 (nothing excites the unstable mode)."""
        w = cfg.weights
        if w.kappa == 0 and w.scheme == "exact":
            raise ConfigError("weights.scheme: the exact OU transition needs kappa > 0")
        at_rest = w.sigma == 0 and (
            (w.init == "identity" and w.mean == 1.0) or (w.init == "beta" and w.beta == w.mean)
        ) and (cfg.model.heads == "gradient" or w.value_init == w.init)
        if not at_rest:
            _check_euler_growth(cfg, w.kappa, "weights.kappa", lambda: f"kappa * weights.dt = {w.kappa * w.dt:g}")

    @classmethod
    def relaxation(cls, section) -> tuple[float, str]:
        return float(section.kappa), "weights.kappa"

    def mean_matrix(self, d: int) -> np.ndarray:
        M = np.asarray(self.mean, dtype=float)
        if M.ndim == 0:
            return float(M) * np.eye(d)
        if M.shape != (d, d):
            raise ValueError(f"ou process: mean matrix has shape {M.shape}, expected ({d}, {d})")
        return M

    def drift(self, D: np.ndarray, t: float) -> np.ndarray:
        return self.kappa * (self.mean_matrix(D.shape[-1])[None] - D)

    def stepper(self, scheme: str) -> Callable:
        return self.exact_step if scheme == "exact" else self.euler_maruyama_step

    def exact_step(self, D: np.ndarray, f: np.ndarray, t: float, dt: float, rng):
        """The exact OU transition: M + e^{-kappa dt} (D - M) + std dW^sym, std^2 = sigma^2 (1 - e^{-2 kappa dt}) / (2 kappa)."""
        sigma = float(self.sigma)
        H, d = D.shape[:2]
        M = self.mean_matrix(d)[None]
        kap = self.kappa
        decay = math.exp(-kap * dt)
        std = sigma * math.sqrt((1 - math.exp(-2 * kap * dt)) / (2 * kap)) if kap != 0 else sigma * math.sqrt(dt)
        noise = std * _sym_noise(rng, H, d) if sigma > 0 else 0.0
        return M + decay * (D - M) + noise, (noise if sigma > 0 else None)


@PROCESSES.register("oscillating", about="the paper's target: f = F_h(t) - D, sigma = 0 (key phase)")
@dataclass(frozen=True)
class OscillatingProcess(WeightProcess):
    """The paper's oscillating weights: dD_h = (F_h(t) - D_h) dt, sigma = 0 by default.

    ``phase`` selects the per-head phase convention (docs/model.md §2): ``shift``
    (tau = t + phi_h in every argument), ``figure`` (phi_h added once to each argument)
    or ``in-phase`` (phi_h = 0). phi_h = 2 pi h / H for heads h = 0..H-1.
    """

    phase: str = "shift"
    sigma: float = 0.0
    name = "oscillating"

    def __post_init__(self):
        if self.phase not in ("shift", "figure", "in-phase"):
            raise ValueError(
                f"oscillating process: unknown phase convention {self.phase!r}; "
                "use 'shift', 'figure' or 'in-phase'"
            )

    @classmethod
    def from_config(cls, section) -> OscillatingProcess:
        return cls(phase=section.phase)

    @classmethod
    def check_config(cls, cfg) -> None:
        """d >= 2, and an Euler--Maruyama path must stay finite (rate 1)."""
        w = cfg.weights
        if w.phase and cfg.model.d < 2:
            raise ConfigError("weights.process: oscillating weights need d >= 2")
        _check_euler_growth(cfg, 1.0, "weights.dt", lambda: f"weights.dt = {w.dt:g}")

    @classmethod
    def relaxation(cls, section) -> tuple[float, str]:
        return 1.0, "weights.dt"

    def drift(self, D: np.ndarray, t: float) -> np.ndarray:
        H, d, _ = D.shape
        return oscillating_target(t, d, H, self.phase) - D

    def stepper(self, scheme: str) -> Callable:
        if scheme != "exact":
            return self.euler_maruyama_step
        if float(self.sigma) != 0.0:
            raise ValueError("scheme 'exact' for oscillating weights requires sigma = 0")
        return self.exact_step

    def exact_step(self, D: np.ndarray, f: np.ndarray, t: float, dt: float, rng):
        """The exact relaxation e^{-dt} D + int_t^{t+dt} e^{-(t+dt-u)} F_h(u) du (sigma = 0)."""
        H, d = D.shape[:2]
        return math.exp(-dt) * D + _oscillating_relaxation(t, t + dt, d, H, self.phase), None


@PROCESSES.register("frozen", about="frozen weights: f = 0, D_h(t) = D_h(0)")
@dataclass(frozen=True)
class FrozenProcess(WeightProcess):
    """Frozen weights: f = 0 (sigma = 0): D_h(t) = D_h(0)."""

    sigma: float = 0.0
    name = "frozen"

    def drift(self, D: np.ndarray, t: float) -> np.ndarray:
        return np.zeros_like(D)

    def stepper(self, scheme: str) -> Callable:
        return self.euler_maruyama_step  # exact for f = 0


@PROCESSES.register("file", about="matrices given on a time grid, or a saved weight path (key path_file)")
@dataclass(frozen=True)
class FileProcess(WeightProcess):
    """Weights read from a file: a saved :class:`WeightPath` (.npz with its keys) or matrices
    D (K+1, H, d, d) on the grid t_k = k dt (:func:`weight_path_from_arrays`)."""

    path_file: str = ""
    dt: float = 0.01
    name = "file"
    from_file = True

    @classmethod
    def from_config(cls, section) -> FileProcess:
        return cls(path_file=section.path_file, dt=section.dt)

    def weight_path(self, *, sign: float = -1.0, **_generated) -> WeightPath:
        """The path in the file (the keys of a generated path other than ``sign`` do not apply)."""
        path = Path(self.path_file)
        with load_arrays(path) as z:
            is_saved_path = {"A", "V", "drift", "dM"} <= set(z.files)
        if is_saved_path:
            return WeightPath.load(path)
        return weight_path_from_arrays(read_array(path, key="D"), self.dt, sign=sign)


@PROCESSES.register("drift", about="a user-supplied Python callable fn(D, t) (Python API only)", config=False)
@dataclass(frozen=True)
class DriftProcess(WeightProcess):
    """User-supplied drift: ``fn(D, t) -> f`` with D and f of shape (H, d, d) (Python API only)."""

    fn: Callable[[np.ndarray, float], np.ndarray] = field(repr=False, default=None)  # type: ignore[assignment]
    sigma: float = 0.0
    name = "drift"

    def __post_init__(self):
        if not callable(self.fn):
            raise TypeError(f"DriftProcess needs a callable fn(D, t) -> f, got {self.fn!r}")

    @classmethod
    def from_config(cls, section) -> DriftProcess:
        raise ValueError("weights.process: the 'drift' process takes a Python callable; build DriftProcess(fn) in Python")

    def drift(self, D: np.ndarray, t: float) -> np.ndarray:
        f = np.asarray(self.fn(D.copy(), float(t)), dtype=float)
        if f.shape != D.shape:
            raise ValueError(f"drift function returned shape {f.shape}, expected {D.shape}")
        if not np.all(np.isfinite(f)):
            raise ValueError(f"drift function returned non-finite values at t = {t}")
        return f

    def params(self) -> dict | None:
        return None  # a callable is not a recordable parameter


# ------------------------------------------------------------- oscillating target F_h(t)
def _oscillating_table(d: int):
    """Entries of F(tau) as (i, j, c0, amp, trig, a, b): F_ij = c0 + amp * trig(a tau + b)."""
    if d == 2:
        return [(0, 0, 2.0, 1.5, "cos", 1.0, 0.0), (0, 1, 0.0, 1.0, "sin", 2.0, 0.0), (1, 1, 2.0, -1.5, "cos", 1.0, 0.0)]
    if d == 3:
        return [
            (0, 0, 2.0, 1.5, "cos", 1.0, 0.0),
            (0, 1, 0.0, 1.0, "sin", 2.0, 0.0),
            (0, 2, 0.0, 1.0, "sin", 1.0, 0.0),
            (1, 1, 2.0, 1.5, "sin", 1.0, 0.0),
            (1, 2, 0.0, 1.0, "cos", 2.0, 0.0),
            (2, 2, 2.0, 1.5, "cos", 1.0, math.pi / 4),
        ]
    if d < 2:
        raise ValueError(f"oscillating weights need d >= 2, got d = {d}")
    P = d * (d - 1) // 2
    table = [(i, i, 2.0, 1.5, "cos", 1.0, 2 * math.pi * i / d) for i in range(d)]
    p = 0
    for i in range(d):
        for j in range(i + 1, d):
            table.append((i, j, 0.0, 1.0, "sin", 2.0, 2 * math.pi * p / P))
            p += 1
    return table


def _phases(H: int, phase: str) -> np.ndarray:
    if phase == "in-phase":
        return np.zeros(H)
    return 2 * math.pi * np.arange(H) / H


def _arg_offsets(a: float, b: float, phi: np.ndarray, phase: str) -> np.ndarray:
    """Offset b_h so that the argument is a t + b_h for each head."""
    if phase == "figure":
        return b + phi
    return a * phi + b  # shift (and in-phase, where phi = 0)


def oscillating_target(t: float, d: int, H: int, phase: str = "shift") -> np.ndarray:
    """The paper's oscillating target F_h(t), shape (H, d, d), symmetric (docs/model.md §2).

    d = 3: F(tau) = [[2 + 1.5 cos tau, sin 2tau, sin tau], [., 2 + 1.5 sin tau, cos 2tau],
    [., ., 2 + 1.5 cos(tau + pi/4)]]; d = 2: [[2 + 1.5 cos tau, sin 2tau], [., 2 - 1.5 cos tau]];
    d >= 4: F_ii = 2 + 1.5 cos(tau + 2 pi i/d), F_ij = sin(2 tau + 2 pi p/P) for the p-th
    pair i < j (0-based i and p, pairs in row-major order).
    """
    phi = _phases(H, phase)
    F = np.zeros((H, d, d))
    for i, j, c0, amp, trig, a, b in _oscillating_table(d):
        arg = a * t + _arg_offsets(a, b, phi, phase)
        val = c0 + amp * (np.cos(arg) if trig == "cos" else np.sin(arg))
        F[:, i, j] = val
        F[:, j, i] = val
    return F


def _oscillating_relaxation(t0: float, t1: float, d: int, H: int, phase: str) -> np.ndarray:
    """Exact integral  int_{t0}^{t1} exp(-(t1 - u)) F_h(u) du, shape (H, d, d)."""
    phi = _phases(H, phase)
    dt = t1 - t0
    decay = math.exp(-dt)
    out = np.zeros((H, d, d))
    for i, j, c0, amp, trig, a, b in _oscillating_table(d):
        bh = _arg_offsets(a, b, phi, phase)

        def G(u):
            x = a * u + bh
            if trig == "cos":
                return (np.cos(x) + a * np.sin(x)) / (1 + a * a)
            return (np.sin(x) - a * np.cos(x)) / (1 + a * a)

        val = c0 * (1 - decay) + amp * (G(t1) - decay * G(t0))
        out[:, i, j] = val
        out[:, j, i] = val
    return out


# ----------------------------------------------------------------------- initial draws
def initial_matrices(kind: str, H: int, d: int, rng: np.random.Generator | None = None, *, beta: float = 1.0, file=None) -> np.ndarray:
    """Initial head matrices, shape (H, d, d).

    ``gaussian``: the paper's D_h(0) = G + G^T with G iid N(0, 1); ``identity``: I;
    ``beta``: beta I; ``file``: an (H, d, d) or (d, d) array from .npy / .npz (key ``D0``
    or the only array), read with ``allow_pickle=False``.
    """
    if kind == "gaussian":
        if rng is None:
            raise ValueError("initial_matrices('gaussian') needs a random generator")
        G = rng.standard_normal((H, d, d))
        return G + np.swapaxes(G, 1, 2)
    if kind == "identity":
        return np.broadcast_to(np.eye(d), (H, d, d)).copy()
    if kind == "beta":
        return beta * np.broadcast_to(np.eye(d), (H, d, d)).copy()
    if kind == "file":
        arr = read_array(file, key="D0")
        if arr.shape == (d, d):
            arr = np.broadcast_to(arr, (H, d, d)).copy()
        if arr.shape != (H, d, d):
            raise ValueError(f"initial matrices in {file}: shape {arr.shape}, expected ({H}, {d}, {d}) or ({d}, {d})")
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"initial matrices in {file} contain NaN or infinite values")
        return arr.astype(float)
    raise ValueError(f"unknown initial matrix kind {kind!r}; use 'gaussian', 'identity', 'beta' or 'file'")


#: The arrays and scalars of a saved :class:`WeightPath` (``meta`` is optional).
PATH_KEYS = ("dt", "A", "V", "drift", "dM", "sigma", "heads", "sign")


def read_array(file, key: str) -> np.ndarray:
    if file is None:
        raise ValueError("a file path is required")
    path = Path(file)
    data = load_arrays(path)
    if isinstance(data, np.lib.npyio.NpzFile):
        with data:
            if key in data.files:
                arr = np.array(data[key])
            elif len(data.files) == 1:
                arr = np.array(data[data.files[0]])
            elif key == "D" and set(PATH_KEYS) & set(data.files):
                missing = [k for k in PATH_KEYS if k not in data.files]
                raise ValueError(f"{path} is a spherepde weight path missing {missing}; it cannot be used (save it again with WeightPath.save)")
            else:
                raise ValueError(f"{path}: expected an array named {key!r} (found {data.files})")
    else:
        arr = np.array(data)
    if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise ValueError(f"{path}: expected a real numeric array, got dtype {arr.dtype}")
    return arr


def _asymmetry(M: np.ndarray) -> tuple[tuple, float]:
    """Where (index tuple over the leading axes) and how much max |M - M^T| is largest."""
    diff = np.abs(M - np.swapaxes(M, -1, -2)).max(axis=(-1, -2))
    idx = np.unravel_index(int(np.argmax(diff)), diff.shape)
    return tuple(int(i) for i in idx), float(diff[idx])


def _symmetric(M: np.ndarray) -> bool:
    return bool(np.allclose(M, np.swapaxes(M, -1, -2), atol=1e-12))


# ---------------------------------------------------------------------------- the path
@dataclass(frozen=True, eq=False)
class WeightPath:
    """A sampled weight path Theta_t on the grid t_k = k dt, k = 0..K (see module docstring).

    Query with :meth:`matrices` (A_h(t), V_h(t)), :meth:`drift_at` and :meth:`noise`.
    """

    dt: float
    A: np.ndarray  # (K+1, H, d, d)
    V: np.ndarray  # (K+1, H, d, d)
    drift: np.ndarray  # (K+1, H, d, d), f_h(D_h(t_k), t_k)
    dM: np.ndarray  # (K, H, d, d)
    sigma: float = 0.0
    heads: str = "gradient"  # or "general"
    sign: float = -1.0
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        for name in ("A", "V", "drift", "dM"):
            arr = getattr(self, name)
            arr.flags.writeable = False
        K1, H, d, _ = self.A.shape
        if self.V.shape != self.A.shape or self.drift.shape != self.A.shape or self.dM.shape != (K1 - 1, H, d, d):
            raise ValueError("WeightPath: inconsistent array shapes")

    def __repr__(self) -> str:
        """One line: sizes, grid, sign and what made the path (the arrays are A, V, drift, dM)."""
        what = ", ".join(f"{k}={self.meta[k]!r}" for k in ("process", "scheme", "seed") if k in self.meta)
        return (f"WeightPath(H={self.H}, d={self.d}, K={self.K}, dt={self.dt:g}, T={self.T:g}, heads={self.heads!r}, sign={self.sign:+g}, "
                f"sigma={self.sigma:g}" + (f", {what}" if what else "") + ")")

    # ---- sizes
    @property
    def H(self) -> int:
        return self.A.shape[1]

    @property
    def d(self) -> int:
        return self.A.shape[2]

    @property
    def K(self) -> int:
        return self.A.shape[0] - 1

    @property
    def T(self) -> float:
        return self.K * self.dt

    @property
    def times(self) -> np.ndarray:
        return np.arange(self.K + 1) * self.dt

    @property
    def is_gradient(self) -> bool:
        return self.heads == "gradient"

    @property
    def is_constant(self) -> bool:
        """True when Theta_t does not change in time (no noise, the same A_h, V_h and drift on
        every grid point, e.g. the ``frozen`` process): steps may then cross grid points."""
        c = self.__dict__.get("_is_constant")
        if c is None:
            c = bool(self.sigma == 0.0 and np.all(self.A == self.A[0]) and np.all(self.V == self.V[0])
                     and np.all(self.drift == self.drift[0]))
            self.__dict__["_is_constant"] = c
        return c

    @property
    def D(self) -> np.ndarray:
        """Gradient heads: the symmetric matrices D_h on the grid (= A)."""
        if not self.is_gradient:
            raise ValueError("D is defined for gradient heads only")
        return self.A

    # ---- queries
    def _locate(self, t: float) -> tuple[int, float]:
        if not (-1e-12 <= t <= self.T * (1 + 1e-12) + 1e-12):
            raise ValueError(f"time t = {t} is outside the weight path [0, {self.T}]; generate the path to a larger T")
        x = t / self.dt
        k = int(math.floor(x + 1e-9))
        k = min(max(k, 0), self.K)
        lam = x - k
        if abs(lam) < 1e-9 or k == self.K:
            lam = 0.0
        return k, lam

    def _interp(self, arr: np.ndarray, t: float) -> np.ndarray:
        """arr at t, linearly interpolated; always a new writable array, at a grid point too (a read-only view of the
        path there would make Numba compile every kernel that takes it a second time, for read-only arrays)."""
        k, lam = self._locate(t)
        if lam == 0.0:
            return arr[k].copy()
        return (1.0 - lam) * arr[k] + lam * arr[k + 1]

    def matrices(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        """(A_h(t), V_h(t)), each (H, d, d), linearly interpolated between grid points."""
        return self._interp(self.A, t), self._interp(self.V, t)

    def drift_at(self, t: float) -> np.ndarray:
        """f_h(D_h(t), t), linearly interpolated between grid points, (H, d, d)."""
        return self._interp(self.drift, t)

    def grid_index(self, t: float) -> int | None:
        """k if t is (to round-off) the grid point t_k, else None."""
        k, lam = self._locate(t)
        return k if lam == 0.0 else None

    def next_grid_time(self, t: float) -> float:
        """The first grid point strictly after t."""
        k, _ = self._locate(t)
        return min(k + 1, self.K) * self.dt

    # ---- I/O
    def save(self, path) -> None:
        """Write the path to an .npz file (atomic: :func:`spherepde._base.atomic_savez`)."""
        atomic_savez(
            path,
            dt=self.dt,
            A=self.A,
            V=self.V,
            drift=self.drift,
            dM=self.dM,
            sigma=self.sigma,
            heads=np.array(self.heads),
            sign=self.sign,
            meta=np.array(json.dumps(self.meta, default=str)),
        )

    @classmethod
    def load(cls, path) -> WeightPath:
        """Read a path written by :meth:`save`, checking it as input: every key present,
        headers before data (no pickles, no forged sizes), finite arrays of consistent
        shapes, dt > 0, s = +-1, and for gradient heads symmetric A with V = s A.
        Problems raise ValueError naming the file (FileNotFoundError if it is missing)."""
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"weight path file not found: {path}")
        data = load_arrays(path)
        if not isinstance(data, np.lib.npyio.NpzFile):
            raise ValueError(f"{path} is a single .npy array, not a spherepde weight path (an .npz archive with {', '.join(PATH_KEYS)})")
        with data as z:
            missing = [k for k in PATH_KEYS if k not in z.files]
            if missing:
                raise ValueError(f"{path} is not a spherepde weight path: it lacks {missing} (a saved path has {', '.join(PATH_KEYS)})")
            try:
                arrays = {k: np.array(z[k]) for k in ("A", "V", "drift", "dM")}
                dt, sigma, sign = float(z["dt"]), float(z["sigma"]), float(z["sign"])
                heads = str(z["heads"])
                meta = json.loads(str(z["meta"])) if "meta" in z.files else {}
            except (ValueError, TypeError, KeyError, OSError, EOFError) as exc:
                raise ValueError(f"{path}: damaged weight path ({' '.join(str(exc).split())})") from exc
        _check_loaded_path(path, arrays, dt, sigma, sign, heads)
        return cls(dt=dt, sigma=sigma, heads=heads, sign=sign, meta=meta if isinstance(meta, dict) else {},
                   **{k: v.astype(float, copy=False) for k, v in arrays.items()})


def _check_loaded_path(path: Path, arrays: dict, dt: float, sigma: float, sign: float, heads: str) -> None:
    for name, arr in arrays.items():
        if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
            raise ValueError(f"{path}: {name} must be a real numeric array, got dtype {arr.dtype}")
    A = arrays["A"]
    if A.ndim != 4 or A.shape[2] != A.shape[3] or A.shape[0] < 2 or A.shape[1] < 1:
        raise ValueError(f"{path}: A has shape {A.shape}; a weight path has A of shape (K+1, H, d, d) with K >= 1")
    K1, H, d, _ = A.shape
    for name, shape in (("V", A.shape), ("drift", A.shape), ("dM", (K1 - 1, H, d, d))):
        if arrays[name].shape != shape:
            raise ValueError(f"{path}: {name} has shape {arrays[name].shape}, expected {shape} (A is {A.shape})")
    if not (math.isfinite(dt) and dt > 0):
        raise ValueError(f"{path}: the grid step dt = {dt} must be a positive number")
    if not (math.isfinite(sigma) and sigma >= 0):
        raise ValueError(f"{path}: sigma = {sigma} must be a finite number >= 0")
    if sign not in (-1.0, 1.0):
        raise ValueError(f"{path}: sign s = {sign} must be -1 or +1")
    if heads not in ("gradient", "general"):
        raise ValueError(f"{path}: heads = {heads!r} must be 'gradient' or 'general'")
    for name, arr in arrays.items():
        bad = ~np.isfinite(arr)
        if bad.any():
            k, h = (int(i) for i in np.argwhere(bad)[0][:2])
            raise ValueError(f"{path}: {name} contains {int(bad.sum())} NaN or infinite value(s), e.g. at grid point {k}, head {h}")
    if heads == "gradient":
        if not _symmetric(A):
            (k, h), asym = _asymmetry(A)
            raise ValueError(
                f"{path}: gradient heads need symmetric matrices, but A of head {h} at grid point {k} (t = {k * dt:g}) "
                f"has max |A - A^T| = {asym:.3g}; symmetrise it, or save the path with general heads"
            )
        if not np.allclose(arrays["V"], sign * A, rtol=1e-12, atol=1e-12):
            raise ValueError(f"{path}: gradient heads need V = s A with s = {sign:+g}, but V differs; the file is inconsistent")


def _sym_noise(rng: np.random.Generator, H: int, d: int) -> np.ndarray:
    G = rng.standard_normal((H, d, d))
    return 0.5 * (G + np.swapaxes(G, 1, 2))


def _simulate(process: WeightProcess, D0: np.ndarray, T: float, dt: float, rng, scheme: str):
    """Integrate one matrix process; returns (D (K+1,...), drift (K+1,...), dM (K,...)).

    Each step is the process's own (:meth:`WeightProcess.stepper`): f_k = drift(D_k, t_k),
    then (D_{k+1}, dM_k) from D_k, f_k; dM_k = 0 for a step without noise.
    """
    K = int(round(T / dt))
    if K < 1 or abs(K * dt - T) > 1e-9 * max(1.0, T):
        raise ValueError(f"weight path: T = {T} must be a positive multiple of dt = {dt}")
    H, d, _ = D0.shape
    D = np.empty((K + 1, H, d, d))
    f = np.empty((K + 1, H, d, d))
    dM = np.zeros((K, H, d, d))
    D[0] = D0
    step = process.stepper(scheme)
    for k in range(K):
        t = k * dt
        f[k] = process.drift(D[k], t)
        D[k + 1], noise = step(D[k], f[k], t, dt, rng)
        if noise is not None:
            dM[k] = noise
        if not np.all(np.isfinite(D[k + 1])):
            raise FloatingPointError(f"weight path became non-finite at t = {(k + 1) * dt}; reduce dt or check the drift")
    f[K] = process.drift(D[K], K * dt)
    return D, f, dM


def _initial_heads(init, H: int, d: int, rng, beta: float, init_file, heads: str) -> np.ndarray:
    """D_h(0), shape (H, d, d), from ``init`` (a kind of :func:`initial_matrices` or an (H, d, d)
    or (d, d) array); gradient heads need symmetric matrices."""
    if isinstance(init, np.ndarray):
        D0 = np.asarray(init, float)
        if D0.shape == (d, d):
            D0 = np.broadcast_to(D0, (H, d, d)).copy()
        if D0.shape != (H, d, d):
            raise ValueError(f"initial matrices have shape {D0.shape}, expected ({H}, {d}, {d})")
    else:
        D0 = initial_matrices(init, H, d, rng, beta=beta, file=init_file)
    if heads == "gradient" and not _symmetric(D0):
        (h,), asym = _asymmetry(D0)
        where = f" in {init_file}" if isinstance(init, str) and init == "file" else ""
        raise ValueError(
            f"gradient heads need symmetric initial matrices D_h(0), but head {h}{where} has max |D - D^T| = {asym:.3g}; "
            "symmetrise them ((D + D^T) / 2) or use general heads"
        )
    return D0


def generate_weight_path(
    process,
    *,
    H: int,
    d: int,
    T: float,
    dt: float,
    seed: int | None = 0,
    init: str | np.ndarray = "gaussian",
    beta: float = 1.0,
    init_file=None,
    init_seed: int | None = None,
    heads: str = "gradient",
    sign: float = -1.0,
    scheme: str = "euler",
    value_init: str | np.ndarray | None = None,
) -> WeightPath:
    """Generate a weight path once from a seed (docs/model.md §2).

    Parameters
    ----------
    process : a :class:`WeightProcess` (OUProcess, OscillatingProcess, ...) or any object with
        ``name``, ``sigma`` and ``drift(D, t)`` (stepped by Euler--Maruyama).
    H, d : number of heads and the ambient dimension (tokens on S^{d-1}).
    T, dt : final time and grid step; T must be a multiple of dt.
    seed : seeds the noise (numpy PCG64 through ``SeedSequence(seed)``); the same seed
        gives the same path on every run.
    init : ``gaussian`` (D = G + G^T), ``identity``, ``beta`` (beta I), ``file``, or an
        (H, d, d) array.
    init_seed : seed of the initial draw when it should differ from ``seed`` (e.g. one
        fixed D_h(0) for Monte-Carlo over noise paths); default: derived from ``seed``.
    heads : ``gradient`` (A_h = D_h, V_h = s D_h) or ``general`` (A_h and V_h evolve
        independently under the same process; ``value_init`` gives V_h(0)).
    sign : s = -1 (paper, energy descent) or +1 (clustering, ascent).
    scheme : ``euler`` (Euler--Maruyama with symmetrised noise, as the paper) or
        ``exact`` (exact OU transition / exact relaxation toward F_h(t)).
    """
    if H < 1 or d < 2:
        raise ValueError(f"need H >= 1 and d >= 2, got H = {H}, d = {d}")
    if not dt > 0 or not T > 0:
        raise ValueError(f"need T > 0 and dt > 0, got T = {T}, dt = {dt}")
    if sign not in (-1, 1, -1.0, 1.0):
        raise ValueError(f"sign s must be -1 or +1, got {sign}")
    if heads not in ("gradient", "general"):
        raise ValueError(f"heads must be 'gradient' or 'general', got {heads!r}")
    if scheme not in ("euler", "exact"):
        raise ValueError(f"scheme must be 'euler' or 'exact', got {scheme!r}")
    process = _as_process(process)
    ss = np.random.SeedSequence(seed)
    noise_ss, init_ss, vnoise_ss, vinit_ss = ss.spawn(4)
    if init_seed is not None:
        init_ss = np.random.SeedSequence(init_seed)
    D0 = _initial_heads(init, H, d, np.random.default_rng(init_ss), beta, init_file, heads)
    A, f, dM = _simulate(process, D0, T, dt, np.random.default_rng(noise_ss), scheme)
    if heads == "gradient":
        V = sign * A
    else:
        if value_init is None:
            V0 = D0.copy()
        elif isinstance(value_init, np.ndarray):
            V0 = np.broadcast_to(np.asarray(value_init, float), (H, d, d)).copy()
        else:
            V0 = initial_matrices(value_init, H, d, np.random.default_rng(vinit_ss), beta=beta)
        V, _, _ = _simulate(process, V0, T, dt, np.random.default_rng(vnoise_ss), scheme)
    meta = {"process": process.name, "scheme": scheme, "seed": seed, "init": init if isinstance(init, str) else "array"}
    params = process.params()
    if params is not None:
        meta["params"] = params
    return WeightPath(
        dt=float(dt),
        A=A,
        V=V,
        drift=f,
        dM=dM,
        sigma=float(process.sigma),
        heads=heads,
        sign=float(sign),
        meta=meta,
    )


def weight_path_from_arrays(D, dt: float, *, sign: float = -1.0, V=None) -> WeightPath:
    """A path from given matrices on a grid (e.g. read from a file): D (K+1, H, d, d).

    The drift is the piecewise-constant slope (D_{k+1} - D_k)/dt (its value at the last
    grid point repeats the last slope) and there is no noise. With ``V`` given the heads
    are general (A = D); otherwise gradient heads with V = s D.
    """
    D = np.array(D, dtype=float)  # a copy: the path makes its arrays read-only
    if D.ndim != 4 or D.shape[2] != D.shape[3] or D.shape[0] < 2:
        raise ValueError(f"matrices must have shape (K+1, H, d, d) with K >= 1, got {D.shape}")
    if not np.all(np.isfinite(D)):
        raise ValueError("weight matrices contain NaN or infinite values")
    slope = np.diff(D, axis=0) / dt
    drift = np.concatenate([slope, slope[-1:]], axis=0)
    heads = "gradient" if V is None else "general"
    if V is None:
        if not _symmetric(D):
            (k, h), asym = _asymmetry(D)
            raise ValueError(
                f"gradient heads need symmetric matrices, but D of head {h} at grid point {k} (t = {k * dt:g}) has "
                f"max |D - D^T| = {asym:.3g}; symmetrise it, or pass V for general heads"
            )
        V = sign * D
    return WeightPath(dt=float(dt), A=D, V=np.array(V, dtype=float), drift=drift, dM=np.zeros_like(slope), sigma=0.0, heads=heads, sign=float(sign), meta={"process": "file"})
