"""The analytic and structure validation studies at smoke size, and ``spherepde validate``.

Measured at smoke size (2-core machine): analytic ~4 s, structure ~11 s.
* analytic: rate relative errors on icosphere(8), beta = 2: l = 1: 1.3e-3, l = 2: 3.2e-3
  (both signs); uniform-energy relative error 6.5e-7 / 4.1e-8 / 2.5e-9 (levels 4/8/16,
  beta = 2), order 4.04.
* structure: mass drift <= 1.3e-14 over 200 steps; min rho 2e-51 > 0; energy monotone at
  every step; edi_exact orders in dt: euler 1.00, ssprk2 3.00, ssprk3 3.17; edi_paper
  order in h 1.05.
"""

from __future__ import annotations

import json
from itertools import pairwise

import numpy as np
import pytest

from spherepde.validation import analytic, structure


@pytest.fixture(scope="module")
def analytic_smoke():
    return analytic.run("smoke")


@pytest.fixture(scope="module")
def structure_smoke():
    return structure.run("smoke")


def _protocol(res, mod):
    assert res["summary"] and isinstance(res["summary"], str)
    assert res["checks"] and all(isinstance(v, bool) for v in res["checks"].values())
    json.dumps(__import__("spherepde.validation.common", fromlist=["to_jsonable"]).to_jsonable(res))  # serialisable
    assert set(mod.SIZES) == {"smoke", "quick", "full"}
    assert mod.NAME and mod.TITLE


# ---------------------------------------------------------------- analytic
def test_analytic_rates_and_energy(analytic_smoke):
    res = analytic_smoke
    _protocol(res, analytic)
    assert all(res["checks"].values()), res["checks"]
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
    _protocol(res, structure)
    assert all(res["checks"].values()), res["checks"]
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
    assert rep["failed_checks"] == []
    assert "pass" in md and "wall time" in md.lower()
    err = capsys.readouterr().err
    assert "analytic" in err and "structure" in err and "checks pass" in err

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
    import spherepde.validation as validation
    from spherepde.validation.report import run_validation

    monkeypatch.setattr(validation, "STUDIES", validation.STUDIES + ("not_written_yet",))
    rep = run_validation("smoke", tmp_path / "r", only=["not_written_yet"], progress=False)
    assert rep["missing"] == ["not_written_yet"] and rep["studies"]["not_written_yet"]["status"] == "missing"
    assert "not_written_yet" in (tmp_path / "r" / "report.md").read_text()


def test_verbose_reaches_every_study(tmp_path, monkeypatch):
    """``validate -v`` hands ``verbose=True`` to each study; every study accepts it."""
    import inspect

    import spherepde.validation as validation
    from spherepde.validation import report as validate_cli

    for name in validation.STUDIES:
        mod = __import__(f"spherepde.validation.{name}", fromlist=["run"])
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


def test_progress_logger_writes_to_stderr(capsys):
    from spherepde.validation.common import progress_logger

    progress_logger(True)("run 3 of 20 done")
    progress_logger(False)("silent")
    cap = capsys.readouterr()
    assert cap.err == "run 3 of 20 done\n" and cap.out == ""


def test_study_params():
    from spherepde.validation.common import study_params

    sizes = {"smoke": {"a": 1, "b": 2}}
    p, log = study_params(sizes, "smoke", {"b": 3, "verbose": True})
    assert p == {"a": 1, "b": 3} and sizes["smoke"] == {"a": 1, "b": 2}
    p, _ = study_params(sizes, "smoke", {"c": 4})
    assert p["c"] == 4
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['c'\]"):
        study_params(sizes, "smoke", {"c": 4}, strict=True)
    with pytest.raises(ValueError, match="unknown size 'huge'"):
        study_params(sizes, "huge", {})
