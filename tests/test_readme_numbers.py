"""Numbers the README states are read from the report that produced them, so they cannot drift.

Section "Clustering and metastability": every row of the merge-time table, the cost
sentence and the nucleation numbers come from
``validation/report-quick-metastability/report.json`` (``spherepde validate --quick --only
metastability --out validation/report-quick-metastability``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
REPORT = ROOT / "validation" / "report-quick-metastability" / "report.json"


@pytest.fixture(scope="module")
def meta():
    rep = json.loads(REPORT.read_text(encoding="utf-8"))
    assert rep["meta"]["size"] == "quick" and rep["counts"]
    return rep["studies"]["metastability"]["results"]


def test_merge_time_table_is_the_report(meta):
    for c in meta["cases"]:
        row = (f"| {c['beta']:g} | {c['m1']:g} | {c['theta0_deg']:g}° | {c['t_ode']:.2f} | {c['t_mesh']:.2f} | "
               f"{100 * (c['t_mesh'] - c['t_ode']) / c['t_ode']:+.2f} % | {c['steps']} |")
        assert row in README, row
    assert f"level {meta['cases'][0]['level']} (`validation/report-quick-metastability/`" in " ".join(README.split())


def test_cost_and_nucleation_sentences_are_the_report(meta):
    text = " ".join(README.split())
    c = meta["cases"][0]
    assert f"{c['steps']} implicit steps against about {c['explicit_steps']:,.0f} explicit SSP-RK3 steps" in text
    assert f"{c['wall_s']:.1f} s against {c['tokens']['wall_s']:.1f} s for {c['tokens']['n']} tokens" in text
    assert f"tokens merge at {c['tokens']['t_tokens']:.1f}" in text
    assert f"Level {meta['levels'][0]['level']} gives {meta['levels'][0]['t_mesh']:.2f}" in text
    p = meta["params"]
    assert f"{p['nuc_noise_amp'] * 100:g} % noise, β = {p['nuc_beta']:g}" in text
    assert f"{p['nuc_n']:,} tokens both show" in text.replace("the mesh and ", "") and f"at t = {p['nuc_T']:g}" in text
    assert f"(Heun, Δt = {p['token_dt']:g})" in text
    nu = meta["nucleation"]
    assert f"argmax of γ_l ({nu['l_fastest_theory']})" in text and nu["l_fastest_mesh"] == nu["l_fastest_theory"]
    assert f"both show {nu['clusters_mesh']} clusters" in text and nu["clusters_mesh"] == nu["clusters_tokens"]


def test_full_size_sentence_is_the_full_report():
    rep = json.loads((ROOT / "validation" / "report-full" / "metastability" / "report.json").read_text(encoding="utf-8"))
    st = rep["studies"]["metastability"]
    r = st["results"]
    text = " ".join(README.split())
    passed = sum(c["passed"] for c in st["checks"].values())
    lv = " / ".join(str(x["level"]) for x in r["levels"])
    tv = " / ".join(f"{x['t_mesh']:.2f}" for x in r["levels"])
    assert f"{passed}/{len(st['checks'])} checks) mesh levels {lv} give {tv} for β = 10" in text
    words = {5: "five", 6: "six", 7: "seven", 8: "eight"}
    assert f"{words[len(r['cases'])]} cases, " in text
    c12 = next(c for c in r["cases"] if c["beta"] == 12.0)
    assert f"β = 12 gives {c12['t_mesh']:.1f} against the ODE's {c12['t_ode']:.1f}" in text
