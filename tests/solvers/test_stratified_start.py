"""The stratified token start (initial.placement = "stratified", issue 37 item 4): the cluster
masses are the bump weights exactly, and the mean resultant and the energy approach those of
the vMF mixture itself at a rate 1/n, against references that do not use the placement rule: the
closed form A(kappa) = coth kappa - 1/kappa of the mean resultant, and the energy
E = 1/2 sum_ij p_i p_j E[e^{beta x.y}] with the y-integral in closed form and the x-integral by
Gauss-Laguerre (polar) x trapezoid (azimuth) quadrature."""

from __future__ import annotations

import math

import numpy as np
import pytest

from spherepde.model.clusters import weighted_clusters
from spherepde.runs.config import ConfigError, config_from_dict, default_config
from spherepde.runs.runner import build_token_start
from spherepde.solvers.particles import initial_tokens, stratified_tokens, stratified_vmf, vmf_counts

#: the five bumps of metastable-mesh / metastable-particles
MEANS = np.array([[1.0, 0.0, 0.0], [0.4695, 0.8829, 0.0], [-0.766, 0.6428, 0.0], [-0.0868, -0.4924, 0.866], [-0.2198, -0.604, -0.766]])
P = np.array([0.3, 0.15, 0.2, 0.2, 0.15])
KAPPA = np.full(5, 200.0)
BETA = 10.0


def _log_sinhc(z):
    """log(sinh z / z), stable for large z."""
    z = np.asarray(z, float)
    big = z > 1e-3
    zs = np.where(big, z, 1.0)
    return np.where(big, zs + np.log1p(-np.exp(-2 * zs)) - math.log(2) - np.log(zs), z**2 / 6)


def _mixture_reference(means, kappas, p, beta, n_polar=80, n_azimuth=64):
    """Energy and mean resultant of the vMF mixture on S^2 under D = beta I, by quadrature.

    E_y[e^{beta x.y}] for y ~ vMF(mu_j, kappa_j) is sinhc(|kappa_j mu_j + beta x|) / sinhc(kappa_j);
    x ~ vMF(mu_i, kappa_i) has 1 - x.mu_i = s / kappa_i with s ~ Exp(1) cut at 2 kappa_i."""
    means = means / np.linalg.norm(means, axis=1)[:, None]
    s, ws = np.polynomial.laguerre.laggauss(n_polar)
    phi = 2 * math.pi * np.arange(n_azimuth) / n_azimuth
    energy, resultant = 0.0, np.zeros(3)
    for i, mu in enumerate(means):
        e1 = np.cross(mu, np.eye(3)[int(np.argmin(np.abs(mu)))])
        e1 /= np.linalg.norm(e1)
        e2 = np.cross(mu, e1)
        w = 1 - s / kappas[i]
        r = np.sqrt(np.clip(1 - w**2, 0, None))
        X = w[:, None, None] * mu + r[:, None, None] * (np.cos(phi)[None, :, None] * e1 + np.sin(phi)[None, :, None] * e2)
        W = (ws / -math.expm1(-2 * kappas[i]))[:, None] / n_azimuth * np.ones(n_azimuth)
        resultant += p[i] * np.einsum("ab,abk->k", W, X)
        for j in range(len(p)):
            val = np.exp(_log_sinhc(np.linalg.norm(kappas[j] * means[j] + beta * X, axis=-1)) - _log_sinhc(kappas[j]))
            energy += 0.5 * p[i] * p[j] * float((W * val).sum())
    return energy, float(np.linalg.norm(resultant))


def _tokens(n):
    X, w = stratified_tokens(n, MEANS, KAPPA, P)
    return X, (np.full(n, 1.0 / n) if w is None else w)


def test_reference_mean_resultant_is_the_closed_form():
    a = 1 / math.tanh(200.0) - 1 / 200.0
    _, R = _mixture_reference(MEANS, KAPPA, P, BETA)
    assert R == pytest.approx(float(np.linalg.norm((P * a) @ (MEANS / np.linalg.norm(MEANS, axis=1)[:, None]))), rel=1e-10)


@pytest.mark.parametrize("n", [400, 401, 1000])
def test_cluster_masses_are_the_bump_weights(n):
    X, w = _tokens(n)
    assert np.allclose(np.linalg.norm(X, axis=1), 1.0, atol=1e-14) and w.sum() == pytest.approx(1.0, abs=1e-14)
    _, masses, _ = weighted_clusters(X, w)  # the recorded count's linkage finds the five bumps
    assert np.allclose(np.sort(masses), np.sort(P), atol=1e-12)
    counts = vmf_counts(n, P)
    assert counts.sum() == n and np.all(np.abs(counts - n * P) < 1)


@pytest.mark.parametrize("n", [400, 1600])
def test_mean_resultant_and_energy_approach_the_mixture_like_one_over_n(n):
    """Stated tolerance: relative energy error and resultant error below 0.25 / n (a random
    draw of 400 tokens is off by several per cent)."""
    E0, R0 = _mixture_reference(MEANS, KAPPA, P, BETA)
    X, w = _tokens(n)
    E = 0.5 * w @ np.exp(BETA * (X @ X.T)) @ w
    assert abs(E / E0 - 1) < 0.25 / n
    assert abs(np.linalg.norm(w @ X) - R0) < 0.25 / n


def test_single_bump_polar_quadrature_and_uniform_lattice():
    for m in (10, 100, 1000):
        X = stratified_vmf([0.0, 0.0, 1.0], 20.0, m)
        assert abs(X[:, 2].mean() - (1 / math.tanh(20.0) - 1 / 20.0)) < 0.02 / m
    U = initial_tokens("uniform", 500, placement="stratified")  # kappa = 0: the spherical Fibonacci lattice
    assert np.linalg.norm(U.mean(axis=0)) < 1e-3
    assert np.array_equal(U, initial_tokens("uniform", 500, placement="stratified", seed=7))  # no randomness


def test_weights_when_counts_are_not_whole():
    X, w = stratified_tokens(7, MEANS[:2], [50.0, 50.0], [0.5, 0.5])
    assert w is not None and np.allclose(np.sort(np.unique(np.round(w, 12))), [0.5 / 4, 0.5 / 3])
    with pytest.raises(ValueError, match="initial.n >= 2"):
        vmf_counts(1, [0.5, 0.5])


def _cfg(**over):
    d = default_config().to_dict()
    d["run"]["solver"] = "particles"
    d["initial"].update({"kind": "vmf", "means": MEANS.tolist(), "kappas": KAPPA.tolist(), "weights": P.tolist(), "n": 401, "placement": "stratified"})
    for key, value in over.items():
        sec, _, name = key.partition("__")
        d[sec][name] = value
    return config_from_dict(d)


def test_config_builds_the_weighted_start_and_refuses_what_it_cannot_place():
    X, w = build_token_start(_cfg())
    assert X.shape == (401, 3) and w is not None
    assert default_config().initial.placement == "random"
    for over, needle in (({"initial__kind": "octahedral"}, "'vmf' or 'uniform'"), ({"run__solver": "both"}, "only token starts"),
                         ({"model__d": 4, "initial__means": [[1.0, 0, 0, 0]], "initial__kappas": [20.0], "initial__weights": []}, "model.d = 3"),
                         ({"initial__n": 3}, "initial.n >= 5")):
        with pytest.raises(ConfigError, match=needle):
            _cfg(**over)


def _merge_times(beta: float, n: int, level: int) -> tuple[float, float, float]:
    """Two equal kappa = 200 clusters at 90 degrees under D = beta I: the times to mean resultant
    0.95 of the two-point ODE, of the mesh (implicit, point masses) and of n stratified tokens."""
    from spherepde.geometry import densities
    from spherepde.geometry.meshfiles import icosphere
    from spherepde.solvers.mesh import MeshSolver
    from spherepde.solvers.particles import ParticleSolver
    from spherepde.studies.common import frozen_beta_path
    from spherepde.studies.metastability import resultant_time_ode, time_to_resultant

    means, theta = [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]], math.pi / 2
    t_ode = resultant_time_ode(beta, 0.5, 0.5, theta)
    T = round(1.3 * t_ode) + 1.0
    path = frozen_beta_path(beta, 1.0, T, 0.01)
    X, w = stratified_tokens(n, means, [200.0, 200.0], [0.5, 0.5])
    t_tok, _ = time_to_resultant(ParticleSolver(X, path, integrator="heun", weights=w), T, 0.1)
    mesh = icosphere(level)
    ms = MeshSolver(mesh, densities.vmf_mixture(mesh, np.array(means), [200.0, 200.0], [0.5, 0.5]), path, order=1, integrator="implicit",
                    tol=1e-3, atoms=True)
    t_mesh, _ = time_to_resultant(ms, T, 0.1)
    return t_ode, t_mesh, t_tok


def test_stratified_tokens_and_mesh_merge_together():
    """The cheap twin check: beta = 8, 100 stratified tokens and mesh level 8 merge within 2 % of
    each other and of the two-point ODE (a random draw of 100 tokens is off by 14 %)."""
    t_ode, t_mesh, t_tok = _merge_times(8.0, 100, 8)
    assert abs(t_tok / t_mesh - 1) < 0.02
    assert abs(t_tok / t_ode - 1) < 0.02 and abs(t_mesh / t_ode - 1) < 0.02
