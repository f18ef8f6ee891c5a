"""Error-controlled token steps (issue 36, part 3): the Bogacki--Shampine 3(2) pair ``rk23`` of
:class:`spherepde.solvers.integrators.EmbeddedPair` in :class:`spherepde.solvers.particles.ParticleSolver`.

Measured on the problems below (for the record; the assertions use bands): one step of size h on the
smooth problem (24 uniform tokens, frozen head beta = 2, h = 0.2 / 0.1 / 0.05): true local error
~ h^4.05, error estimate ~ h^3.12; error at T = 1 against a tol = 1e-10 run ~ tol^0.87 (5.3e-5 /
1.7e-6 / 1.8e-8 at tol 1e-4 / 1e-6 / 1e-8, in 15 / 45 / 205 steps); the two-bump merge (beta = 8,
90 degrees apart) at tol 1e-5: t = 22.0838, 8e-7 from Heun at dt = 0.005, in 189 steps (2 rejected) to Heun's 6,000.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from spherepde.model.weights import FrozenProcess, OUProcess, generate_weight_path
from spherepde.solvers.errors import SolverError
from spherepde.solvers.integrators import STEPPERS, EmbeddedPair, get_stepper
from spherepde.solvers.particles import ParticleSolver, _normalise, initial_tokens, stratified_tokens
from spherepde.studies.bench_tokens import GroupMerges


def _frozen(beta: float, T: float, dt: float = 0.01):
    return generate_weight_path(FrozenProcess(), H=1, d=3, T=T, dt=dt, seed=0, init="beta", beta=beta, sign=1)


def _smooth():
    return initial_tokens("uniform", 24, 3, seed=3), _frozen(2.0, 2.0)


def test_registered_for_tokens_only():
    pair = get_stepper("rk23", "particles")
    assert isinstance(pair, EmbeddedPair) and pair.adaptive and pair.order == 3
    assert get_stepper("adaptive", "particles") is pair
    assert "particles" in STEPPERS.entry("rk23").info["solvers"] and "mesh" not in STEPPERS.entry("rk23").info["solvers"]
    # the tableau: consistent (b, bhat sum to 1; rows sum to c) and FSAL (the last row is b)
    assert sum(pair.b) == pytest.approx(1.0) and sum(pair.bhat) == pytest.approx(1.0)
    for row, c in zip(pair.a, pair.c[1:]):
        assert sum(row) == pytest.approx(c)
    assert pair.a[-1] == pair.b[:-1] and pair.c[-1] == 1.0


def test_pair_orders_on_a_smooth_problem():
    """One step of size h: the propagated solution's error ~ h^4 (order 3), the estimate ~ h^3 (order 2)."""
    X, path = _smooth()
    ps = ParticleSolver(X, path, integrator="rk23")
    pair = ps.stepper
    first = ps._evaluate(X, 0.0)

    def reference(h, m=64):
        Y, t = X, 0.0
        for _ in range(m):
            Y = pair.token_attempt(Y, t, h / m, t + h / m, ps._evaluate(Y, t), ps._evaluate, _normalise)[0]
            t += h / m
        return Y

    errs, ests = [], []
    hs = (0.2, 0.1, 0.05)
    for h in hs:
        Xn, evals, b, chord = pair.token_attempt(X, 0.0, h, h, first, ps._evaluate, _normalise)
        assert len(evals) == 4 and tuple(b) == pair.b
        np.testing.assert_allclose(np.linalg.norm(Xn, axis=1), 1.0, atol=1e-14)  # retracted
        errs.append(np.max(np.linalg.norm(Xn - reference(h), axis=1)))
        ests.append(np.max(chord))
    p_err = np.polyfit(np.log(hs), np.log(errs), 1)[0]
    p_est = np.polyfit(np.log(hs), np.log(ests), 1)[0]
    assert 3.6 < p_err < 4.5, p_err
    assert 2.7 < p_est < 3.4, p_est


def test_error_follows_the_tolerance():
    """Tokens at T = 1 against a fine reference: the error falls with tol (and stays near it), in fewer steps."""
    X, path = _smooth()
    ref = ParticleSolver(X, path, dt=0.001, integrator="heun")
    ref.advance(1.0)
    fine = ParticleSolver(X, path, integrator="rk23", tol=1e-10)
    fine.advance(1.0)
    assert np.max(np.linalg.norm(fine.X - ref.X, axis=1)) < 5e-6  # Heun's own error at dt = 1e-3
    errs, steps = [], []
    for tol in (1e-4, 1e-6, 1e-8):
        ps = ParticleSolver(X, path, integrator="rk23", tol=tol)
        ps.advance(1.0)
        errs.append(np.max(np.linalg.norm(ps.X - fine.X, axis=1)))
        steps.append(ps.step_count)
    assert errs[0] < 1e-3 and errs[1] < 1e-5 and errs[2] < 1e-7, errs
    assert errs[0] > 10 * errs[1] > 100 * errs[2], errs
    assert steps[0] < steps[1] < steps[2], steps


def test_steps_land_on_t_stop_and_on_the_moving_weights_grid():
    path = generate_weight_path(OUProcess(), H=2, d=3, T=1.0, dt=0.05, seed=2)
    ps = ParticleSolver(initial_tokens("octahedral", 20, 3, seed=1), path, integrator="rk23", tol=1e-3)
    times = [0.0]
    for t_stop in (0.37, 0.5, 0.93, 1.0):
        while ps.t < t_stop:
            ps.step(t_stop)
            times.append(ps.t)
        assert ps.t == t_stop  # exactly, not to round-off
    grid = np.arange(path.K + 1) * path.dt
    for a, b in zip(times[:-1], times[1:]):
        assert b > a
        inside = grid[(grid > a + 1e-12) & (grid < b - 1e-12)]
        assert inside.size == 0, f"the step ({a}, {b}) straddles the grid point {inside}"
    assert ps.last_step() == pytest.approx(times[-1] - times[-2]) and ps.step_count == len(times) - 1
    assert ps.step_hint() is None and ps.reference_step() == pytest.approx(path.dt)
    assert ps.advance(1.0) is True and ps.step_count == len(times) - 1  # at its own time: no step


def test_frozen_weights_steps_grow_past_the_grid():
    """Frozen weights: steps may cross grid points, so a settled state takes steps far above weights.dt."""
    X, w = stratified_tokens(40, [[0, 0, 1.0]], [200.0])
    ps = ParticleSolver(X, _frozen(4.0, 20.0), integrator="rk23", tol=1e-5, weights=w)
    ps.advance(20.0)
    assert ps.t == 20.0 and ps.step_count < 200  # 2,000 at the fixed step 0.01


def test_martingale_and_energy_balance_with_moving_weights():
    """OU weights (noise): the Ito martingale is booked at every grid point, the balance residual
    at a tight tolerance is as small as Heun's at a small fixed step."""
    path = generate_weight_path(OUProcess(), H=1, d=3, T=0.5, dt=0.01, seed=5)
    X0 = initial_tokens("octahedral", 30, 3, seed=2)
    heun = ParticleSolver(X0, path, dt=0.0025, integrator="heun")
    heun.advance(0.5)
    ada = ParticleSolver(X0, path, integrator="rk23", tol=1e-7)
    ada.advance(0.5)
    rh, ra = heun.record(), ada.record()
    assert ra["martingale"] == pytest.approx(rh["martingale"], rel=1e-3, abs=1e-9)
    assert ra["energy"] == pytest.approx(rh["energy"], rel=1e-5)
    assert abs(ra["edi_exact"]) < max(2 * abs(rh["edi_exact"]), 1e-6), (ra["edi_exact"], rh["edi_exact"])


@pytest.mark.parametrize("moving", [False, True])
def test_resume_bit_identical(moving):
    path = generate_weight_path(OUProcess(), H=2, d=3, T=0.4, dt=0.01, seed=9) if moving else _frozen(6.0, 4.0)
    T = path.T
    X0 = initial_tokens("octahedral", 30, 3, seed=4)
    full = ParticleSolver(X0, path, integrator="rk23", tol=1e-4)
    full.advance(0.4 * T)
    full.advance(T)
    a = ParticleSolver(X0, path, integrator="rk23", tol=1e-4)
    a.advance(0.4 * T)
    calls = [0]

    def stop():  # interrupted between two records, mid-way
        calls[0] += 1
        return calls[0] > 3

    assert a.advance(T, should_stop=stop) is False
    st = a.get_state()
    assert st["t"] == a.t and 0.4 * T < a.t < T
    b = ParticleSolver(initial_tokens("uniform", 30, 3, seed=99), path, integrator="rk23", tol=1e-4)
    b.set_state(st)
    assert b.t == a.t and b.h_next == a.h_next
    b.advance(T)
    assert b.step_count == full.step_count and b.t == full.t == T
    assert np.array_equal(b.X, full.X)
    rf, rb = full.record(), b.record()
    for k in rf:
        assert rf[k] == rb[k] or (math.isnan(rf[k]) and math.isnan(rb[k])), k
    heun = ParticleSolver(X0, path, integrator="heun")
    with pytest.raises(ValueError, match="fixed-step run"):
        b.set_state(heun.get_state())
    with pytest.raises(ValueError, match="error-controlled steps"):
        heun.set_state(st)


def test_refused_with_token_noise_and_bad_tolerance():
    X, path = _smooth()
    with pytest.raises(ValueError, match="model.noise"):
        ParticleSolver(X, path, integrator="rk23", noise=0.1)
    with pytest.raises(ValueError, match="solver.tol"):
        ParticleSolver(X, path, integrator="rk23", tol=0.0)


def test_config_refuses_noise_and_mesh():
    from spherepde.runs.config import ConfigError, config_from_dict

    base = {"run": {"solver": "particles"}, "solver": {"integrator": "rk23"}}
    config_from_dict(base)
    with pytest.raises(ConfigError, match="solver.integrator.*model.noise"):
        config_from_dict({**base, "model": {"noise": 0.1}})
    with pytest.raises(ConfigError, match="solver.integrator"):
        config_from_dict({"run": {"solver": "mesh"}, "solver": {"integrator": "rk23"}})


def test_step_floor_raises(monkeypatch):
    """A step rejected below the floor (DT_FLOOR * T, raised here to 0.05 * T) is a SolverError naming solver.tol."""
    import spherepde.solvers.particles as particles

    monkeypatch.setattr(particles, "DT_FLOOR", 0.05)
    X, path = _smooth()
    ps = ParticleSolver(X, path, dt=0.2, integrator="rk23", tol=1e-9)
    with pytest.raises(SolverError, match="solver.tol"):
        ps.advance(1.0)


def _two_bumps():
    X, w = stratified_tokens(40, [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]], [200.0, 200.0], [0.6, 0.4])
    return X, w, [24, 16]


def _merge_run(ps, counts, T):
    gm = GroupMerges(counts, ps.t, ps.X)
    for t_r in np.arange(1, int(T) + 1, dtype=float):  # records every 1.0, as the example
        while ps.t < t_r:
            ps.step(t_r) if ps.adaptive else ps.step()
            gm.add(ps.t, ps.X)
    return gm.times


def test_metastable_merge_time_agrees_with_small_fixed_steps():
    """Two bumps 90 degrees apart (beta = 8): a plateau, then one merge near t = 23 (the two-point ODE: 22.9)."""
    X, w, counts = _two_bumps()
    path = _frozen(8.0, 30.0)
    heun = ParticleSolver(X, path, dt=0.005, integrator="heun", weights=w)
    th = _merge_run(heun, counts, 30.0)
    ada = ParticleSolver(X, path, integrator="rk23", tol=1e-5, weights=w)
    ta = _merge_run(ada, counts, 30.0)
    assert len(th) == len(ta) == 1 and 15.0 < th[0] < 30.0
    assert abs(ta[0] - th[0]) / th[0] < 0.005, (ta, th)
    assert ada.step_count * 10 <= heun.step_count, (ada.step_count, heun.step_count)
    assert abs(ada.record()["energy"] - heun.record()["energy"]) < 1e-5 * abs(heun.record()["energy"])


def test_fixed_heun_unchanged():
    """The fixed-step path does not touch the adaptive state: t = step_count * dt, no time in the checkpoint."""
    X, path = _smooth()
    ps = ParticleSolver(X, path, integrator="heun")
    ps.advance(0.5)
    assert ps.t == ps.step_count * ps.dt and ps.last_step() == ps.dt and ps.reference_step() is None
    assert "t" not in ps.get_state() and "h_next" not in ps.get_state()


def test_example_run_extended_by_resume_is_bit_identical(tmp_path):
    """The shipped example (rk23) through the CLI: a run to T = 3 resumed to T = 6 writes the rows of a run to T = 6."""
    from spherepde.cli.main import main as spherepde

    args = ["--example", "metastable-particles", "--set", "initial.n=60", "--set", "output.vtk=false", "--set", "output.snapshot_dt=1.0", "-q"]
    assert spherepde(["run", *args, "--set", "solver.T=6", "--out", str(tmp_path / "a")]) == 0
    assert spherepde(["run", *args, "--set", "solver.T=3", "--out", str(tmp_path / "b")]) == 0
    assert spherepde(["resume", str(tmp_path / "b"), "--set", "solver.T=6", "-q"]) == 0
    a, b = (tmp_path / "a" / "diagnostics.csv").read_text(), (tmp_path / "b" / "diagnostics.csv").read_text()
    assert a == b and len(a.splitlines()) == 8
    assert "error-controlled steps (rk23, solver.tol = 1e-05" in (tmp_path / "a" / "run.log").read_text()
