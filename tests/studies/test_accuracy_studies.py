"""Smoke-size runs of the accuracy studies mesh_convergence and work_precision (issue 15).

Each study runs once per module (fixtures) at its ``smoke`` size; the tests assert the
protocol of ``validation/__init__.py`` and the key outcomes, and that a deliberately wrong
scheme fails their solver checks.

Measured at smoke size (2-core machine, loaded):
* mesh_convergence (~8 s; levels 4 / 8 / 16, T = 0.25, one path, n = 100 / 1000 x 3):
  order-2 <G^2> 0.343 / 0.282 / 0.271 against 0.300 +- 0.012 for 1000 tokens; observed
  orders 2.49 (order 2) and 2.61 (order 1: the initial cell averages dominate at T = 0.25);
  the recommended discretisation is level 16 order 1 (1.8 %; level 8 order 2, 4.9 %, costs
  about the same);
  exponent over H = 1, 4 (level 4): mesh b = -0.41, 100 tokens b = -0.72.
* work_precision (~10 s; levels 2 / 4 / 8, T = 0.25, vmf-ou and vmf-osc, n = 50 / 200 / 800 x 4):
  observed orders of the G^2 error 2.13 / 2.04 (order 2), 1.55 / 1.43 (order 1), particles
  in n -0.51 / -0.53.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import assert_plots, assert_study_protocol


def _failed(res):
    return {k for k, c in res["checks"].items() if not c["passed"]}


# ------------------------------------------------------------------ mesh convergence
@pytest.fixture(scope="module")
def mconv():
    import spherepde.studies.mesh_convergence as mod

    return mod, mod.run("smoke")


def test_mesh_convergence_protocol(mconv, tmp_path):
    mod, res = mconv
    assert_study_protocol(mod, res, min_summary=200)
    assert_plots(mod, res, tmp_path)
    p = res["params"]
    # one table row per (path, level, order) plus a Richardson row per path
    assert len(res["tables"][0]["rows"]) == len(res["paths"]) * (len(p["levels"]) * len(p["orders"]) + 1)
    assert len(res["tables"][1]["rows"]) == len(res["paths"]) * len(p["n_list"])
    assert len(res["claims"]) == 2


def test_mesh_convergence_outcomes(mconv):
    _, res = mconv
    assert all(c["passed"] for c in res["checks"].values()), res["checks"]
    levels = sorted(res["params"]["levels"])
    nmax = str(max(res["params"]["n_list"]))
    for rec in res["paths"]:
        seq2 = [rec["mesh"][f"L{lv}-o2"]["tavg"] for lv in levels]
        part = rec["particles"][nmax]["mean"]
        # the order-2 sequence moves towards the tokens' value, and its steps shrink
        assert abs(seq2[-1] - part) < abs(seq2[0] - part)
        assert abs(seq2[2] - seq2[1]) < 0.5 * abs(seq2[1] - seq2[0])
        # the error against the converged value decreases with the level at both orders
        for o in (1, 2):
            errs = [abs(rec["mesh"][f"L{lv}-o{o}"]["err_ref"]) for lv in levels[:-1]] + ([abs(rec["mesh"][f"L{levels[-1]}-o1"]["err_ref"])] if o == 1 else [])
            assert all(a > b for a, b in zip(errs, errs[1:])), (o, errs)
        # the finest order-2 run is the reference; the Richardson estimate is close to it
        assert rec["mesh"][f"L{levels[-1]}-o2"]["err_ref"] == 0.0
        assert rec["conv"]["clean"] and abs(rec["conv"]["richardson"] / rec["conv"]["ref"] - 1) < 0.02
        # the token means: spread shrinks with n
        sd = [rec["particles"][str(n)]["sd"] for n in sorted(res["params"]["n_list"])]
        assert sd[-1] < sd[0]
    fn = res["finite_n"]
    assert -1.6 <= fn["sd_slope"] <= -0.25, fn  # Monte-Carlo -1/2 (3 draws; the n = 100 draws are heavy-tailed)
    assert abs(fn["mean_offset"][-1]) < 0.15  # 1000 tokens within the finite-n offset of the converged mesh


def test_mesh_convergence_recommended(mconv):
    _, res = mconv
    rec = res["recommended"]
    cands = {d["key"]: d for d in res["discretisations"]}
    assert rec is not None and rec["key"] in cands
    ok = [d for d in cands.values() if d["within_bar"]]
    cmin = min(d["cost_s"] for d in ok)
    close = [d for d in ok if d["cost_s"] <= (1 + res["params"]["cost_tie"]) * cmin]  # costs within the timing noise
    assert cands[rec["key"]]["within_bar"] and rec["cost_s"] <= (1 + res["params"]["cost_tie"]) * cmin
    assert rec["max_err"] == min(d["max_err"] for d in close)
    assert rec["max_err"] <= res["params"]["bar"]
    # within the bar means: on every path, against both estimates of the converged value
    for path in res["paths"]:
        r = path["mesh"][rec["key"]]
        assert abs(r["err_ref"]) <= res["params"]["bar"] and (not path["conv"]["clean"] or abs(r["err_richardson"]) <= res["params"]["bar"])
    assert "Recommended discretisation (result):" in res["summary"]


def test_mesh_convergence_exponents(mconv):
    _, res = mconv
    e = res["exponent"]
    assert e["H"] == [1, 4] and all(len(v) == 2 for v in e["mesh_tavg"])
    # G^2 falls with H at the density level and for the tokens (early times: heads average out, b near -1)
    assert -1.3 < e["mesh_fit"]["b"] < -0.1 and -1.3 < e["particles_fit"]["b"] < -0.1
    for f in (e["mesh_fit"], e["particles_fit"]):
        lo, hi = f["ci95"]
        assert lo <= f["b"] <= hi
    # the H = 1 values are those of the convergence runs (same paths, same discretisation)
    assert e["mesh_tavg"][0][0] == res["paths"][0]["mesh"][f"L{e['level']}-o{e['order']}"]["tavg"]


def test_mesh_convergence_coarse_level_per_H(mconv):
    """At every H the b_level value is compared with one level coarser; the change is what the
    report quotes as the bound on the b_level error at that H."""
    _, res = mconv
    e = res["exponent"]
    lc = res["params"]["b_coarse_level"]
    assert e["coarse_level"] == lc and lc * 2 <= e["level"]
    for i, H in enumerate(e["H"]):
        assert len(e["coarse_tavg"][i]) == len(e["mesh_tavg"][i])
        ch = [(m - c) / m for m, c in zip(e["mesh_tavg"][i], e["coarse_tavg"][i])]
        assert e["coarse_change"][i] == pytest.approx(ch)
        assert e["coarse_change_max"][i] == pytest.approx(max(abs(x) for x in ch))
    # H = 1 reuses the convergence runs at the coarse level when that level is among them
    if f"L{lc}-o{e['order']}" in res["paths"][0]["mesh"]:
        assert e["coarse_tavg"][0][0] == res["paths"][0]["mesh"][f"L{lc}-o{e['order']}"]["tavg"]
    # the summary says whether the bar holds at every H, from these numbers
    ok = all(c <= res["params"]["bar"] for c in e["coarse_change_max"])
    assert ("within the 5% bar at every H" if ok else "NOT shown to be within the 5% bar at every H") in res["summary"]


def test_paper_example_discretisation_is_what_the_study_reads():
    """The study's sentence about the paper examples reads their packaged config, so it cannot go stale."""
    import tomllib
    from importlib import resources

    from spherepde.studies.mesh_convergence import SIZES, paper_example_discretisation

    ex = paper_example_discretisation()
    for name in ("paper-ou-mesh", "paper-oscillating-mesh"):
        cfg = tomllib.loads(resources.files("spherepde.runs.configs").joinpath(f"{name}.toml").read_text())
        assert (cfg["mesh"]["level"], cfg["solver"]["order"], cfg["solver"]["integrator"]) == (ex["level"], ex["order"], ex["integrator"])
    # the full study runs exactly that discretisation, at H = 1 (levels) and at every H (exponent)
    full = SIZES["full"]
    assert ex["level"] in full["levels"] and ex["order"] in full["orders"] and full["integrators"][str(ex["order"])] == ex["integrator"]
    assert (full["b_level"], full["b_order"]) == (ex["level"], ex["order"])


def test_mesh_convergence_preconditions():
    import spherepde.studies.mesh_convergence as mod
    from spherepde.studies.common import StudyPreconditionError

    with pytest.raises(StudyPreconditionError, match="at least 3 mesh levels"):
        mod.run("smoke", levels=(4, 8))
    with pytest.raises(StudyPreconditionError, match="b_coarse_level"):
        mod.run("smoke", levels=(2, 4, 8), n_list=(20, 40), paths=1, b_level=4, b_coarse_level=3, b_H=(1, 2), T=0.02, t_avg=0.0)
    with pytest.raises(StudyPreconditionError, match="constant factor"):
        mod.run("smoke", levels=(2, 4, 6), n_list=(20, 40), b_H=(), T=0.02, t_avg=0.0)


def test_richardson_and_orders():
    from spherepde.studies.mesh_convergence import observed_order, richardson

    # G(h) = 1 + h^2 on h = 1/4, 1/8, 1/16
    r = richardson([1 + 1 / 16, 1 + 1 / 64, 1 + 1 / 256], 2.0)
    assert r["clean"] and r["p"] == pytest.approx(2.0) and r["value"] == pytest.approx(1.0)
    assert not richardson([1.0, 1.1, 1.05], 2.0)["clean"]  # the differences change sign
    assert not richardson([1.0, 1.1], 2.0)["clean"]
    assert observed_order(0.1, 0.05, 2.0) == pytest.approx(1.0)
    assert math.isnan(observed_order(0.1, 0.0, 2.0))


# -------------------------------------------------------------------- work precision
@pytest.fixture(scope="module")
def wprec():
    import spherepde.studies.work_precision as mod

    return mod, mod.run("smoke")


def test_work_precision_protocol(wprec, tmp_path):
    mod, res = wprec
    assert_study_protocol(mod, res, min_summary=200)
    assert_plots(mod, res, tmp_path)
    # the table: one row per case x quantity x method, with the costs to reach 1 % and 0.1 %
    want = {(c, q, m) for c in res["params"]["cases"] for q in ("E", "G2") for m in ("mesh order 1", "mesh order 2", "particles")}
    got = {(r["case"], r["quantity"], r["method"]) for r in res["table"]}
    assert got == want and len(res["table"]) == len(want)
    for r in res["table"]:
        for k in ("cost_1pct", "cost_0.1pct"):
            assert r[k]["status"] in ("interpolated", "at most", "not reached")
            assert (r[k]["status"] == "not reached") == (not np.isfinite(r[k]["cost"]))
    assert len(res["tables"][0]["rows"]) == len(want)


def test_work_precision_outcomes(wprec):
    _, res = wprec
    assert all(c["passed"] for c in res["checks"].values()), res["checks"]
    levels = sorted(res["params"]["levels"])
    ns = sorted(res["params"]["n_list"])
    for case, c in res["cases"].items():
        for q in ("energy", "G2"):
            assert c["reference"][q]["clean"]  # smooth start: a Richardson reference
            for o in (1, 2):  # the mesh error decreases with the level at both orders
                errs = [c["mesh"][f"L{lv}-o{o}"][f"err_{q}"] for lv in levels]
                assert all(a > b for a, b in zip(errs, errs[1:])), (case, q, o, errs)
            # order 2 beats order 1 on the finest level
            assert c["mesh"][f"L{levels[-1]}-o2"][f"err_{q}"] < c["mesh"][f"L{levels[-1]}-o1"][f"err_{q}"]
        # the tokens' G2 error shrinks with n, roughly like n^-1/2
        errs = [c["particles"][str(n)]["err_G2_mean"] for n in ns]
        assert errs[-1] < errs[0]
        assert -0.8 <= c["orders"]["G2 particles in n"] <= -0.3
        assert 1.8 <= c["orders"]["G2 mesh order 2"] <= 2.4
        # the finest order-2 mesh is far more accurate than the most expensive token run here
        assert c["mesh"][f"L{levels[-1]}-o2"]["err_G2"] < 0.1 * c["particles"][str(ns[-1])]["err_G2_mean"]


def test_cost_to_reach():
    from spherepde.studies.work_precision import cost_to_reach, rel_l1

    costs, errs = [1.0, 10.0, 100.0], [0.1, 0.01, 0.001]
    r = cost_to_reach(costs, errs, 0.01)
    assert r["status"] == "interpolated" and r["cost"] == pytest.approx(10.0)
    r = cost_to_reach(costs, errs, math.sqrt(0.1 * 0.01))  # half-way in log: sqrt(1 * 10)
    assert r["cost"] == pytest.approx(math.sqrt(10.0))
    assert cost_to_reach(costs, errs, 0.5) == {"cost": 1.0, "status": "at most"}
    r = cost_to_reach(costs, errs, 1e-4)
    assert r["status"] == "not reached" and math.isnan(r["cost"])
    t = np.linspace(0, 1, 11)
    assert rel_l1(t, 1.1 * np.ones(11), np.ones(11)) == pytest.approx(0.1)


# ------------------------------------------------------------------- wrong schemes
def test_wrong_sign_flux_fails_mesh_convergence(wrong_sign_flux):
    """Self-convergence alone cannot see a consistently wrong scheme; the tokens on the same path can."""
    import spherepde.studies.mesh_convergence as mod

    res = mod.run("smoke", b_H=())
    failed = _failed(res)
    tok = next(k for k in res["checks"] if k.startswith("finest mesh"))
    assert tok in failed and res["checks"][tok]["measured"] > 0.2  # 0.28 (0.098 for the correct scheme)
    assert "Solver checks:" in res["summary"] and "failed:" in res["summary"]


def test_wrong_sign_flux_fails_work_precision(wrong_sign_flux):
    import spherepde.studies.work_precision as mod

    res = mod.run("smoke", cases=("vmf-osc",))
    name = "vmf-osc: particles, order in n of the G2(t) error against the mesh reference"
    assert name in _failed(res) and abs(res["checks"][name]["measured"]) < 0.2  # the error stalls (-0.01; -0.53 correct)


def test_first_order_claimed_as_second_fails_work_precision(order2_runs_first_order):
    import spherepde.studies.work_precision as mod

    res = mod.run("smoke", cases=("vmf-osc",), n_list=(50, 200), samples=2)
    name = "vmf-osc: mesh order 2, observed order in h of G2(t) (levels 2, 4, 8)"
    assert name in _failed(res) and res["checks"][name]["measured"] < 1.7  # 1.42 (2.04 correct)
