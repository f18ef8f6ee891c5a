"""Stationary states of the noisy model with one frozen head (spherepde.model.stationary, .continuation).

References: the closed-form thresholds of MODEL §9 (and spherepde.model.linear's rates), a plain NumPy
dense sum for the self-consistency on the mesh, the axially symmetric reduction against the mesh quadrature
(second order on the icosphere), and Mun & Rosenzweig's published threshold and tricritical beta_*.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import iv, spherical_in

from spherepde.geometry import icosphere
from spherepde.geometry.circle import CircleMesh, uniform_circle
from spherepde.model import continuation as cont
from spherepde.model import stationary as st
from spherepde.model.linear import linear_rate

KINDS = [(d, a) for d in (3, 2) for a in ("softmax", "unnormalised")]


def _grid(d, n=64):
    return st.ReducedGrid(d, n if d == 3 else n + 1)


# ------------------------------------------------------------------ the uniform state and the threshold
@pytest.mark.parametrize("d, attention", KINDS)
@pytest.mark.parametrize("s", [1, -1])
def test_uniform_state_solves_the_self_consistency(d, attention, s):
    p = st.SteadyProblem(d, attention, s, 3.0, 0.4)
    for grid in (_grid(d), st.MeshGrid(uniform_circle(40))) if d == 2 else (_grid(d),):
        assert st.residual(grid, p, st.uniform(grid)) < 1e-13  # exactly, where the quadrature is rotation invariant
    if d == 3:  # the icosphere's cells differ: Z of the uniform density varies by the quadrature error, O(h^2)
        res = [st.residual(st.MeshGrid(icosphere(n)), p, st.uniform(st.MeshGrid(icosphere(n)))) for n in (8, 16)]
        assert math.log2(res[0] / res[1]) > 1.8 and res[1] < 2e-4


@pytest.mark.parametrize("d, attention", KINDS)
@pytest.mark.parametrize("beta", [0.5, 3.0, 9.0])
def test_threshold_is_where_the_linear_rate_vanishes_and_where_the_discrete_map_turns_unstable(d, attention, beta):
    nu_c = st.critical_nu(beta, attention, d)
    # MODEL §9: gamma_1 - nu l(l+1) (S^2) or gamma_1 - nu (S^1), gamma_1 = linear_rate(1, beta, c = s beta)
    assert linear_rate(1, beta, beta, attention=attention, d=d) / (2 if d == 3 else 1) == pytest.approx(nu_c, rel=1e-12)
    closed = {(3, "softmax"): 1 / math.tanh(beta) - 1 / beta, (3, "unnormalised"): float(spherical_in(1, beta)),
              (2, "softmax"): float(iv(1, beta) / iv(0, beta)), (2, "unnormalised"): float(iv(1, beta))}[(d, attention)]
    assert nu_c == pytest.approx(closed, rel=1e-12)
    # the discretised map: the largest eigenvalue of dT/drho at the uniform state is nu_c / nu
    grid = _grid(d, 96)
    nu = 0.8 * nu_c
    assert st.stability(grid, st.SteadyProblem(d, attention, 1, beta, nu), st.uniform(grid)) == pytest.approx(nu_c / nu, rel=1e-9)
    assert st.critical_beta(nu_c, attention, d) == pytest.approx(beta, rel=1e-9)


def test_higher_mode_threshold_matches_the_map():
    grid = _grid(3, 96)
    for mode in (2, 3):
        nu_c = st.critical_nu(2.5, "unnormalised", 3, mode)
        assert nu_c == pytest.approx(float(spherical_in(mode, 2.5)), rel=1e-12)
        _, J = st.map_jacobian(grid, st.SteadyProblem(3, "unnormalised", 1, 2.5, nu_c), st.uniform(grid))
        ev = np.sort(np.linalg.eigvals(J).real)[::-1]
        assert np.min(np.abs(ev - 1.0)) < 1e-9  # the degree-l mode is neutral there


@pytest.mark.parametrize("d, attention, beta", [(3, "softmax", 4.0), (2, "unnormalised", 1.5)])
def test_continuous_branch_bifurcates_at_threshold_with_square_root_amplitude(d, attention, beta):
    grid = _grid(d, 64)
    nu_c = st.critical_nu(beta, attention, d)
    p = st.SteadyProblem(d, attention, 1, beta, nu_c)
    above = st.solve_stable(grid, p.with_(nu=1.01 * nu_c), st.seeded(grid, st.uniform(grid), 1, 1e-2))
    assert above.converged and above.order < 1e-12
    eps = np.array([0.02, 0.01, 0.005, 0.0025])
    r = []
    start = st.seeded(grid, st.uniform(grid), 1, 0.1)
    for e in eps:
        s = st.solve_stable(grid, p.with_(nu=(1 - e) * nu_c), start)
        assert s.converged and s.stable and s.residual < 1e-10
        r.append(s.order)
        start = s.rho
    # r^2 = c1 (nu_c - nu)/nu_c + c2 (...)^2 + c0 with c0 = 0: r ~ sqrt(nu_c - nu) (measured c0 / (c1 eps_min) ~ 3e-3)
    c2, c1, c0 = np.polyfit(eps, np.array(r) ** 2, 2)
    assert c1 > 0 and abs(c0) < 0.01 * c1 * eps.min()


# ------------------------------------------------------------------ the two quadratures agree
def test_reduction_is_converged_to_round_off():
    p = st.SteadyProblem(3, "unnormalised", 1, 3.0, 0.6 * st.critical_nu(3.0, "unnormalised", 3))
    orders = []
    for n in (48, 96):
        g = st.ReducedGrid(3, n)
        orders.append(st.solve_stable(g, p, st.seeded(g, st.uniform(g), 1, 0.1)).order)
    assert abs(orders[0] - orders[1]) < 1e-10


@pytest.mark.parametrize("attention, beta", [("softmax", 4.0), ("unnormalised", 1.0)])
def test_icosphere_quadrature_converges_to_the_reduction_at_second_order(attention, beta):
    p = st.SteadyProblem(3, attention, 1, beta, 0.7 * st.critical_nu(beta, attention, 3))
    g = st.ReducedGrid(3, 96)
    ref = st.solve_stable(g, p, st.seeded(g, st.uniform(g), 1, 0.1))
    errs = []
    for level in (4, 8):
        mg = st.MeshGrid(icosphere(level))
        s = st.solve_fixed_point(mg, p, st.seeded(mg, st.uniform(mg), 1, 1e-2))
        assert s.converged
        errs.append(abs(s.order - ref.order))
    # measured 8.6e-4 / 2.0e-4 (softmax), 1.3e-3 / 3.1e-4 (unnormalised): slope 2 in h ~ 1/level
    assert 1.8 < math.log2(errs[0] / errs[1]) < 2.2
    assert errs[1] < 5e-4


def test_circle_mesh_agrees_with_the_reduction():
    p = st.SteadyProblem(2, "softmax", 1, 4.0, 0.7 * st.critical_nu(4.0, "softmax", 2))
    g = st.ReducedGrid(2, 129)
    ref = st.solve_stable(g, p, st.seeded(g, st.uniform(g), 1, 0.1))
    s = st.solve_fixed_point(st.MeshGrid(uniform_circle(64)), p, st.seeded(st.MeshGrid(uniform_circle(64)), np.full(64, 1 / (2 * np.pi)), 1, 1e-2))
    assert abs(s.order - ref.order) < 1e-9  # both spectral for the periodic integrand
    errs = []
    for n in (64, 128):  # a graded circle mesh (arcs from 0.54 to 1.46 times the mean): the midpoint rule, second order
        t = 2 * np.pi * np.arange(n) / n
        mg = st.MeshGrid(CircleMesh(t + 0.3 * np.sin(t)))
        errs.append(abs(st.solve_fixed_point(mg, p, st.seeded(mg, st.uniform(mg), 1, 1e-2)).order - ref.order))
    assert 1.9 < math.log2(errs[0] / errs[1]) < 2.1 and errs[1] < 1e-5  # measured 1.9e-5, 4.7e-6


@pytest.mark.parametrize("attention", ["softmax", "unnormalised"])
def test_mesh_state_satisfies_self_consistency_by_a_plain_dense_sum(attention):
    mesh = icosphere(4)
    mg = st.MeshGrid(mesh)
    p = st.SteadyProblem(3, attention, 1, 2.5, 0.6 * st.critical_nu(2.5, attention, 3))
    s = st.solve_fixed_point(mg, p, st.seeded(mg, st.uniform(mg), 1, 1e-2))
    X, A = mesh.geometry().nodes, mesh.geometry().areas
    Z = np.exp(p.beta * X @ X.T) @ (A * s.rho)  # Z(x_i) = sum_j exp(beta x_i.x_j) |C_j| rho_j
    log_rho = np.log(s.rho)
    target = (np.log(Z) if attention == "softmax" else Z) * (p.s / p.nu)  # rho ∝ Z^{s/nu} or exp(s Z / nu)
    assert np.ptp(log_rho - target) < 1e-8
    assert np.sum(A * s.rho) == pytest.approx(1.0, abs=1e-13)
    assert s.order > 0.3


# ------------------------------------------------------------------ s = -1: the uniform state only
@pytest.mark.parametrize("d, attention", KINDS)
def test_repulsive_head_relaxes_to_the_uniform_state(d, attention):
    grid = _grid(d)
    p = st.SteadyProblem(d, attention, -1, 3.0, 0.05)  # small nu: the undamped iteration would oscillate
    s = st.solve_fixed_point(grid, p, st.seeded(grid, st.uniform(grid), 1, 0.8))
    assert s.converged and s.order < 1e-10 and s.stable
    assert math.isnan(cont.threshold(p, "nu")) and cont.trace_branch(p, "nu", 0.1, 1.0, grid=grid).transition == "none"


# ------------------------------------------------------------------ published thresholds, folds, hysteresis
@pytest.mark.parametrize("d", [2, 3])
def test_published_threshold_maps_to_ours(d):
    # Mun & Rosenzweig: K_# with their velocity P int e^{beta x.y} y dmu (ours / beta) and K = 1/(2 nu'): nu_c = beta / (2 K_#)
    for beta in (0.3, 1.0, 2.5, 7.0):
        assert st.published_threshold(beta, d) == pytest.approx(st.critical_nu(beta, "unnormalised", d), rel=1e-12)
    b = st.tricritical_beta(d)
    ratio = spherical_in(2, b) / spherical_in(1, b) if d == 3 else iv(2, b) / iv(1, b)  # I_{d/2+1}/I_{d/2} by another route
    assert ratio == pytest.approx(1 / d, rel=1e-10)
    assert b == pytest.approx({3: 1.816154525, 2: 2.446918311}[d], rel=1e-8)


@pytest.mark.parametrize("d", [3, 2])
def test_unnormalised_branch_has_a_fold_only_above_the_tricritical_beta(d):
    grid = _grid(d, 48)
    b_star = st.tricritical_beta(d)
    below = st.SteadyProblem(d, "unnormalised", 1, 0.75 * b_star, 1.0)
    nu_c = st.critical_nu(below.beta, "unnormalised", d)
    br = cont.trace_branch(below, "nu", 0.5 * nu_c, 1.5 * nu_c, grid=grid, r_max=0.9)
    assert br.converged and br.transition == "continuous" and br.values[1] < nu_c  # supercritical: into nu < nu_c
    assert np.all(np.diff(br.values) < 0)
    above = below.with_(beta=1.5 * b_star)
    nu_c = st.critical_nu(above.beta, "unnormalised", d)
    br = cont.trace_branch(above, "nu", 0.5 * nu_c, 1.5 * nu_c, grid=grid, r_max=0.9)
    assert br.converged and br.transition == "discontinuous" and br.values[1] > nu_c  # subcritical, then the fold
    (fold,) = br.folds
    assert nu_c < fold.value < 1.5 * nu_c and 0 < fold.order < 1
    assert not br.stable[1] and br.stable[-1]  # unstable below the fold, stable past it
    # the fold by another route: a stable clustered state exists just below it and none just above
    clustered = np.exp(4.0 * grid.mode_function(1))  # a concentrated start, followed up to just below the fold
    below_fold = cont.sweep(above, "nu", np.array([0.9, 0.97, 0.995]) * fold.value, grid=grid, start=clustered).states[-1]
    assert below_fold.converged and below_fold.stable and below_fold.order > fold.order
    above_fold = st.solve_stable(grid, above.with_(nu=1.005 * fold.value), below_fold.rho)
    assert above_fold.converged and above_fold.order < 1e-10


def test_sweeps_show_hysteresis_between_threshold_and_fold():
    grid = _grid(3, 48)
    p = st.SteadyProblem(3, "unnormalised", 1, 2 * st.tricritical_beta(3), 1.0)
    nu_c = st.critical_nu(p.beta, p.attention, 3)
    values = np.linspace(0.8, 1.4, 13) * nu_c
    down = cont.sweep(p, "nu", values[::-1], grid=grid)
    up = cont.sweep(p, "nu", values, grid=grid, start=down.states[-1].rho)
    assert all(s.converged for s in down.states + up.states)
    fold = cont.trace_branch(p, "nu", values[0], values[-1], grid=grid).folds[0].value
    on = lambda sw, v: sw.order[np.argmin(np.abs(sw.values - v))]  # noqa: E731
    for v in values:
        if v > fold:  # only the uniform state is stable
            assert on(down, v) < 1e-10 and on(up, v) < 1e-10
        elif v >= nu_c:  # both stable: the sweeps disagree (hysteresis)
            assert on(down, v) < 1e-10 and on(up, v) > 0.5
        else:
            assert on(down, v) > 0.5 and on(up, v) == pytest.approx(on(down, v), abs=1e-9)


def test_softmax_transition_is_continuous():
    # a finding, not a prediction: no fold for the softmax head on S^2 and S^1 at beta = 2 and 8
    for d in (3, 2):
        for beta in (2.0, 8.0):
            p = st.SteadyProblem(d, "softmax", 1, beta, 1.0)
            nu_c = st.critical_nu(beta, "softmax", d)
            br = cont.trace_branch(p, "nu", 0.5 * nu_c, 1.2 * nu_c, grid=_grid(d, 48), r_max=0.9)
            assert br.converged and br.transition == "continuous" and br.values[1] < nu_c


def test_branch_in_beta_starts_at_the_beta_threshold():
    grid = _grid(2, 48)
    p = st.SteadyProblem(2, "unnormalised", 1, 1.0, 3.0)
    b_c = st.critical_beta(3.0, "unnormalised", 2)
    assert float(iv(1, b_c)) == pytest.approx(3.0, rel=1e-10)
    br = cont.trace_branch(p, "beta", 0.5 * b_c, 1.5 * b_c, grid=grid, r_max=0.9)
    assert br.values[0] == pytest.approx(b_c) and br.converged
    # beta_c = 2.67 > beta_* = 2.45: discontinuous, the branch first leaves into beta < beta_c and folds there
    assert br.transition == "discontinuous" and br.values[1] < b_c and br.folds[0].value < b_c


def test_bad_problems_are_refused_with_a_clear_message():
    with pytest.raises(ValueError, match="nu must be positive"):
        st.SteadyProblem(nu=0.0)
    with pytest.raises(ValueError, match="s = \\+1 or -1"):
        st.SteadyProblem(s=0)
    with pytest.raises(ValueError, match="d = 3"):
        st.SteadyProblem(d=4)
