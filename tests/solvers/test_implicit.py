"""The linearly implicit upwind step (solvers.implicit, the implicit stepper): an M-matrix step,
positive and conservative for any step, second-order close to explicit Euler, steps that follow the
dynamics, and the first-order rule. References: the explicit upwind right-hand side."""

import math

import numpy as np
import pytest

import spherepde as sp
from spherepde import densities
from spherepde.solvers.fv import face_values, fv_geometry, fv_rhs
from spherepde.solvers.implicit import W_MAX, face_weights, implicit_upwind_step, upwind_matrix
from spherepde.solvers.integrators import get_stepper
from spherepde.solvers.mesh import MeshSolver
from spherepde.solvers.particles import ParticleSolver, stratified_tokens

NORTH, EAST = [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]


def frozen(beta, T, sign=1.0, dt=None, H=1):
    return sp.generate_weight_path(sp.FrozenProcess(), H=H, d=3, T=T, dt=dt or T / 4, init="beta", beta=beta, sign=sign)


def two_bumps(mesh, m1=0.5, theta=math.pi / 2, kappa=200.0):
    b = [math.sin(theta), 0.0, math.cos(theta)]
    return densities.vmf_mixture(mesh, [NORTH, b], [kappa, kappa], [m1, 1.0 - m1])


@pytest.fixture(scope="module")
def geom8():
    return fv_geometry(sp.icosphere(8))


def test_upwind_matrix_is_the_explicit_upwind_operator(geom8):
    rng = np.random.default_rng(0)
    u = rng.normal(size=geom8.n_edges)
    rho = rng.random(geom8.n_cells)
    K = upwind_matrix(geom8, u)
    assert np.allclose(-(K @ rho) / geom8.areas, fv_rhs(geom8, face_values(geom8, rho, 1), u), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("h", [1e-3, 1.0, 1e4])
def test_implicit_step_is_positive_and_conservative_for_any_step(geom8, h):
    rng = np.random.default_rng(1)
    u = 50.0 * rng.normal(size=geom8.n_edges)  # explicit CFL bound ~1e-4: h = 1e4 is 1e8 times it
    rho = rng.random(geom8.n_cells) ** 4
    M = (np.diag(geom8.areas) + h * upwind_matrix(geom8, u).toarray())
    off = M - np.diag(np.diag(M))
    assert off.max() <= 0.0 and np.all(np.diag(M) > 0)  # an M-matrix ...
    assert np.allclose(M.sum(axis=0), geom8.areas, rtol=1e-9)  # ... with column sums |C_c|
    new = implicit_upwind_step(geom8, rho, u, h)
    assert new.min() >= 0.0
    assert np.sum(new * geom8.areas) == pytest.approx(np.sum(rho * geom8.areas), rel=1e-12)


def test_implicit_step_agrees_with_explicit_euler_to_second_order(geom8):
    rng = np.random.default_rng(2)
    u = rng.normal(size=geom8.n_edges)
    rho = 1.0 + 0.5 * rng.random(geom8.n_cells)
    r = fv_rhs(geom8, face_values(geom8, rho, 1), u)
    diff = [np.abs(implicit_upwind_step(geom8, rho, u, h) - (rho + h * r)).max() for h in (1e-3, 5e-4)]
    assert diff[0] / diff[1] == pytest.approx(4.0, rel=0.05)  # O(h^2) per step: consistent


# ----------------------------------------------------------------- long, slow dynamics
def test_implicit_steps_follow_the_dynamics_not_empty_space():
    mesh = sp.icosphere(8)
    ms = MeshSolver(mesh, two_bumps(mesh), frozen(10.0, 20.0, 1.0), order=1, integrator="implicit")
    explicit_steps = 20.0 / (0.5 * ms._current().bound)
    ms.advance(20.0)
    row = ms.record()
    assert ms.step_count < explicit_steps / 20  # the issue asks for 10x; measured ~46x
    assert row["rho_min"] >= 0.0 and row["mass"] == pytest.approx(1.0, abs=1e-12)
    assert abs(row["edi_exact"]) < 1e-9 * row["energy"]  # frozen quadratic energy: the discrete chain rule is exact


def test_implicit_fixed_step_is_not_cfl_limited():
    mesh = sp.icosphere(8)
    ms = MeshSolver(mesh, two_bumps(mesh), frozen(10.0, 2.0, 1.0), order=1, integrator="implicit", dt=0.5)
    ms.advance(2.0)
    assert ms.step_count == 4 and ms.record()["rho_min"] >= 0.0


def test_implicit_takes_orders_one_and_two():
    mesh = sp.icosphere(4)
    MeshSolver(mesh, densities.uniform(mesh), frozen(2.0, 1.0), order=2, integrator="implicit")
    with pytest.raises(ValueError, match="order 1 .* or 2"):
        get_stepper("implicit", "mesh").check_options(order=3)
    with pytest.raises(ValueError, match="implicit"):
        MeshSolver(mesh, densities.uniform(mesh), frozen(2.0, 1.0), atoms=True)


# ----------------------------------------------------------------- second order in space (frozen face weights)
def test_weighted_matrix_is_the_explicit_second_order_operator(geom8):
    """Where no cell's weights are scaled (a smooth density), K(u, w) rho is the limited-reconstruction flux."""
    rng = np.random.default_rng(3)
    u = rng.normal(size=geom8.n_edges)
    rho = 1.0 + 0.3 * geom8.nodes[:, 2] + 0.2 * geom8.nodes[:, 0] ** 2
    faces = face_values(geom8, rho, 2)
    w = face_weights(geom8, rho, faces)
    assert 0.0 < min(w[0].min(), w[1].min()) and max(w[0].max(), w[1].max()) < W_MAX  # nothing scaled here
    K = upwind_matrix(geom8, u, weights=w)
    ref = fv_rhs(geom8, faces, u)
    assert np.allclose(-(K @ rho) / geom8.areas, ref, rtol=1e-12, atol=1e-12)
    assert not np.allclose(ref, fv_rhs(geom8, face_values(geom8, rho, 1), u), atol=1e-3)  # order 2 differs from 1


@pytest.mark.parametrize("h", [1e-3, 1.0, 1e4])
def test_second_order_step_is_positive_and_conservative_for_any_step(geom8, h):
    rng = np.random.default_rng(4)
    u = 50.0 * rng.normal(size=geom8.n_edges)
    rho = rng.random(geom8.n_cells) ** 4
    rho[rng.random(geom8.n_cells) < 0.2] = 0.0  # vacuum cells: weight 1
    w = face_weights(geom8, rho, face_values(geom8, rho, 2))
    assert min(w[0].min(), w[1].min()) >= 0.0 and max(w[0].max(), w[1].max()) <= W_MAX
    M = np.diag(geom8.areas) + h * upwind_matrix(geom8, u, weights=w).toarray()
    off = M - np.diag(np.diag(M))
    assert off.max() <= 0.0 and np.all(np.diag(M) > 0)
    assert np.allclose(M.sum(axis=0), geom8.areas, rtol=1e-9)
    new = implicit_upwind_step(geom8, rho, u, h, weights=w)
    assert new.min() >= 0.0
    assert np.sum(new * geom8.areas) == pytest.approx(np.sum(rho * geom8.areas), rel=1e-12)


def _centroid_angle(points, masses, a, b):
    """The angle between the centroids of the mass on either side of the bisecting plane of directions a and b."""
    side = points @ (np.asarray(a) - np.asarray(b)) >= 0.0
    a = (masses[side, None] * points[side]).sum(0)
    b = (masses[~side, None] * points[~side]).sum(0)
    return math.acos(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def _two_spread_bumps(level):
    theta = math.pi / 3
    b = [math.sin(theta), 0.0, math.cos(theta)]
    mesh = sp.icosphere(level)
    return mesh, b, densities.vmf_mixture(mesh, [NORTH, b], [200.0, 200.0], [0.6, 0.4])


def _mesh_angle(mesh, rho0, b, T, **kw):
    ms = MeshSolver(mesh, rho0, frozen(10.0, T), **kw)
    ms.advance(T)
    return _centroid_angle(ms.geom.nodes, ms.rho * ms.geom.areas, NORTH, b)


def test_second_order_implicit_step_carries_the_second_order_scheme():
    """Two kappa = 200 bumps 60 degrees apart, beta = 10, while they are still spread (t <= 0.25): the
    implicit step at order 2 moves the clusters' centroids like the explicit SSP-RK3 at order 2 (the same
    spatial scheme); at order 1 it lags by numerical diffusion (measured at level 16: 1.1e-4 against 4.0e-3)."""
    T = 0.25
    mesh, b, rho0 = _two_spread_bumps(16)
    ref = _mesh_angle(mesh, rho0, b, T, order=2, integrator="ssprk3")
    err = {order: abs(_mesh_angle(mesh, rho0, b, T, order=order, integrator="implicit", tol=1e-4) - ref) for order in (1, 2)}
    assert err[2] < 5e-4 < 3e-3 < err[1], err


@pytest.mark.slow
def test_second_order_implicit_follows_spread_clusters_like_the_tokens():
    """The same two bumps against 4,000 stratified tokens (the mean-field reference up to quadrature) at
    level 32: the frozen-weight second-order step is several times closer than first-order upwind
    (measured: 3.0e-3 against 9.7e-3)."""
    T = 0.25
    mesh, b, rho0 = _two_spread_bumps(32)
    X, w = stratified_tokens(4000, [NORTH, b], [200.0, 200.0], [0.6, 0.4])
    ps = ParticleSolver(X, frozen(10.0, T), integrator="heun", dt=T / 64, weights=w)
    ps.advance(T)
    ref = _centroid_angle(ps.X, np.full(len(ps.X), 1.0) if w is None else w, NORTH, b)
    err = {order: abs(_mesh_angle(mesh, rho0, b, T, order=order, integrator="implicit", tol=1e-4) - ref) for order in (1, 2)}
    assert err[2] < err[1] / 3.0, err
