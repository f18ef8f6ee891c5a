"""The stepper registry (spherepde.solvers.integrators.STEPPERS) and the option rules its components own.

Every time scheme is one registry entry that says which solvers it serves and its order; the
tests loop over the registry. Each option rule is written once, by the component it belongs to
(the stepper, the point masses, the mesh solver), and the config reports that same text.
"""

from __future__ import annotations

import numpy as np
import pytest

import spherepde as sp
from spherepde.geometry import densities
from spherepde.model.weights import FrozenProcess, generate_weight_path
from spherepde.runs.config import ConfigError, default_config
from spherepde.solvers.integrators import STEPPERS, ExplicitScheme, OptionError, Stepper, get_stepper, integrator_names
from spherepde.solvers.mesh import MeshSolver
from spherepde.solvers.particles import ParticleSolver, initial_tokens


@pytest.mark.parametrize("entry", STEPPERS.entries(), ids=lambda e: e.name)
def test_every_entry_says_its_order_and_solvers(entry):
    st = entry.obj
    assert isinstance(st, Stepper) and st.name == entry.name and st.order >= 1
    assert set(st.solvers) <= {"mesh", "particles"} and st.solvers
    assert entry.info == {"order": st.order, "solvers": tuple(st.solvers)} and entry.about
    for name in (entry.name, *entry.aliases):
        for solver in st.solvers:
            assert get_stepper(name, solver) is st and name in integrator_names(solver)
    if isinstance(st, ExplicitScheme):
        _A, b, c = st.butcher()
        np.testing.assert_allclose(b, st.b, atol=1e-15)
        np.testing.assert_allclose(c, st.c, atol=1e-15)


def test_a_solver_refuses_a_scheme_it_is_not_served_by():
    with pytest.raises(OptionError, match="not implemented for the particles solver") as exc:
        get_stepper("implicit", "particles")
    assert exc.value.option == "integrator"


def _heun_by_hand(X, path, dt, steps):
    """Heun's method with retraction, written out (the particle solver's arithmetic before the registry)."""
    ps = ParticleSolver(X, path, dt=dt, integrator="euler")
    unit = lambda Y: Y / np.linalg.norm(Y, axis=-1, keepdims=True)
    X = unit(np.asarray(X, float))
    for n in range(steps):
        t = n * dt
        v0 = ps._evaluate(X, t)["v"]
        v1 = ps._evaluate(unit(X + dt * v0), t + dt)["v"]
        X = unit(X + 0.5 * dt * (v0 + v1))
    return X


@pytest.mark.parametrize("name", [n for n in integrator_names("particles") if not get_stepper(n, "particles").adaptive])
def test_token_steppers_take_the_registered_steps_bit_for_bit(name):
    """Fixed-step token schemes (the error-controlled pair: tests/solvers/test_token_adaptive.py)."""
    path = generate_weight_path(FrozenProcess(), H=2, d=3, T=0.2, dt=0.02, init="gaussian", seed=1)
    X0 = initial_tokens("uniform", 30, 3, seed=2)
    ps = ParticleSolver(X0, path, integrator=name)
    ps.advance(0.2)
    if get_stepper(name, "particles").order == 2:
        assert np.array_equal(ps.X, _heun_by_hand(X0, path, 0.02, 10))
    else:
        unit = lambda Y: Y / np.linalg.norm(Y, axis=-1, keepdims=True)
        X = unit(X0)
        for n in range(10):
            X = unit(X + 0.02 * ps._evaluate(X, n * 0.02)["v"])
        assert np.array_equal(ps.X, X)


@pytest.mark.parametrize(
    "solver_kwargs, overrides, option",
    [
        ({"atoms": True}, {"solver.atoms": True}, "atoms"),
        ({"integrator": "implicit", "atoms": True, "velocity": "midpoint"},
         {"solver.integrator": "implicit", "solver.atoms": True, "solver.velocity": "midpoint"}, "atoms"),
        ({"integrator": "rk9"}, None, "integrator"),
    ],
)
def test_option_rules_are_written_once_and_the_config_reports_them(solver_kwargs, overrides, option):
    mesh = sp.icosphere(4)
    path = generate_weight_path(FrozenProcess(), H=1, d=3, T=1.0, dt=0.1, init="beta", beta=2.0)
    with pytest.raises(OptionError) as direct:
        MeshSolver(mesh, densities.uniform(mesh), path, **solver_kwargs)
    assert direct.value.option == option
    if overrides is None:
        return
    with pytest.raises(ConfigError) as cfg:
        default_config().with_overrides({"run.solver": "mesh", **overrides})
    assert str(cfg.value) == f"solver.{option}: {direct.value}"


def test_general_heads_need_the_midpoint_velocity_in_the_same_words():
    mesh = sp.icosphere(4)
    general = generate_weight_path(FrozenProcess(), H=1, d=3, T=1.0, dt=0.1, heads="general")
    with pytest.raises(OptionError, match="velocity = 'midpoint'") as direct:
        MeshSolver(mesh, densities.uniform(mesh), general)
    with pytest.raises(ConfigError) as cfg:
        default_config().with_overrides({"run.solver": "mesh", "model.heads": "general"})
    assert str(cfg.value) == f"solver.velocity: {direct.value}"
