"""Distances between a mesh density and a token cloud (mesh-versus-particle validation).

* :func:`wasserstein_sphere` -- the Wasserstein-p distance between the two measures with
  the geodesic cost d(x, y) = arccos(x . y) on S^2, exact through POT's network simplex
  (``ot.emd2``) with the mesh measure as point masses m_c = rho_c |C_c| at the cell
  centres, or POT's sliced spherical Wasserstein distance
  (``ot.sliced_wasserstein_sphere``; Bonet et al. 2023) for large sizes.
* :func:`sliced_w1_sphere` -- the sliced spherical W1 (Bonet et al. 2023) with the closed
  form of W1 on a circle (level median; Hundrieser, Klatt & Munk 2022), in radians:
  O(P (N + n) log(N + n)) for P great circles, milliseconds where the exact W1 takes
  minutes.
* :func:`l1_to_particles` -- the L1 distance sum_c |rho_c - rho_hat_c| |C_c| between the
  mesh density and a smoothed histogram of the tokens on the same mesh (a von
  Mises--Fisher kernel density estimate evaluated as cell averages at the centres,
  summed by the Numba attention kernel with A = kappa I).
* :func:`sample_from_density` -- n tokens drawn from a mesh density (cells by mass,
  then a point uniform in the planar triangle, projected to the sphere; on the circle a
  point uniform in the arc).

On the circle S^1 (a :class:`~spherepde.geometry.circle.CircleMesh`, points (n, 2)) the
"sliced" W1 is the exact W1 of the circle in closed form (:func:`w1_circle`, no projection).

The mesh measure itself is a first-order quadrature of the density: the distances carry
an O(h) contribution from placing cell masses at centres even for identical measures.
"""

from __future__ import annotations

import numpy as np

__all__ = ["wasserstein_sphere", "sliced_w1_sphere", "SlicedW1", "great_circles", "w1_circle", "l1_to_particles", "sample_from_density", "particle_density"]


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
    if X.shape[1] == 2 and p == 1 and method == "sliced":  # the circle: W1 in closed form, exact at any size
        return SlicedW1(mesh)(rho, X, weights)
    if method == "exact":
        C = np.arccos(np.clip(mesh.centers[keep] @ X.T, -1.0, 1.0)) ** p
        val = ot.emd2(a[keep] / a[keep].sum(), b, C, numItermax=10_000_000)
        return float(val) ** (1.0 / p)
    if method == "sliced":
        val = ot.sliced_wasserstein_sphere(mesh.centers[keep], X, a[keep] / a[keep].sum(), b, n_projections=n_projections, p=p, seed=seed)
        return float(val)
    raise ValueError(f"unknown method {method!r}; use 'exact', 'sliced' or 'auto'")


def w1_circle(u, a, v, b) -> np.ndarray:
    """W1 on the circle of length 1 between sum_i a_i delta_{u_i} and sum_j b_j delta_{v_j}.

    ``u`` (m, P) and ``v`` (n, P) are coordinates in [0, 1) on P circles at once; ``a`` (m,)
    and ``b`` (n,) weights with equal sums. Closed form W1 = min_alpha int_0^1 |F(t) - alpha| dt
    with F = F_a - F_b, the minimiser being the level median of F (Hundrieser, Klatt &
    Munk 2022); the whole circle counts, including [0, min point). Returns (P,).
    """
    vals = np.concatenate([np.asarray(u, float).T % 1.0, np.asarray(v, float).T % 1.0], axis=1)  # (P, m + n), rows contiguous
    P = vals.shape[0]
    wts = np.concatenate([np.asarray(a, float), -np.asarray(b, float)])
    order = np.argsort(vals, axis=1)
    vs = np.take_along_axis(vals, order, axis=1)
    F = np.zeros((P, vals.shape[1] + 1))
    np.cumsum(wts[order], axis=1, out=F[:, 1:])  # F on [0, vs_0) is 0, then on [vs_k, vs_{k+1})
    delta = np.diff(vs, axis=1, prepend=0.0, append=1.0)
    srt = np.argsort(F, axis=1)
    cw = np.cumsum(np.take_along_axis(delta, srt, axis=1), axis=1)
    k = np.argmax(cw >= 0.5 * cw[:, -1:], axis=1)
    med = np.take_along_axis(F, np.take_along_axis(srt, k[:, None], axis=1), axis=1)
    return np.sum(delta * np.abs(F - med), axis=1)


def great_circles(n_projections: int, seed: int = 0) -> np.ndarray:
    """``n_projections`` random great circles of S^2: (P, 3, 2) orthonormal frames (seeded)."""
    Z = np.random.default_rng(seed).standard_normal((n_projections, 3, 2))
    Q, R = np.linalg.qr(Z)
    return Q * np.sign(np.diagonal(R, axis1=1, axis2=2))[:, None, :]


def _circle_coords(P, U) -> np.ndarray:
    """Coordinates in [0, 1) of points P (m, 3) projected onto the great circles U (p, 3, 2): (m, p)."""
    Y = (np.asarray(P, float) @ np.transpose(U, (1, 0, 2)).reshape(3, -1)).reshape(len(P), U.shape[0], 2)
    return (np.pi + np.arctan2(-Y[..., 1], -Y[..., 0])) / (2 * np.pi)


class SlicedW1:
    """Sliced spherical W1 against one mesh, in radians (see :func:`sliced_w1_sphere`).

    The great circles and the cell centres' coordinates on them are computed once, so a
    run that measures the distance at every record pays only for the tokens' side.
    """

    def __init__(self, mesh, *, n_projections: int = 100, seed: int = 0):
        self.mesh = mesh
        self.n_projections = int(n_projections)
        self.U = great_circles(self.n_projections, seed)
        self._cells = self._coords(mesh.centers)  # cells with zero mass weigh nothing

    def _coords(self, P) -> np.ndarray:
        """Coordinates in [0, 1) on the great circles (m, P); on the circle S^1 (points (m, 2)) the angle / 2 pi (m, 1):
        there the "sliced" W1 is the exact W1 of the circle itself, with no projection."""
        P = np.asarray(P, float)
        if P.shape[1] == 2:
            return (np.mod(np.arctan2(P[:, 1], P[:, 0]), 2 * np.pi) / (2 * np.pi))[:, None]
        return _circle_coords(P, self.U)

    def __call__(self, rho, X, weights=None) -> float:
        a = _masses(self.mesh, rho)
        X = np.asarray(X, float)
        n = X.shape[0]
        b = np.full(n, 1.0 / n) if weights is None else np.asarray(weights, float) / np.sum(weights)
        return float(2 * np.pi * np.mean(w1_circle(self._cells, a, self._coords(X), b)))


def sliced_w1_sphere(mesh, rho, X, weights=None, *, n_projections: int = 100, seed: int = 0) -> float:
    """Sliced spherical W1 between the mesh density and the tokens, in radians.

    The mean over ``n_projections`` random great circles (seeded, so the same circles at
    every call) of the W1 distance, with arc-length cost, between the two measures
    projected onto the circle x -> U^T x / |U^T x| (Bonet et al. 2023, SSW_1), computed in
    closed form (:func:`w1_circle`). It is a discrepancy of its own, smaller than W1
    (projections shrink distances): compare it across times and runs, not with W1.
    """
    return SlicedW1(mesh, n_projections=n_projections, seed=seed)(rho, X, weights)


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
    if X.shape[1] == 3:  # the attention kernel with A = kappa I: Z(x_c) = sum_i w_i e^{kappa x_c . x_i} (Numba, parallel)
        from spherepde.attention import attention_moments

        logZ, _, _ = attention_moments(mesh.centers, X, w, kappa * np.eye(3)[None], log=True, summation="direct")
        out = np.exp(logZ[:, 0] - np.max(logZ[:, 0]))
        return out / np.sum(out * mesh.areas)
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
    if mesh.d == 2:  # the circle: a point uniform in the cell's arc
        theta = mesh.phi[cells] + mesh.areas[cells] * rng.random(n)
        return np.stack([np.cos(theta), np.sin(theta)], axis=1)
    r1 = np.sqrt(rng.random(n))
    r2 = rng.random(n)
    P = mesh.points[mesh.cells[cells]]  # (n, 3, 3)
    X = (1 - r1)[:, None] * P[:, 0] + (r1 * (1 - r2))[:, None] * P[:, 1] + (r1 * r2)[:, None] * P[:, 2]
    return X / np.linalg.norm(X, axis=1, keepdims=True)
