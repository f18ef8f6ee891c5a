"""Point masses (solvers.atoms.PointMasses) for collapsed clusters: merge times against the two-point
ODE (solved with SciPy in the metastability study), pinning without them, resume bit for bit, snapshots
and both-runs that keep them."""

import math

import numpy as np
import pytest

import spherepde as sp
from spherepde import densities
from spherepde.model.clusters import MERGE_ANGLE
from spherepde.solvers.mesh import MeshSolver
from spherepde.studies.metastability import merge_time_ode, resultant_time_ode, time_to_resultant

NORTH, EAST = [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]


def frozen(beta, T, sign=1.0, dt=None, H=1):
    return sp.generate_weight_path(sp.FrozenProcess(), H=H, d=3, T=T, dt=dt or T / 4, init="beta", beta=beta, sign=sign)


def two_bumps(mesh, m1=0.5, theta=math.pi / 2, kappa=200.0):
    b = [math.sin(theta), 0.0, math.cos(theta)]
    return densities.vmf_mixture(mesh, [NORTH, b], [kappa, kappa], [m1, 1.0 - m1])


def t_resultant(solver, T, every=0.25):
    """First time the mean resultant reaches 0.95 (the metastability study's rule)."""
    return time_to_resultant(solver, T, every)[0]


# ----------------------------------------------------------------- point masses
@pytest.mark.parametrize("m1,theta_deg", [(0.5, 90.0), (0.7, 80.0)])
def test_merge_time_of_two_clusters_matches_the_two_point_ode(m1, theta_deg):
    beta = 8.0
    theta = math.radians(theta_deg)
    t_ode = resultant_time_ode(beta, m1, 1.0 - m1, theta)
    mesh = sp.icosphere(8)
    ms = MeshSolver(mesh, two_bumps(mesh, m1, theta), frozen(beta, 2 * t_ode, 1.0), order=1, integrator="implicit", atoms=True)
    t95 = t_resultant(ms, 2 * t_ode)
    assert t95 == pytest.approx(t_ode, rel=0.05)
    ms.advance(2 * t_ode)
    assert len(ms.points.merges) == 1 and sorted(ms.points.merges[0][1:3]) == pytest.approx(sorted([m1, 1 - m1]), abs=1e-6)
    assert t95 == pytest.approx(t_ode, rel=0.05)
    row = ms.record()
    assert row["atom_mass"] == pytest.approx(1.0, abs=1e-12) and row["mass"] == pytest.approx(1.0, abs=1e-12)
    assert row["n_clusters"] == 1


def _merge_angle_time_ode(beta, m1, m2, theta0, angle):
    """The two-point ODE (module docstring of the metastability study) integrated to the angle ``angle``."""
    from scipy.integrate import solve_ivp

    def rhs(t, y):
        q = math.exp(beta * (math.cos(y[0]) - 1.0))
        return [-beta * math.sin(y[0]) * (m2 * q / (m1 + m2 * q) + m1 * q / (m2 + m1 * q))]

    def hit(t, y):
        return y[0] - angle

    hit.terminal = True
    return float(solve_ivp(rhs, [0.0, 1e4], [theta0], events=hit, rtol=1e-11, atol=1e-13).t_events[0][0])


def _merge_run(tol, T, every, level=8):
    """Level 8 (the kappa = 200 bumps are point masses from the start), records every ``every``, one step at a
    time; returns the solver, the record times and the (start, end) of the step after which the merge was found."""
    mesh = sp.icosphere(level)
    ms = MeshSolver(mesh, two_bumps(mesh), frozen(8.0, T, 1.0), order=1, integrator="implicit", atoms=True, tol=tol)
    records = [every * k for k in range(1, int(T / every) + 1)]
    merge_step = None
    for t_rec in records:
        while ms.t < t_rec - 1e-12:
            t_start = ms.t
            ms.step(t_rec)
            if ms.points.merges and merge_step is None:
                merge_step = (t_start, ms.t)
    return ms, records, merge_step


def test_merge_event_is_located_inside_the_step_at_the_two_point_ode_time():
    """Two kappa = 200 clusters at 90 degrees, masses 1/2, beta = 8: the merge event (angle < merge_radius)
    lies within 0.5 % of the two-point ODE's time to that angle at tol 1e-3 and 1e-4, strictly inside the step
    that found it (never on a record or step-end time, records every 0.25 so steps end on them), and where
    the exponential approach (d theta/dt = -beta theta near 0) from the angle at the step's end puts it."""
    beta, radius = 8.0, MERGE_ANGLE
    t_ode = merge_time_ode(beta, 0.5, 0.5, math.pi / 2)
    assert t_ode == pytest.approx(_merge_angle_time_ode(beta, 0.5, 0.5, math.pi / 2, radius), rel=1e-9)
    times = {}
    for tol in (1e-3, 1e-4):
        ms, records, (t_a, t_b) = _merge_run(tol, 1.2 * t_ode, 0.25)
        assert len(ms.points.merges) == 1
        t_ev, m1, m2, ang = ms.points.merges[0]
        assert sorted([m1, m2]) == pytest.approx([0.5, 0.5], abs=1e-9) and 0.0 < ang < radius
        assert t_a < t_ev < t_b and min(abs(t_ev - r) for r in records) > 1e-6
        assert t_ev == pytest.approx(t_b - math.log(radius / ang) / beta, abs=0.02 * (t_b - t_a))  # Heun vs e^{-beta h}
        assert t_ev == pytest.approx(t_ode, rel=5e-3)
        times[tol] = t_ev
    assert times[1e-3] == pytest.approx(times[1e-4], rel=1e-3)
    # the error left is the trajectory's (first order in tol), not the step's: smaller at the finer tol
    assert abs(times[1e-4] - t_ode) < abs(times[1e-3] - t_ode)


def test_without_point_masses_the_mesh_pins_the_clusters():
    """The broken alternative: on the mesh alone collapsed clusters sit on cell nodes and do not merge in time."""
    beta = 8.0
    t_ode = resultant_time_ode(beta, 0.5, 0.5, math.pi / 2)
    mesh = sp.icosphere(8)
    ms = MeshSolver(mesh, two_bumps(mesh), frozen(beta, 2 * t_ode, 1.0), order=1, integrator="implicit")
    assert abs(t_resultant(ms, 2 * t_ode, every=2.0) - t_ode) > 0.05 * t_ode


def test_point_masses_resume_bit_for_bit():
    mesh = sp.icosphere(8)
    path = frozen(8.0, 30.0, 1.0)
    a = MeshSolver(mesh, two_bumps(mesh), path, order=1, integrator="implicit", atoms=True)
    a.advance(10.0)
    st = a.get_state()
    a.advance(30.0)
    b = MeshSolver(mesh, two_bumps(mesh), path, order=1, integrator="implicit", atoms=True)
    b.set_state(st)
    b.advance(30.0)
    assert a.step_count == b.step_count and np.array_equal(a.points.x, b.points.x) and np.array_equal(a.rho, b.rho)
    assert a.points.merges == b.points.merges and a.record() == b.record()


def test_snapshot_density_keeps_the_point_masses():
    mesh = sp.icosphere(8)
    ms = MeshSolver(mesh, two_bumps(mesh), frozen(8.0, 1.0, 1.0), order=1, integrator="implicit", atoms=True)
    ms.advance(1.0)
    assert len(ms.points.m) == 2
    rho = ms.snapshot()["rho"]
    assert np.sum(rho * ms.geom.areas) == pytest.approx(1.0, abs=1e-12)


def test_both_run_with_point_masses_samples_and_measures_them(tmp_path):
    """run.solver = 'both' with point masses: the tokens are drawn from the density with the point
    masses in it, and the distances see them (not only the cells' remainder)."""
    from spherepde.runs.runner import read_diagnostics, run

    over = {"run.solver": "both", "initial.kind": "vmf", "initial.means": [NORTH, EAST], "initial.kappas": [200.0, 200.0],
            "initial.weights": [0.7, 0.3], "model.sign": 1, "weights.process": "frozen", "weights.init": "beta", "weights.beta": 8.0,
            "solver.T": 0.2, "output.record_dt": 0.1, "output.vtk": False, "mesh.level": 8, "initial.n": 400,
            "solver.integrator": "implicit", "solver.atoms": True}
    run(sp.default_config().with_overrides(over), out=tmp_path / "b", progress=False)
    d = read_diagnostics(tmp_path / "b" / "diagnostics.csv")
    assert d["atom_mass"][0] > 0.99  # level 8: the kappa = 200 bumps are point masses from the start
    assert abs(d["p_mean_resultant"][0] - d["mean_resultant"][0]) < 0.05  # the tokens were drawn from them
    assert d["w1_sliced"][-1] < 0.3  # and the distance sees them (about h at level 8; the cells alone hold almost no mass)


def test_staircase_merge_in_summary_is_not_a_record_time(tmp_path):
    """The beta = 8 staircase (metastable-mesh, level 8) with records every 0.05, so the step that finds the first
    merge (near t = 1.3) is cut at a record time: summary.json's merge time lies strictly between two records,
    located inside the step, where a step-end time would be a record time."""
    import json

    from spherepde.cli.main import main
    from spherepde.runs.runfolder import read_diagnostics

    out = tmp_path / "st"
    rc = main(["run", "--example", "metastable-mesh", "--set", "weights.beta=8", "--set", "mesh.level=8", "--set", "solver.T=2.0",
               "--set", "output.record_dt=0.05", "--set", "output.snapshot_dt=2.0", "--set", "output.vtk=false", "--out", str(out), "-q"])
    assert rc == 0
    merges = json.loads((out / "summary.json").read_text())["merges"]
    t_rec = read_diagnostics(out / "diagnostics.csv")["t"]
    assert len(merges) == 1 and 1.0 < merges[0]["t"] < 1.6 and 0.0 < merges[0]["angle_rad"] < MERGE_ANGLE
    assert min(abs(merges[0]["t"] - t) for t in t_rec) > 1e-6


def test_merge_time_in_step_is_exact_for_the_exponential_approach():
    """Two points at angle theta(t) = theta0 e^{-lam t} (symmetric about the north pole): the step's interpolant
    (cubic Hermite of log theta) puts the crossing of the radius at ln(theta0 / radius) / lam to round-off,
    for a step far longer than 1 / lam; a pair already inside at the step's start is dated there."""
    from spherepde.solvers.atoms import _StepPath, merge_time_in_step

    lam, th0, t0, t1 = 8.0, 0.5, 3.0, 4.0

    def pair(t):
        th = th0 * math.exp(-lam * (t - t0))
        a, da = 0.5 * th, -0.5 * lam * th
        x = np.array([[math.sin(a), 0.0, math.cos(a)], [-math.sin(a), 0.0, math.cos(a)]])
        v = np.array([[math.cos(a), 0.0, -math.sin(a)], [-math.cos(a), 0.0, -math.sin(a)]]) * da
        return x, v

    (x0, v0), (x1, v1) = pair(t0), pair(t1)
    step = _StepPath(t0, t1, x0, v0, x1, v1)
    assert merge_time_in_step(step, 0, 1, MERGE_ANGLE) == pytest.approx(t0 + math.log(th0 / MERGE_ANGLE) / lam, abs=1e-10)
    assert merge_time_in_step(step, 0, 1, 0.9) == t0  # within the radius at the start
