"""The particle (token) reference solver (docs/model.md §1, §3 and §7).

n tokens x_i on S^{d-1} with weights w_i (1/n by default) move with the attention
velocity of the empirical measure mu = sum_i w_i delta_{x_i}:

    dx_i/dt = v[mu, Theta_t](x_i) = (1/H) sum_h P_{x_i} V_h Y_h(x_i) / Z_h(x_i),
    Z_h(x) = sum_j w_j exp(x^T A_h x_j),   Y_h(x) = sum_j w_j exp(x^T A_h x_j) x_j,

(softmax attention; unnormalised attention drops the division by Z_h, ``attention="unnormalised"``),

driven by a :class:`~spherepde.model.weights.WeightPath`. Integrators: the token steppers of
:data:`spherepde.solvers.integrators.STEPPERS` (explicit Runge--Kutta with retraction to the
sphere after every stage), e.g.

* ``euler`` -- explicit Euler followed by renormalisation x <- x / |x| (the paper's
  scheme, arXiv:2605.18870 Section 6, step for step);
* ``heun`` -- Heun's method (explicit trapezoid, second order) with retraction to the
  sphere after the predictor and the corrector;
* ``rk23`` (alias ``adaptive``) -- error-controlled steps: the Bogacki--Shampine 3(2) pair with
  first-same-as-last (:class:`~spherepde.solvers.integrators.EmbeddedPair`; P. Bogacki & L. F.
  Shampine, Appl. Math. Lett. 2 (1989) 321--325). A step is accepted when every token's chord
  between the third- and the second-order solution is at most atol + rtol (the chord the token
  moved), atol = rtol = ``tol`` (``solver.tol``), and no token moved more than MAX_DISPLACEMENT;
  steps land exactly on every ``advance(t_stop)`` time and, where the weights move
  (``path.is_constant`` false), on every point of the weight grid (a step never straddles one,
  so the Ito martingale increment is booked at the step that starts on its grid point and the
  trapezoid rule of the weights' work covers one chord of the linear path). The time ``t`` is
  state (checkpointed with the proposed next step), not ``step_count * dt``. Token noise is
  refused (ValueError): the Brownian step has no local error estimate of this kind.

The solver step Delta t must be a whole multiple of the weight path's grid step, or a whole
fraction of it (the path is linear between its grid points; a martingale increment is added
at the step that starts on its grid point). A token moves at most ``Delta t * speed_bound(path)``
per step (:func:`speed_bound`); :func:`particle_step` keeps that below ``MAX_DISPLACEMENT``
radians, the particle analogue of the mesh's CFL bound. With token noise nu > 0 (``noise``) each step
ends with a projected Brownian step (:mod:`spherepde.solvers.token_noise`: weak order 1, its own
seeded stream), and the step also keeps the Brownian step's root-mean-square angle
sqrt(2 nu (d - 1) dt) below MAX_DISPLACEMENT. The attention sums are the Numba kernel :func:`spherepde.attention.attention_moments`
(a per-token gather).
"""

from __future__ import annotations

import logging
import math

import numpy as np

from spherepde.model.clusters import cluster_table, weighted_clusters
from spherepde.model.columns import particle_columns
from spherepde.model.energy import EnergyBalance, martingale_increment, mean_resultant_length, state_rates, weights_change
from spherepde.model.entropy import token_entropy
from spherepde.model.velocity import DEFAULT_ATTENTION, head_fields, is_normalised, velocity_from_fields
from spherepde.model.weights import WeightPath
from spherepde.solvers.errors import SolverError
from spherepde.solvers.integrators import SNAP_TOL, get_stepper
from spherepde.solvers.token_noise import STATE_KEY, brownian_step, noise_generator, noise_step_limit, pack_state, unpack_state

__all__ = ["ParticleSolver", "initial_tokens", "sample_vmf", "stratified_vmf", "stratified_tokens", "vmf_counts", "GOLDEN_ANGLE", "speed_bound", "particle_step", "MAX_DISPLACEMENT"]

log = logging.getLogger(__name__)

#: The largest angle (radians) a token may move in one step: the particle analogue of the mesh's
#: CFL number. The shipped examples move at most 0.04 per step, the default config 0.08 (OU peaks).
MAX_DISPLACEMENT = 0.2
#: Attempts of one error-controlled step before SolverError (each retry shrinks the step by a factor in [FAC_MIN, SAFETY]).
MAX_ATTEMPTS = 50
#: The smallest error-controlled step, relative to the weight path's length T (SolverError below it).
DT_FLOOR = 1e-12


def speed_bound(path: WeightPath, attention: str = DEFAULT_ATTENTION) -> float:
    """An upper bound of the token speed |v(x, t)| over the sphere and the whole path.

    |P_x V_h Y_h / Z_h| <= ||V_h||_2 (Y_h / Z_h is an average of unit vectors), so
    |v| <= (1/H) sum_h ||V_h(t)||_2; the path is linear between grid points, so its maximum
    over the grid bounds every t. Unnormalised attention (``attention``): |Y_h| <= Z_h <= e^{||A_h||_2}
    (the weights sum to 1), so |v| <= (1/H) sum_h ||V_h(t)||_2 e^{||A_h(t)||_2}; on a segment of the
    path each norm is at most its larger end value (norms are convex in t), so the product of those
    two maxima bounds every t of the segment.
    """
    V = np.asarray(path.V, float)
    if V.size == 0:
        return 0.0
    nv = np.linalg.norm(V, ord=2, axis=(-2, -1))
    if not is_normalised(attention):
        ea = np.exp(np.linalg.norm(np.asarray(path.A, float), ord=2, axis=(-2, -1)))
        if len(nv) > 1:
            nv, ea = np.maximum(nv[:-1], nv[1:]), np.maximum(ea[:-1], ea[1:])
        nv = nv * ea
    return float(np.max(np.mean(nv, axis=1)))


def particle_step(path: WeightPath, dt: float | None = None, *, key: str = "solver.dt", attention: str = DEFAULT_ATTENTION,
                  noise: float = 0.0) -> float:
    """The particle step: ``dt`` when a token moves at most MAX_DISPLACEMENT radians per step,
    else ValueError naming the step to use; with ``dt`` None the path's grid step, or the
    largest whole fraction of it that is stable (``attention``: the attention kind, :func:`speed_bound`).
    With token noise nu = ``noise`` > 0 the step also keeps the Brownian step's root-mean-square angle
    sqrt(2 nu (d - 1) dt) at most MAX_DISPLACEMENT (:func:`~spherepde.solvers.token_noise.noise_step_limit`)."""
    vmax = speed_bound(path, attention)
    nlimit = noise_step_limit(noise, path.d, MAX_DISPLACEMENT)
    limit = min(MAX_DISPLACEMENT / vmax if vmax > 0 else math.inf, nlimit)
    m = max(1, math.ceil(path.dt / limit - 1e-12)) if math.isfinite(limit) else 1
    stable = path.dt / m if m > 1 else path.dt
    if dt is None:
        return stable
    if dt * vmax > MAX_DISPLACEMENT * (1 + 1e-12):
        raise ValueError(
            f"{key}: the particle step {dt:g} moves a token up to {dt * vmax:.3g} rad per step (|v| <= {vmax:.3g}), "
            f"more than {MAX_DISPLACEMENT:g}; use {key} = {stable:.6g} or smaller (or {key} = 0 to have it chosen)"
        )
    if dt > nlimit * (1 + 1e-12):
        raise ValueError(
            f"{key}: with model.noise = {noise:g} the particle step {dt:g} moves a token by {math.sqrt(2 * noise * (path.d - 1) * dt):.3g} rad "
            f"(root mean square) per step, more than {MAX_DISPLACEMENT:g}; use {key} = {stable:.6g} or smaller (or {key} = 0 to have it chosen)"
        )
    return float(dt)


def _normalise(X: np.ndarray) -> np.ndarray:
    return X / np.linalg.norm(X, axis=-1, keepdims=True)


def sample_vmf(rng: np.random.Generator, mu: np.ndarray, kappa: float, n: int) -> np.ndarray:
    """n samples of the von Mises--Fisher law on S^{d-1} with mean direction mu and concentration kappa.

    Uses Wood's (1994) rejection sampler for the component along mu.
    """
    mu = np.asarray(mu, float)
    mu = mu / np.linalg.norm(mu)
    d = mu.size
    if kappa <= 0:
        return _normalise(rng.standard_normal((n, d)))
    b = (-2 * kappa + math.sqrt(4 * kappa**2 + (d - 1) ** 2)) / (d - 1)
    x0 = (1 - b) / (1 + b)
    c = kappa * x0 + (d - 1) * math.log(1 - x0**2)
    out = np.empty(n)
    filled = 0
    while filled < n:
        m = 2 * (n - filled) + 8
        z = rng.beta((d - 1) / 2, (d - 1) / 2, size=m)
        u = rng.random(m)
        wv = (1 - (1 + b) * z) / (1 - (1 - b) * z)
        ok = kappa * wv + (d - 1) * np.log(1 - x0 * wv) - c >= np.log(u)
        acc = wv[ok][: n - filled]
        out[filled : filled + acc.size] = acc
        filled += acc.size
    v = rng.standard_normal((n, d))
    v -= (v @ mu)[:, None] * mu
    v = _normalise(v)
    return out[:, None] * mu + np.sqrt(np.clip(1 - out**2, 0, None))[:, None] * v


GOLDEN_ANGLE = math.pi * (3.0 - math.sqrt(5.0))  #: azimuth increment of the stratified placement (radians)


def vmf_counts(n: int, p) -> np.ndarray:
    """Tokens per mixture component, (k,) integers summing to n: floor(n p_j) plus one for the
    largest remainders (Hamilton's rule), p normalised here; every component of positive weight
    gets at least one token (ValueError when n is smaller than their number)."""
    p = np.asarray(p, float)
    p = p / p.sum()
    if n < int(np.count_nonzero(p)):
        raise ValueError(f"stratified tokens: n = {n} is fewer than the {np.count_nonzero(p)} components of positive weight; use initial.n >= {np.count_nonzero(p)}")
    counts = np.floor(n * p + 1e-9).astype(int)
    order = np.argsort(-(n * p - counts), kind="stable")
    counts[order[: n - counts.sum()]] += 1
    empty = (counts == 0) & (p > 0)
    while np.any(empty):  # take a token from the largest count for each empty component
        counts[np.argmax(counts)] -= 1
        counts[np.argmax(empty)] += 1
        empty = (counts == 0) & (p > 0)
    return counts


def stratified_vmf(mu, kappa: float, m: int) -> np.ndarray:
    """m deterministic points of the von Mises--Fisher law on S^2 about ``mu``, (m, 3).

    Polar coordinate w = x . mu by the inverse CDF at the midpoints u_i = (i + 1/2)/m,
    F(w) = (e^{kappa w} - e^{-kappa}) / (e^{kappa} - e^{-kappa}) (w = 2u - 1 for kappa = 0);
    azimuth i * GOLDEN_ANGLE about mu (for kappa = 0 the spherical Fibonacci lattice). Averages
    of smooth functions converge like a quadrature rule, not like 1/sqrt(m)."""
    mu = np.asarray(mu, float)
    mu = mu / np.linalg.norm(mu)
    if mu.size != 3:
        raise ValueError(f"stratified vMF points are placed on S^2 (d = 3), got d = {mu.size}")
    u = (np.arange(m) + 0.5) / m
    if kappa > 0:
        w = 1.0 + np.log1p(-(1.0 - u) * -np.expm1(-2.0 * kappa)) / kappa
    else:
        w = 2.0 * u - 1.0
    w = np.clip(w, -1.0, 1.0)
    e1 = np.cross(mu, np.eye(3)[int(np.argmin(np.abs(mu)))])
    e1 /= np.linalg.norm(e1)
    e2 = np.cross(mu, e1)
    phi = GOLDEN_ANGLE * np.arange(m)
    s = np.sqrt(1.0 - w**2)
    return w[:, None] * mu + (s * np.cos(phi))[:, None] * e1 + (s * np.sin(phi))[:, None] * e2


def stratified_tokens(n: int, means, kappas, weights=None) -> tuple[np.ndarray, np.ndarray | None]:
    """A deterministic start on S^2 with the cluster masses of a vMF mixture exactly: tokens (n, 3)
    (component by component, :func:`vmf_counts` of them, placed by :func:`stratified_vmf`) and
    token weights (n,) p_j / n_j, or None when every count is n p_j (equal weights 1/n)."""
    means = np.atleast_2d(np.asarray(means, float))
    k = means.shape[0]
    kappas = np.broadcast_to(np.asarray(kappas, float), (k,))
    p = np.ones(k) / k if weights is None or len(weights) == 0 else np.asarray(weights, float)
    p = p / p.sum()
    counts = vmf_counts(n, p)
    X = np.concatenate([stratified_vmf(means[j], float(kappas[j]), int(counts[j])) for j in range(k) if counts[j] > 0])
    w = np.concatenate([np.full(c, p[j] / c) for j, c in enumerate(counts) if c > 0])
    return X, (None if np.allclose(w, 1.0 / n, rtol=1e-12, atol=0.0) else w)


def initial_tokens(
    kind: str,
    n: int,
    d: int = 3,
    *,
    seed: int | None = 0,
    sigma: float = 0.05,
    means=None,
    kappas=None,
    weights=None,
    file=None,
    placement: str = "random",
    noise: float = 0.0,
) -> np.ndarray:
    """Initial tokens, shape (n, d), on S^{d-1}; deterministic for a given seed.

    kind
        ``octahedral``: the paper's start (Section 6): each token picks one of the 2d
        vertices +-e_i uniformly, adds N(0, sigma^2) per coordinate and is normalised.
        ``uniform``: the uniform law on the sphere. ``vmf``: a mixture of von
        Mises--Fisher clusters (``means`` (k, d), ``kappas`` (k,), mixture ``weights``).
        ``file``: an (n, d) array from an .npy file (rows are normalised; n is taken
        from the file).
    placement
        ``random`` (the draw above) or ``stratified`` (``vmf`` and ``uniform`` on S^2 only): the
        deterministic :func:`stratified_tokens`, counts n p_j rounded (their token weights are
        :func:`stratified_tokens`' second value, which the solver needs when n p_j is not whole).
        On the circle (d = 2, ``uniform``): the n quantiles of (1 + noise f)/(2 pi), f the seeded
        Fourier field of a mesh's ``initial.noise`` (:func:`spherepde.geometry.circle_densities.quantile_angles`).
    noise
        the amplitude of that field (``stratified`` tokens on the circle only; 0: equally spaced).
    """
    if d < 2:
        raise ValueError(f"tokens need d >= 2, got d = {d}")
    rng = np.random.default_rng(seed)
    if kind == "file":
        from spherepde.model.weights import read_array

        X = read_array(file, key="X")
        if X.ndim != 2 or X.shape[1] != d:
            raise ValueError(f"tokens in {file}: shape {X.shape}, expected (n, {d})")
        if X.shape[0] == 0:
            raise ValueError(f"tokens in {file}: shape {X.shape} holds no tokens; give at least one row (n >= 1)")
        if not np.all(np.isfinite(X)):
            raise ValueError(f"tokens in {file} contain NaN or infinite values")
        norms = np.linalg.norm(X, axis=1)
        if np.any(norms < 1e-12):
            raise ValueError(f"tokens in {file}: some rows are zero and cannot be put on the sphere")
        return X / norms[:, None]
    if n < 1:
        raise ValueError(f"need at least one token, got n = {n}")
    if noise and not (placement == "stratified" and kind == "uniform" and d == 2):
        raise ValueError("token noise: only stratified uniform tokens on the circle (d = 2) carry a noise field")
    if placement == "stratified":
        if kind not in ("vmf", "uniform"):
            raise ValueError(f"stratified placement is defined for kind 'vmf' and 'uniform', got {kind!r}")
        if kind == "uniform" and d == 2:
            from spherepde.geometry.circle import unit
            from spherepde.geometry.circle_densities import quantile_angles

            return unit(quantile_angles(n, noise, seed=0 if seed is None else seed))
        if kind == "uniform":
            return stratified_tokens(n, np.eye(d)[:1], [0.0])[0]
        return stratified_tokens(n, means, kappas, weights)[0]
    if placement != "random":
        raise ValueError(f"unknown token placement {placement!r}; use 'random' or 'stratified'")
    if kind == "octahedral":
        idx = rng.integers(0, 2 * d, size=n)
        X = np.zeros((n, d))
        X[np.arange(n), idx % d] = np.where(idx < d, 1.0, -1.0)
        X += sigma * rng.standard_normal((n, d))
        return _normalise(X)
    if kind == "uniform":
        return _normalise(rng.standard_normal((n, d)))
    if kind == "vmf":
        means = np.atleast_2d(np.asarray(means if means is not None else np.eye(d)[:1], float))
        k = means.shape[0]
        kappas = np.broadcast_to(np.asarray(kappas if kappas is not None else 20.0, float), (k,))
        p = np.ones(k) / k if weights is None else np.asarray(weights, float)
        if means.shape[1] != d or p.shape != (k,) or np.any(p < 0) or not p.sum() > 0:
            raise ValueError("vmf tokens: means must be (k, d), weights (k,) non-negative")
        if not np.all(np.isfinite(kappas)) or np.any(kappas < 0) or np.any(kappas > 1e30):
            raise ValueError(f"vmf tokens: concentrations must be finite numbers in [0, 1e30], got {kappas.tolist()}")
        if not np.all(np.isfinite(means)) or np.any(np.linalg.norm(means, axis=1) == 0) or not np.all(np.isfinite(p)):
            raise ValueError("vmf tokens: mean directions must be finite and non-zero, weights finite")
        comp = rng.choice(k, size=n, p=p / p.sum())
        X = np.empty((n, d))
        for j in range(k):
            sel = comp == j
            X[sel] = sample_vmf(rng, means[j], float(kappas[j]), int(sel.sum()))
        return X
    raise ValueError(f"unknown token initialisation {kind!r}; use 'octahedral', 'uniform', 'vmf' or 'file'")


class ParticleSolver:
    """Token dynamics driven by a weight path (see module docstring).

    Parameters
    ----------
    X0 : (n, d) initial tokens (normalised on input).
    path : the weight path Theta_t; ``dt`` is a whole multiple or a whole fraction of its grid step.
    dt : solver step (default: the path's grid step; :func:`particle_step` bounds it).
    integrator : a token stepper of :data:`~spherepde.solvers.integrators.STEPPERS` by name (or the
        :class:`~spherepde.solvers.integrators.Stepper`): ``euler`` (paper) or ``heun`` (= ``ssprk2``).
    weights : (n,) token weights summing to 1 (default 1/n).
    cluster_radius : chordal linkage radius of the recorded cluster count.
    attention : ``"softmax"`` (default) or ``"unnormalised"`` (:data:`~spherepde.model.velocity.ATTENTION_KINDS`):
        a_h = V_h Y_h / Z_h or V_h Y_h; for gradient heads it also sets the mobility of G2.
    noise : token noise nu >= 0 (``model.noise``): after the deterministic step, the projected Brownian
        step x <- (x + sqrt(2 nu dt) P_x xi)/|.| (:func:`~spherepde.solvers.token_noise.brownian_step`,
        weak order 1); with nu > 0 the rows add the ``entropy`` column (:func:`~spherepde.model.entropy.token_entropy`).
    noise_seed : seeds the noise (:func:`~spherepde.solvers.token_noise.noise_generator`: the first child of
        ``SeedSequence(noise_seed)``; runs pass ``initial.seed``). Unused with nu = 0 (nothing is drawn).
    tol : error-controlled integrators only (``rk23``; ``solver.tol``): the local error tolerance, atol = rtol = tol
        of the chordal error per token (module docstring); ``dt`` is then the first step tried and the fixed
        step an explicit scheme would take (:meth:`reference_step`).
    """

    def __init__(self, X0, path: WeightPath, *, dt: float | None = None, integrator: str = "euler", weights=None, cluster_radius: float = 0.1,
                 attention: str = DEFAULT_ATTENTION, noise: float = 0.0, noise_seed: int = 0, tol: float = 1e-3):
        X0 = np.asarray(X0, dtype=float)
        if X0.ndim != 2 or X0.shape[1] != path.d:
            raise ValueError(f"tokens have shape {X0.shape}, but the weight path has d = {path.d}; expected (n, {path.d})")
        if not np.all(np.isfinite(X0)):
            raise ValueError("initial tokens contain NaN or infinite values")
        self.stepper = get_stepper(integrator, "particles")
        is_normalised(attention)  # ValueError naming the choices for an unknown kind
        self.path, self.attention = path, attention
        self.dt = float(path.dt if dt is None else dt)
        m = self.dt / path.dt
        self.substeps = int(round(m))
        self.split = 1  # steps per grid interval when dt is a fraction of the grid step
        if self.substeps < 1 and self.dt > 0:
            split = path.dt / self.dt
            if round(split) >= 2 and abs(split - round(split)) <= 1e-9 * split:
                self.split = int(round(split))
        if (self.substeps < 1 and self.split < 2) or (self.substeps >= 1 and abs(m - self.substeps) > 1e-9):
            raise ValueError(f"particle dt = {self.dt} must be a whole multiple or a whole fraction of the weight path step {path.dt}")
        n = X0.shape[0]
        self.w = np.full(n, 1.0 / n) if weights is None else np.asarray(weights, float)
        if self.w.shape != (n,) or np.any(self.w < 0) or not np.isclose(self.w.sum(), 1.0):
            raise ValueError("token weights must be (n,) non-negative and sum to 1")
        self.integrator = self.stepper.name
        self.cluster_radius = cluster_radius
        self.noise = float(noise)
        if not (math.isfinite(self.noise) and self.noise >= 0):
            raise ValueError(f"token noise must be a finite number >= 0, got {noise!r} (model.noise)")
        self.adaptive = bool(getattr(self.stepper, "adaptive", False))
        self.tol = float(tol)
        if self.adaptive:
            if self.noise > 0:
                raise ValueError(f"integrator {self.integrator!r}: error-controlled steps are for deterministic tokens; with token noise "
                                 f"(model.noise = {self.noise:g}) use a fixed-step integrator ('heun' or 'euler') or model.noise = 0")
            if not (math.isfinite(self.tol) and 0.0 < self.tol <= 1.0):
                raise ValueError(f"integrator {self.integrator!r}: the local error tolerance must be a number in (0, 1], got {tol!r} (solver.tol)")
        self._t = 0.0  # the time, kept as state by error-controlled steps (fixed steps: step_count * dt)
        self.h_next = self.dt  # the next step tried (error-controlled steps)
        self.dt_last = 0.0
        self.rejected = 0  # rejected attempts so far (error-controlled steps)
        self.err_prev = 1.0  # the last accepted step's error ratio (the PI step control's memory)
        self._rng = noise_generator(noise_seed) if self.noise > 0 else None
        self.columns = particle_columns(self.noise > 0)
        self.X = _normalise(X0)
        self.step_count = 0
        self.balance = EnergyBalance(sign=path.sign)
        self._cache = None
        if path.is_gradient:
            self.balance.E0 = self._evaluate(self.X, 0.0)["rates"]["energy"]

    # ------------------------------------------------------------------ evaluation
    @property
    def t(self) -> float:
        return self._t if self.adaptive else self.step_count * self.dt

    def _evaluate(self, X, t):
        """Velocity and (gradient heads) energy rates of the tokens X at time t."""
        A, V = self.path.matrices(t)
        grad = self.path.is_gradient
        fields = head_fields(X, self.w, A, want_q=grad and self.path.sigma > 0)
        v = velocity_from_fields(X, fields, V, kind=self.attention)
        rates = state_rates(X, self.w, fields, A, self.path.drift_at(t), self.path.sigma, v, attention=self.attention) if grad else None
        return {"fields": fields, "v": v, "rates": rates}

    def _current(self):
        key = self.step_count
        if self._cache is None or self._cache[0] != key:
            self._cache = (key, self._evaluate(self.X, self.t))
        return self._cache[1]

    # ---------------------------------------------------------------------- stepping
    def step(self, t_stop: float | None = None) -> None:
        """Advance one step: of size dt, or (error-controlled integrators) the accepted step towards ``t_stop``
        (default: the end of the weight path) that lands on it, or on the next weight-grid point where the weights move."""
        if self.adaptive:
            self._adaptive_step(self.path.T if t_stop is None else t_stop)
            return
        t, dt, X = self.t, self.dt, self.X
        if t + dt > self.path.T * (1 + 1e-12) + 1e-12:
            raise ValueError(f"cannot step past the end of the weight path (T = {self.path.T})")
        ev = self._current()
        grad = self.path.is_gradient
        if grad and self.path.sigma > 0:
            k = self.path.grid_index(t)
            if self.substeps:
                dM = self.path.dM[k : k + self.substeps].sum(axis=0)
                self.balance.add_martingale(martingale_increment(X, self.w, ev["fields"], dM))
            elif k is not None and k < self.path.K:  # a fraction of the grid step: the increment at its left end (Ito)
                self.balance.add_martingale(martingale_increment(X, self.w, ev["fields"], self.path.dM[k]))
        Xn, evals, weights = self.stepper.token_step(X, t, dt, ev, self._evaluate, _normalise)
        if self._rng is not None:  # Lie splitting: the Brownian part after the deterministic step
            Xn = brownian_step(Xn, math.sqrt(2.0 * self.noise * dt), self._rng)
        if not np.all(np.isfinite(Xn)):
            raise FloatingPointError(f"tokens became non-finite at t = {t + dt:.6g} (step {self.step_count + 1}); reduce dt")
        ev1 = None
        if grad:
            self.balance.add_stages(dt, weights, [e["rates"] for e in evals])
            dD = weights_change(self.path, t, (self.step_count + 1) * dt)
            if dD is not None:  # the end state's evaluation (the next step starts from it)
                ev1 = self._evaluate(Xn, (self.step_count + 1) * dt)
                self.balance.add_weights_change(dD, ev["rates"]["M"], ev1["rates"]["M"])
        self.X = Xn
        self.step_count += 1
        if ev1 is not None:
            self._cache = (self.step_count, ev1)

    def _end_time(self, t: float, h: float, t_stop: float) -> float:
        """t + h cut at t_stop and, unless the weights are constant, at the next weight-grid point (snapped onto both)."""
        pdt = self.path.dt
        t_end = min(t + h, t_stop)
        if not self.path.is_constant:
            t_next = self.path.next_grid_time(t)
            if t_end >= t_next - SNAP_TOL * pdt:
                t_end = t_next
        if t_end >= t_stop - SNAP_TOL * pdt:
            t_end = t_stop
        return t_end

    def _adaptive_step(self, t_stop: float) -> None:
        """One error-controlled step towards t_stop (module docstring; :class:`~spherepde.solvers.integrators.EmbeddedPair`)."""
        t, X, pair = self._t, self.X, self.stepper
        if t_stop > self.path.T * (1 + 1e-12) + 1e-12:
            raise ValueError(f"cannot step past the end of the weight path (T = {self.path.T})")
        ev = self._current()
        grad = self.path.is_gradient
        dmart = 0.0
        if grad and self.path.sigma > 0:  # Ito: the increment of the grid point the step starts on (steps never straddle one)
            k = self.path.grid_index(t)
            if k is not None and k < self.path.K:
                dmart = martingale_increment(X, self.w, ev["fields"], self.path.dM[k])
        h_try, rejected = self.h_next, False
        floor = DT_FLOOR * max(1.0, self.path.T)
        for _attempt in range(MAX_ATTEMPTS):
            t_end = self._end_time(t, h_try, t_stop)
            h = t_end - t
            if not h > 0:
                raise SolverError(f"zero time step at t = {t:.6g} (step {self.step_count}, t_stop = {t_stop:.6g})")
            with np.errstate(all="ignore"):
                Xn, evals, b, chord = pair.token_attempt(X, t, h, t_end, ev, self._evaluate, _normalise)
                err = pair.error_norm(X, Xn, chord, self.tol, self.tol)
                move = float(np.max(np.linalg.norm(Xn - X, axis=-1)))  # chord <= angle, close to it below 0.2 rad
            fac = pair.factor(err, err_prev=self.err_prev if self.step_count else None, after_reject=rejected)
            if err <= 1.0 and move <= MAX_DISPLACEMENT:
                break
            self.rejected += 1
            rejected = True
            h_try = h * min(fac, 1.0)
            if move > MAX_DISPLACEMENT:  # math.inf for non-finite tokens: then the error already shrank the step
                h_try = min(h_try, 0.9 * h * MAX_DISPLACEMENT / move)
            if h_try < floor:
                raise SolverError(f"the token step collapsed to dt = {h_try:.3g} at t = {t:.6g} (step {self.step_count}) below the floor {floor:.3g}: "
                                  f"the local error tolerance solver.tol = {self.tol:g} cannot be met -- raise solver.tol, or check the weights")
        else:  # pragma: no cover - the error would have to stay above tol MAX_ATTEMPTS times in a row
            raise SolverError(f"no token step meets the local error tolerance at t = {t:.6g} (step {self.step_count}); raise solver.tol")
        # a step cut short by t_stop or a grid point keeps the proposal it was cut from
        self.h_next = max(h_try, h * fac) if (h < h_try * (1.0 - 1e-12) and fac >= 1.0) else h * fac
        self.err_prev = err
        ev1 = evals[-1]  # FSAL: the evaluation at the new state, the next step's first
        if grad:
            self.balance.add_martingale(dmart)
            self.balance.add_stages(h, b, [e["rates"] for e in evals])
            dD = weights_change(self.path, t, t_end)
            if dD is not None:
                self.balance.add_weights_change(dD, ev["rates"]["M"], ev1["rates"]["M"])
        self.X = Xn
        self._t = t_end
        self.dt_last = h
        self.step_count += 1
        self._cache = (self.step_count, ev1)

    @property
    def may_be_nan(self) -> frozenset:
        """Columns NaN by design: the split of the energy balance after a resume from a checkpoint
        written before it was kept (:meth:`~spherepde.model.energy.EnergyBalance.unknown_columns`); ``entropy``
        of fewer than two tokens of positive weight (no leave-one-out estimate)."""
        few = self.noise > 0 and np.count_nonzero(self.w > 0) < 2
        return self.balance.unknown_columns() | (frozenset({"entropy"}) if few else frozenset())

    def step_hint(self) -> float | None:
        """None: token steps are fixed (``dt``) or follow the local error (no estimate from the state)."""
        return None

    def reference_step(self) -> float | None:
        """Error-controlled steps: the fixed step an explicit scheme would take (``dt``: the weight grid step or the
        stable fraction of it, :func:`particle_step`), the yardstick of the run's step budget; None for fixed steps."""
        return float(self.dt) if self.adaptive else None

    def last_step(self) -> float:
        if self.adaptive:
            return float(self.dt_last)
        return float(self.dt) if self.step_count else 0.0

    def events(self) -> dict:
        return {}

    def notes(self) -> list[str]:
        """The token step when it is a fraction of the weight grid step (and why); how error-controlled steps are taken."""
        if self.adaptive:
            where = "" if self.path.is_constant else ", and on every point of the weight grid (the weights move)"
            return [f"token steps follow the local error ({self.integrator}, solver.tol = {self.tol:g}): the first tries dt = {self.dt:.6g}; "
                    f"steps land on every record and snapshot time{where}"]
        if self.split <= 1:
            return []
        why = (f" (its Brownian step alone {math.sqrt(2 * self.noise * (self.path.d - 1) * self.path.dt):.3g} rad root mean square, "
               f"model.noise = {self.noise:g})" if self.path.dt > noise_step_limit(self.noise, self.path.d, MAX_DISPLACEMENT) else "")
        return [f"token step {self.dt:.6g} = weights.dt / {self.split}: with the step weights.dt = {self.path.dt:g} "
                f"a token could move more than {MAX_DISPLACEMENT:g} rad" + why]

    def advance(self, t_stop: float, *, should_stop=None) -> bool:
        """Step until t = t_stop (which must lie on the solver's time grid); returns True there.

        ``should_stop`` (optional) is called before every step; when it returns True the
        solver stops early and ``advance`` returns False (a later ``advance(t_stop)`` continues).
        """
        if self.adaptive:
            if t_stop < self._t - SNAP_TOL * self.path.dt:
                raise ValueError(f"t_stop = {t_stop} is before the solver's time t = {self._t}")
            while self._t < t_stop - SNAP_TOL * self.path.dt:
                if should_stop is not None and should_stop():
                    return False
                self._adaptive_step(t_stop)
            return True
        n = (t_stop - self.t) / self.dt
        k = int(round(n))
        if abs(n - k) > 1e-6 or k < 0:
            raise ValueError(f"t_stop = {t_stop} is not on the particle time grid (t = {self.t}, dt = {self.dt})")
        for _ in range(k):
            if should_stop is not None and should_stop():
                return False
            self.step()
        return True

    # -------------------------------------------------------------------- recording
    def record(self) -> dict:
        """The diagnostics row at the current state (docs/model.md §3; the columns
        :data:`spherepde.model.columns.PARTICLE_COLUMNS`, with ``entropy`` when nu > 0)."""
        row = {"t": self.t, "step": self.step_count}
        ev = self._current()
        row.update(self.balance.columns(ev["rates"] if self.path.is_gradient else None))
        row["mean_resultant"] = mean_resultant_length(self.X, self.w)
        row["speed_rms"] = float(np.sqrt(np.sum(self.w * np.sum(ev["v"] ** 2, axis=1))))
        row["n_clusters"] = len(weighted_clusters(self.X, self.w, self.cluster_radius)[1])
        if self.noise > 0:
            row["entropy"] = token_entropy(self.X, self.w)
        return {k: row[k] for k in self.columns}

    def snapshot(self) -> dict:
        """Token positions ``X`` (n, d) and the cluster table ``clusters`` (mass, centre;
        :func:`spherepde.model.clusters.cluster_table`)."""
        return {"X": self.X.copy(), "clusters": cluster_table(self.X, self.w, self.cluster_radius)}

    # ------------------------------------------------------------------ checkpoints
    def get_state(self) -> dict:
        st = {"X": self.X.copy(), "step_count": self.step_count}
        st.update({"balance_" + k: (np.nan if v is None else v) for k, v in self.balance.state().items()})
        if self._rng is not None:
            st[STATE_KEY] = pack_state(self._rng)
        if self.adaptive:  # the time and the controller's state: a resumed run takes the same steps
            st.update({"t": self._t, "h_next": self.h_next, "dt_last": self.dt_last, "rejected": self.rejected, "err_prev": self.err_prev})
        return st

    def set_state(self, st: dict) -> None:
        X = np.asarray(st["X"], float)
        if X.shape != self.X.shape:
            raise ValueError(f"checkpoint tokens have shape {X.shape}, expected {self.X.shape}")
        if self._rng is not None:
            if STATE_KEY not in st:
                raise ValueError(f"the checkpoint holds no token noise state ({STATE_KEY}), but the run has model.noise = {self.noise:g}")
            unpack_state(self._rng, st[STATE_KEY])
        if self.adaptive:
            if "t" not in st or "h_next" not in st:
                raise ValueError(f"the checkpoint holds no time and next step (t, h_next), which the error-controlled integrator {self.integrator!r} needs; "
                                 "it was written by a fixed-step run: resume with that run's solver.integrator")
            self._t, self.h_next = float(st["t"]), float(st["h_next"])
            self.dt_last, self.rejected = float(st.get("dt_last", 0.0)), int(st.get("rejected", 0))
            self.err_prev = float(st.get("err_prev", 1.0))
        elif "t" in st and abs(float(st["t"]) - int(st["step_count"]) * self.dt) > 1e-9 * max(1.0, abs(float(st["t"]))):
            raise ValueError(f"the checkpoint was written by error-controlled steps (t = {float(st['t']):g} after {int(st['step_count'])} steps), "
                             f"not by fixed steps of dt = {self.dt:g}: resume with that run's solver.integrator")
        self.X = X.copy()
        self.step_count = int(st["step_count"])
        self.balance.restore({k: float(st["balance_" + k]) for k in self.balance.state() if "balance_" + k in st})
        self._cache = None
