"""Unnormalised attention (model.attention = "unnormalised", docs/model.md "Unnormalised attention"):
the velocity against a plain NumPy formula, its energy structure (v = s grad xi, mobility 1, the
paper-form EDI exact for every H), the fused kernel against the NumPy route, the closed forms
(linear rates, two-point ODE) against independent computations, and softmax left as it was."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.integrate import quad
from scipy.special import iv, spherical_in

import spherepde as sp
from spherepde.model.energy import state_rates
from spherepde.model.linear import linear_rate, two_point_rate
from spherepde.model.velocity import ATTENTION_KINDS, head_fields, is_normalised, velocity_from_fields
from spherepde.solvers.mesh import MeshSolver
from spherepde.solvers.particles import ParticleSolver, speed_bound

USA = "unnormalised"


def _unit(rng, n, d):
    X = rng.standard_normal((n, d))
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def _sym(rng, H, d, scale=0.7):
    G = rng.standard_normal((H, d, d)) * scale
    return (G + np.transpose(G, (0, 2, 1))) / 2


def _plain_velocity(X, w, A, V, normalised):
    """(1/H) sum_h P_x sum_j w_j e^{x A_h x_j} V_h x_j [/ Z_h(x)], one token at a time (no shared code)."""
    n, d = X.shape
    out = np.zeros((n, d))
    for i in range(n):
        a = np.zeros(d)
        for h in range(A.shape[0]):
            e = np.array([w[j] * math.exp(X[i] @ A[h] @ X[j]) for j in range(n)])
            ah = V[h] @ (e @ X)
            a += ah / e.sum() if normalised else ah
        a /= A.shape[0]
        out[i] = a - (a @ X[i]) * X[i]
    return out


def _path(A, V=None, *, sign=1.0, T=1.0, dt=0.5):
    """A frozen path of the given matrices: gradient heads (A = D, V = s D) when V is None, else general heads."""
    H, d, _ = A.shape
    if V is None:
        return sp.generate_weight_path(sp.FrozenProcess(), H=H, d=d, T=T, dt=dt, init=A, sign=sign)
    return sp.generate_weight_path(sp.FrozenProcess(), H=H, d=d, T=T, dt=dt, init=A, heads="general", value_init=V)


# ------------------------------------------------------------------ the velocity
@pytest.mark.parametrize("d", [2, 3, 5])
@pytest.mark.parametrize("heads", ["gradient", "general"])
def test_token_velocity_matches_a_plain_formula(d, heads):
    rng = np.random.default_rng(d)
    n, H = 25, 3
    X = _unit(rng, n, d)
    w = rng.random(n) + 0.5
    w /= w.sum()
    A = _sym(rng, H, d)
    if heads == "gradient":
        s = -1.0
        path, V = _path(A, sign=s), s * A
    else:
        A = A + 0.3 * rng.standard_normal((H, d, d))
        V = rng.standard_normal((H, d, d))
        path = _path(A, V)
    ps = ParticleSolver(X, path, weights=w, attention=USA)
    ref = _plain_velocity(X, w, A, V, normalised=False)
    np.testing.assert_allclose(ps._current()["v"], ref, rtol=1e-12, atol=1e-13)
    # and softmax still is the normalised formula; the two differ
    soft = ParticleSolver(X, path, weights=w)._current()["v"]
    np.testing.assert_allclose(soft, _plain_velocity(X, w, A, V, normalised=True), rtol=1e-12, atol=1e-13)
    assert np.max(np.abs(soft - ref)) > 1e-2


def test_gradient_heads_flow_up_grad_xi_with_mobility_one():
    """v = s grad_S xi, G2 = int |v|^2 dmu and transport = s G2 exactly (every H)."""
    rng = np.random.default_rng(7)
    n, d, H, s = 40, 3, 3, -1.0
    X, w = _unit(rng, n, d), np.full(n, 1 / 40)
    D = _sym(rng, H, d)
    F = head_fields(X, w, D)
    v = velocity_from_fields(X, F, s * D, kind=USA)
    r = state_rates(X, w, F, D, np.zeros_like(D), 0.0, v, attention=USA)
    np.testing.assert_allclose(v, s * r["grad_xi"], rtol=1e-13, atol=1e-14)
    assert r["G2"] == pytest.approx(float(np.sum(w * np.sum(v * v, axis=1))), rel=1e-14)
    assert r["transport"] == pytest.approx(s * r["G2"], rel=1e-13)
    soft = state_rates(X, w, F, D, np.zeros_like(D), 0.0, velocity_from_fields(X, F, s * D), attention="softmax")
    assert abs(soft["transport"] - s * soft["G2"]) > 1e-4 * abs(soft["G2"])  # softmax, H > 1: a covariance term
    # a numerical gradient of xi = (1/H) sum_h Z_h along a tangent direction
    x, t = X[0], np.cross(X[0], [0.3, -0.2, 0.9])
    t /= np.linalg.norm(t)
    xi = lambda y: float(np.mean(head_fields(X, w, D, targets=y[None]).Z))
    hstep = 1e-5
    num = (xi(np.cos(hstep) * x + np.sin(hstep) * t) - xi(np.cos(hstep) * x - np.sin(hstep) * t)) / (2 * hstep)
    assert r["grad_xi"][0] @ t == pytest.approx(num, rel=1e-7)


def test_one_head_usa_velocity_is_z_times_softmax_velocity():
    """For one head v_USA(x) = Z(x) v_softmax(x) pointwise; at the uniform state Z = sinh(beta)/beta."""
    beta = 2.5
    D = beta * np.eye(3)[None]
    n = 4000
    X = sp.initial_tokens("uniform", n, placement="stratified")  # a quadrature of the uniform law
    w = np.full(n, 1 / n)
    F = head_fields(X, w, D)
    vu, vs = velocity_from_fields(X, F, D, kind=USA), velocity_from_fields(X, F, D)
    np.testing.assert_allclose(vu, F.Z[:, :1] * vs, rtol=1e-12, atol=1e-13)  # |v| ~ 1e-5 here: the lattice is nearly uniform
    np.testing.assert_allclose(F.Z[:, 0], math.sinh(beta) / beta, rtol=1e-3)
    Xr = _unit(np.random.default_rng(4), 50, 3)  # and away from uniform, where |v| ~ 1
    Fr = head_fields(Xr, np.full(50, 1 / 50), D)
    vu = velocity_from_fields(Xr, Fr, D, kind=USA)
    np.testing.assert_allclose(vu, Fr.Z[:, :1] * velocity_from_fields(Xr, Fr, D), rtol=1e-13, atol=1e-14)
    assert np.max(np.linalg.norm(vu, axis=1)) > 0.3


def test_softmax_stays_the_default_bit_for_bit():
    rng = np.random.default_rng(3)
    X = _unit(rng, 30, 3)
    path = sp.generate_weight_path(sp.OUProcess(), H=2, d=3, T=0.2, dt=0.05, seed=1)
    a, b = ParticleSolver(X, path), ParticleSolver(X, path, attention="softmax")
    a.advance(0.2)
    b.advance(0.2)
    assert a.attention == "softmax" and np.array_equal(a.X, b.X) and a.record() == b.record()
    mesh = sp.icosphere(3)
    rho = sp.densities.vmf_mixture(mesh, [[0.0, 0.0, 1.0]], [4.0])
    m1, m2 = MeshSolver(mesh, rho, path), MeshSolver(mesh, rho, path, attention="softmax")
    m1.advance(0.1)
    m2.advance(0.1)
    assert np.array_equal(m1.rho, m2.rho)
    with pytest.raises(ValueError, match="'softmax', 'unnormalised'"):
        ParticleSolver(X, path, attention="normalised")
    assert is_normalised("softmax") and not is_normalised(USA) and USA in ATTENTION_KINDS


def test_speed_bound_covers_the_unnormalised_speed():
    """|v| <= (1/H) sum_h ||V_h|| e^{||A_h||}: the tokens of a tight cluster nearly reach it."""
    path = _path(3.0 * np.eye(3)[None], sign=1.0)
    rng = np.random.default_rng(0)
    X = np.array([0.0, 0.0, 1.0]) + 0.02 * rng.standard_normal((50, 3))
    X[0] = [1.0, 0.0, 0.05]  # one token far from the cluster
    v = ParticleSolver(X, path, attention=USA)._current()["v"]
    bound = speed_bound(path, USA)
    assert bound == pytest.approx(3.0 * math.exp(3.0)) and speed_bound(path) == pytest.approx(3.0)
    assert np.max(np.linalg.norm(v, axis=1)) <= bound
    assert np.max(np.linalg.norm(v, axis=1)) > speed_bound(path)  # faster than softmax could ever be


# ------------------------------------------------------------------ the mesh: fused kernel and balance
def _ou_mesh(attention, level=4, H=2, numpy_rates=False, T=0.2, **kw):
    mesh = sp.icosphere(level)
    rho = sp.densities.vmf_mixture(mesh, [[0.0, 0.0, 1.0], [1.0, 0.0, 0.2]], [6.0, 10.0])
    path = sp.generate_weight_path(sp.OUProcess(), H=H, d=3, T=T, dt=0.05, seed=2)
    ms = MeshSolver(mesh, rho, path, attention=attention, **kw)
    ms._numpy_rates = numpy_rates
    return ms


def test_fused_kernel_equals_the_numpy_route_with_usa():
    a, b = _ou_mesh(USA), _ou_mesh(USA, numpy_rates=True)
    ea, eb = a._evaluate(a.rho, 0.05), b._evaluate(b.rho, 0.05)
    for k in ("energy", "dEdt_partial", "G2", "transport", "G2_scheme"):
        assert ea.rates[k] == pytest.approx(eb.rates[k], rel=1e-11, abs=1e-14), k
    for k in ("xi", "Phi", "M"):
        np.testing.assert_allclose(ea.rates[k], eb.rates[k], rtol=1e-11, atol=1e-14)
    np.testing.assert_allclose(ea.u, eb.u, rtol=1e-11, atol=1e-13)
    # the potential flux uses xi with USA (not Phi = (1/H) sum log Z_h)
    g = a.geom
    c, n = g.edge_cells[:, 0], g.edge_cells[:, 1]
    np.testing.assert_allclose(ea.u, a.path.sign * (ea.rates["xi"][n] - ea.rates["xi"][c]) / g.node_distances, rtol=1e-12)
    soft = _ou_mesh("softmax")._evaluate(a.rho, 0.05)
    assert np.max(np.abs(soft.u - ea.u)) > 0.1 * np.max(np.abs(ea.u))


@pytest.mark.parametrize("integrator", ["ssprk3", "implicit"])
def test_paper_form_balance_is_exact_for_two_heads_on_the_mesh(integrator):
    """With USA the scheme's G^2 is s x (the discrete transport rate) for every H: edi_paper = edi_exact to
    round-off (explicit stages and the implicit step's trapezoid rule alike); with softmax and H = 2 the
    two differ (the covariance term of the harmonic-mean mobility)."""
    out = {}
    for att in (USA, "softmax"):
        ms = _ou_mesh(att, level=3, integrator=integrator)
        ms.advance(0.2)
        r = ms.record()
        out[att] = r
        assert abs(r["energy"] - ms.balance.E0) > 1e-3
    r = out[USA]
    assert abs(r["edi_paper"] - r["edi_exact"]) < 1e-12
    assert r["int_transport"] == pytest.approx(-r["int_G2_scheme"], rel=1e-12)
    s = out["softmax"]
    assert abs(s["edi_paper"] - s["edi_exact"]) > 1e-6


@pytest.mark.parametrize("attention", [USA, "softmax"])
def test_token_edi_paper_form_with_two_ou_heads(attention):
    """Tokens, H = 2 heads. With OU noise (sigma^2 = 2) the paper form equals the exact chain-rule
    residual to round-off with USA, and its solver part (edi_paper - edi_weights) falls at order 2 with
    the Heun step; softmax keeps a covariance term that no step removes. With deterministic weights
    (OU drift, sigma = 0; the path's grid refined with the step) the paper-form residual itself -> 0 as
    dt -> 0 with USA (first order: the Euler weight path's)."""
    X = sp.initial_tokens("octahedral", 40, seed=1)
    noisy = sp.generate_weight_path(sp.OUProcess(), H=2, d=3, T=0.4, dt=0.02, seed=5)
    rows = {}
    for dt in (0.01, 0.005, 0.0025):
        smooth = sp.generate_weight_path(sp.OUProcess(sigma=0.0), H=2, d=3, T=0.4, dt=dt, seed=5)  # the same D(0)
        for name, path in (("noisy", noisy), ("smooth", smooth)):
            ps = ParticleSolver(X, path, dt=dt, integrator="heun", attention=attention)
            ps.advance(0.4)
            rows.setdefault(name, []).append(ps.record())
    gap = [abs(r["edi_paper"] - r["edi_exact"]) for r in rows["noisy"]]
    solver_part = [abs(r["edi_paper"] - r["edi_weights"]) for r in rows["noisy"]]
    paper = [abs(r["edi_paper"]) for r in rows["smooth"]]
    if attention == USA:
        assert max(gap) < 1e-12, gap
        assert solver_part[0] / solver_part[1] > 3 and solver_part[1] / solver_part[2] > 3, solver_part
        assert paper[0] / paper[1] > 1.7 and paper[1] / paper[2] > 1.7, paper
    else:
        assert min(gap) > 1e-3 and gap[2] > 0.8 * gap[1], gap  # H = 2: the covariance term stays
        assert paper[2] > 1e-3 and paper[2] > 0.6 * paper[1], paper  # measured -2.6e-3, -2.1e-3, -1.8e-3 (USA: 1.1e-3, 5.5e-4, 2.7e-4)


# ------------------------------------------------------------------ closed forms
@pytest.mark.parametrize("beta", [0.5, 2.0, 5.0])
def test_linear_rates_against_funk_hecke_and_fourier_integrals(beta):
    """The kernel's eigenvalues by quadrature (independent of scipy's Bessel functions):
    S^2: int e^{beta t} P_l(t) dt / 2 = i_l(beta); S^1: int e^{beta cos p} cos(k p) dp / (2 pi) = I_k(beta)."""
    from scipy.special import eval_legendre

    for l in range(1, 6):
        il = quad(lambda t: math.exp(beta * t) * eval_legendre(l, t), -1, 1, epsabs=1e-14)[0] / 2
        i0 = math.sinh(beta) / beta
        c = 1.7
        assert linear_rate(l, beta, c, attention=USA) == pytest.approx(c / beta * l * (l + 1) * il, rel=1e-9)
        assert linear_rate(l, beta, c) == pytest.approx(c / beta * l * (l + 1) * il / i0, rel=1e-9)
        Ik = quad(lambda p: math.exp(beta * math.cos(p)) * math.cos(l * p), 0, 2 * math.pi, epsabs=1e-14)[0] / (2 * math.pi)
        I0 = quad(lambda p: math.exp(beta * math.cos(p)), 0, 2 * math.pi)[0] / (2 * math.pi)
        assert linear_rate(l, beta, c, attention=USA, d=2) == pytest.approx(c / beta * l**2 * Ik, rel=1e-9)
        assert linear_rate(l, beta, c, d=2) == pytest.approx(c / beta * l**2 * Ik / I0, rel=1e-9)
    assert linear_rate(2, beta, beta, attention=USA) == pytest.approx(linear_rate(2, beta, beta) * spherical_in(0, beta), rel=1e-13)
    assert linear_rate(3, beta, 1.0, attention=USA, d=2) == pytest.approx(9 * iv(3, beta) / beta, rel=1e-13)
    with pytest.raises(ValueError, match="d = 4"):
        linear_rate(1, beta, 1.0, d=4)


def _two_token_angle_time(beta, m1, theta0, attention, angle, dt=2e-4):
    """Two tokens (weights m1, 1 - m1) on a tilted great circle of S^2, Heun steps: the first time their angle is
    below ``angle`` (linear interpolation in log theta between steps)."""
    u, v = np.array([1.0, 2.0, 2.0]) / 3, np.array([2.0, 1.0, -2.0]) / 3  # orthonormal, not a coordinate plane
    X = np.array([u, math.cos(theta0) * u + math.sin(theta0) * v])
    path = sp.generate_weight_path(sp.FrozenProcess(), H=1, d=3, T=4.0, dt=dt * 50, init="beta", beta=beta, sign=1.0)
    ps = ParticleSolver(X, path, dt=dt, integrator="heun", weights=[m1, 1 - m1], attention=attention)
    ang = lambda Y: math.atan2(np.linalg.norm(np.cross(Y[0], Y[1])), Y[0] @ Y[1])
    a0 = ang(ps.X)
    while True:
        ps.step()
        a1 = ang(ps.X)
        if a1 < angle:
            f = (math.log(angle) - math.log(a0)) / (math.log(a1) - math.log(a0))
            return ps.t - dt + f * dt
        a0 = a1


@pytest.mark.parametrize("attention", [USA, "softmax"])
def test_two_point_ode_matches_two_tokens_with_unequal_masses(attention):
    """d theta/dt of two point masses (docs/model.md): unequal masses, a great circle off the axes of S^2."""
    from spherepde.studies.metastability import merge_time_ode

    beta, m1, theta0, angle = 2.0, 0.3, 1.2, 0.05
    t_ode = merge_time_ode(beta, m1, 1 - m1, theta0, angle, attention=attention)
    assert t_ode == pytest.approx(_two_token_angle_time(beta, m1, theta0, attention, angle), rel=1e-5)
    if attention == USA:  # the closed form: d theta/dt = -c (m1 + m2) e^{beta cos theta} sin theta
        assert two_point_rate(1.0, beta, 0.3, 0.7, beta, attention=USA) == pytest.approx(-beta * math.exp(beta * math.cos(1.0)) * math.sin(1.0))


def test_nucleation_prediction_on_the_circle():
    """k* = argmax_k gamma_k is 3 at beta = 5 and 4 at beta = 7 (both kinds); the clusters of mode k
    sit where the start's mode k peaks: for 1 + eps cos(k (theta - theta0)) at theta0 + 2 pi j / k."""
    from spherepde.model.linear import fastest_mode, fourier_coefficient, linear_rate, nucleation_angles

    for kind in ("softmax", "unnormalised"):
        assert fastest_mode(5.0, attention=kind) == 3 and fastest_mode(7.0, attention=kind) == 4
        assert linear_rate(3, 5.0, 1.0, attention=kind, d=2) > max(linear_rate(k, 5.0, 1.0, attention=kind, d=2) for k in (2, 4))
    th = np.linspace(0, 2 * np.pi, 4096, endpoint=False)
    for k, theta0 in ((3, 0.4), (4, 5.9), (1, 3.0)):
        w = 1 + 0.1 * np.cos(k * (th - theta0))
        got = nucleation_angles(fourier_coefficient(th, k, w / w.sum()), k)
        want = np.sort(np.mod(theta0 + 2 * np.pi * np.arange(k) / k, 2 * np.pi))
        assert np.allclose(got, want, atol=1e-9)
    with pytest.raises(ValueError, match="not determined"):
        nucleation_angles(0j, 3)
