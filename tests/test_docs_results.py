"""The results pages of the documentation are written from the committed report files.

``docs/_ext/spherepde_results.py`` (run by ``docs/conf.py`` before every Sphinx build) writes
one page per validation report folder, one for the G²-vs-H sweep and one for performance; here
it writes them into a temporary folder, and every number of the solver-checks, paper-claims,
sweep and benchmark tables is compared with the value in the report file, formatted the same
way. Each page names the date and the machine, and its figures resolve.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _generator():
    spec = importlib.util.spec_from_file_location("spherepde_results", ROOT / "docs" / "_ext" / "spherepde_results.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GEN = _generator()


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    folder = tmp_path_factory.mktemp("results")
    paths = GEN.write_results(folder)
    return folder, {p.stem: p.read_text(encoding="utf-8") for p in paths}


def _tables_after(page: str, heading: str) -> list[list[list[str]]]:
    """The rows (cells as written) of the first table under every ``heading`` of ``page``."""
    out = []
    for part in page.split(f"\n{heading}\n")[1:]:
        rows = []
        for line in part.splitlines():
            if not line.startswith("|"):
                if rows or line.startswith("#"):
                    break
                continue
            rows.append([c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]])
        out.append(rows[2:])  # header and separator dropped
    return out


def test_every_report_folder_has_a_page(pages):
    _, text = pages
    folders = sorted(p.parent for p in (ROOT / "validation").rglob("report.json"))
    assert len(folders) >= 12  # the three quick reports and the nine full-size runs
    for f in folders:
        name = f.relative_to(ROOT / "validation").as_posix().replace("/", "-")
        assert name in text, f"no results page for {f}"
        assert f"results/{name}" not in text["index"] and name in text["index"]
    assert "sweep-paper-G2-vs-H" in text and "performance" in text
    for f in (ROOT / "benchmarks").glob("*.json"):
        assert f"benchmarks/{GEN.text(f.name)}" in text["performance"]


def test_checks_and_claims_tables_hold_the_report_json_numbers(pages):
    _, text = pages
    compared = 0
    for folder in GEN.report_folders():
        report = json.loads((folder / "report.json").read_text(encoding="utf-8"))
        page = text[GEN.slug(folder)]
        meta = report["meta"]
        assert f"- date: {meta['date']}" in page
        assert f"{meta['machine']['cpu_count']} cores" in page and GEN.text(meta["machine"]["platform"]) in page
        studies = [e for e in report["studies"].values() if e.get("status") == "ok"]
        check_tables = iter(_tables_after(page, "### Solver checks"))
        claim_tables = iter(_tables_after(page, "### Paper claims"))
        for e in studies:
            assert GEN.prose(e.get("summary", "")) in page
            if e.get("checks"):
                rows = next(check_tables)
                assert len(rows) == len(e["checks"])
                for row, (name, v) in zip(rows, e["checks"].items()):
                    v = v if isinstance(v, dict) else {"passed": v}
                    assert row == [GEN.text(name), GEN.cell(v.get("measured")), GEN.cell(v.get("expected")),
                                   GEN.cell(v.get("tolerance")), "yes" if v["passed"] else "no"]
                    if isinstance(v.get("measured"), float):
                        assert float(row[1]) == pytest.approx(v["measured"], rel=1e-3)
                    compared += 1
            if e.get("claims"):
                rows = next(claim_tables)
                for row, (name, v) in zip(rows, e["claims"].items(), strict=True):
                    assert row[0] == GEN.text(name) and row[1] == GEN.cell(v["value"]) and row[3] == GEN.cell(v["paper_value"])
                    assert row[2] == GEN.text(f"[{GEN.cell(v['interval'][0])}, {GEN.cell(v['interval'][1])}]")
                    assert row[4] == ("yes" if v["reproduced"] else "no")
                    compared += 1
        assert next(check_tables, None) is None and next(claim_tables, None) is None
    assert compared > 100


def test_sweep_and_performance_numbers_come_from_their_json(pages):
    _, text = pages
    a = json.loads((ROOT / "validation" / "sweep-paper-G2-vs-H" / "analysis.json").read_text(encoding="utf-8"))
    (fit,) = _tables_after(text["sweep-paper-G2-vs-H"], "## Fit")
    assert fit[0][:3] == [GEN.cell(a["a"]), GEN.cell(a["b"]), GEN.cell(a["b_stderr"])]
    points = _tables_after(text["sweep-paper-G2-vs-H"], "## Points")[0]
    assert [r[1] for r in points] == [GEN.cell(p["mean"]) for p in a["points"]]
    d = json.loads((ROOT / "benchmarks" / "readme-times.json").read_text(encoding="utf-8"))
    perf = text["performance"]
    assert f"- date: {d['date']}" in perf and GEN.text(d["machine"]["platform"]) in perf
    rows = {r[0]: r for r in _tables_after(perf, "- note: " + GEN.text(d["note"]))[0]}
    for k, m in d["measurements"].items():
        assert rows[GEN.text(k)][1] == GEN.cell(m["seconds"])


def test_figures_are_copied_and_every_image_path_resolves(pages):
    folder, text = pages
    n = 0
    for name, page in text.items():
        for path in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", page):
            assert (folder / path).is_file(), f"{name}: {path}"
            n += 1
    listed = sum(len(e.get("figures", [])) for f in GEN.report_folders()
                 for e in json.loads((f / "report.json").read_text(encoding="utf-8"))["studies"].values())
    assert n == listed + 1  # and the sweep's analysis.png


def test_speed_report_rows_are_the_json(pages):
    """The ``spherepde bench --speed`` table of the performance page: one row per entry, ratio,
    target and target met as in ``benchmarks/speed.json``."""
    _, text = pages
    d = json.loads((ROOT / "benchmarks" / "speed.json").read_text(encoding="utf-8"))
    (rows,) = _tables_after(text["performance"], "## benchmarks/speed.json")
    assert [r[0] for r in rows] == list(d["entries"])
    for row, e in zip(rows, d["entries"].values()):
        assert row[1] == GEN.cell(e["ratio"]) and row[3] == GEN.cell(e["target_ratio"])
        assert float(row[1]) == pytest.approx(e["ratio"], rel=1e-3)
        assert row[6] == ("yes" if e["target_met"] else "**no**")
        assert GEN.text(e["new"]) in text["performance"]
