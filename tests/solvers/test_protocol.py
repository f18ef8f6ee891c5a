"""The written solver protocol and the one record loop (issue 25): every solver satisfies
``spherepde.Solver``, and ``spherepde.integrate`` gives exactly what the hand-written loop did."""

from __future__ import annotations

import numpy as np
import pytest

import spherepde as sp
from spherepde import densities
from spherepde.solvers.coupled import CoupledSolver


@pytest.fixture(scope="module")
def path():
    return sp.generate_weight_path(sp.OUProcess(), H=2, d=3, T=0.2, dt=0.01, seed=3)


def _solvers(path):
    mesh = sp.icosphere(4)
    return {
        "particles": lambda: sp.ParticleSolver(sp.initial_tokens("octahedral", 50, seed=1), path),
        "mesh": lambda: sp.MeshSolver(mesh, densities.octahedral(mesh), path),
        "both": lambda: CoupledSolver(sp.MeshSolver(mesh, densities.octahedral(mesh), path), 40, seed=2),
    }


@pytest.mark.parametrize("kind", ["particles", "mesh", "both"])
def test_every_solver_satisfies_the_protocol_and_integrate_is_the_hand_loop(path, kind):
    make = _solvers(path)[kind]
    a, b = make(), make()
    assert isinstance(a, sp.Solver)
    times = [0.0, 0.05, 0.1, 0.1, 0.2]
    traj = sp.integrate(a, times, snapshots=True)
    rows, snaps = [], []
    for t in times:  # the loop the studies used to write by hand
        if t > b.t + 1e-12:
            b.advance(t)
        rows.append(b.record())
        snaps.append(b.snapshot())
    assert traj.rows == rows and traj.steps == b.step_count
    for s, r in zip(traj.snapshots, snaps):
        assert s.keys() == r.keys() and all(np.array_equal(s[k], r[k], equal_nan=True) for k in s)
    assert np.array_equal(traj["energy"], [r["energy"] for r in rows])


def test_integrate_refuses_times_that_go_back(path):
    s = _solvers(path)["particles"]()
    s.advance(0.1)
    with pytest.raises(ValueError, match="non-decreasing"):
        sp.integrate(s, [0.05, 0.2])
    with pytest.raises(ValueError, match="non-decreasing"):
        sp.integrate(s, [0.2, 0.15])
    with pytest.raises(ValueError, match="finite"):
        sp.integrate(s, [0.2, float("nan")])


@pytest.mark.parametrize("kind", ["particles", "mesh", "both"])
def test_advance_through_stops_between_steps_and_continues_bit_for_bit(path, kind):
    from spherepde.solvers.protocol import advance_through

    make = _solvers(path)[kind]
    a, b = make(), make()
    times = [0.0, 0.1, 0.2]
    asked = []

    def stop() -> bool:
        asked.append(1)
        return len(asked) == 3  # the third step is not taken

    first = list(advance_through(a, times, should_stop=stop))
    assert [i for i, _, _ in first] == [0, 1] and first[0][2] is not None and first[1][2] is None
    assert a.t < 0.1
    rest = [row for _, _, row in advance_through(a, iter(times[1:]))]  # times may come lazily
    ref = sp.integrate(b, times).rows[1:]
    assert len(rest) == len(ref) and a.step_count == b.step_count
    for r, q in zip(rest, ref):
        assert r.keys() == q.keys() and all(np.array_equal(r[k], q[k], equal_nan=True) for k in r)
