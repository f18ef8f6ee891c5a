"""Stationary states of the noisy model with one frozen gradient head D = beta I (docs/model.md, "Stationary states").

With token noise nu > 0 (MODEL §9, d_t rho + div_S(rho v) = nu Delta_S rho) and one frozen gradient head
A = beta I, V = s beta I, a stationary density with zero flux solves the self-consistency equation

    softmax:       rho = Z[rho]^{s/nu} / int Z[rho]^{s/nu}      (rho s grad log Z = nu grad rho)
    unnormalised:  rho = exp(s Z[rho]/nu) / int exp(s Z[rho]/nu) (rho s grad Z = nu grad rho)

with Z[rho](x) = int exp(beta x.y) rho(y) dsigma(y), int rho dsigma = 1, on S^2 (d = 3) or S^1 (d = 2).
Written T(rho) for the right-hand side, a state is a fixed point rho = T(rho). The uniform density is one
for every (beta, nu); it loses stability, for s = +1, where the linear rate gamma_1 - nu l(l+1) (S^2) or
gamma_1 - nu (S^1) of :func:`spherepde.model.linear.linear_rate` vanishes (MODEL §9):

    nu_c = i_1(beta)/i_0(beta) = coth beta - 1/beta (softmax S^2),  i_1(beta) (unnormalised S^2),
    nu_c = I_1(beta)/I_0(beta) (softmax S^1),                          I_1(beta) (unnormalised S^1),

and a degree-l (mode-k) state bifurcates where i_l replaces i_1 (I_k replaces I_1). For s = -1 no mode
grows and the uniform state is the stationary state (unnormalised: the free energy E + nu int rho log rho is
strictly convex, the kernel exp(beta x.y) being positive definite).

Two quadratures carry the same equation (both: Z_i = sum_j k_ij W_j rho_j):

* :class:`ReducedGrid` -- the stationary states of one isotropic head are axially symmetric; on S^2 a
  density of u = cos(polar angle) with Gauss-Legendre nodes u_j, ring measures W_j = 2 pi g_j and the
  kernel averaged over the azimuth, k(u, u') = exp(beta u u') I_0(beta sqrt(1-u^2) sqrt(1-u'^2));
  on S^1 an even density on [0, pi] with the trapezoidal rule (spectral for periodic functions) and
  k(t, t') = (e^{beta cos(t - t')} + e^{beta cos(t + t')})/2. Dense, with Newton and stability.
* :class:`MeshGrid` -- any finite-volume geometry (icosphere, circle mesh): cell nodes and measures,
  Z from :func:`spherepde.attention.attention_moments`; damped fixed-point iteration.

Order parameter of degree l (mode k): r_l = sqrt(int int P_l(x.y) rho(x) rho(y)) with P_l the Legendre
polynomial (S^2) or the Chebyshev polynomial T_k (S^1, P_k(cos a) = cos k a): rotation invariant,
r_1 = |int x rho| the mean resultant, and r_l = |int P_l(u) rho| for an axially symmetric density.

Stability: the linearised map J = dT/drho (on mass-free perturbations) is similar to a symmetric operator;
a state is linearly stable (unnormalised: a local minimum of the free energy) when its eigenvalues stay
below 1 (:attr:`SteadyState.stability` is the largest; the reduction checks the symmetric subspace only).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from spherepde.model.velocity import is_normalised

__all__ = [
    "MeshGrid", "ReducedGrid", "SteadyProblem", "SteadyState", "critical_beta", "critical_nu", "published_threshold",
    "map_jacobian", "residual", "seeded", "self_consistent_map", "solve_fixed_point", "solve_newton", "solve_stable", "tricritical_beta", "uniform",
]

#: :func:`solve_stable` accepts a state whose largest eigenvalue of dT/drho is below 1 + MARGINAL (marginal
#: stability at a threshold, where fixed-point iteration would converge only algebraically)
MARGINAL = 1e-8

#: geometry names and their ambient dimension
GEOMETRY_D = {"sphere": 3, "circle": 2}


@dataclass(frozen=True)
class SteadyProblem:
    """One frozen gradient head D = beta I, V = s beta I, noise nu, on S^{d-1} (d = 3 or 2)."""

    d: int = 3
    attention: str = "softmax"
    s: int = 1
    beta: float = 2.0
    nu: float = 0.5

    def __post_init__(self):
        if self.d not in (2, 3):
            raise ValueError(f"stationary states: d = 3 (S^2) or d = 2 (S^1), got d = {self.d}")
        is_normalised(self.attention)  # an unknown kind raises with the list of kinds
        if self.s not in (1, -1):
            raise ValueError(f"stationary states: s = +1 or -1, got {self.s}")
        if not (self.beta > 0 and math.isfinite(self.beta) and self.beta <= 200):
            raise ValueError(f"stationary states: beta must lie in (0, 200], got {self.beta}")
        if not (self.nu > 0 and math.isfinite(self.nu)):
            raise ValueError(f"stationary states: nu must be positive, got {self.nu}")

    @property
    def normalised(self) -> bool:
        return is_normalised(self.attention)

    def with_(self, **kw) -> SteadyProblem:
        return replace(self, **kw)


def critical_nu(beta: float, attention: str = "softmax", d: int = 3, mode: int = 1) -> float:
    """nu where the degree-``mode`` (mode-k) perturbation of the uniform state is neutral for s = +1 (module
    docstring): i_l/i_0, i_l (S^2), I_k/I_0, I_k (S^1) -- the zero of gamma_l - nu l(l+1) of MODEL §9."""
    from scipy.special import ive, spherical_in

    if d == 3:
        v = float(spherical_in(mode, beta))
        return v / float(spherical_in(0, beta)) if is_normalised(attention) else v
    v = float(ive(mode, beta))  # I_k e^{-beta}
    return v / float(ive(0, beta)) if is_normalised(attention) else v * math.exp(beta)


def critical_beta(nu: float, attention: str = "softmax", d: int = 3, mode: int = 1) -> float:
    """beta where :func:`critical_nu` equals ``nu`` (it increases with beta); nan if none below 200
    (softmax: nu_c < 1, so no threshold for nu >= 1)."""
    from scipy.optimize import brentq

    f = lambda b: critical_nu(b, attention, d, mode) - nu  # noqa: E731
    lo, hi = 1e-8, 200.0
    if f(lo) > 0 or f(hi) < 0:
        return math.nan
    return float(brentq(f, lo, hi, xtol=1e-14, rtol=1e-14))


def tricritical_beta(d: int) -> float:
    """beta_* of Mun & Rosenzweig for noisy unnormalised attention on S^{d-1}: I_{d/2+1}(beta)/I_{d/2}(beta) = 1/d
    (continuous transition below, discontinuous above)."""
    from scipy.optimize import brentq
    from scipy.special import ive

    return float(brentq(lambda b: ive(d / 2 + 1, b) / ive(d / 2, b) - 1.0 / d, 1e-6, 100.0, xtol=1e-14))


def published_threshold(beta: float, d: int) -> float:
    """nu_c of the unnormalised head in this package's normalisation from Mun & Rosenzweig's
    K_# = beta^{d/2} / (2^{d/2} Gamma(d/2) I_{d/2}(beta)): their velocity is ours divided by beta and their
    K = 1/(2 nu') with nu' = nu/beta, so nu_c = beta / (2 K_#) (docs/model.md, "Stationary states")."""
    from scipy.special import gamma, iv

    k_sharp = beta ** (d / 2) / (2 ** (d / 2) * gamma(d / 2) * iv(d / 2, beta))
    return float(beta / (2.0 * k_sharp))


# ------------------------------------------------------------------------------ quadratures
class ReducedGrid:
    """The axially symmetric reduction (module docstring), ``n`` nodes; exact to quadrature.

    Attributes: d, n, coord (n,) u_j (S^2) or theta_j (S^1), weights (n,) W_j with sum |S^{d-1}|.
    """

    dense = True

    def __init__(self, d: int = 3, n: int = 128):
        self.d, self.n = int(d), int(n)
        if self.d == 3:
            u, g = np.polynomial.legendre.leggauss(self.n)
            self.coord, self.weights = u, 2.0 * np.pi * g
            self._sin = np.sqrt(np.clip(1.0 - u * u, 0.0, None))
        else:
            t = np.pi * np.arange(self.n) / (self.n - 1)
            w = np.full(self.n, np.pi / (self.n - 1))
            w[[0, -1]] *= 0.5
            self.coord, self.weights = t, 2.0 * w
        self._cache: tuple[float, np.ndarray] | None = None

    @property
    def measure(self) -> float:
        return 4.0 * np.pi if self.d == 3 else 2.0 * np.pi

    def kernel(self, beta: float) -> np.ndarray:
        """k_ij (n, n), Z_i = sum_j k_ij W_j rho_j."""
        if self._cache is not None and self._cache[0] == beta:
            return self._cache[1]
        from scipy.special import i0e

        if self.d == 3:
            u, s = self.coord, self._sin
            ss = beta * np.outer(s, s)
            k = np.exp(beta * np.outer(u, u) + ss) * i0e(ss)
        else:
            t = self.coord
            k = 0.5 * (np.exp(beta * np.cos(t[:, None] - t[None, :])) + np.exp(beta * np.cos(t[:, None] + t[None, :])))
        self._cache = (beta, k)
        return k

    def zsum(self, rho, beta: float) -> np.ndarray:
        return self.kernel(beta) @ (self.weights * rho)

    def mode_function(self, mode: int) -> np.ndarray:
        """P_l(u) (S^2) or cos(k theta) (S^1) at the nodes."""
        if self.d == 3:
            return np.polynomial.legendre.legval(self.coord, [0.0] * mode + [1.0])
        return np.cos(mode * self.coord)

    def order(self, rho, mode: int = 1) -> float:
        return float(abs(np.sum(self.weights * rho * self.mode_function(mode))))


class MeshGrid:
    """The quadrature of a finite-volume geometry (icosphere, circle mesh): cell nodes x_c and measures |C_c|."""

    dense = False

    def __init__(self, mesh, *, summation: str = "auto", tol: float = 1e-12):
        from spherepde.geometry.protocol import geometry_of

        geom = geometry_of(mesh)
        self.d = int(geom.d)
        self.nodes = np.ascontiguousarray(geom.nodes, dtype=np.float64)
        self.weights = np.asarray(geom.areas, dtype=np.float64)
        self.n = self.weights.size
        self.summation, self.tol = summation, tol

    @property
    def measure(self) -> float:
        return float(self.weights.sum())

    def log_zsum(self, rho, beta: float) -> np.ndarray:
        from spherepde.attention import attention_moments

        A = beta * np.eye(self.d)[None]
        logz, _, _ = attention_moments(self.nodes, self.nodes, self.weights * rho, A, log=True, summation=self.summation, tol=self.tol)
        return logz[:, 0]

    def zsum(self, rho, beta: float) -> np.ndarray:
        return np.exp(self.log_zsum(rho, beta))

    def mode_function(self, mode: int) -> np.ndarray:
        """P_l(z) (S^2, axis e_3) or cos(k theta) (S^1) at the cell nodes (seeds)."""
        if self.d == 3:
            return np.polynomial.legendre.legval(self.nodes[:, 2], [0.0] * mode + [1.0])
        return np.cos(mode * np.arctan2(self.nodes[:, 1], self.nodes[:, 0]))

    def order(self, rho, mode: int = 1) -> float:
        """r_l (module docstring): |sum_c m_c x_c| for l = 1, else the double sum of P_l(x.y) in blocks."""
        m = self.weights * rho
        if mode == 1:
            return float(np.linalg.norm(m @ self.nodes))
        if self.d == 2:
            th = np.arctan2(self.nodes[:, 1], self.nodes[:, 0])
            return float(abs(np.sum(m * np.exp(1j * mode * th))))
        total = 0.0
        for a in range(0, self.n, 1024):
            c = np.clip(self.nodes[a:a + 1024] @ self.nodes.T, -1.0, 1.0)
            total += float(m[a:a + 1024] @ np.polynomial.legendre.legval(c, [0.0] * mode + [1.0]) @ m)
        return math.sqrt(max(total, 0.0))


# ------------------------------------------------------------------------------ the map T
def uniform(grid) -> np.ndarray:
    return np.full(grid.n, 1.0 / grid.measure)


def _exponent(grid, p: SteadyProblem, rho):
    """q with T = e^q / int e^q, and dq/dZ (module docstring)."""
    if p.normalised:
        if isinstance(grid, MeshGrid):
            logz = grid.log_zsum(rho, p.beta)
            return (p.s / p.nu) * logz, (p.s / p.nu) * np.exp(-logz)
        z = grid.zsum(rho, p.beta)
        return (p.s / p.nu) * np.log(z), p.s / (p.nu * z)
    z = grid.zsum(rho, p.beta)
    return (p.s / p.nu) * z, np.full(grid.n, p.s / p.nu)


def self_consistent_map(grid, p: SteadyProblem, rho) -> np.ndarray:
    """T(rho) = e^q / sum_j W_j e^q_j with q = (s/nu) log Z (softmax) or (s/nu) Z (unnormalised)."""
    q, _ = _exponent(grid, p, rho)
    e = np.exp(q - q.max())
    return e / np.sum(grid.weights * e)


def residual(grid, p: SteadyProblem, rho) -> float:
    """max |rho - T(rho)| / max rho: 0 at a stationary state."""
    return float(np.max(np.abs(rho - self_consistent_map(grid, p, rho))) / np.max(np.abs(rho)))


@dataclass(frozen=True)
class SteadyState:
    """A computed stationary density ``rho`` (at the grid's nodes) with its diagnostics."""

    problem: SteadyProblem
    rho: np.ndarray
    order: float  # r_mode (module docstring)
    converged: bool
    residual: float
    iterations: int
    stability: float  # largest eigenvalue of dT/drho (nan where not computed); < 1: linearly stable
    mode: int = 1

    @property
    def stable(self) -> bool:
        """Linearly stable, marginal stability (within :data:`MARGINAL`) included."""
        return bool(self.stability < 1.0 + MARGINAL)


def map_jacobian(grid: ReducedGrid, p: SteadyProblem, rho):
    """T(rho) and dT/drho (n, n) on the reduction: (diag T - T (W T)^T) diag(dq/dZ) K diag(W)."""
    q, dq = _exponent(grid, p, rho)
    e = np.exp(q - q.max())
    T = e / np.sum(grid.weights * e)
    KW = grid.kernel(p.beta) * grid.weights[None, :]
    B = dq[:, None] * KW
    J = T[:, None] * B - np.outer(T, (grid.weights * T) @ B)
    return T, J


def stability(grid: ReducedGrid, p: SteadyProblem, rho) -> float:
    """Largest real part of the eigenvalues of dT/drho at ``rho`` (< 1: linearly stable)."""
    _, J = map_jacobian(grid, p, rho)
    return float(np.max(np.linalg.eigvals(J).real))


def _state(grid, p, rho, converged, its, mode, stab=math.nan) -> SteadyState:
    return SteadyState(p, rho, grid.order(rho, mode), bool(converged), residual(grid, p, rho), int(its), float(stab), mode)


def solve_newton(grid: ReducedGrid, p: SteadyProblem, start, *, tol: float = 1e-11, maxiter: int = 60, mode: int = 1) -> SteadyState:
    """Newton's method on F(rho) = rho - T(rho) with a backtracking line search (reduction only);
    converges quadratically also near the bifurcation, to the nearest state whatever its stability."""
    rho = np.array(start, dtype=np.float64)
    rho /= np.sum(grid.weights * rho)
    converged, its = False, 0
    for its in range(1, maxiter + 1):
        T, J = map_jacobian(grid, p, rho)
        F = rho - T
        norm = np.max(np.abs(F)) / np.max(rho)
        if norm < tol:
            converged = True
            break
        step = np.linalg.solve(np.eye(grid.n) - J, -F)
        lam = 1.0
        while lam > 1e-4:
            trial = rho + lam * step
            if np.all(trial > 0) and residual(grid, p, trial) < (1 - 0.25 * lam) * norm:
                break
            lam *= 0.5
        if lam <= 1e-4 or not np.all(trial > 0):
            break
        rho = trial / np.sum(grid.weights * trial)
    stab = stability(grid, p, rho)
    return _state(grid, p, rho, converged, its, mode, stab)


def solve_fixed_point(grid, p: SteadyProblem, start, *, tol: float = 1e-10, maxiter: int = 20000, damping: float = 1.0, mode: int = 1) -> SteadyState:
    """Damped fixed-point iteration rho <- (1 - a) rho + a T(rho) (any grid); ``a`` halves whenever two
    successive updates point against each other (an eigenvalue of dT/drho below -1: s = -1 with small nu). Converges only to linearly stable states; slowly near a
    bifurcation (the rate is the largest eigenvalue of dT/drho)."""
    rho = np.array(start, dtype=np.float64)
    rho /= np.sum(grid.weights * rho)
    a, last, converged, its = damping, None, False, 0
    for its in range(1, maxiter + 1):
        T = self_consistent_map(grid, p, rho)
        res = float(np.max(np.abs(rho - T)) / np.max(rho))
        if res < tol:
            converged = True
            break
        step = T - rho
        if last is not None and np.sum(grid.weights * step * last) < 0:  # the updates alternate: an eigenvalue below -1
            a = max(0.5 * a, 1e-3)
        last = step
        rho = rho + a * step
    stab = stability(grid, p, rho) if grid.dense else math.nan
    return _state(grid, p, rho, converged, its, mode, stab)


def seeded(grid, rho, mode: int = 1, amplitude: float = 1e-3, sign: int = 1) -> np.ndarray:
    """rho + amplitude * sign * P_l (relative to the uniform value), renormalised: a small nonuniform seed."""
    out = np.asarray(rho, dtype=np.float64) * (1.0 + sign * amplitude * grid.mode_function(mode))
    return out / np.sum(grid.weights * out)


def solve_stable(grid: ReducedGrid, p: SteadyProblem, start, *, mode: int = 1, tol: float = 1e-11, maxiter: int = 20000) -> SteadyState:
    """The linearly stable state reached from ``start`` (what the noisy dynamics would settle on): the
    uniform state if ``start`` is within 5 % of it and it is stable; else Newton from ``start``; if that state is unstable or Newton fails, damped fixed-point iteration (which only
    converges to stable states) from it, pushed off the unstable state, with Newton polishing every 200
    iterations once it lands in a stable state's basin. A state whose largest eigenvalue exceeds 1 by less
    than :data:`MARGINAL` (the uniform state exactly at the threshold) counts as stable."""
    u = uniform(grid)
    if np.max(np.abs(np.asarray(start) / u - 1.0)) < 0.05:  # near the uniform state: it attracts if it is (marginally) stable
        ust = _state(grid, p, u, True, 0, mode, stability(grid, p, u))
        if ust.stability < 1.0 + MARGINAL:
            return ust
    st = solve_newton(grid, p, start, tol=tol, mode=mode)
    if st.converged and st.stability < 1.0 + MARGINAL:
        return st
    rho = seeded(grid, st.rho, mode, 1e-2) if st.converged else np.array(start, dtype=np.float64)
    done = 0
    while done < maxiter:
        fp = solve_fixed_point(grid, p, rho, tol=tol, maxiter=200, mode=mode)
        done += fp.iterations
        if fp.converged and fp.stability < 1.0 - MARGINAL:
            return replace(fp, iterations=st.iterations + done)
        polish = solve_newton(grid, p, fp.rho, tol=tol, mode=mode)
        if polish.converged and polish.stability < 1.0 - MARGINAL and abs(polish.order - fp.order) < 0.05 + 10 * fp.residual:
            return replace(polish, iterations=st.iterations + done + polish.iterations)
        rho = fp.rho
    return replace(fp, iterations=st.iterations + done, converged=False)
