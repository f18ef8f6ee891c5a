"""Initial densities on the circle S^1 (d = 2), as cell averages of mass 1 on a
:class:`~spherepde.geometry.circle.CircleMesh` (docs/model.md, "The circle").

The same constructors as :mod:`spherepde.geometry.densities` (the sphere's), which the run
builder picks for ``mesh.kind = "circle"``; a density is with respect to arc length, so the
uniform law is 1/(2 pi). Every constructor returns rho (nc,) with sum_c rho_c h_c = 1.

* :func:`vmf_mixture` -- von Mises bumps e^{kappa cos(theta - theta_j)} / (2 pi I_0(kappa));
* :func:`octahedral` -- the law of a token that picks one of the 2d = 4 points +-e_i, adds
  N(0, sigma^2 I) and is normalised (the exact projected-normal density on the circle);
* :func:`spherical_harmonic` -- (1/(2 pi)) (1 + eps cos(l theta)) (m >= 0) or with sin(l theta)
  (m < 0): the circle's Fourier mode of degree l;
* :func:`with_noise` -- rho (1 + amplitude f) with f a seeded random Fourier field of modes
  k = 1..8 (coefficients N(0, 1/2) for cos and sin), scaled to max |f| = 1 over the cells;
* :func:`quantile_angles` -- n angles at the quantiles of (1 + amplitude f)/(2 pi), a deterministic token
  sample of the density :func:`with_noise` gives (its tokens' Fourier coefficients are the density's);
* :func:`from_particles` -- the histogram of points (n, 2); :func:`from_file` -- cell values, or the
  histogram of the tokens (n, 2) a file holds.

Cell averages of smooth densities use Gauss--Legendre quadrature (4 points) on sub-arcs at
most half as wide as the narrowest feature (1/sqrt(kappa) for a bump, sigma for the
projected normal), so narrow bumps put the right mass into each cell; Fourier modes are
averaged exactly ((sin k phi_{c+1} - sin k phi_c) / (k h_c)).
"""

from __future__ import annotations

import math

import numpy as np

from spherepde.geometry.densities import normalise, read_start_file

__all__ = ["cell_average", "fourier_average", "from_file", "from_particles", "normalise", "octahedral", "spherical_harmonic",
           "uniform", "vm_density", "vmf_mixture", "with_noise", "circle_means", "noise_coefficients", "quantile_angles"]

#: Largest number of quadrature sub-arcs per mesh.
MAX_SUBARCS = 4_000_000
_GL = np.polynomial.legendre.leggauss(4)


def cell_average(mesh, f, *, scale: float | None = None, subarcs: int | None = None) -> np.ndarray:
    """(1/h_c) int_{arc c} f(theta) dtheta by 4-point Gauss--Legendre on ``subarcs`` equal pieces per arc
    (default: pieces at most ``scale`` / 2 wide), shape (nc,). ``f`` maps angles (m,) to values (m,)."""
    nc = mesh.n_cells
    if subarcs is None:
        want = 1 if scale is None or not scale > 0 else math.ceil(mesh.h / (0.5 * scale))
        subarcs = int(max(1, min(want, MAX_SUBARCS // nc)))
    x, w = _GL
    s = (np.arange(subarcs)[:, None] + 0.5 * (x[None, :] + 1.0)) / subarcs  # (subarcs, 4) in [0, 1]
    theta = mesh.phi[:, None] + mesh.areas[:, None] * s.reshape(1, -1)  # (nc, subarcs * 4)
    vals = np.asarray(f(theta.reshape(-1)), dtype=np.float64).reshape(nc, -1)
    return vals @ np.tile(0.5 * w, subarcs) / subarcs


def fourier_average(mesh, k: int, kind: str = "cos") -> np.ndarray:
    """Exact cell averages of cos(k theta) (``kind = "cos"``) or sin(k theta), shape (nc,)."""
    k = int(k)
    a, b = mesh.phi, mesh.phi + mesh.areas
    if k == 0:
        return np.ones(mesh.n_cells) if kind == "cos" else np.zeros(mesh.n_cells)
    if kind == "cos":
        return (np.sin(k * b) - np.sin(k * a)) / (k * mesh.areas)
    return (np.cos(k * a) - np.cos(k * b)) / (k * mesh.areas)


def uniform(mesh) -> np.ndarray:
    """The uniform law rho = 1/(2 pi)."""
    return normalise(mesh, np.ones(mesh.n_cells))


def circle_means(means) -> np.ndarray:
    """Mean directions (k, 2) from 2-vectors or angles (a list of numbers, radians)."""
    arr = np.asarray(means, dtype=np.float64)
    if arr.ndim == 1:
        return np.stack([np.cos(arr), np.sin(arr)], axis=1)
    if arr.ndim == 2 and arr.shape[1] == 2:
        return arr
    raise ValueError(f"von Mises means on the circle are 2-vectors (k, 2) or angles (k,), got shape {arr.shape}")


def vm_density(theta, mean_angle: float, kappa: float) -> np.ndarray:
    """von Mises density e^{kappa cos(theta - mu)} / (2 pi I_0(kappa)), as e^{kappa (cos - 1)} / (2 pi ive_0(kappa))."""
    from scipy.special import ive

    kappa = float(kappa)
    return np.exp(kappa * (np.cos(np.asarray(theta) - mean_angle) - 1.0)) / (2.0 * math.pi * ive(0, kappa))


def vmf_mixture(mesh, means, kappas, weights=None) -> np.ndarray:
    """sum_j w_j vM(theta_j, kappa_j) as normalised cell averages (nc,); ``means`` (k, 2) or angles (k,)."""
    mu = circle_means(means)
    k = mu.shape[0]
    if not np.all(np.isfinite(mu)) or np.any(np.linalg.norm(mu, axis=1) == 0):
        raise ValueError(f"von Mises mean directions must be finite and non-zero, got {mu.tolist()}")
    kappas = np.broadcast_to(np.asarray(kappas, float), (k,))
    if np.any(kappas < 0) or not np.all(np.isfinite(kappas)):
        raise ValueError(f"von Mises concentrations must be finite and >= 0, got {kappas}")
    w = np.full(k, 1.0 / k) if weights is None else np.asarray(weights, float)
    if w.shape != (k,) or np.any(w < 0) or not w.sum() > 0:
        raise ValueError(f"von Mises weights must be {k} non-negative numbers with a positive sum, got {weights!r}")
    w = w / w.sum()
    th = np.arctan2(mu[:, 1], mu[:, 0])
    scale = 1.0 / math.sqrt(max(float(kappas.max()), 1e-12))
    rho = cell_average(mesh, lambda t: sum(wi * vm_density(t, ti, ki) for wi, ti, ki in zip(w, th, kappas)), scale=scale)
    if not np.sum(rho * mesh.areas) > 0:
        raise ValueError(f"von Mises density: with kappa = {float(kappas.max()):g} every cell average underflows to 0; use a smaller initial.kappas")
    return normalise(mesh, rho)


def _projected_normal(theta, mean_angle: float, sigma: float) -> np.ndarray:
    """Density on S^1 of y/|y| for y ~ N(mu, sigma^2 I), |mu| = 1: with c = cos(theta - mu), a = 1/sigma,
    (1/(2 pi)) [ e^{-a^2/2} + c a sqrt(2 pi) Phi(c a) e^{-a^2 (1 - c^2)/2} ] (integrate r times the Gaussian along the ray)."""
    from scipy.special import ndtr

    a = 1.0 / sigma
    c = np.cos(np.asarray(theta) - mean_angle)
    return (math.exp(-0.5 * a * a) + c * a * math.sqrt(2 * math.pi) * ndtr(c * a) * np.exp(-0.5 * a * a * (1 - c * c))) / (2 * math.pi)


def octahedral(mesh, sigma: float = 0.05) -> np.ndarray:
    """The paper's token law in d = 2 (four points +-e_i, Gaussian noise sigma, normalised) as cell averages (nc,)."""
    sigma = float(sigma)
    if not sigma > 0 or not np.isfinite(sigma):
        raise ValueError(f"octahedral: sigma must be a positive number, got {sigma}")
    f = lambda t: sum(_projected_normal(t, a, sigma) for a in (0.0, 0.5 * math.pi, math.pi, 1.5 * math.pi)) / 4.0  # noqa: E731
    return normalise(mesh, cell_average(mesh, f, scale=sigma))


def spherical_harmonic(mesh, l: int, m: int, eps: float) -> np.ndarray:
    """(1/(2 pi)) (1 + eps cos(l theta)) for m >= 0, or with sin(l theta) for m < 0, exact cell averages (nc,)."""
    eps = float(eps)
    if not np.isfinite(eps) or (int(l) > 0 and abs(eps) > 1.0):
        raise ValueError(f"the circle's mode density 1 + eps cos(l theta) needs |eps| <= 1, got eps = {eps}")
    vals = fourier_average(mesh, l, "cos" if m >= 0 else "sin")
    return normalise(mesh, (1.0 + eps * vals) / (2 * math.pi))


def noise_coefficients(seed: int = 0, kmax: int = 8) -> np.ndarray:
    """The seeded random Fourier field of :func:`with_noise` and :func:`quantile_angles`: rows (a_k, b_k),
    k = 1..kmax, drawn N(0, 1/2) in that order, shape (kmax, 2); f = sum_k a_k cos k theta + b_k sin k theta."""
    return np.random.default_rng(seed).normal(scale=math.sqrt(0.5), size=(int(kmax), 2))


def with_noise(mesh, rho, amplitude: float, *, seed: int = 0, kmax: int = 8) -> np.ndarray:
    """rho (1 + amplitude f), normalised: f = sum_{k=1..kmax} a_k cos k theta + b_k sin k theta with a_k, b_k ~
    N(0, 1/2) (seeded, :func:`noise_coefficients`), cell-averaged exactly and scaled to max |f| = 1 over the
    cells; 0 <= amplitude < 1 keeps rho > 0."""
    if not 0.0 <= amplitude < 1.0:
        raise ValueError(f"noise amplitude must lie in [0, 1), got {amplitude}")
    f = np.zeros(mesh.n_cells)
    for k, (a, b) in enumerate(noise_coefficients(seed, kmax), start=1):
        f += a * fourier_average(mesh, k, "cos") + b * fourier_average(mesh, k, "sin")
    f /= np.max(np.abs(f))
    return normalise(mesh, np.asarray(rho, float) * (1.0 + amplitude * f))


#: Points over which :func:`quantile_angles` takes max |f| (the field is a trigonometric polynomial of degree <= kmax).
FIELD_MAX_POINTS = 1 << 14


def quantile_angles(n: int, amplitude: float = 0.0, *, seed: int = 0, kmax: int = 8) -> np.ndarray:
    """n angles at the quantiles of rho = (1 + amplitude f) / (2 pi), f the field of :func:`with_noise`
    (same seed, scaled to max |f| = 1 over FIELD_MAX_POINTS equally spaced angles): theta_i solves
    F(theta_i) = (i + 1/2) / n, F(theta) = (theta + amplitude g(theta)) / (2 pi) with
    g = int_0^theta f = sum_k (a_k sin k theta + b_k (1 - cos k theta)) / k, by Newton's method, shape (n,).

    Tokens of mass 1/n at these angles are a deterministic sample of rho: their Fourier coefficients
    sum_i e^{-ik theta_i} / n are the midpoint rule in the quantile variable of int e^{-ik theta} rho d theta,
    exact up to O((k / n)^2) for k << n (docs/guide/circle.md). amplitude = 0 gives equally spaced tokens."""
    n = int(n)
    if n < 1:
        raise ValueError(f"quantile tokens: need n >= 1, got {n}")
    if not 0.0 <= amplitude < 1.0:
        raise ValueError(f"noise amplitude must lie in [0, 1), got {amplitude}")
    u = 2.0 * math.pi * (np.arange(n) + 0.5) / n
    if amplitude == 0.0:
        return u
    coef = noise_coefficients(seed, kmax)
    k = np.arange(1, coef.shape[0] + 1, dtype=np.float64)

    def field(th):
        return np.cos(np.outer(th, k)) @ coef[:, 0] + np.sin(np.outer(th, k)) @ coef[:, 1]

    scale = amplitude / float(np.max(np.abs(field(2.0 * math.pi * np.arange(FIELD_MAX_POINTS) / FIELD_MAX_POINTS))))
    th = u.copy()
    for _ in range(100):
        g = np.sin(np.outer(th, k)) @ (coef[:, 0] / k) + (1.0 - np.cos(np.outer(th, k))) @ (coef[:, 1] / k)
        step = (th + scale * g - u) / (1.0 + scale * field(th))
        th -= step
        if np.max(np.abs(step)) < 1e-14:
            break
    return np.mod(th, 2.0 * math.pi)


def from_particles(mesh, X, weights=None) -> np.ndarray:
    """Histogram density of weighted points X (n, 2): rho_c = (weight in arc c) / h_c, (nc,)."""
    X = np.asarray(X, float)
    if X.ndim != 2 or X.shape[1] != 2 or X.shape[0] == 0:
        raise ValueError(f"points on the circle must have shape (n, 2) with n >= 1, got {X.shape}")
    if not np.all(np.isfinite(X)) or np.any(np.linalg.norm(X, axis=1) == 0):
        raise ValueError("points contain NaN/inf coordinates or lie at the origin")
    w = np.full(X.shape[0], 1.0 / X.shape[0]) if weights is None else np.asarray(weights, float)
    if w.shape != (X.shape[0],):
        raise ValueError(f"point weights have shape {w.shape}, expected ({X.shape[0]},)")
    mass = np.bincount(mesh.locate(X), weights=w, minlength=mesh.n_cells)  # mesh: a CircleMesh
    return normalise(mesh, mass / mesh.areas)


def from_file(mesh, path) -> np.ndarray:
    """The density of ``initial.file`` (:func:`spherepde.geometry.densities.read_start_file`, d = 2): cell
    values (nc,), normalised, or the histogram of tokens (n, 2) (:func:`from_particles`: mass 1/n per token
    in the arc containing it)."""
    arr = read_start_file(path, mesh.n_cells, 2)
    if arr.ndim == 2:
        return from_particles(mesh, arr)
    return normalise(mesh, arr)
