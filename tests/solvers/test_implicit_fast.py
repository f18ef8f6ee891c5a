"""The implicit step that costs what it moves (issue 36): the upwind sweep against the sparse LU, the point
masses' sums by source against one sum over the whole measure, the kept cell sums, the skip bound of the
cells' sums, and one full cell sum per accepted step -- each against the previous route (``legacy``)."""

import math

import numpy as np
import pytest

import spherepde as sp
from spherepde import densities
from spherepde.attention import attention_moments
from spherepde.solvers import atoms as atoms_mod
from spherepde.solvers.fv import face_values, fv_geometry, potential_edge_velocity, rigid_rotation_edge_velocity
from spherepde.solvers.implicit import _upwind_sweep, face_weights, implicit_upwind_step
from spherepde.solvers.integrators import ImplicitUpwind
from spherepde.solvers.mesh import MeshSolver

LEGACY = ImplicitUpwind("implicit", 1, ("mesh",), legacy=True)


@pytest.fixture(scope="module")
def geom8():
    return fv_geometry(sp.icosphere(8))


def _state(geom, seed=0):
    rng = np.random.default_rng(seed)
    phi = np.sin(3.0 * geom.nodes[:, 0]) + geom.nodes[:, 2] ** 2
    return potential_edge_velocity(geom, phi, 1.0), 1.0 + rng.random(geom.n_cells)


@pytest.mark.parametrize("h", [1e-3, 0.1, 10.0])
@pytest.mark.parametrize("order", [1, 2])
def test_upwind_sweep_is_the_lu_solution(geom8, h, order):
    """A potential velocity makes the matrix triangular: the sweep solves it exactly (round-off from the LU), positive, mass kept."""
    u, rho = _state(geom8)
    w = face_weights(geom8, rho, face_values(geom8, rho, 2)) if order == 2 else None
    lu = implicit_upwind_step(geom8, rho, u, h, weights=w, solve="lu")
    sweep = implicit_upwind_step(geom8, rho, u, h, weights=w)
    assert np.max(np.abs(sweep - lu)) <= 1e-13 * np.max(lu)
    assert np.all(sweep >= 0.0)
    assert abs(geom8.areas @ sweep - geom8.areas @ rho) <= 1e-13
    out = np.empty_like(rho)
    ones = np.ones(geom8.n_edges)
    assert _upwind_sweep(geom8.areas, rho, geom8.edge_cells.astype(np.int64), geom8.edge_lengths, u,
                         ones if w is None else w[0], ones if w is None else w[1], h, out)


def test_a_cycle_or_noise_falls_back_to_the_lu(geom8):
    """A rigid rotation's flow graph has cycles: the sweep says so and the step is the LU's, bit for bit; so with noise."""
    u = rigid_rotation_edge_velocity(geom8, [0.0, 0.0, 1.0])
    rho = _state(geom8)[1]
    out = np.empty_like(rho)
    ones = np.ones(geom8.n_edges)
    assert not _upwind_sweep(geom8.areas, rho, geom8.edge_cells.astype(np.int64), geom8.edge_lengths, u, ones, ones, 0.1, out)
    assert np.array_equal(implicit_upwind_step(geom8, rho, u, 0.1), implicit_upwind_step(geom8, rho, u, 0.1, solve="lu"))
    u2 = _state(geom8)[0]
    assert np.array_equal(implicit_upwind_step(geom8, rho, u2, 0.1, 0.05), implicit_upwind_step(geom8, rho, u2, 0.1, 0.05, solve="lu"))
    with pytest.raises(ValueError, match="solve"):
        implicit_upwind_step(geom8, rho, u2, 0.1, solve="cholesky")
