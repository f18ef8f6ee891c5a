"""The linearly implicit upwind step (solvers.implicit, the implicit stepper): an M-matrix step,
positive and conservative for any step, second-order close to explicit Euler, steps that follow the
dynamics, and the first-order rule. References: the explicit upwind right-hand side."""

import math

import numpy as np
import pytest

import spherepde as sp
from spherepde import densities
from spherepde.solvers.fv import face_values, fv_geometry, fv_rhs
from spherepde.solvers.implicit import implicit_upwind_step, upwind_matrix
from spherepde.solvers.mesh import MeshSolver

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


def test_implicit_needs_order_one():
    mesh = sp.icosphere(4)
    with pytest.raises(ValueError, match="order = 1"):
        MeshSolver(mesh, densities.uniform(mesh), frozen(2.0, 1.0), order=2, integrator="implicit")
    with pytest.raises(ValueError, match="implicit"):
        MeshSolver(mesh, densities.uniform(mesh), frozen(2.0, 1.0), atoms=True)
