"""Distances between a mesh density and a token cloud (mesh-versus-particle validation).

* :func:`wasserstein_sphere` -- the Wasserstein-p distance between the two measures with
  the geodesic cost d(x, y) = arccos(x . y) on S^2, exact through POT's network simplex
  (``ot.emd2``) with the mesh measure as point masses m_c = rho_c |C_c| at the cell
  centres, or POT's sliced spherical Wasserstein distance
  (``ot.sliced_wasserstein_sphere``; Bonet et al. 2023) for large sizes.
* :func:`l1_to_particles` -- the L1 distance sum_c |rho_c - rho_hat_c| |C_c| between the
  mesh density and a smoothed histogram of the tokens on the same mesh (a von
  Mises--Fisher kernel density estimate evaluated as cell averages at the centres).
* :func:`sample_from_density` -- n tokens drawn from a mesh density (cells by mass,
  then a point uniform in the planar triangle, projected to the sphere).

The mesh measure itself is a first-order quadrature of the density: the distances carry
an O(h) contribution from placing cell masses at centres even for identical measures.
"""

from __future__ import annotations

import numpy as np

__all__ = ["wasserstein_sphere", "l1_to_particles", "sample_from_density", "particle_density"]


def _masses(mesh, rho) -> np.ndarray:
    rho = np.asarray(rho, float)
    if rho.shape != (mesh.n_cells,):
        raise ValueError(f"density has shape {rho.shape}, expected ({mesh.n_cells},)")
    m = rho * mesh.areas
    if np.any(m < 0) or not np.isfinite(m).all():
        raise ValueError("density must be finite and non-negative")
    return m / m.sum()


def wasserstein_sphere(mesh, rho, X, weights=None, *, p: int = 1, method: str = "auto", max_exact: int = 4_000_000, n_projections: int = 200, seed: int = 0) -> float:
    """Wasserstein-p distance on S^2 between the mesh density and the tokens.

    Parameters
    ----------
    mesh, rho : the mesh and cell densities (mass normalised internally).
    X : (n, 3) tokens; weights : (n,) token weights (default 1/n).
    p : 1 or 2.
    method : ``exact`` (POT ``emd2`` with geodesic cost), ``sliced`` (POT
        ``sliced_wasserstein_sphere``) or ``auto`` (exact while n_cells * n <= max_exact).
    """
    import ot

    a = _masses(mesh, rho)
    X = np.asarray(X, float)
    n = X.shape[0]
    b = np.full(n, 1.0 / n) if weights is None else np.asarray(weights, float) / np.sum(weights)
    keep = a > 0
    if method == "auto":
        method = "exact" if keep.sum() * n <= max_exact else "sliced"
    if method == "exact":
        C = np.arccos(np.clip(mesh.centers[keep] @ X.T, -1.0, 1.0)) ** p
        val = ot.emd2(a[keep] / a[keep].sum(), b, C, numItermax=10_000_000)
        return float(val) ** (1.0 / p)
    if method == "sliced":
        val = ot.sliced_wasserstein_sphere(mesh.centers[keep], X, a[keep] / a[keep].sum(), b, n_projections=n_projections, p=p, seed=seed)
        return float(val)
    raise ValueError(f"unknown method {method!r}; use 'exact', 'sliced' or 'auto'")


def particle_density(mesh, X, weights=None, *, kappa: float | None = None) -> np.ndarray:
    """Smoothed token histogram on the mesh: vMF kernel density estimate at cell centres.

    rho_hat(x_c) = sum_i w_i K_kappa(x_c . x_i),  K_kappa(t) = kappa e^{kappa (t - 1)} / (2 pi (1 - e^{-2 kappa})),
    renormalised to mass 1 on the mesh. Default bandwidth: kappa = 1 / (2 h)^2 with h the
    mesh's maximal edge length (the kernel is wider than a cell).
    """
    X = np.asarray(X, float)
    n = X.shape[0]
    w = np.full(n, 1.0 / n) if weights is None else np.asarray(weights, float) / np.sum(weights)
    if kappa is None:
        kappa = 1.0 / (2.0 * mesh.h) ** 2
    out = np.zeros(mesh.n_cells)
    norm = kappa / (2 * np.pi * (1 - np.exp(-2 * kappa)))
    for start in range(0, n, 2048):
        G = mesh.centers @ X[start : start + 2048].T
        out += np.exp(kappa * (G - 1.0)) @ w[start : start + 2048]
    out *= norm
    return out / np.sum(out * mesh.areas)


def l1_to_particles(mesh, rho, X, weights=None, *, kappa: float | None = None) -> float:
    """L1 distance sum_c |rho_c - rho_hat_c| |C_c| (rho_hat from :func:`particle_density`)."""
    a = _masses(mesh, rho)
    rho_hat = particle_density(mesh, X, weights, kappa=kappa)
    return float(np.sum(np.abs(a / mesh.areas - rho_hat) * mesh.areas))


def sample_from_density(mesh, rho, n: int, *, seed: int | None = 0) -> np.ndarray:
    """n tokens drawn from the mesh density: a cell with probability m_c, then a point
    uniform in the cell's planar triangle, projected to the sphere (deterministic for a seed)."""
    a = _masses(mesh, rho)
    rng = np.random.default_rng(seed)
    cells = rng.choice(mesh.n_cells, size=n, p=a)
    r1 = np.sqrt(rng.random(n))
    r2 = rng.random(n)
    P = mesh.points[mesh.cells[cells]]  # (n, 3, 3)
    X = (1 - r1)[:, None] * P[:, 0] + (r1 * (1 - r2))[:, None] * P[:, 1] + (r1 * r2)[:, None] * P[:, 2]
    return X / np.linalg.norm(X, axis=1, keepdims=True)
