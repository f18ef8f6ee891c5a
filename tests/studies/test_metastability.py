"""The metastability validation study at smoke size: its protocol, its outcomes, and that a
broken scheme fails it (issue 24).

Measured at smoke size (level 8, beta = 8, equal masses at 90 degrees): mesh merge time 24.16
against the ODE's 24.17; about 180x fewer steps than the explicit SSP-RK3 estimate; the
fastest-growing degree of a near-uniform start at beta = 10 is 4 on the mesh and in theory."""

from __future__ import annotations

import json

import pytest

import spherepde.solvers.mesh as mesh_solver
from spherepde.solvers.fv import fv_rhs
from spherepde.studies import metastability
from spherepde.studies.common import to_jsonable

MERGE = "merge time (angle < 0.01 rad), beta = 8, m1 = 0.5, theta0 = 90 deg, level 8: mesh vs two-point ODE, relative error"
RESULTANT = "time to mean resultant 0.95, beta = 8, m1 = 0.5, theta0 = 90 deg, level 8: mesh vs two-point ODE, relative error"


@pytest.fixture(scope="module")
def smoke():
    return metastability.run("smoke")


def test_protocol_and_outcomes(smoke, tmp_path):
    res = smoke
    assert set(metastability.SIZES) == {"smoke", "quick", "full"}
    assert res["checks"] and all(c["passed"] for c in res["checks"].values()), {k: c for k, c in res["checks"].items() if not c["passed"]}
    assert res["checks"][MERGE]["measured"] < 0.005 and res["checks"][RESULTANT]["measured"] < 0.01
    case = res["cases"][0]
    assert case["t_ode"] == pytest.approx(24.17, abs=0.01)  # REFERENCES: 24.2 for beta = 8
    # the merge (angle < MERGE_ANGLE) is the solver's located event, later than the resultant time, never a record time
    every = min(res["params"]["record_every"], case["t_ode"] / 100)
    assert case["t_merge"] > case["t_mesh"] and abs(case["t_merge"] / every - round(case["t_merge"] / every)) > 1e-6
    assert case["t_merge_ode"] == pytest.approx(24.777, abs=1e-3)
    assert case["explicit_steps"] > 20 * case["steps"]
    assert res["nucleation"]["l_fastest_theory"] == 4 == res["nucleation"]["l_fastest_mesh"]
    assert "Solver checks: 6/6 pass" in res["summary"]
    json.dumps(to_jsonable(res))
    paths = metastability.plot(res, tmp_path)
    assert len(paths) == 2 and all(p.stat().st_size > 1000 for p in paths)


def test_ode_reference_values():
    """The REFERENCES table: equal masses at 90 degrees reach R = 0.95 at 24.2 / 112.7 / 574 for beta = 8 / 10 / 12;
    the merge (angle 0.01 rad) follows after the quadrature t = int_{0.01}^{theta_R} d theta / (beta sin theta 2q/(1+q)),
    q = e^{beta (cos theta - 1)} (the ODE separated, equal masses; theta_R = arccos(2 R^2 - 1))."""
    import math

    from scipy.integrate import quad

    assert [round(metastability.resultant_time_ode(b, 0.5, 0.5, math.pi / 2), 1) for b in (8, 10)] == [24.2, 112.7]
    assert metastability.resultant_time_ode(12, 0.5, 0.5, math.pi / 2) == pytest.approx(574, rel=2e-3)
    th_r = math.acos(2 * 0.95**2 - 1)
    for b in (8.0, 10.0):
        gap = metastability.merge_time_ode(b, 0.5, 0.5, math.pi / 2) - metastability.resultant_time_ode(b, 0.5, 0.5, math.pi / 2)

        def dt_dtheta(th, b=b):
            q = math.exp(b * (math.cos(th) - 1.0))
            return 1.0 / (b * math.sin(th) * 2.0 * q / (1.0 + q))

        assert gap == pytest.approx(quad(dt_dtheta, 0.01, th_r, epsabs=1e-13, epsrel=1e-12)[0], rel=1e-6)


def test_without_point_masses_the_merge_check_fails():
    res = metastability.run("smoke", atoms=False, n_tokens=20)
    assert not res["checks"][MERGE]["passed"]


def test_wrong_sign_flux_fails_the_nucleation_check(monkeypatch):
    """The explicit flux with the wrong sign: perturbations decay instead of growing (the implicit
    step and the point masses do not use this function, so the merge check stays green)."""
    monkeypatch.setattr(mesh_solver, "fv_rhs", lambda geom, faces, u, **kw: fv_rhs(geom, faces, -u, **kw))
    res = metastability.run("smoke", n_tokens=20)
    failed = [k for k, c in res["checks"].items() if not c["passed"]]
    assert failed == ["nucleation (beta = 10, level 8): fastest-growing degree, mesh minus argmax gamma_l"]


def test_cli_two_clusters_reach_the_mean_field_merge_time(tmp_path):
    """The issue's acceptance run: the example with two equal kappa = 200 clusters at 90 degrees,
    beta = 10, level 16: mean resultant 0.95 within 5 % of 112.65, far fewer steps than explicit."""
    import math

    import numpy as np

    from spherepde.cli.main import main
    from spherepde.runs.runfolder import read_diagnostics

    out = tmp_path / "mm"
    rc = main(["run", "--example", "metastable-mesh", "--set", "initial.means=[[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]",
               "--set", "initial.kappas=[200.0, 200.0]", "--set", "initial.weights=[0.5, 0.5]", "--set", "weights.beta=10",
               "--set", "solver.T=150", "--set", "mesh.level=16", "--set", "output.vtk=false", "--out", str(out), "-q"])
    assert rc == 0
    d = read_diagnostics(out / "diagnostics.csv")
    t, R = d["t"], d["mean_resultant"]
    i = int(np.argmax(R >= 0.95))
    t95 = t[i - 1] + (0.95 - R[i - 1]) * (t[i] - t[i - 1]) / (R[i] - R[i - 1])
    t_ode = metastability.resultant_time_ode(10.0, 0.5, 0.5, math.pi / 2)
    assert abs(t95 - t_ode) <= 0.05 * t_ode
    assert d["step"][i] < 1000  # the explicit scheme needs about 2.7e5 here (the study's cost check)
    start = [ln for ln in (out / "run.log").read_text().splitlines() if "solver mesh, H = 1" in ln]
    assert start and "steps" not in start[0]  # no step estimate from the CFL bound (it would say about 2e5)
    summary = json.loads((out / "summary.json").read_text())
    assert len(summary["merges"]) == 1 and summary["merges"][0]["t"] > t95
