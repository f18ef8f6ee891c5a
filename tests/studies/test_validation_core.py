"""The analytic and structure validation studies at smoke size, and ``spherepde validate``.

Measured at smoke size (2-core machine): analytic ~2 s, structure ~5 s.
* analytic: rate relative errors on icosphere(8), beta = 2: l = 1: 1.3e-3, l = 2: 3.2e-3
  (both signs); uniform-energy relative error 6.5e-7 / 4.1e-8 / 2.5e-9 (levels 4/8/16,
  beta = 2), order 4.04; rigid rotation (quarter turn, icosphere 4 / 8): L1 error order 1
  0.186 / 0.106 (order 0.82), order 2 0.0222 / 0.00424 (order 2.42).
* structure: mass drift <= 1.3e-14 over 200 steps; min rho 2e-51 > 0; energy monotone at
  every step; edi_exact orders in dt: euler 1.00, ssprk2 3.00, ssprk3 3.17; edi_paper
  order in h 1.05; OU RMS edi_exact order 0.96 in the weight step.

Also: the report protocol (solver checks with measured/target/tolerance, paper claims by
their intervals, preconditions as errors, one headline derived from the same booleans).
"""

from __future__ import annotations

import json
from itertools import pairwise

import numpy as np
import pytest
from conftest import assert_study_protocol

from spherepde.studies import analytic, structure


@pytest.fixture(scope="module")
def analytic_smoke():
    return analytic.run("smoke")


@pytest.fixture(scope="module")
def structure_smoke():
    return structure.run("smoke")


# ---------------------------------------------------------------- analytic
def test_analytic_rates_and_energy(analytic_smoke):
    res = analytic_smoke
    assert_study_protocol(analytic, res)
    assert all(c["passed"] for c in res["checks"].values()), res["checks"]
    # transport orders against the exact rotated density (measured 0.82 and 2.42 on icosphere 4 / 8)
    assert 0.7 <= res["rotation_orders"]["1"] <= 1.0
    assert 2.0 <= res["rotation_orders"]["2"] <= 2.7
    errs = {(r["order"], r["level"]): r["l1_error"] for r in res["rotation"]}
    assert errs[(2, 8)] < 0.1 * errs[(1, 8)]  # second order is an order of magnitude more accurate on icosphere(8)
    assert all(r["mass_error"] < 1e-12 for r in res["rotation"])
    rates = res["rates"]
    assert {(r["l"], r["sign"]) for r in rates} == {(1, 1), (1, -1), (2, 1), (2, -1)}
    for r in rates:
        assert np.sign(r["gamma_measured"]) == r["sign"]
        assert r["rel_err"] < 6e-3, r  # measured 1.3e-3 (l = 1), 3.2e-3 (l = 2) on icosphere(8)
        # the uncorrected c l(l+1) i_l/i_0 with c = s beta is beta times the measured rate
        assert r["ratio_to_model_md"] == pytest.approx(1 / r["beta"], rel=1e-2)
    # exact rate formula: s l(l+1) i_l(beta)/i_0(beta); beta = 2, l = 1: i_1(2)/i_0(2) * 2
    assert analytic.gamma_exact(1, 2.0, 1) == pytest.approx(2 * (1 / np.tanh(2.0) - 1 / 2.0))
    for beta in res["params"]["energy_betas"]:
        errs = [r["rel_err"] for r in res["energy"] if r["beta"] == beta]
        assert all(a > b for a, b in pairwise(errs)), errs
        assert res["energy_orders"][str(beta)] > 3.5  # measured 4.04


def test_analytic_overrides_are_checked():
    with pytest.raises(ValueError, match="unknown parameter"):
        analytic.run("smoke", nonsense=1)
    with pytest.raises(ValueError, match="unknown size"):
        analytic.run("huge")


def test_analytic_plot(analytic_smoke, tmp_path):
    paths = analytic.plot(analytic_smoke, tmp_path / "fig")
    assert len(paths) >= 3
    for p in paths:
        assert p.suffix == ".png" and p.stat().st_size > 1000
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ---------------------------------------------------------------- structure
def test_structure_invariants(structure_smoke):
    res = structure_smoke
    assert_study_protocol(structure, res)
    assert all(c["passed"] for c in res["checks"].values()), res["checks"]
    assert res["max_mass_drift"] <= 1e-12
    assert all(r["steps"] >= 200 for r in res["clustering"])
    assert res["rho_min"] >= 0.0
    assert {(r["order"], r["cfl"]) for r in res["clustering"]} == {(1, 0.5), (1, 1.0), (2, 0.5), (2, 1.0)}
    assert all(r["rho_max_growth"] > 10 for r in res["clustering"])  # it did cluster
    mono = res["monotonicity"]
    assert {r["sign"] for r in mono} == {1, -1}
    assert all(r["violations"] == 0 and r["steps"] >= 15 for r in mono)


def test_structure_edi_orders(structure_smoke):
    res = structure_smoke
    o = res["edi_dt_orders_frozen"]
    assert 0.8 <= o["euler"]["edi_exact"] <= 1.3
    assert o["ssprk3"]["edi_exact"] >= 2.5
    assert 0.7 <= res["edi_h_orders_frozen"]["edi_paper"] <= 1.5
    ou = res["edi_ou_rms"]
    assert ou[0]["rms_edi_exact"] < ou[-1]["rms_edi_exact"]
    assert 0.5 <= res["edi_dt_orders_ou"]["edi_exact"] <= 1.2  # measured 0.96 (strong order >= 1/2)


def test_structure_plot(structure_smoke, tmp_path):
    paths = structure.plot(structure_smoke, tmp_path)
    assert len(paths) >= 3
    for p in paths:
        assert p.suffix == ".png" and p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ---------------------------------------------------------------- CLI / API
def test_cli_validate_smoke(tmp_path, capsys):
    from spherepde.cli.main import main

    out = tmp_path / "report"
    rc = main(["validate", "--smoke", "--only", "analytic", "structure", "--out", str(out)])
    assert rc == 0
    md = (out / "report.md").read_text()
    rep = json.loads((out / "report.json").read_text())
    for mod in (analytic, structure):
        assert mod.TITLE in md
        assert rep["studies"][mod.NAME]["status"] == "ok"
        assert rep["studies"][mod.NAME]["title"] == mod.TITLE
        for f in rep["studies"][mod.NAME]["figures"]:
            assert not f.startswith("/") and (out / f).is_file() and f in md
    assert rep["meta"]["size"] == "smoke" and rep["meta"]["machine"]["cpu_count"] >= 1
    assert rep["failed_checks"] == [] and rep["claims_not_reproduced"] == []
    n = rep["counts"]["checks_total"]
    assert n == len(rep["studies"]["analytic"]["checks"]) + len(rep["studies"]["structure"]["checks"]) and rep["counts"]["checks_passed"] == n
    assert f"**Solver checks: {n}/{n} pass.**" in md and "**Paper claims: 0/0 reproduced.**" in md
    assert "| check | measured | target | tolerance | result |" in md and "wall time" in md.lower()
    err = capsys.readouterr().err
    assert "analytic" in err and "structure" in err
    assert f"validation (smoke): solver checks {n}/{n} pass; paper claims 0/0 reproduced" in err

    # a non-empty output folder is refused without --force (exit 2, nothing rewritten)
    before = (out / "report.md").stat().st_mtime_ns
    assert main(["validate", "--smoke", "--only", "analytic", "--out", str(out)]) == 2
    assert (out / "report.md").stat().st_mtime_ns == before
    assert "--force" in capsys.readouterr().err


def test_cli_bad_options(tmp_path, capsys):
    from spherepde.cli.main import main

    assert main(["validate", "--smoke", "--only", "no_such_study", "--out", str(tmp_path / "x")]) == 2
    assert "known studies" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
    with pytest.raises(SystemExit) as exc:
        main(["validate", "--smoke", "--full"])
    assert exc.value.code == 2


def test_missing_study_is_reported_not_fatal(tmp_path, monkeypatch):
    import spherepde.studies as validation
    from spherepde.studies.report import run_validation

    monkeypatch.setattr(validation, "STUDIES", validation.STUDIES + ("not_written_yet",))
    rep = run_validation("smoke", tmp_path / "r", only=["not_written_yet"], progress=False)
    assert rep["missing"] == ["not_written_yet"] and rep["studies"]["not_written_yet"]["status"] == "missing"
    assert "not_written_yet" in (tmp_path / "r" / "report.md").read_text()


def test_verbose_reaches_every_study(tmp_path, monkeypatch):
    """``validate -v`` hands ``verbose=True`` to each study; every study accepts it."""
    import inspect

    import spherepde.studies as validation
    from spherepde.studies import report as validate_cli

    for name in validation.STUDIES:
        mod = __import__(f"spherepde.studies.{name}", fromlist=["run"])
        src = inspect.getsource(mod.run)
        assert "study_params(SIZES, size, overrides" in src, f"validation.{name}.run does not take `verbose` through study_params"

    seen = []
    real = analytic.run

    def spy(size, **kw):
        seen.append(kw.get("verbose"))
        return real(size, **kw)

    monkeypatch.setattr(analytic, "run", spy)
    validate_cli.run_validation("smoke", tmp_path / "a", only=["analytic"], progress=False, verbose=True)
    validate_cli.run_validation("smoke", tmp_path / "b", only=["analytic"], progress=False)
    assert seen == [True, None]


def test_cli_set_changes_a_study_parameter(tmp_path, capsys):
    """``validate --set STUDY.PARAM=VALUE`` runs just that study with the value; bad keys and values are one-line errors."""
    import json

    from spherepde.cli.main import main

    out = tmp_path / "r"
    assert main(["validate", "--smoke", "--set", "analytic.levels=[8]", "--set", "analytic.betas=[1.0]", "--out", str(out), "-q"]) == 0
    rep = json.loads((out / "report.json").read_text())
    assert list(rep["studies"]) == ["analytic"] and rep["meta"]["overrides"] == {"analytic": {"levels": [8], "betas": [1.0]}}
    assert rep["studies"]["analytic"]["results"]["params"]["betas"] == [1.0]
    capsys.readouterr()
    for bad, msg in [
        ("analytic.levls=[8]", "no parameter 'levls' at size 'smoke'; valid: "),
        ("analytic.levels=eight", "analytic.levels: expected a list like"),
        ("analytic", "expected STUDY.PARAM=VALUE"),
        ("analytic.betas=[1.0, nan]", "analytic.betas: [1.0, nan] is not finite"),
        ("nosuch.x=1", "unknown study 'nosuch'"),
    ]:
        assert main(["validate", "--smoke", "--set", bad, "--out", str(tmp_path / "x")]) == 2
        err = capsys.readouterr().err
        assert msg in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
        assert not (tmp_path / "x").exists()


def test_overrides_reach_the_named_study_and_are_recorded(tmp_path, monkeypatch):
    """``run_validation(overrides=...)`` hands the parameters to that study only and says so in the report."""
    from spherepde.studies import analytic, structure
    from spherepde.studies import report as validate_cli

    seen = {}
    for mod in (analytic, structure):
        real = mod.run

        def spy(size, _real=real, _name=mod.__name__, **kw):
            seen[_name.rsplit(".", 1)[1]] = dict(kw)
            return _real(size, **kw)

        monkeypatch.setattr(mod, "run", spy)
    rep = validate_cli.run_validation("smoke", tmp_path / "a", only=["analytic", "structure"], progress=False,
                                      overrides={"analytic": {"levels": (8,)}})
    assert seen == {"analytic": {"levels": (8,)}, "structure": {}}
    assert rep["meta"]["overrides"] == {"analytic": {"levels": (8,)}}
    assert "parameters changed from size `smoke`: analytic: levels = (8,)" in (tmp_path / "a" / "report.md").read_text()
    with pytest.raises(ValueError, match="'structure', which is not among the studies run"):
        validate_cli.run_validation("smoke", tmp_path / "b", only=["analytic"], progress=False, overrides={"structure": {}})
    assert not (tmp_path / "b").exists()


def test_progress_logger_writes_to_stderr(capsys):
    from spherepde.studies.common import progress_logger

    progress_logger(True)("run 3 of 20 done")
    progress_logger(False)("silent")
    cap = capsys.readouterr()
    assert cap.err == "run 3 of 20 done\n" and cap.out == ""


def test_study_params():
    from spherepde.studies.common import study_params

    sizes = {"smoke": {"a": 1, "b": 2}}
    p, log = study_params(sizes, "smoke", {"b": 3, "verbose": True})
    assert p == {"a": 1, "b": 3} and sizes["smoke"] == {"a": 1, "b": 2}
    p, _ = study_params(sizes, "smoke", {"c": 4})
    assert p["c"] == 4
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['c'\]"):
        study_params(sizes, "smoke", {"c": 4}, strict=True)
    with pytest.raises(ValueError, match="unknown size 'huge'"):
        study_params(sizes, "huge", {})


# ---------------------------------------------------------------- checks, claims, preconditions
def test_solver_check_band():
    from spherepde.studies.common import solver_check

    c = solver_check(0.98, lo=0.8, hi=1.3, expected=1.0)
    assert c["passed"] and c["tolerance"] == "in [0.8, 1.3]" and c["measured"] == 0.98 and c["expected"] == 1.0
    assert not solver_check(0.61, lo=0.8, hi=1.3)["passed"]
    assert not solver_check(1.31, lo=0.8, hi=1.3)["passed"]
    assert solver_check(1e-14, hi=1e-12)["tolerance"] == "<= 1e-12"
    assert not solver_check(float("nan"), hi=1.0)["passed"]  # a non-finite measurement never passes
    assert not solver_check(None, lo=0.0)["passed"]
    assert solver_check(0, hi=0, tolerance="0 of 10 steps")["passed"]


def test_paper_claim_needs_the_interval():
    from spherepde.studies.common import claim_sentence, paper_claim

    # the full report's density-level OU exponent: within 0.25 of -1, but the interval excludes it
    c = paper_claim(-0.87, [-0.90, -0.84], -1.0, statement="ou, density level")
    assert not c["reproduced"]
    assert "NOT reproduced (the interval excludes it)" in claim_sentence(c) and "[-0.9, -0.84]" in claim_sentence(c)
    # the point estimate is far off, but the interval contains the paper's value
    c = paper_claim(-1.31, [-2.11, -0.22], -1.0, statement="ou, particles")
    assert c["reproduced"] and "REPRODUCED" in claim_sentence(c)
    # no interval (one path per H): not reproduced, and said so
    c = paper_claim(-0.01, [float("nan"), float("nan")], 0.0, statement="one path")
    assert not c["reproduced"] and "no interval" in claim_sentence(c)


def test_require_finite_raises_precondition_error():
    from spherepde.studies.common import StudyPreconditionError, require, require_finite

    require_finite("ok", [1.0, [2.0, 3.0]], {"a": [4.0]})
    with pytest.raises(StudyPreconditionError, match=r"^distances: 1 of 3 values are not finite$"):
        require_finite("distances", [0.1, [float("nan"), 0.2]])
    with pytest.raises(StudyPreconditionError, match="too few levels"):
        require(False, "too few levels")


def _fake_study(monkeypatch, name, run):
    """Register ``spherepde.studies.<name>`` (an in-memory module) as a study."""
    import importlib.machinery
    import sys
    import types

    import spherepde.studies as validation

    modname = f"spherepde.studies.{name}"
    mod = types.ModuleType(modname)
    mod.__spec__ = importlib.machinery.ModuleSpec(modname, None)
    mod.NAME, mod.TITLE, mod.SIZES = name, f"Fake study {name}", {"smoke": {}, "quick": {}, "full": {}}
    mod.run = run
    mod.plot = lambda results, out: []
    monkeypatch.setitem(sys.modules, modname, mod)
    monkeypatch.setattr(validation, "STUDIES", tuple(validation.STUDIES) + (name,))
    return mod


def test_report_counts_checks_and_claims_apart(tmp_path, monkeypatch, capsys):
    from spherepde.cli.main import main
    from spherepde.studies.common import checks_line, paper_claim, solver_check

    def run(size, **kw):
        checks = {
            "order in h": solver_check(0.98, lo=0.8, hi=1.3, expected=1.0),
            "rate rel. error": solver_check(0.031, hi=0.01, expected=0.0, tolerance="< 1%"),
            "legacy bool": True,
        }
        claims = {
            "ou: b = -1": paper_claim(-0.87, [-0.90, -0.84], -1.0, statement="ou"),
            "osc: b = 0": paper_claim(0.01, [-0.02, 0.03], 0.0, statement="osc"),
        }
        return {"summary": "fake" + checks_line(checks, claims), "checks": checks, "claims": claims}

    _fake_study(monkeypatch, "fake_claims", run)
    out = tmp_path / "r"
    assert main(["validate", "--smoke", "--only", "fake_claims", "--out", str(out)]) == 3  # a failed solver check: exit 3 (issue 37)
    rep = json.loads((out / "report.json").read_text())
    assert rep["counts"] == {"checks_passed": 2, "checks_total": 3, "claims_reproduced": 1, "claims_total": 2}
    assert rep["failed_checks"] == [["fake_claims", "rate rel. error"]]
    assert rep["claims_not_reproduced"] == [["fake_claims", "ou: b = -1"]]
    st = rep["studies"]["fake_claims"]
    assert st["checks"]["legacy bool"] == {"passed": True, "measured": None, "expected": None, "lo": None, "hi": None, "tolerance": None}
    md = (out / "report.md").read_text()
    assert "**Solver checks: 2/3 pass.**" in md and "**Paper claims: 1/2 reproduced.**" in md
    assert "| fake_claims | Fake study fake_claims | 2/3 pass (**1 failed**) | 1/2 reproduced |" in md
    assert "| rate rel. error | 0.031 | 0 | < 1% | **FAIL** |" in md
    assert "| ou: b = -1 | -0.87 | [-0.9, -0.84] | -1 | **not reproduced** |" in md
    assert "| osc: b = 0 | 0.01 | [-0.02, 0.03] | 0 | reproduced |" in md
    # the study's own text says the same
    assert "Solver checks: 2/3 pass; failed: rate rel. error." in md and "Paper claims: 1/2 reproduced; not reproduced: ou: b = -1." in md
    err = capsys.readouterr().err
    assert (
        "validation (smoke): solver checks 2/3 pass (FAILED: fake_claims: rate rel. error); "
        "paper claims 1/2 reproduced (not reproduced: fake_claims: ou: b = -1)"
    ) in err


def test_failed_precondition_is_an_error_not_a_check(tmp_path, monkeypatch, capsys):
    from spherepde.cli.main import main
    from spherepde.studies.common import require_finite

    def run(size, **kw):
        require_finite("fake: G^2 curves", [0.3, float("inf")])
        raise AssertionError("not reached")  # pragma: no cover

    _fake_study(monkeypatch, "fake_nan", run)
    out = tmp_path / "r"
    assert main(["validate", "--smoke", "--only", "analytic", "fake_nan", "--out", str(out)]) == 1
    rep = json.loads((out / "report.json").read_text())
    assert rep["studies"]["fake_nan"]["status"] == "error"
    assert rep["errors"] == {"fake_nan": "precondition failed: fake: G^2 curves: 1 of 2 values are not finite"}
    assert rep["counts"]["checks_total"] == len(rep["studies"]["analytic"]["checks"])  # the broken study counts nothing
    md = (out / "report.md").read_text()
    assert "| fake_nan | Fake study fake_nan | **error** | **error** |" in md
    assert "Study `fake_nan`: **error** after" in md and "precondition failed: fake: G^2 curves" in md
    assert "Traceback" not in md
    err = capsys.readouterr().err
    assert "studies with errors: fake_nan" in err
    assert "spherepde: error: fake_nan: precondition failed: fake: G^2 curves: 1 of 2 values are not finite\n" in err and "Traceback" not in err


# ------------------------------------------------------------------ issue 37: exit status, duration, partial report
def test_validate_exits_3_when_a_real_solver_check_fails(tmp_path, capsys, wrong_sign_flux):
    from spherepde.cli.main import main
    from spherepde.cli.validate import CHECK_FAILED

    out = tmp_path / "r"
    assert main(["validate", "--smoke", "--only", "analytic", "--out", str(out), "-q"]) == CHECK_FAILED == 3
    rep = json.loads((out / "report.json").read_text())
    assert rep["failed_checks"] and not rep["errors"]


def test_validate_claims_not_reproduced_stay_exit_0(tmp_path, monkeypatch, capsys):
    from spherepde.cli.main import main
    from spherepde.studies.common import paper_claim, solver_check

    def run(size, **kw):
        return {"summary": "fake", "checks": {"ok": solver_check(1.0, lo=0.5, hi=1.5)},
                "claims": {"b = -1": paper_claim(-0.5, [-0.6, -0.4], -1.0, statement="not reproduced")}}

    _fake_study(monkeypatch, "fake_finding", run)
    assert main(["validate", "--smoke", "--only", "fake_finding", "--out", str(tmp_path / "r"), "-q"]) == 0


def test_validate_prints_its_estimated_duration_first(tmp_path, capsys):
    from spherepde.cli.main import main
    from spherepde.studies import SIZES, STUDIES
    from spherepde.studies.report import ESTIMATED_WALL_S, estimated_wall_s

    assert set(ESTIMATED_WALL_S) == set(STUDIES) and all(set(v) == set(SIZES) for v in ESTIMATED_WALL_S.values())
    quick = estimated_wall_s("quick", STUDIES)
    assert 15 * 60 <= quick <= 35 * 60  # the issue measured about 21 min for validate --quick on an idle machine, before the noise study (~7 min)
    main(["validate", "--smoke", "--only", "analytic", "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("validate (smoke): 1 studies, estimated ") and "an estimate" in err[0], err[0]
    assert f"estimated {ESTIMATED_WALL_S['analytic']['smoke']:.0f} s" in err[0]


def test_ctrl_c_during_validate_writes_a_partial_report_of_the_finished_studies(tmp_path, monkeypatch, capsys):
    from spherepde.cli.main import main
    from spherepde.studies.common import solver_check

    _fake_study(monkeypatch, "fake_first", lambda size, **kw: {"summary": "first", "checks": {"ok": solver_check(1.0, lo=0.5, hi=1.5)}})

    def interrupted(size, **kw):
        raise KeyboardInterrupt

    _fake_study(monkeypatch, "fake_second", interrupted)
    _fake_study(monkeypatch, "fake_third", lambda size, **kw: {"summary": "third"})
    out = tmp_path / "r"
    code = main(["validate", "--smoke", "--only", "fake_first", "fake_second", "fake_third", "--out", str(out), "-q"])
    err = capsys.readouterr().err
    assert code == 130
    line = [x for x in err.splitlines() if x.startswith("spherepde: error:")]
    assert len(line) == 1 and "interrupted during fake_second" in line[0] and "1 studies that finished" in line[0], err
    rep = json.loads((out / "report.json").read_text())
    assert list(rep["studies"]) == ["fake_first"] and rep["counts"]["checks_passed"] == 1
    assert rep["meta"]["interrupted"] == {"during": "fake_second", "not_run": ["fake_second", "fake_third"]}
    md = (out / "report.md").read_text()
    assert "**interrupted** (Ctrl-C) during fake_second" in md and "not run: fake_second, fake_third" in md
