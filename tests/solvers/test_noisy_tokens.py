"""Tokens with Brownian noise (issue 35, ``model.noise = nu``; docs/model.md §10).

References used here, independent of the code under test:

* the continuum: a degree-l zonal harmonic's mean decays at nu l(l + d - 2) under nu Delta_S on
  S^{d-1} (S^1: nu l^2; S^2: nu l(l + 1)); E[x] at nu (d - 1);
* the exact discrete scheme: by Funk--Hecke, one projected step (x + s P_x xi)/|.| multiplies a
  zonal degree-l harmonic's mean by lambda_l = E[G_l(u)], u = (1 + s^2 q)^{-1/2}, q ~ chi^2_{d-1},
  G_l the Gegenbauer polynomial with G_l(1) = 1 (G_1(u) = u, G_2(u) = (d u^2 - 1)/(d - 1));
  computed here by quadrature against the chi^2 density (SciPy);
* the noisy mean-field (Kuramoto-type) drift at A = 0, V = I: dm/dt = (I - E[x x^T]) m - nu (d - 1) m;
* the entropy of a uniform law (-log |S^{d-1}|) and of a von Mises--Fisher law,
  int rho log rho = log C_d(kappa) + kappa A_d(kappa), A_d = I_{d/2}/I_{d/2-1}.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from spherepde.model.entropy import loo_log_density, token_entropy
from spherepde.model.weights import WeightPath
from spherepde.solvers.particles import MAX_DISPLACEMENT, ParticleSolver, particle_step, sample_vmf
from spherepde.solvers.token_noise import brownian_step, noise_generator, pack_state, unpack_state


def _lambda(l: int, d: int, s2: float) -> float:
    """The exact per-step factor of a degree-l zonal harmonic's mean (Funk--Hecke, module docstring)."""
    from scipy import integrate, stats

    g = (lambda q: (1 + s2 * q) ** -0.5) if l == 1 else (lambda q: (d / (1 + s2 * q) - 1) / (d - 1))
    return integrate.quad(lambda q: g(q) * stats.chi2.pdf(q, d - 1), 0, np.inf)[0]


def _zonal(l: int, X: np.ndarray) -> np.ndarray:
    """The zonal harmonic about e_1 of degree l, normalised to 1 at e_1 (x_1, (d x_1^2 - 1)/(d - 1))."""
    d = X.shape[1]
    return X[:, 0] if l == 1 else (d * X[:, 0] ** 2 - 1) / (d - 1)


def _frozen_path(d: int, T: float, dt: float, *, V=None, H: int = 1) -> WeightPath:
    """A frozen general-heads path: A = 0 and V (default 0: no drift, pure diffusion)."""
    K = int(round(T / dt))
    z = np.zeros((K + 1, H, d, d))
    Vs = z.copy() if V is None else np.broadcast_to(np.asarray(V, float), z.shape).copy()
    return WeightPath(dt=dt, A=z.copy(), V=Vs, drift=z.copy(), dM=np.zeros((K, H, d, d)), heads="general")


# ------------------------------------------------------------------ the scheme's weak order
@pytest.mark.parametrize("d", [2, 3, 5])
@pytest.mark.parametrize("l", [1, 2])
def test_the_exact_discrete_decay_is_weak_order_one(d, l):
    """lambda_l(dt)^(T/dt) - exp(-nu l(l+d-2) T) falls linearly with dt (fitted slope 0.85..1.1)."""
    nu, T, dts = 1.0, 0.4, np.array([0.04, 0.02, 0.01, 0.005])
    exact = math.exp(-nu * l * (l + d - 2) * T)
    err = np.array([_lambda(l, d, 2 * nu * dt) ** round(T / dt) - exact for dt in dts])
    slope = np.polyfit(np.log(dts), np.log(np.abs(err)), 1)[0]
    assert 0.85 < slope < 1.1, (err, slope)
    assert np.all(err > 0)  # the projected step diffuses a little too slowly


@pytest.mark.parametrize("d", [2, 3, 5])
def test_brownian_steps_match_the_exact_discrete_decay_and_converge_to_the_continuum(d):
    """Tokens from one point: the sample means of the degree-1 and -2 zonal harmonics agree with
    lambda_l^K within 4 standard errors at every dt, and their error against the continuum
    exp(-nu l(l+d-2) T) falls like dt (slope 0.7..1.3) at n = 200,000."""
    nu, T, n = 1.0, 0.4, 200_000
    dts = [0.04, 0.02, 0.01]
    errs = {1: [], 2: []}
    for i, dt in enumerate(dts):
        rng = noise_generator(100 * d + i)
        X = np.zeros((n, d))
        X[:, 0] = 1.0
        K = round(T / dt)
        for _ in range(K):
            X = brownian_step(X, math.sqrt(2 * nu * dt), rng)
        assert np.allclose(np.linalg.norm(X, axis=1), 1.0, atol=1e-12)
        for l in (1, 2):
            h = _zonal(l, X)
            se = h.std() / math.sqrt(n)
            assert abs(h.mean() - _lambda(l, d, 2 * nu * dt) ** K) < 4 * se, (d, l, dt, h.mean(), _lambda(l, d, 2 * nu * dt) ** K, se)
            errs[l].append(h.mean() - math.exp(-nu * l * (l + d - 2) * T))
    for l in (1, 2):
        slope = np.polyfit(np.log(dts), np.log(np.abs(errs[l])), 1)[0]
        assert 0.7 < slope < 1.3, (d, l, errs[l], slope)


def test_a_wrong_noise_scale_is_caught():
    """The Funk--Hecke check fails for a step with sqrt(nu dt) instead of sqrt(2 nu dt) (the test can fail)."""
    nu, dt, n, K, d = 1.0, 0.02, 100_000, 10, 3
    rng = noise_generator(7)
    X = np.tile(np.eye(d)[0], (n, 1))
    for _ in range(K):
        X = brownian_step(X, math.sqrt(nu * dt), rng)
    h = X[:, 0]
    assert abs(h.mean() - _lambda(1, d, 2 * nu * dt) ** K) > 10 * h.std() / math.sqrt(n)


# ------------------------------------------------------------------ the solver
@pytest.mark.parametrize("integrator", ["euler", "heun"])
@pytest.mark.parametrize("d", [2, 3, 5])
def test_solver_adds_exactly_the_brownian_step_after_the_deterministic_one(integrator, d):
    """With no drift the solver's tokens are bit for bit the projected Brownian steps of the stream
    noise_generator(noise_seed); the ``entropy`` column appears with nu > 0 only."""
    path = _frozen_path(d, 0.1, 0.01)
    X0 = sample_vmf(np.random.default_rng(0), np.eye(d)[0], 5.0, 50)
    ps = ParticleSolver(X0, path, integrator=integrator, noise=0.3, noise_seed=11)
    ps.advance(0.1)
    unit = lambda Y: Y / np.linalg.norm(Y, axis=1, keepdims=True)  # noqa: E731 - the steppers' retraction
    rng, X = noise_generator(11), unit(X0)
    for _ in range(10):
        X = brownian_step(unit(X), math.sqrt(2 * 0.3 * 0.01), rng)  # the zero-velocity step retracts, then the noise
    np.testing.assert_array_equal(ps.X, X)
    assert "entropy" in ps.record()
    quiet = ParticleSolver(X0, path, integrator=integrator)
    quiet.advance(0.1)
    np.testing.assert_allclose(quiet.X, X0 / np.linalg.norm(X0, axis=1, keepdims=True), atol=1e-15)
    assert "entropy" not in quiet.record() and "noise_rng" not in quiet.get_state()


def test_noise_and_attention_drift_add_up():
    """Noisy mean-field drift at A = 0, V = I on S^2: the empirical mean follows
    dm = [(I - S) m - 2 nu m] dt + dN, S = E[x x^T] of the tokens, N a martingale of standard deviation
    sqrt(2 nu T (1 - 1/d) / n) per coordinate. Summed along the run, the residual of m_1 is within 4 of
    those standard deviations, and is far outside them without the Ito drift -2 nu m (the test can fail)."""
    d, T, dt, nu, n = 3, 0.4, 0.005, 0.5, 4000
    path = _frozen_path(d, T, dt, V=np.eye(d))
    X0 = sample_vmf(np.random.default_rng(3), np.eye(d)[0], 0.6, n)
    ps = ParticleSolver(X0, path, noise=nu, noise_seed=5)
    transport = ito = 0.0
    m0 = ps.X.mean(axis=0)
    for _ in range(round(T / dt)):
        X = ps.X
        m = X.mean(axis=0)
        S = X.T @ X / n
        transport += dt * ((np.eye(d) - S) @ m)[0]
        ito += dt * (-(d - 1) * nu * m[0])
        ps.step()
    residual = ps.X.mean(axis=0)[0] - m0[0] - transport
    sd = math.sqrt(2 * nu * T * (1 - 1 / d) / n)
    assert abs(residual - ito) < 4 * sd, (residual, ito, sd)
    assert abs(residual) > 4 * sd


def test_state_carries_the_noise_stream_bit_for_bit():
    """get_state / set_state mid-run: the continued run equals the uninterrupted one exactly; a state
    without the noise stream is refused in one line."""
    d = 3
    path = _frozen_path(d, 0.2, 0.01, V=np.eye(d))
    X0 = sample_vmf(np.random.default_rng(1), np.eye(d)[0], 1.0, 40)
    a = ParticleSolver(X0, path, noise=0.5, noise_seed=2)
    a.advance(0.1)
    st = a.get_state()
    a.advance(0.2)
    b = ParticleSolver(X0, path, noise=0.5, noise_seed=99)  # another seed: the state decides
    b.set_state({k: np.asarray(v).copy() for k, v in st.items()})
    b.advance(0.2)
    np.testing.assert_array_equal(a.X, b.X)
    with pytest.raises(ValueError, match="no token noise state"):
        b.set_state({k: v for k, v in st.items() if k != "noise_rng"})
    rng = noise_generator(4)
    rng.standard_normal(3)
    other = noise_generator(0)
    unpack_state(other, pack_state(rng))
    assert other.standard_normal() == rng.standard_normal()


def test_the_noise_stream_is_its_own():
    """The noise stream differs from the initial draw's default_rng(seed) and depends on the seed."""
    a, b, c = noise_generator(1).standard_normal(5), np.random.default_rng(1).standard_normal(5), noise_generator(2).standard_normal(5)
    assert not np.allclose(a, b) and not np.allclose(a, c)
    np.testing.assert_array_equal(a, noise_generator(1).standard_normal(5))


def test_particle_step_bounds_the_brownian_step():
    """The chosen step keeps sqrt(2 nu (d-1) dt) <= MAX_DISPLACEMENT and is a whole fraction of the
    grid step; a larger solver.dt is refused naming the step to use; nu = 0 keeps the old step."""
    path = _frozen_path(3, 1.0, 0.1)
    assert particle_step(path) == 0.1
    dt = particle_step(path, noise=2.0)
    assert math.sqrt(2 * 2.0 * 2 * dt) <= MAX_DISPLACEMENT * (1 + 1e-12)
    assert abs(0.1 / dt - round(0.1 / dt)) < 1e-9 and math.sqrt(2 * 2.0 * 2 * dt * 0.1 / (0.1 - dt)) > MAX_DISPLACEMENT
    with pytest.raises(ValueError, match=r"model.noise = 2 .* use solver.dt = 0.005 "):
        particle_step(path, 0.1, noise=2.0)
    with pytest.raises(ValueError, match="token noise"):
        ParticleSolver(np.eye(3)[:2], path, noise=-1.0)


# ------------------------------------------------------------------ the entropy column
def _sphere_area(d: int) -> float:
    return 2 * math.pi ** (d / 2) / math.gamma(d / 2)


def _vmf_entropy(kappa: float, d: int) -> float:
    from scipy.special import ive

    nu = d / 2 - 1
    logc = nu * math.log(kappa) - (d / 2) * math.log(2 * math.pi) - math.log(ive(nu, kappa)) - kappa
    return logc + kappa * ive(d / 2, kappa) / ive(nu, kappa)


def test_loo_density_against_a_plain_loop():
    """log f_i(x_i) against a loop with the closed-form constants (S^2: kappa / (4 pi sinh kappa);
    S^1: 1 / (2 pi I_0(kappa))), unequal weights."""
    from scipy.special import i0

    rng = np.random.default_rng(0)
    for d, const in ((3, lambda k: k / (4 * math.pi * math.sinh(k))), (2, lambda k: 1 / (2 * math.pi * i0(k)))):
        X = sample_vmf(rng, np.eye(d)[0], 2.0, 9)
        w = rng.random(9)
        w /= w.sum()
        kappas = [0.5, 3.0, 20.0]
        got = loo_log_density(X, w, kappas)
        for a, k in enumerate(kappas):
            for i in range(9):
                f = sum(w[j] * const(k) * math.exp(k * X[i] @ X[j]) for j in range(9) if j != i) / (1 - w[i])
                assert got[a, i] == pytest.approx(math.log(f), rel=1e-12, abs=1e-12)


@pytest.mark.parametrize(
    "d, kappa, n, tol",
    [(2, 0.0, 1500, 0.01), (3, 0.0, 1500, 0.01), (5, 0.0, 1500, 0.01), (2, 10.0, 2000, 0.05), (3, 10.0, 2000, 0.05), (3, 50.0, 2000, 0.05), (5, 2.0, 2000, 0.05)],
)
def test_entropy_estimate_against_exact_values(d, kappa, n, tol):
    """int rho log rho of the tokens against the exact value: uniform -log |S^{d-1}| (-log 2 pi, -log 4 pi,
    -log (8 pi^2 / 3)) within 0.01 at n = 1,500; vMF laws within 0.05 at n = 2,000."""
    X = sample_vmf(np.random.default_rng(int(10 * kappa) + d), np.eye(d)[0], kappa, n)
    exact = -math.log(_sphere_area(d)) if kappa == 0 else _vmf_entropy(kappa, d)
    assert abs(token_entropy(X) - exact) < tol, (token_entropy(X), exact)


def test_entropy_distinguishes_concentrations():
    """The estimate is not a constant: a vMF law of kappa = 10 reads higher than kappa = 2 by about the
    exact difference (within 0.05), and n < 2 tokens give NaN."""
    rng = np.random.default_rng(5)
    a = token_entropy(sample_vmf(rng, np.eye(3)[0], 2.0, 1500))
    b = token_entropy(sample_vmf(rng, np.eye(3)[0], 10.0, 1500))
    assert abs((b - a) - (_vmf_entropy(10.0, 3) - _vmf_entropy(2.0, 3))) < 0.05
    assert math.isnan(token_entropy(np.eye(3)[:1]))


def test_coupled_tokens_take_the_noise_and_record_p_entropy():
    """CoupledSolver(noise=nu): its tokens take the Brownian step of the stream of ``seed`` (the same
    tokens as a ParticleSolver from its start, to round-off), and rows add p_entropy in the registry's order.
    """
    import spherepde as sp
    from spherepde import densities
    from spherepde.model.columns import solver_columns
    from spherepde.solvers.coupled import CoupledSolver

    path = sp.generate_weight_path(sp.OUProcess(), H=1, d=3, T=0.02, dt=0.01, seed=3)
    mesh = sp.icosphere(2)
    cs = CoupledSolver(sp.MeshSolver(mesh, densities.octahedral(mesh), path, noise=0.2), 30, seed=4, noise=0.2)
    alone = ParticleSolver(cs.particle_solver.X.copy(), path, noise=0.2, noise_seed=4)
    cs.advance(0.02)
    alone.advance(0.02)
    np.testing.assert_allclose(cs.particle_solver.X, alone.X, rtol=0, atol=1e-13)  # the start renormalised once more: round-off
    assert tuple(cs.record()) == solver_columns("both", "cheap", noise=True)


def test_the_note_names_the_noise_when_it_sets_the_step():
    path = _frozen_path(3, 1.0, 0.1)
    ps = ParticleSolver(np.eye(3)[:2], path, dt=particle_step(path, noise=2.0), noise=2.0)
    assert "model.noise = 2" in ps.notes()[0] and ps.split == 20
