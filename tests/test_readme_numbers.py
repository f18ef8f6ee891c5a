"""Numbers README.md and the user guide state are read from the report that produced them, so they cannot drift.

docs/guide/clustering.md: every row of the merge-time table, the cost
sentence and the nucleation numbers come from
``validation/report-quick-metastability/report.json`` (``spherepde validate --quick --only
metastability --out validation/report-quick-metastability``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
CLUSTERING = (ROOT / "docs" / "guide" / "clustering.md").read_text(encoding="utf-8")
PAPER = (ROOT / "docs" / "guide" / "paper.md").read_text(encoding="utf-8")
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
        assert row in CLUSTERING, row
    assert f"level {meta['cases'][0]['level']} (`validation/report-quick-metastability/`" in " ".join(CLUSTERING.split())


def test_cost_and_nucleation_sentences_are_the_report(meta):
    text = " ".join(CLUSTERING.split())
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
    text = " ".join(CLUSTERING.split())
    passed = sum(c["passed"] for c in st["checks"].values())
    lv = " / ".join(str(x["level"]) for x in r["levels"])
    tv = " / ".join(f"{x['t_mesh']:.2f}" for x in r["levels"])
    assert f"{passed}/{len(st['checks'])} checks) mesh levels {lv} give {tv} for β = 10" in text
    words = {5: "five", 6: "six", 7: "seven", 8: "eight"}
    assert f"{words[len(r['cases'])]} cases, " in text
    c12 = next(c for c in r["cases"] if c["beta"] == 12.0)
    assert f"β = 12 gives {c12['t_mesh']:.1f} against the ODE's {c12['t_ode']:.1f}" in text


# ------------------------------------------------------------------ times (issue 26)
# Every time README.md states about running spherepde is in benchmarks/readme-times.json, written by
# `python benchmarks/readme_times.py [--suite] [--long]`; `--update-readme` rewrites the sentences.
TIMES = ROOT / "benchmarks" / "readme-times.json"


@pytest.fixture(scope="module")
def readme_times():
    import importlib.util

    spec = importlib.util.spec_from_file_location("readme_times", ROOT / "benchmarks" / "readme_times.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def measured():
    doc = json.loads(TIMES.read_text(encoding="utf-8"))
    assert doc["machine"]["cpu_count"] and "load_average" in doc and "loaded" in doc
    return doc["measurements"]


def test_readme_times_are_the_benchmark(readme_times, measured):
    """Each sentence of readme_times.SENTENCES occurs once and states its measurement, rounded as stated."""
    docs = readme_times.read_docs()  # README.md and the guide pages the sentences live on
    assert readme_times.disagreements(docs, measured) == []
    # regenerable: `python benchmarks/readme_times.py --update-readme` would change nothing
    assert readme_times.update_readme(docs, measured) == docs


def test_readme_times_check_is_not_vacuous(readme_times, measured):
    docs = readme_times.read_docs()
    stated = readme_times.stated_numbers(docs)
    assert {"default_first_run", "default_later_run", "h100_particle_run", "render_gif", "suite_min", "paper_ou_mesh"} == set(stated)
    doubled = {k: dict(v, seconds=3 * v["seconds"]) for k, v in measured.items()}
    assert len(readme_times.disagreements(docs, doubled)) == sum(v is not None for v in stated.values())
    assert [readme_times.rounded(x) for x in (4.4, 31.2, 33, 78.4, 142.7)] == ["4", "30", "35", "80", "140"]
    assert readme_times.rounded(4.3, minutes=True) == "4.5" and readme_times.rounded(11.4, minutes=True) == "11"


def test_first_run_says_so_at_once(measured):
    """Found: about 20 s of silence before the first line of the first run (output not a terminal)."""
    first = measured["default_first_run"]
    assert first["first_line_s"] is not None and first["first_line_s"] < min(5.0, first["seconds"] / 4)


def test_shipped_paper_ou_mesh_time_is_its_summary():
    s = json.loads((ROOT / "validation" / "paper-ou-mesh" / "summary.json").read_text(encoding="utf-8"))
    text = " ".join(PAPER.split())
    wall, steps = round(s["wall_time_s"]), int(s["final"]["step"])
    assert f"summary, full `diagnostics.csv`) took {wall} s on this 2-core machine" in text
    assert f"{steps:,} steps" in text


# ------------------------------------------------------------------ the README's results table
def _claims_table() -> list[dict]:
    lines = README[README.index("## Results: the paper's claims"):].splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("| weights |"))
    rows = []
    for ln in lines[head + 2:]:
        if not ln.startswith("|"):
            break
        cells = [c.strip() for c in ln.strip("|").split("|")]
        rows.append(dict(zip(("weights", "level", "paths", "b", "paper", "reproduced"), cells)))
    return rows


def _number(s: str) -> float:
    return float(s.replace("−", "-").replace("+", ""))


def test_readme_claims_table_verdicts_follow_the_interval_rule():
    """'reproduced' is yes exactly when the quoted 95 % interval contains the paper's b (the
    intervals themselves are checked against the reports by validation/recompute_intervals.py)."""
    import re

    rows = _claims_table()
    assert len(rows) == 7 and {r["weights"] for r in rows} == {"OU", "oscillating, in-phase", "oscillating, shift"}
    for r in rows:
        lo, hi = (_number(x) for x in re.fullmatch(r"\S+ \[(\S+), (\S+)\]", r["b"]).groups())
        inside = lo <= _number(r["paper"]) <= hi
        assert r["reproduced"] == ("yes" if inside else "no"), r


def test_every_readme_interval_is_checked_against_a_report():
    import importlib.util

    spec = importlib.util.spec_from_file_location("recompute_intervals", ROOT / "validation" / "recompute_intervals.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    quoted = {q for f, q, _ in mod.QUOTES if f == "README.md"}
    for r in _claims_table():
        assert f"| {r['b']} |" in quoted, r["b"]
