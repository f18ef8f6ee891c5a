"""The circle S^1 (d = 2): linear rates, nucleation of clusters, merge times and cost against Bruno et al.'s scheme.

Bruno, Pasqualotto & Agazzi (ICLR 2025; "B" below) study unnormalised attention (USA) on the circle with
one frozen head A = beta I, V = I (c = 1 in docs/model.md "The circle"):

    d_t rho + d_theta(rho v) = 0,   v(theta) = -int e^{beta cos(theta - phi)} sin(theta - phi) rho(phi) dphi.

This study measures the density level (``mesh.kind = "circle"``) and the tokens on that model and its
relatives. Parts:

* **Linear rates.** rho_0 = 1/(2 pi) + (eps/pi) sum_{k=1..4} cos(k theta + psi_k) (exact cell averages,
  psi_k = 0.7 k, so mu_hat_k = eps e^{i psi_k} has both a cosine and a sine part). The complex Fourier
  coefficient mu_hat_k(t) grows like e^{gamma_k t}, gamma_k = (c/beta) k^2 I_k(beta) / I_0(beta)
  (softmax) or (c/beta) k^2 I_k(beta) (USA) (:func:`spherepde.model.linear.linear_rate`), for gradient
  heads (c = s beta, s = +1 and -1) and B's heads (general, c = 1). Measured: the least-squares slope of
  log |mu_hat_k(t)| over [0, T_lin], T_lin = ``rate_growth`` / max_k |gamma_k|. Density level: order-2
  finite volumes, SSP-RK3, ``rate_cells`` arcs; check: relative error <= ``rate_tol`` for every k and case.
  Tokens: ``rate_draws`` draws of ``rate_tokens`` tokens at the quantiles (i + U)/n of rho_0 (one seeded
  uniform shift U per draw; inverse distribution function), Heun steps, the empirical
  mu_hat_k = (1/n) sum_i e^{-ik theta_i}. Quantiles give the tokens the low Fourier coefficients of rho_0
  to near round-off. Independent draws would not do: their sampling noise of size n^{-1/2} sits in every
  mode, and its quadratic interactions (modes m and k - m growing at gamma_m + gamma_{k-m} > gamma_k) swamp
  the slow modes within the window (errors of tens of per cent at n = 2,000 when this study was
  written). Check: the mean over the draws within ``rate_tol_tokens`` plus three standard errors of the mean.
  (The shifts leave the low modes exact, so the draws agree to round-off and the band is ``rate_tol_tokens``.)
* **B's two experiments** (beta = 5 to T = 0.5 and beta = 7 to T = 0.1; B's model, c = 1). B starts from
  1/(2 pi) + 0.01 N(0, 1) per grid point: white noise whose Fourier coefficients have size
  0.01 (2 pi dx)^{1/2}, so the start depends on the grid and tends to the (never clustering) uniform state
  as dx -> 0 -- it has no continuum limit. Here the start is a seeded random-phase Fourier field,
  rho_0 = 1/(2 pi) + (a/pi) sum_{k=1..8} cos(k theta + psi_k), with a = ``b_amp`` = 6e-4 ~ 0.01 (2 pi dx_B)^{1/2},
  B's amplitude on their grid of 9,999 cells; it is given to the density level as exact cell averages
  and to ``b_tokens`` tokens placed at the quantiles (i + 1/2)/N of its distribution function (their
  low Fourier coefficients equal the field's to near round-off). Clusters are counted by one rule for
  both (the cells of the density, or of the tokens' histogram on the same mesh, denser than 5/(4 pi),
  linked within the chordal radius 0.1; :func:`spherepde.model.clusters.weighted_clusters`). Checks: the
  density level and the tokens have the same number of clusters and their positions agree within
  ``b_pos_tol`` rad. B's predictions are paper claims: the fraction of the seeds that end with
  k* = argmax_k gamma_k clusters (3 at beta = 5, 4 at beta = 7) must have a 95 % (Clopper--Pearson)
  interval that contains 1; the distance of the clusters from (2 pi j - arg mu_hat_{k*}(0))/k*
  (:func:`spherepde.model.linear.nucleation_angles`) is stated with it, not counted. Neither is a solver
  check: with gamma_3 / gamma_4 = 0.95 at beta = 7 the winner depends on the start, and the other modes
  (and the clusters' later motion) move the clusters away from the single-mode positions.
* **Two-point merge ODE** (gradient head D = beta I, s = +1, c = beta). Two narrow von Mises bumps
  (kappa = 2000, carried as point masses from the start: implicit step with ``atoms``) of masses m1, 1 - m1
  at the arc theta0; the merge event (angle < MERGE_ANGLE) against
  :func:`spherepde.studies.metastability.merge_time_ode` with ``attention`` (softmax or USA); check:
  relative error <= ``merge_tol``.
* **Mesh convergence** of B's beta = 5 problem to T = 0.5 (seed 0 of the random field, order 2, SSP-RK3,
  B's heads): W1 at T of each mesh against the finest (``ref_cells``), and the observed order of W1 in h.
  W1 on the circle is closed form: min_c int |F_mu - F_nu - c| dtheta with F the distribution functions
  (the optimal c is the median of F_mu - F_nu; :func:`w1_circle`).
* **The authors' d = 2 settings** (their ``tokens_s1_clustered``: n = ``paper_n`` = 100 tokens, H = ``paper_H`` = 10
  gradient heads, D_h(0) = G + G^T, s = -1, OU or oscillating weights; docs/model.md §2). One weight path per
  regime (seed ``paper_seed``, exact transition on a grid of 0.02) drives the density level (the octahedral
  density, sigma = 0.05, on ``paper_cells`` arcs, order 2, SSP-RK2) and ``paper_draws`` draws of the n tokens
  (explicit Euler, dt = 5e-3, the authors' scheme). Check: the time average <G^2> over t >= ``paper_t_avg``
  of the density level within ``paper_spread`` = 3 standard deviations of one draw of the tokens' mean. (At 2
  the first quick run failed the oscillating case, just above the band: 100 tokens lie above the mean-field
  value, the finite-n offset the S^2 studies measure as well.)
* **Cost against B's scheme.** :func:`b_scheme` is B's PDE solver written in NumPy: first-order
  Lax--Friedrichs on ``b_scheme_cells`` = 9,999 points, dt = 0.02 dx, the velocity a dense circular
  convolution (by FFT). It starts from the same random field (point values) and runs to the same T. Both
  are timed in this process, and both are measured by W1 at T against the finest spherepde mesh.
  Checks (``cost_checks``; off at smoke size, where B's grid is smaller): the density level on
  ``cost_cells`` arcs (order 2, SSP-RK3, CFL 0.5, FFT sums) is at least 10x faster and at least as close
  to the reference as B's scheme.
  B's notebook computes the convolution with ``torch.nn.functional.conv1d``, which is a
  cross-correlation: sum_k u_k W'(x_i + x_k), the velocity of the mirror image of the density. With it a
  sine mode decays while a cosine mode grows (``reflected=True`` reproduces it; the summary reports the
  two rates). The comparison here uses the true convolution, the scheme the paper describes.
"""

from __future__ import annotations

import math
import time

import numpy as np

from spherepde.model.linear import fastest_mode, fourier_coefficient, linear_rate, nucleation_angles
from spherepde.studies import common as _v
from spherepde.studies.common import checks_line, paper_claim, require_finite, save_figure, solver_check, study_params

NAME = "circle"
TITLE = "The circle S^1: linear rates, nucleation (Bruno et al.), merge times, convergence and cost against Lax-Friedrichs"

USA = "unnormalised"
#: (attention, heads) of the linear-rate cases: heads "+1" / "-1" are gradient heads (c = s beta), "B" B's (c = 1)
RATE_CASES = (("softmax", "+1"), ("softmax", "-1"), ("softmax", "B"), (USA, "+1"), (USA, "-1"), (USA, "B"))
#: the modes of the linear-rate start and their phases psi_k
RATE_MODES = (1, 2, 3, 4)
#: The density level's attention sums: "fast" (FFT on the uniform circle meshes, error-controlled to 1e-10). "auto" would
#: sum directly below 10^6 (target, source) pairs, a threshold set on S^2: on 512 arcs that is about 10x slower than the FFT.
SUMMATION = "fast"

SIZES = _v.sizes_table({
    "rate_beta": _v.per_size(2.0, 3.0, 5.0),
    "rate_cells": _v.per_size(128, 256, 512),
    "rate_eps": 1e-4,
    "rate_growth": 2.0,
    "rate_tol": 0.02,
    "rate_tokens": _v.per_size(2000, 20000, 100000),
    "rate_draws": _v.per_size(2, 4, 8),
    "rate_token_steps": 100,
    "rate_tol_tokens": 0.03,
    "b_cases": _v.per_size([[5.0, 0.5]], [[5.0, 0.5], [7.0, 0.1]], [[5.0, 0.5], [7.0, 0.1]]),
    "b_cells": _v.per_size(512, 1024, 2048),
    "b_amp": 6e-4,
    "b_seeds": _v.per_size([0], [0, 1, 2], [0, 1, 2, 3, 4, 5, 6, 7]),
    "b_tokens": _v.per_size(4000, 20000, 20000),
    "b_token_steps": _v.per_size(300, 600, 1200),
    "b_pos_tol": 0.05,
    "merge_cases": _v.per_size(
        [[4.0, 0.5, 90.0, USA]],
        [[4.0, 0.5, 90.0, USA], [6.0, 0.7, 60.0, USA], [8.0, 0.5, 90.0, "softmax"], [8.0, 0.6, 70.0, "softmax"]],
        [[2.0, 0.5, 120.0, USA], [4.0, 0.5, 90.0, USA], [6.0, 0.7, 60.0, USA], [8.0, 0.5, 90.0, "softmax"], [8.0, 0.6, 70.0, "softmax"],
         [10.0, 0.5, 100.0, "softmax"]],
    ),
    "merge_cells": 256,
    "merge_tol": 0.01,
    "conv_cells": _v.per_size([128, 256], [256, 512, 1024], [256, 512, 1024, 2048, 4096]),
    "ref_cells": _v.per_size(1024, 4096, 16384),
    "cost_cells": _v.per_size(256, 512, 512),
    "b_scheme_cells": _v.per_size(999, 9999, 9999),
    "cost_beta": 5.0,
    "cost_T": _v.per_size(0.4, 0.5, 0.5),
    "cost_checks": _v.per_size(False, True, True),
    "paper_regimes": _v.per_size(["ou"], ["ou", "osc-in-phase"], ["ou", "osc-shift", "osc-in-phase"]),
    "paper_H": 10,
    "paper_n": 100,
    "paper_draws": _v.per_size(4, 6, 16),
    "paper_T": _v.per_size(1.0, 4.0, 20.0),
    "paper_t_avg": _v.per_size(0.5, 1.0, 2.5),
    "paper_cells": _v.per_size(128, 256, 512),
    "paper_seed": 0,
    "paper_spread": 3.0,
})

RANGES = {
    "rate_beta": _v.Range(float, 0.0, 20.0, open_lo=True, what="beta"),
    "rate_cells": _v.Range(int, 16, 10**6, what="a number of arcs"),
    "rate_eps": _v.Range(float, 0.0, 0.05, open_lo=True, what="a perturbation amplitude"),
    "rate_growth": _v.Range(float, 0.0, 10.0, open_lo=True, what="e-folds of the fastest mode"),
    "rate_tol": _v.FRACTION,
    "rate_tokens": _v.Range(int, 100, 10**6, what="a number of tokens"),
    "rate_draws": _v.Range(int, 2, 100, what="a number of token draws"),
    "rate_token_steps": _v.STEPS,
    "rate_tol_tokens": _v.FRACTION,
    "b_cases": _v.Range(float, 0.0, 20.0, open_lo=True, what="a case [beta, T]"),
    "b_cells": _v.Range(int, 64, 10**6, what="a number of arcs"),
    "b_amp": _v.Range(float, 0.0, 0.05, open_lo=True, what="a Fourier amplitude"),
    "b_seeds": _v.Range(int, 0, 2**32 - 1, what="a seed"),
    "b_tokens": _v.Range(int, 100, 10**6, what="a number of tokens"),
    "b_token_steps": _v.STEPS,
    "b_pos_tol": _v.Range(float, 0.0, 3.2, open_lo=True, what="an angle (rad)"),
    "merge_cases": _v.Range(None),
    "merge_cells": _v.Range(int, 16, 10**6, what="a number of arcs"),
    "merge_tol": _v.FRACTION,
    "conv_cells": _v.Range(int, 16, 10**6, what="a number of arcs"),
    "ref_cells": _v.Range(int, 16, 10**6, what="a number of arcs"),
    "cost_cells": _v.Range(int, 16, 10**6, what="a number of arcs"),
    "b_scheme_cells": _v.Range(int, 16, 10**6, what="a number of grid points"),
    "cost_beta": _v.Range(float, 0.0, 20.0, open_lo=True, what="beta"),
    "cost_T": _v.TIME,
    "cost_checks": _v.BOOL,
    "paper_regimes": _v.Range(None, choices=("ou", "osc-shift", "osc-in-phase", "osc-figure")),
    "paper_H": _v.HEADS,
    "paper_n": _v.Range(int, 2, 10**5, what="a number of tokens"),
    "paper_draws": _v.Range(int, 2, 1000, what="a number of token draws"),
    "paper_T": _v.TIME,
    "paper_t_avg": _v.TIME0,
    "paper_cells": _v.Range(int, 16, 10**6, what="a number of arcs"),
    "paper_seed": _v.Range(int, 0, 2**32 - 1, what="a seed"),
    "paper_spread": _v.Range(float, 0.0, 100.0, open_lo=True, what="a number of standard deviations"),
}


def check_params(p: dict) -> str | None:
    """The rules across the size parameters: ``cost_cells`` is one of ``conv_cells``, every mesh of the
    convergence part is coarser than ``ref_cells``, and the merge cases are [beta, m1, theta0, attention]."""
    if p["cost_cells"] not in p["conv_cells"]:
        return f"cost_cells: {p['cost_cells']} is not one of conv_cells {p['conv_cells']}; add it there or pick one of them"
    if not p["paper_t_avg"] < p["paper_T"]:
        return f"paper_t_avg: {p['paper_t_avg']:g} must lie before paper_T = {p['paper_T']:g}"
    if max(p["conv_cells"]) >= p["ref_cells"]:
        return f"ref_cells: {p['ref_cells']} must be finer than every mesh of conv_cells {p['conv_cells']}"
    for c in p["merge_cases"]:
        if not (isinstance(c, (list, tuple)) and len(c) == 4 and c[3] in ("softmax", USA) and 0 < float(c[0]) <= 64
                and 0 < float(c[1]) < 1 and 0 < float(c[2]) < 180):
            return f"merge_cases: {c!r} is not [beta in (0, 64], m1 in (0, 1), theta0 in (0, 180) degrees, 'softmax' or 'unnormalised']"
    for c in p["b_cases"]:
        if not (isinstance(c, (list, tuple)) and len(c) == 2):
            return f"b_cases: {c!r} is not a [beta, T] pair; e.g. [[5.0, 0.5], [7.0, 0.1]]"
    return None


# ------------------------------------------------------------------ weights, starts, measures
def _path(beta: float, T: float, heads: str, dt: float | None = None):
    """One frozen head A = beta I on S^1: gradient (V = s beta I, heads "+1" / "-1") or B's (general, V = I)."""
    from spherepde.model.weights import FrozenProcess, generate_weight_path

    dt = T if dt is None else dt
    if heads == "B":
        return generate_weight_path(FrozenProcess(), H=1, d=2, T=T, dt=dt, init="beta", beta=beta, heads="general", value_init=np.eye(2))
    return generate_weight_path(FrozenProcess(), H=1, d=2, T=T, dt=dt, init="beta", beta=beta, sign=float(heads))


def _c(beta: float, heads: str) -> float:
    return 1.0 if heads == "B" else float(heads) * beta


def fourier_field(mesh, amps, phases) -> np.ndarray:
    """Exact cell averages of 1/(2 pi) + (1/pi) sum_k a_k cos(k theta + psi_k), k = 1, 2, ... (mu_hat_k = a_k e^{i psi_k})."""
    from spherepde.geometry.circle_densities import fourier_average

    rho = np.full(mesh.n_cells, 1.0 / (2.0 * math.pi))
    for k, (a, psi) in enumerate(zip(amps, phases), start=1):
        rho += (a / math.pi) * (math.cos(psi) * fourier_average(mesh, k, "cos") - math.sin(psi) * fourier_average(mesh, k, "sin"))
    return rho


def _field_cdf(theta, amps, phases) -> np.ndarray:
    """Distribution function of the field of :func:`fourier_field` on [0, 2 pi]."""
    F = np.asarray(theta, float) / (2.0 * math.pi)
    for k, (a, psi) in enumerate(zip(amps, phases), start=1):
        F = F + (a / (math.pi * k)) * (np.sin(k * theta + psi) - math.sin(psi))
    return F


def field_tokens(u, amps, phases) -> np.ndarray:
    """Angles with distribution function F^{-1}(u) for the field of :func:`fourier_field` (inverse by interpolation on 2^16 points)."""
    grid = np.linspace(0.0, 2.0 * math.pi, 2**16 + 1)
    return np.interp(np.asarray(u, float), _field_cdf(grid, amps, phases), grid)


def _unit(theta) -> np.ndarray:
    return np.stack([np.cos(theta), np.sin(theta)], axis=1)


def _coefficients(mesh, rho, modes) -> np.ndarray:
    """mu_hat_k = int e^{-ik theta} rho dtheta of cell averages, exactly (piecewise-constant density)."""
    from spherepde.geometry.circle_densities import fourier_average

    m = rho * mesh.areas
    return np.array([m @ fourier_average(mesh, k, "cos") - 1j * (m @ fourier_average(mesh, k, "sin")) for k in modes])


def w1_circle(edges_a, masses_a, edges_b, masses_b, atoms_a=None, atoms_b=None, points: int = 2**18) -> float:
    """W1 on the circle of two measures, each piecewise-constant on arcs (``edges`` (nc + 1,) increasing from
    0 to 2 pi, ``masses`` (nc,)) plus optional atoms (angles, masses): min_c int |F_a - F_b - c| dtheta with the
    distribution functions F from 0, c the median of F_a - F_b (Rabin, Delon & Gousseau's closed form for the
    circle), by the midpoint rule on ``points`` angles."""
    th = (np.arange(points) + 0.5) * (2.0 * math.pi / points)

    def cdf(edges, masses, atoms):
        F = np.interp(th, edges, np.concatenate([[0.0], np.cumsum(masses)]))
        if atoms is not None and len(atoms[0]):
            ang, m = np.mod(np.asarray(atoms[0], float), 2 * math.pi), np.asarray(atoms[1], float)
            F = F + np.sum(m[None, :] * (ang[None, :] <= th[:, None]), axis=1)
        return F

    G = cdf(edges_a, masses_a, atoms_a) - cdf(edges_b, masses_b, atoms_b)
    return float(np.mean(np.abs(G - np.median(G))) * 2.0 * math.pi)


def _edges(mesh) -> np.ndarray:
    return np.append(mesh.phi, mesh.phi[0] + 2.0 * math.pi) - mesh.phi[0]


def cluster_angles(mesh, rho) -> tuple[np.ndarray, np.ndarray]:
    """Angles and masses of the clusters of cell densities ``rho``: cells denser than 5/(4 pi) linked within the
    chordal radius 0.1 (:func:`spherepde.model.clusters.weighted_clusters`, the mesh solver's rule), by decreasing mass."""
    from spherepde.model.clusters import weighted_clusters
    from spherepde.solvers.atoms import DENSE_FLOOR

    dense = rho >= DENSE_FLOOR
    _, m, c = weighted_clusters(mesh.nodes[dense], rho[dense] * mesh.areas[dense])
    return np.mod(np.arctan2(c[:, 1], c[:, 0]), 2.0 * math.pi), m


def _match(a, b) -> float:
    """Largest arc from a point of ``b`` to the nearest point of ``a`` (inf if either is empty)."""
    from spherepde.geometry.circle import arc_between

    if len(a) == 0 or len(b) == 0:
        return math.inf
    return float(max(min(float(arc_between(x, y)) for x in a) for y in b))


# ------------------------------------------------------------------ B's scheme
def b_scheme(u0, beta: float, T: float, *, c: float = 1.0, reflected: bool = False) -> tuple[np.ndarray, int]:
    """Bruno, Pasqualotto & Agazzi's PDE solver (their public notebook, ``PDESimulation``), in NumPy.

    Nodes x_j = j dx, j = 0..n-1, dx = 2 pi / n (B: n = 9,999), point values u0 (n,). First-order
    Lax--Friedrichs with the flux f = u v,

        u_j^{m+1} = (u_{j-1}^m + u_{j+1}^m) / 2 - (dt / (2 dx)) (f_{j+1}^m - f_{j-1}^m),
        v_j = sum_k W'(x_j - x_k) u_k dx,   W'(x) = -c e^{beta cos x} sin x,

    a dense circular convolution, here by FFT (exactly the same sum, O(n log n)). B's step is
    dt = 0.02 dx; here dt = T / ceil(T / (0.02 dx)) <= 0.02 dx, so that the run ends at T exactly.
    ``reflected``: B's notebook literally (``torch.nn.functional.conv1d`` is a cross-correlation):
    v_j = sum_k W'(x_j + x_k) u_k dx. Returns the values at T and the number of steps.
    """
    u = np.array(u0, dtype=np.float64)
    n = u.size
    dx = 2.0 * math.pi / n
    steps = int(math.ceil(T / (0.02 * dx) - 1e-9))
    dt = T / steps
    x = dx * np.arange(n)
    what = np.fft.rfft(-c * np.exp(beta * np.cos(x)) * np.sin(x) * dx)
    lam = dt / (2.0 * dx)
    for _ in range(steps):
        if reflected:  # sum_k W'(x_{j+k}) u_k: the convolution of W' with u(-x)
            v = np.fft.irfft(what * np.conj(np.fft.rfft(u)), n)
        else:
            v = np.fft.irfft(what * np.fft.rfft(u), n)
        f = u * v
        u = 0.5 * (np.roll(u, 1) + np.roll(u, -1)) - lam * (np.roll(f, -1) - np.roll(f, 1))
    return u, steps


# ------------------------------------------------------------------ linear rates
def _rate_start(eps: float):
    return [eps] * len(RATE_MODES), [0.7 * k for k in RATE_MODES]


def _fit(ts, coefs) -> np.ndarray:
    """Least-squares slopes of log |mu_hat_k(t)|, coefs (len(ts), modes)."""
    return np.array([np.polyfit(ts, np.log(np.abs(coefs[:, i])), 1)[0] for i in range(coefs.shape[1])])


def _rate_mesh(p, attention: str, heads: str, T: float) -> np.ndarray:
    from spherepde.geometry.circle import uniform_circle
    from spherepde.solvers.mesh import MeshSolver

    mesh = uniform_circle(int(p["rate_cells"]))
    rho0 = fourier_field(mesh, *_rate_start(p["rate_eps"]))
    ms = MeshSolver(mesh, rho0, _path(p["rate_beta"], T, heads, T / 10), velocity="midpoint" if heads == "B" else "potential", order=2,
                    integrator="ssprk3", attention=attention, summation=SUMMATION)
    ts, cs = [0.0], [_coefficients(mesh, ms.rho, RATE_MODES)]
    for t in np.linspace(0.0, T, 11)[1:]:
        ms.advance(float(t))
        ts.append(ms.t)
        cs.append(_coefficients(mesh, ms.rho, RATE_MODES))
    return _fit(np.array(ts), np.array(cs))


def _rate_tokens(p, attention: str, heads: str, T: float, seed: int) -> np.ndarray:
    from spherepde.solvers.particles import ParticleSolver

    n = int(p["rate_tokens"])
    u = (np.arange(n) + np.random.default_rng(seed).uniform()) / n  # quantiles, shifted at random
    theta = field_tokens(u, *_rate_start(p["rate_eps"]))
    steps = int(p["rate_token_steps"])
    ps = ParticleSolver(_unit(theta), _path(p["rate_beta"], T, heads, T / 10), dt=T / steps, integrator="heun", attention=attention)

    def coefs():
        th = np.arctan2(ps.X[:, 1], ps.X[:, 0])
        return [fourier_coefficient(th, k) for k in RATE_MODES]

    ts, cs = [0.0], [coefs()]
    for t in np.linspace(0.0, T, 11)[1:]:
        ps.advance(float(t))
        ts.append(ps.t)
        cs.append(coefs())
    return _fit(np.array(ts), np.array(cs))


def _rates(p, log) -> list:
    out = []
    beta = float(p["rate_beta"])
    for attention, heads in RATE_CASES:
        c = _c(beta, heads)
        gamma = np.array([linear_rate(k, beta, c, attention=attention, d=2) for k in RATE_MODES])
        T = float(p["rate_growth"]) / float(np.max(np.abs(gamma)))
        mesh_rates = _rate_mesh(p, attention, heads, T)
        tok = np.array([_rate_tokens(p, attention, heads, T, 1000 + s) for s in range(int(p["rate_draws"]))])
        r = {"attention": attention, "heads": heads, "c": c, "T": T, "gamma": gamma.tolist(), "mesh": mesh_rates.tolist(),
             "mesh_rel_err": (np.abs(mesh_rates - gamma) / np.abs(gamma)).tolist(),
             "tokens_mean": tok.mean(axis=0).tolist(), "tokens_sem": (tok.std(axis=0, ddof=1) / math.sqrt(len(tok))).tolist(),
             "tokens_rel_err": (np.abs(tok.mean(axis=0) - gamma) / np.abs(gamma)).tolist()}
        log(f"circle rates {attention}, heads {heads}: mesh rel. err {max(r['mesh_rel_err']):.2e}, tokens {max(r['tokens_rel_err']):.2e}")
        out.append(r)
    return out


# ------------------------------------------------------------------ B's experiments
def _b_start(p, seed: int):
    rng = np.random.default_rng(seed)
    return [float(p["b_amp"])] * 8, rng.uniform(0.0, 2.0 * math.pi, 8).tolist()


def _b_run(p, beta: float, T: float, seed: int) -> dict:
    from spherepde.geometry.circle import uniform_circle
    from spherepde.geometry.circle_densities import from_particles
    from spherepde.solvers.mesh import MeshSolver
    from spherepde.solvers.particles import ParticleSolver

    mesh = uniform_circle(int(p["b_cells"]))
    amps, phases = _b_start(p, seed)
    k = fastest_mode(beta, attention=USA)
    pred = nucleation_angles(amps[k - 1] * complex(math.cos(phases[k - 1]), math.sin(phases[k - 1])), k)
    ms = MeshSolver(mesh, fourier_field(mesh, amps, phases), _path(beta, T, "B"), velocity="midpoint", order=2, integrator="ssprk3",
                    attention=USA, summation=SUMMATION)
    ms.advance(T)
    N = int(p["b_tokens"])
    theta0 = field_tokens((np.arange(N) + 0.5) / N, amps, phases)
    ps = ParticleSolver(_unit(theta0), _path(beta, T, "B"), dt=T / int(p["b_token_steps"]), integrator="heun", attention=USA)
    ps.advance(T)
    a_mesh, m_mesh = cluster_angles(mesh, ms.rho)
    a_tok, m_tok = cluster_angles(mesh, from_particles(mesh, ps.X))
    return {"beta": beta, "T": T, "seed": seed, "k_star": k, "predicted": pred.tolist(), "mesh_angles": a_mesh.tolist(),
            "mesh_masses": m_mesh.tolist(), "token_angles": a_tok.tolist(), "token_masses": m_tok.tolist(),
            "mesh_vs_tokens": _match(a_mesh, a_tok) if len(a_mesh) == len(a_tok) else math.inf,
            "mesh_vs_prediction": _match(a_mesh, pred), "tokens_vs_prediction": _match(a_tok, pred),
            "rho": ms.rho.tolist(), "token_rho": from_particles(mesh, ps.X).tolist()}


# ------------------------------------------------------------------ two-point merge ODE
def _merge(p, case) -> dict:
    from spherepde.geometry import circle_densities as cd
    from spherepde.geometry.circle import uniform_circle
    from spherepde.solvers.mesh import MeshSolver
    from spherepde.studies.metastability import merge_time_ode

    beta, m1, deg, attention = float(case[0]), float(case[1]), float(case[2]), str(case[3])
    theta0 = math.radians(deg)
    t_ode = merge_time_ode(beta, m1, 1.0 - m1, theta0, attention=attention)
    mesh = uniform_circle(int(p["merge_cells"]))
    T = 1.3 * t_ode
    ms = MeshSolver(mesh, cd.vmf_mixture(mesh, [0.3, 0.3 + theta0], [2000.0, 2000.0], [m1, 1.0 - m1]), _path(beta, T, "+1", T / 20),
                    order=1, integrator="implicit", atoms=True, tol=1e-4, attention=attention)
    atoms0 = int(ms.points.x.shape[0])
    ms.advance(T)
    t_mesh = ms.points.merges[0][0] if ms.points.merges else math.inf
    return {"beta": beta, "m1": m1, "theta0_deg": deg, "attention": attention, "t_ode": t_ode, "t_mesh": t_mesh, "atoms0": atoms0,
            "rel_err": abs(t_mesh - t_ode) / t_ode, "steps": int(ms.step_count)}


# ------------------------------------------------------------------ convergence and cost
def _mesh_run(p, n: int) -> tuple:
    """B's beta = ``cost_beta`` problem to ``cost_T`` from seed 0 of the random field on n arcs (order 2, SSP-RK3):
    (mesh, rho at T, wall seconds, steps)."""
    from spherepde.geometry.circle import uniform_circle
    from spherepde.solvers.mesh import MeshSolver

    mesh = uniform_circle(int(n))
    beta, T = float(p["cost_beta"]), float(p["cost_T"])
    rho0 = fourier_field(mesh, *_b_start(p, 0))
    t0 = time.perf_counter()
    ms = MeshSolver(mesh, rho0, _path(beta, T, "B"), velocity="midpoint", order=2, integrator="ssprk3", attention=USA, summation=SUMMATION)
    ms.advance(T)
    return mesh, ms.rho.copy(), time.perf_counter() - t0, int(ms.step_count)


def _reflected_rates(beta: float = 5.0, k: int = 3, n: int = 999, T: float = 0.05) -> dict:
    """Growth rates of eps cos(k x) and eps sin(k x) under :func:`b_scheme` with the true convolution and B's literal one."""
    x = 2.0 * math.pi * np.arange(n) / n
    out = {}
    for name, f in (("cos", np.cos(k * x)), ("sin", np.sin(k * x))):
        u0 = 1.0 / (2.0 * math.pi) + 1e-4 * f
        c0 = abs(np.sum(u0 * np.exp(-1j * k * x)))
        for refl in (False, True):
            u, _ = b_scheme(u0, beta, T, reflected=refl)
            out[f"{name}_{'literal' if refl else 'convolution'}"] = math.log(abs(np.sum(u * np.exp(-1j * k * x))) / c0) / T
    out.update(beta=beta, k=k, n=n, gamma=linear_rate(k, beta, 1.0, attention=USA, d=2))
    return out


def cost_comparison(p, log=lambda *_a: None) -> dict:
    """The convergence and cost part (module docstring) with the study's parameters ``p``; also ``spherepde bench`` part (g)."""
    _mesh_run({**p, "cost_T": 0.02}, 64)  # compile every kernel before anything is timed
    ref_mesh, ref_rho, ref_wall, ref_steps = _mesh_run(p, int(p["ref_cells"]))
    ref = (_edges(ref_mesh), ref_rho * ref_mesh.areas)
    runs = []
    for n in p["conv_cells"]:
        mesh, rho, wall, steps = _mesh_run(p, int(n))
        runs.append({"cells": int(n), "h": 2 * math.pi / n, "wall_s": wall, "steps": steps, "w1": w1_circle(_edges(mesh), rho * mesh.areas, *ref)})
        log(f"circle convergence: {n} arcs, W1 to {p['ref_cells']} = {runs[-1]['w1']:.3e}, {wall:.2f} s")
    nb = int(p["b_scheme_cells"])
    x = 2.0 * math.pi * np.arange(nb) / nb
    amps, phases = _b_start(p, 0)
    u0 = 1.0 / (2.0 * math.pi) + sum((a / math.pi) * np.cos(k * x + s) for k, (a, s) in enumerate(zip(amps, phases), start=1))
    t0 = time.perf_counter()
    u, b_steps = b_scheme(u0, float(p["cost_beta"]), float(p["cost_T"]))
    b_wall = time.perf_counter() - t0
    b_edges = np.concatenate([[0.0], (np.arange(nb) + 0.5) * (2 * math.pi / nb)])  # node j's cell [x_j - dx/2, x_j + dx/2], from 0
    b_mass = u * (2 * math.pi / nb)
    b_w1 = w1_circle(np.append(b_edges, 2 * math.pi), np.concatenate([[b_mass[0] / 2], b_mass[1:], [b_mass[0] / 2]]), *ref)
    log(f"circle cost: B's scheme {nb} points, {b_steps} steps, {b_wall:.2f} s, W1 {b_w1:.3e}")
    orders = [math.log(a["w1"] / b["w1"]) / math.log(a["h"] / b["h"]) for a, b in zip(runs[:-1], runs[1:])]
    return {"ref_cells": int(p["ref_cells"]), "ref_wall_s": ref_wall, "ref_steps": ref_steps, "runs": runs, "orders": orders,
            "b": {"points": nb, "steps": b_steps, "wall_s": b_wall, "w1": b_w1,
                                               "mass": float(np.sum(b_mass)), "min": float(u.min())},
            "cost_cells": int(p["cost_cells"]), "reflected": _reflected_rates()}


# ------------------------------------------------------------------ the authors' d = 2 settings
#: weight grid of the authors' settings (exact OU transition / oscillating relaxation) and the tokens' Euler step
PAPER_GRID_DT, PAPER_TOKEN_DT = 0.02, 5e-3


def _paper_process(regime: str):
    if regime.startswith("osc-"):
        return _v.weight_process("oscillating", phase=regime[4:])
    return _v.weight_process(regime)


def _paper_regime(p, regime: str) -> dict:
    """One shared weight path (H heads, D_h(0) = G + G^T, s = -1) on S^1: the octahedral density (sigma = 0.05) on the
    circle mesh (order 2, SSP-RK2) and ``paper_draws`` draws of ``paper_n`` octahedral tokens (explicit Euler, the
    authors' scheme); <G^2> = time average of G^2 over t >= ``paper_t_avg``."""
    from spherepde.geometry.circle import uniform_circle
    from spherepde.geometry.circle_densities import octahedral
    from spherepde.model.statistics import time_average
    from spherepde.model.weights import generate_weight_path
    from spherepde.solvers.mesh import MeshSolver
    from spherepde.solvers.particles import ParticleSolver, initial_tokens
    from spherepde.solvers.protocol import integrate

    T, H = float(p["paper_T"]), int(p["paper_H"])
    path = generate_weight_path(_paper_process(regime), H=H, d=2, T=T, dt=PAPER_GRID_DT, seed=int(p["paper_seed"]), init="gaussian",
                                sign=-1.0, scheme="exact")
    times = [float(t) for t in np.linspace(0.0, T, int(round(T / 0.1)) + 1)]
    mesh = uniform_circle(int(p["paper_cells"]))
    ms = MeshSolver(mesh, octahedral(mesh, 0.05), path, order=2, integrator="heun", cfl=0.5)
    g_mesh = time_average(times, integrate(ms, times)["G2"], float(p["paper_t_avg"]))
    g_tok = []
    for draw in range(int(p["paper_draws"])):
        ps = ParticleSolver(initial_tokens("octahedral", int(p["paper_n"]), d=2, seed=100 + draw), path, dt=PAPER_TOKEN_DT, integrator="euler")
        g_tok.append(time_average(times, integrate(ps, times)["G2"], float(p["paper_t_avg"])))
    g_tok = np.array(g_tok)
    return {"regime": regime, "H": H, "mesh_G2": float(g_mesh), "tokens_G2": g_tok.tolist(), "tokens_mean": float(g_tok.mean()),
            "tokens_sd": float(g_tok.std(ddof=1)), "z": float(abs(g_mesh - g_tok.mean()) / g_tok.std(ddof=1))}


# ------------------------------------------------------------------ run
def run(size: str = "quick", **overrides) -> dict:
    """Run the study at ``size`` (smoke/quick/full); keyword overrides replace parameters."""
    p, log = study_params(SIZES, size, overrides)
    problem = check_params(p)
    if problem:
        raise ValueError(problem)
    t0 = time.perf_counter()
    res = {"name": NAME, "title": TITLE, "size": size, "params": p}
    res["cost"] = cost_comparison(p, log)  # first: its timings see an idle process
    res["rates"] = _rates(p, log)
    res["b"] = []
    for beta, T in p["b_cases"]:
        for seed in p["b_seeds"]:
            res["b"].append(_b_run(p, float(beta), float(T), int(seed)))
            r = res["b"][-1]
            if seed != p["b_seeds"][0]:  # the figure draws the first seed of each case
                del r["rho"], r["token_rho"]
            log(f"circle B beta = {beta:g}, seed {seed}: clusters mesh {len(r['mesh_angles'])}, tokens {len(r['token_angles'])}")
    res["merge"] = [_merge(p, c) for c in p["merge_cases"]]
    res["paper"] = []
    for regime in p["paper_regimes"]:
        res["paper"].append(_paper_regime(p, regime))
        r = res["paper"][-1]
        log(f"circle authors' d = 2, {regime}: <G2> density {r['mesh_G2']:.4g}, tokens {r['tokens_mean']:.4g} +- {r['tokens_sd']:.2g}")
    res["wall_s"] = time.perf_counter() - t0
    require_finite("circle: linear rates", [r["mesh"] for r in res["rates"]], [r["tokens_mean"] for r in res["rates"]])
    require_finite("circle: merge ODE times", [r["t_ode"] for r in res["merge"]])
    require_finite("circle: the authors' d = 2 settings, <G^2>", [[r["mesh_G2"], r["tokens_G2"]] for r in res["paper"]])
    require_finite("circle: W1 distances", [r["w1"] for r in res["cost"]["runs"]], res["cost"]["b"]["w1"])
    res["checks"] = _checks(res)
    res["claims"] = _claims(res)
    res["tables"] = _tables(res)
    res["summary"] = _summary(res)
    return res


def _case(r) -> str:
    heads = "B's heads (c = 1)" if r["heads"] == "B" else f"gradient heads s = {r['heads']}"
    return f"{r['attention']}, {heads}"


def _checks(res) -> dict:
    p = res["params"]
    ch = {}
    tol, tol_t = float(p["rate_tol"]), float(p["rate_tol_tokens"])
    for r in res["rates"]:
        ch[f"linear rates k = 1..4, {_case(r)}, beta = {p['rate_beta']:g}: density level ({p['rate_cells']} arcs) vs gamma_k, largest relative error"] = (
            solver_check(max(r["mesh_rel_err"]), hi=tol, expected=0.0))
        slack = max(3.0 * s / abs(g) for s, g in zip(r["tokens_sem"], r["gamma"]))
        ch[f"linear rates k = 1..4, {_case(r)}, beta = {p['rate_beta']:g}: {p['rate_tokens']} tokens ({p['rate_draws']} draws) vs gamma_k, "
           "largest relative error of the mean"] = solver_check(
            max(r["tokens_rel_err"]), hi=tol_t + slack, expected=0.0, tolerance=f"<= {tol_t:g} + 3 standard errors ({slack:.2g})")
    for beta, T in p["b_cases"]:
        rs = [r for r in res["b"] if r["beta"] == beta]
        diff = max(abs(len(r["mesh_angles"]) - len(r["token_angles"])) for r in rs)
        ch[f"B's beta = {beta:g} to T = {T:g}, seeds {p['b_seeds']}: clusters, density level minus tokens (largest difference)"] = solver_check(
            diff, lo=0, hi=0, expected=0)
        ch[f"B's beta = {beta:g} to T = {T:g}, seeds {p['b_seeds']}: cluster positions, density level vs tokens (largest arc, rad)"] = solver_check(
            max(r["mesh_vs_tokens"] for r in rs), hi=float(p["b_pos_tol"]), expected=0.0)
    for r in res["merge"]:
        ch[f"merge time, {r['attention']}, beta = {r['beta']:g}, m1 = {r['m1']:g}, theta0 = {r['theta0_deg']:g} deg: point masses on "
           f"{p['merge_cells']} arcs vs two-point ODE, relative error"] = solver_check(r["rel_err"], hi=float(p["merge_tol"]), expected=0.0)
    for r in res["paper"]:
        ch[f"authors' d = 2 setting, {r['regime']}, H = {r['H']}: <G^2> of the density level ({p['paper_cells']} arcs) minus the mean of "
           f"{p['paper_draws']} draws of {p['paper_n']} tokens, in standard deviations of one draw"] = solver_check(
            r["z"], hi=float(p["paper_spread"]), expected=0.0, tolerance=f"<= {p['paper_spread']:g} (the finite-n spread)")
    c = res["cost"]
    if len(c["orders"]):
        ch[f"mesh convergence (B's beta = {p['cost_beta']:g}, T = {p['cost_T']:g}): W1 to {c['ref_cells']} arcs falls with h "
           f"(smallest observed order over {p['conv_cells']})"] = solver_check(min(c["orders"]), lo=0.5, expected=">= 0.5")
    if not p["cost_checks"]:
        return ch
    mine = next(r for r in c["runs"] if r["cells"] == c["cost_cells"])
    ch[f"cost: wall time of B's scheme ({c['b']['points']} points) / density level ({mine['cells']} arcs, order 2), one process"] = solver_check(
        c["b"]["wall_s"] / mine["wall_s"], lo=10.0, expected=">= 10")
    ch[f"cost: W1 to the reference ({c['ref_cells']} arcs), density level ({mine['cells']} arcs) / B's scheme"] = solver_check(
        mine["w1"] / c["b"]["w1"], hi=1.0, expected="<= 1")
    return ch


def _fraction_interval(hits: int, n: int) -> tuple[float, float]:
    """The 95 % Clopper--Pearson interval of a binomial fraction hits / n."""
    from scipy.stats import beta as beta_dist

    lo = 0.0 if hits == 0 else float(beta_dist.ppf(0.025, hits, n - hits + 1))
    hi = 1.0 if hits == n else float(beta_dist.ppf(0.975, hits + 1, n - hits))
    return lo, hi


def _claims(res) -> dict:
    p = res["params"]
    out = {}
    for beta, T in p["b_cases"]:
        rs = [r for r in res["b"] if r["beta"] == beta]
        k = rs[0]["k_star"]
        hits = sum(len(r["mesh_angles"]) == k for r in rs)
        errs = [r["mesh_vs_prediction"] for r in rs]
        out[f"B: k* = {k} clusters at beta = {beta:g} by T = {T:g} (density level, seeds {p['b_seeds']})"] = paper_claim(
            hits / len(rs), _fraction_interval(hits, len(rs)), 1.0, quantity="fraction of starts with k* clusters",
            statement=(f"B predict k* = argmax_k gamma_k = {k} clusters; counts over the seeds "
                       f"{', '.join(str(len(r['mesh_angles'])) for r in rs)} (Clopper-Pearson interval); the clusters lie "
                       f"{', '.join(_v.format_number(e) for e in errs)} rad from (2 pi j - arg mu_hat_k*(0))/k* (their predicted positions; "
                       f"within 0.05 rad: {sum(e <= 0.05 for e in errs)} of {len(errs)} starts)"))
    return out


def _tables(res) -> list:
    p = res["params"]
    rates = [[_case(r), k, r["gamma"][i], r["mesh"][i], r["tokens_mean"][i], r["tokens_sem"][i]]
             for r in res["rates"] for i, k in enumerate(RATE_MODES)]
    b = [[r["beta"], r["T"], r["seed"], r["k_star"], len(r["mesh_angles"]), len(r["token_angles"]), r["mesh_vs_tokens"],
          r["mesh_vs_prediction"], r["tokens_vs_prediction"]] for r in res["b"]]
    merge = [[r["attention"], r["beta"], r["m1"], r["theta0_deg"], r["t_ode"], r["t_mesh"], r["rel_err"]] for r in res["merge"]]
    c = res["cost"]
    cost = [[f"density level, {r['cells']} arcs (order 2, SSP-RK3)", r["steps"], r["wall_s"], r["w1"]] for r in c["runs"]]
    cost.append([f"B's scheme, {c['b']['points']} points (Lax-Friedrichs, dt = 0.02 dx)", c["b"]["steps"], c["b"]["wall_s"], c["b"]["w1"]])
    cost.append([f"reference, {c['ref_cells']} arcs", c["ref_steps"], c["ref_wall_s"], 0.0])
    paper = [[r["regime"], r["H"], r["mesh_G2"], r["tokens_mean"], r["tokens_sd"], r["z"]] for r in res["paper"]]
    return [
        {"title": f"The authors' d = 2 settings (n = {p['paper_n']}, H = {p['paper_H']}, T = {p['paper_T']:g}): <G^2> over t >= "
                  f"{p['paper_t_avg']:g}", "headers": ["weights", "H", "density level", "tokens (mean)", "tokens (sd of a draw)",
                                                       "difference / sd"], "rows": paper},
        {"title": f"Linear rates at beta = {p['rate_beta']:g} (1 / time)", "headers": ["case", "k", "gamma_k", "density level",
                                                                                       "tokens (mean)", "tokens (s.e.m.)"], "rows": rates},
        {"title": "B's experiments: clusters at T and their positions (rad)", "headers": [
            "beta", "T", "seed", "k*", "clusters (density)", "clusters (tokens)", "density vs tokens", "density vs prediction",
            "tokens vs prediction"], "rows": b},
        {"title": "Two point masses: merge times", "headers": ["attention", "beta", "m1", "theta0 (deg)", "ODE", "mesh", "rel. error"],
         "rows": merge},
        {"title": f"B's beta = {p['cost_beta']:g} problem to T = {p['cost_T']:g}: cost and W1 to the reference", "headers": [
            "solver", "steps", "wall (s)", "W1 (rad)"], "rows": cost},
    ]


def _summary(res) -> str:
    p = res["params"]
    c = res["cost"]
    mine = next(r for r in c["runs"] if r["cells"] == c["cost_cells"])
    rr = c["reflected"]
    lines = [
        f"Linear rates of the modes k = 1..4 at beta = {p['rate_beta']:g}: largest relative error of the density level "
        f"{max(max(r['mesh_rel_err']) for r in res['rates']):.2g} ({p['rate_cells']} arcs, order 2), of the mean of "
        f"{p['rate_draws']} draws of {p['rate_tokens']} tokens {max(max(r['tokens_rel_err']) for r in res['rates']):.2g}, over softmax and "
        "unnormalised attention with gradient heads (s = +1, -1) and B's heads.",
        "B's experiments from a random-phase Fourier field of amplitude "
        f"{p['b_amp']:g} per mode (k = 1..8; B's per-grid-point noise has no continuum limit): "
        + "; ".join(f"beta = {r['beta']:g}, seed {r['seed']}: {len(r['mesh_angles'])} clusters on the density level, "
                    f"{len(r['token_angles'])} with {p['b_tokens']} tokens, {r['mesh_vs_tokens']:.2g} rad apart, "
                    f"{r['mesh_vs_prediction']:.2g} rad from B's predicted positions" for r in res["b"]) + ".",
        "Merge times of two point masses: " + "; ".join(
            f"{r['attention']}, beta = {r['beta']:g}, m1 = {r['m1']:g}, theta0 = {r['theta0_deg']:g} deg: {r['t_mesh']:.4g} against the ODE's "
            f"{r['t_ode']:.4g}" for r in res["merge"]) + ".",
        f"B's beta = {p['cost_beta']:g} problem to T = {p['cost_T']:g}: W1 to {c['ref_cells']} arcs "
        + ", ".join(f"{r['w1']:.2g} ({r['cells']} arcs)" for r in c["runs"])
        + f" (observed orders {', '.join(f'{o:.2f}' for o in c['orders'])}). Cost in this process: B's scheme on {c['b']['points']} points "
        f"{c['b']['wall_s']:.3g} s ({c['b']['steps']} steps), W1 {c['b']['w1']:.2g}; density level on {mine['cells']} arcs "
        f"{mine['wall_s']:.3g} s ({mine['steps']} steps), W1 {mine['w1']:.2g}: {c['b']['wall_s'] / mine['wall_s']:.3g}x faster and "
        f"{c['b']['w1'] / mine['w1']:.3g}x closer to the reference.",
        f"The authors' d = 2 settings (n = {p['paper_n']} tokens, H = {p['paper_H']}, s = -1, one shared weight path, T = {p['paper_T']:g}): "
        + "; ".join(f"{r['regime']}: <G^2> {r['mesh_G2']:.4g} on the density level, {r['tokens_mean']:.4g} +- {r['tokens_sd']:.2g} over "
                    f"{p['paper_draws']} token draws ({r['z']:.2g} sd)" for r in res["paper"]) + ".",
        f"B's notebook computes its convolution as a cross-correlation (torch conv1d): on {rr['n']} points at beta = {rr['beta']:g} the mode "
        f"k = {rr['k']} grows at {rr['cos_literal']:.3g} as a cosine but {rr['sin_literal']:.3g} as a sine (true convolution: "
        f"{rr['cos_convolution']:.3g} and {rr['sin_convolution']:.3g}; gamma_k = {rr['gamma']:.3g} less the scheme's diffusion 25 dx k^2).",
    ]
    for claim in res["claims"].values():
        lines.append(_v.claim_sentence(claim) + ": " + claim["statement"] + ".")
    lines.append(checks_line(res["checks"], res["claims"]))
    return "\n\n".join(lines)


# ------------------------------------------------------------------ figures
def plot(results, out_dir) -> list:
    """Figures: measured linear rates against gamma_k; the densities and token histograms at T of B's two
    experiments (first seed) with B's predicted positions; W1 to the reference against the mesh width, with
    B's scheme beside it."""
    from spherepde.viz.figstyle import finish_figure, legend_outside, subplots

    paths = []
    fig, ax = subplots(figsize=(7.4, 4.4), layout="constrained")
    g_all = [g for r in results["rates"] for g in r["gamma"]]
    lo, hi = min(g_all), max(g_all)
    ax.plot([lo, hi], [lo, hi], "k-", lw=0.8, label="measured = gamma_k")
    for r in results["rates"]:
        ax.plot(r["gamma"], r["mesh"], "o", mfc="none", label=f"density, {_case(r)}")
        ax.plot(r["gamma"], r["tokens_mean"], "x", label=f"tokens, {_case(r)}")
    ax.set_xlabel(r"$\gamma_k$, linear theory (1 / time)")
    ax.set_ylabel("measured growth rate (1 / time)")
    legend_outside(ax, fontsize=6)
    paths.append(save_figure(fig, out_dir, "circle_rates.png"))
    firsts = [r for r in results["b"] if "rho" in r]  # the first seed of each case keeps its densities
    fig, axes = subplots(len(firsts), 1, figsize=(7.4, 3.0 * len(firsts)), squeeze=False, layout="constrained")
    for ax, r in zip(axes[:, 0], firsts):
        n = len(r["rho"])
        th = (np.arange(n) + 0.5) * 2 * math.pi / n
        ax.semilogy(th, np.maximum(r["rho"], 1e-6), "-", lw=1.0, label="density level")
        ax.semilogy(th, np.maximum(r["token_rho"], 1e-6), "-", lw=0.6, alpha=0.7, label="tokens (histogram)")
        for j, a in enumerate(r["predicted"]):
            ax.axvline(a, color="r", ls="--", lw=0.8, label="B's predicted positions" if j == 0 else None)
        ax.set_xlim(0, 2 * math.pi)
        ax.set_ylim(1e-6, None)
        ax.set_xlabel(r"$\theta$ (rad)")
        ax.set_ylabel(r"$\rho$ at T")
        ax.set_title(f"β = {r['beta']:g}, T = {r['T']:g}, seed {r['seed']}: k* = {r['k_star']}")
        legend_outside(ax)
    finish_figure(fig)
    paths.append(save_figure(fig, out_dir, "circle_nucleation.png"))
    c = results["cost"]
    fig, ax = subplots(figsize=(7.4, 4.2), layout="constrained")
    h = [r["h"] for r in c["runs"]]
    ax.loglog(h, [r["w1"] for r in c["runs"]], "o-", label="density level (order 2)")
    ax.loglog([2 * math.pi / c["b"]["points"]], [c["b"]["w1"]], "s", ms=8, label=f"B's scheme, {c['b']['points']} points")
    ax.set_xlabel("mesh width h (rad)")
    ax.set_ylabel(f"W1 at T to {c['ref_cells']} arcs (rad)")
    legend_outside(ax)
    finish_figure(fig)
    paths.append(save_figure(fig, out_dir, "circle_convergence.png"))
    return paths
