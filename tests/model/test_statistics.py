"""The one statistics module (spherepde.model.statistics): time averages, fits, the bootstrap
interval of b in <G^2> ~ a H^b, and the README's intervals recomputed from the stored reports."""

import ast
import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest

from spherepde.model import statistics as st
from spherepde.runs.sweep import analysis as sweep_analysis
from spherepde.studies import mesh_convergence, paper_section6

ROOT = Path(__file__).resolve().parents[2]


def _per_H(seed=1, sizes=(5, 4, 6)):
    rng = np.random.default_rng(seed)
    Hs = [1, 10, 100]
    return Hs, [list(0.4 / H * np.exp(0.3 * rng.standard_normal(n))) for H, n in zip(Hs, sizes)]


def test_one_bootstrap_for_every_entry_point():
    """paper_section6, mesh_convergence and the sweep analysis give the same interval for the
    same per-path data and seed (they once resampled three different ways)."""
    Hs, per_H = _per_H()
    assert paper_section6.exponent_fit is st.exponent_fit
    assert mesh_convergence.exponent_fit is st.exponent_fit
    study = st.exponent_fit(Hs, per_H, resamples=700, seed=4, min_runs=2)  # what both studies call
    direct = st.bootstrap_exponent(Hs, per_H, resamples=700, seed=4, min_runs=2)
    table = [{"model.H": H, "mean_G2": v, "status": "completed"} for H, vals in zip(Hs, per_H) for v in vals]
    res = sweep_analysis.analyse(table, "model.H", "G2", bootstrap=700, seed=4)
    assert res["b_ci95"] == list(direct) == study["ci95"]
    assert (res["a"], res["b"], res["b_stderr"]) == (study["a"], study["b"], study["b_stderr"])
    # the groups' order does not matter; another seed gives another interval
    assert st.bootstrap_exponent(Hs[::-1], per_H[::-1], resamples=700, seed=4) == direct
    assert st.bootstrap_exponent(Hs, per_H, resamples=700, seed=5) != direct
    lo, hi = direct
    assert lo < res["b"] < hi


def test_no_other_bootstrap_in_the_package():
    """No module under spherepde/ but statistics defines a bootstrap or a power-law fit of its own."""
    owners = {}
    for f in (ROOT / "spherepde").rglob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.FunctionDef) and ("bootstrap" in node.name or node.name in ("exponent_fit", "fit_power_law", "fit_rate", "growth_rate", "log_slope", "_slope", "time_average", "_time_average")):
                owners.setdefault(node.name, []).append(f.relative_to(ROOT).as_posix())
    assert owners == {name: ["spherepde/model/statistics.py"] for name in owners}, owners


def test_bootstrap_minimum_and_degenerate_cases():
    Hs, per_H = _per_H(sizes=(2, 2, 2))
    nan = st.bootstrap_exponent(Hs, per_H, resamples=200)  # default: 3 runs per H at least
    assert all(math.isnan(x) for x in nan)
    lo, hi = st.bootstrap_exponent(Hs, per_H, resamples=200, min_runs=2)
    assert lo <= hi and math.isfinite(lo)
    assert all(math.isnan(x) for x in st.bootstrap_exponent([1], [[1.0, 2.0, 3.0]], resamples=10))
    assert all(math.isnan(x) for x in st.bootstrap_exponent([1, 2], [[-1.0] * 3, [-2.0] * 3], resamples=10))
    with pytest.raises(ValueError, match="2 x values but 3 groups"):
        st.bootstrap_exponent([1, 2], [[1.0] * 3] * 3, resamples=10)


def test_time_average_and_fits():
    t = np.linspace(0.0, 2.0, 41)
    y = t**2
    assert st.time_average(t, y) == pytest.approx(np.trapezoid(y, t) / 2.0, rel=1e-15)
    sel = t >= 1.0
    assert st.time_average(t, y, 1.0) == pytest.approx(np.trapezoid(y[sel], t[sel]), rel=1e-15)
    assert st.time_average(t, y, 0.5, 1.0) == pytest.approx(7 / 12, rel=1e-3)
    assert math.isnan(st.time_average(t, y, 5.0))
    assert st.time_average([1.0], [3.0]) == 3.0 and st.time_average([1.0, 1.0], [2.0, 4.0]) == 3.0
    f = st.fit_power_law([1, 2, 4, 8], [2 * x**-1.5 for x in (1, 2, 4, 8)])
    assert f["b"] == pytest.approx(-1.5) and f["a"] == pytest.approx(2.0) and f["b_stderr"] == pytest.approx(0.0, abs=1e-12)
    assert st.fit_rate([0.1, 0.05, 0.025], [1e-2, 2.5e-3, 6.25e-4]) == pytest.approx(2.0)
    assert math.isnan(st.fit_rate([0.1, 0.05], [1e-2, float("nan")]))
    assert st.growth_rate([0.0, 0.5, 1.0], [-3.0, -3.0 * math.exp(1.0), -3.0 * math.exp(2.0)]) == pytest.approx(2.0)


def _recompute_module():
    spec = importlib.util.spec_from_file_location("recompute_intervals", ROOT / "validation" / "recompute_intervals.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_readme_intervals_are_recomputed_from_the_stored_reports():
    """Every bootstrap interval README.md and docs/model.md quote is what the one estimator gives
    on the per-path data the reports store (no solver runs)."""
    mod = _recompute_module()
    assert mod.check() == []
    # the sweep's stored analysis.json is reproduced bit for bit (its resampling is the estimator's)
    stored = json.loads((ROOT / "validation" / "sweep-paper-G2-vs-H" / "analysis.json").read_text())
    assert mod.recompute()["sweep, OU particles (10 paths per H)"]["ci95"] == stored["b_ci95"]


def test_readme_interval_check_fails_on_a_wrong_quote(tmp_path):
    mod = _recompute_module()
    for f in {f for f, _, _ in mod.QUOTES}:
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f).write_text((ROOT / f).read_text())
    readme = tmp_path / "README.md"
    readme.write_text(readme.read_text().replace("| −0.886 [−0.914, −0.860] |", "| −0.886 [−0.915, −0.860] |"))
    mod.QUOTES.append(("README.md", "| −0.886 [−0.915, −0.860] |", "mesh level 32 order 2, OU (5 paths)"))
    bad = mod.check(tmp_path)
    assert len(bad) >= 1 and any("−0.915" in b for b in bad)
