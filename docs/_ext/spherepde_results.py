"""Write the results pages of the documentation from the committed report files.

Run by ``docs/conf.py`` before every Sphinx build: one page per validation report folder
(``validation/report-quick*/``, each ``validation/report-full/*/``), one for the G²-vs-H sweep
(``validation/sweep-paper-G2-vs-H/analysis.json``) and one for performance (every JSON file in
``benchmarks/``). Every number on a page is read from those files and formatted here (never
retyped); each page states the date and the machine that the file records. The reports'
figures are copied next to the pages so that Sphinx includes them.

    python docs/_ext/spherepde_results.py [FOLDER]    # default: docs/results
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VALIDATION = ROOT / "validation"
BENCHMARKS = ROOT / "benchmarks"
SWEEP = VALIDATION / "sweep-paper-G2-vs-H"

_ESCAPE = re.compile(r"([\\`*_$|<>\[\]])")


def text(s) -> str:
    """Markdown-safe text: characters that MyST would read as markup are escaped."""
    return _ESCAPE.sub(r"\\\1", str(s))


_PROSE_ESCAPE = re.compile(r"([\\*_$<>])")


def prose(s) -> str:
    """A report's summary: Markdown tables, code spans and brackets kept; emphasis, maths
    and HTML characters escaped."""
    return _PROSE_ESCAPE.sub(r"\\\1", str(s))


def cell(v) -> str:
    """A table cell: floats with 4 significant digits (as ``report.md``), booleans as yes/no."""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return "nan" if not math.isfinite(v) else f"{v:.4g}"
    if v is None:
        return "-"
    return text(v)


def table(headers, rows) -> str:
    lines = ["| " + " | ".join(text(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def check_rows(checks: dict) -> list[list]:
    """The solver-checks table rows: name, measured, expected, tolerance, passed (older reports
    store a check as a bare pass/fail boolean: its numbers are then '-')."""
    rows = []
    for k, v in checks.items():
        v = v if isinstance(v, dict) else {"passed": bool(v)}
        rows.append([k, v.get("measured"), v.get("expected"), v.get("tolerance"), bool(v.get("passed"))])
    return rows


CHECK_HEADERS = ["check", "measured", "expected", "tolerance", "passed"]


def claim_rows(claims: dict) -> list[list]:
    return [
        [k, v.get("value"), f"[{cell(v['interval'][0])}, {cell(v['interval'][1])}]" if v.get("interval") else None,
         v.get("paper_value"), bool(v.get("reproduced"))]
        for k, v in claims.items()
    ]


def machine_line(mach: dict) -> str:
    s = f"{mach.get('cpu_count')} cores ({mach.get('processor')}), {mach.get('platform')}, Python {mach.get('python')}"
    if "node" in mach:
        s = f"`{mach['node']}`, " + s
    libs = [f"{k} {mach[k]}" for k in ("numpy", "scipy", "numba") if k in mach]
    if libs:
        s += ", " + ", ".join(libs)
    if "numba_threads" in mach:
        s += f" ({mach['numba_threads']} Numba threads)"
    return text(s)


def report_folders() -> list[Path]:
    """Every validation folder with a ``report.json``: the quick reports, each full-size run."""
    return sorted(p.parent for p in VALIDATION.glob("*/report.json")) + sorted(p.parent for p in VALIDATION.glob("report-full/*/report.json"))


def slug(folder: Path) -> str:
    return folder.relative_to(VALIDATION).as_posix().replace("/", "-")


def _readme_command(readme: Path, key: str) -> str | None:
    """The cell after the 'what it is' column of ``readme``'s table row for folder ``key``."""
    if not readme.exists():
        return None
    for line in readme.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0] == f"`{key}/`":
            return cells[-1] if readme.parent == VALIDATION else cells[1]
    return None


def command_for(folder: Path, meta: dict) -> str:
    """Markdown: the command that made the report, from the folder's README row, else from meta."""
    rel = folder.relative_to(VALIDATION)
    if len(rel.parts) == 1:
        cmd = _readme_command(VALIDATION / "README.md", rel.parts[0])
        if cmd:
            return cmd + " (from `validation/README.md`)"
    else:
        cmd = _readme_command(folder.parent / "README.md", rel.parts[-1])
        if cmd and cmd.startswith("`"):
            cmd = re.sub(r"^`(?!spherepde)", "`spherepde validate ", cmd, count=1)
            return cmd + f" (from `validation/{rel.parent.as_posix()}/README.md`)"
    parts = ["spherepde validate", f"--{meta.get('size', 'quick')}", "--only", *meta.get("studies_requested", [])]
    for study, kv in (meta.get("overrides") or {}).items():
        parts += [f"--set '{study}.{k}={json.dumps(v)}'" for k, v in kv.items()]
    parts += ["--out", f"validation/{rel.as_posix()}"]
    return "`" + " ".join(parts) + "` (from `report.json`'s meta)"


def _copy_figure(src: Path, dest: Path) -> None:
    if not dest.exists() or dest.stat().st_size != src.stat().st_size or dest.read_bytes() != src.read_bytes():
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)


def _figures(out: Path, name: str, folder: Path, figures) -> list[str]:
    lines = []
    for f in figures:
        src = folder / f
        if not src.exists():
            lines += [f"Figure `{text(f)}` is listed in the report but not committed.", ""]
            continue
        dest = out / "_figures" / name / Path(f).name
        _copy_figure(src, dest)
        rel = dest.relative_to(out).as_posix()
        lines += [f"![{text(Path(f).stem)}]({rel})", ""]
    return lines


def report_page(folder: Path, out: Path) -> str:
    report = json.loads((folder / "report.json").read_text(encoding="utf-8"))
    meta = report["meta"]
    rel = folder.relative_to(VALIDATION).as_posix()
    titles = [e.get("title", n) for n, e in report["studies"].items()]
    name = slug(folder)
    lines = [
        f"# {text(rel)}: {text('; '.join(titles))}",
        "",
        f"- date: {text(meta.get('date'))}",
        f"- machine: {machine_line(meta.get('machine', {}))}",
        f"- spherepde {text(meta.get('spherepde_version'))}, size `{meta.get('size')}`, total wall time {cell(meta.get('wall_s'))} s",
        f"- command: {command_for(folder, meta)}",
        f"- source: `validation/{rel}/report.json` (every number on this page is read from it)",
        "",
    ]
    c = report.get("counts", {})
    if c:
        parts = []
        if c.get("checks_total"):
            parts.append(f"Solver checks: {c.get('checks_passed')}/{c.get('checks_total')} pass.")
        if c.get("claims_total"):
            parts.append(f"Paper claims: {c.get('claims_reproduced')}/{c.get('claims_total')} reproduced.")
        lines += [" ".join(parts), ""] if parts else []
    for sname, e in report["studies"].items():
        lines += [f"## {text(e.get('title', sname))}", ""]
        if e.get("status") != "ok":
            lines += [f"Study `{sname}`: {text(e.get('status'))}: {text(e.get('error', ''))}", ""]
            continue
        lines += [f"Study `{sname}`, wall time {cell(e.get('wall_s'))} s.", "", prose(e.get("summary", "")), ""]
        if e.get("checks"):
            lines += ["### Solver checks", "", table(CHECK_HEADERS, check_rows(e["checks"])), ""]
        if e.get("claims"):
            lines += ["### Paper claims", "", table(["claim", "measured", "95% interval", "paper", "reproduced"], claim_rows(e["claims"])), ""]
        if e.get("figures"):
            lines += ["### Figures", ""] + _figures(out, name, folder, e["figures"])
    return "\n".join(lines).rstrip() + "\n"


def _git_date(path: Path) -> str | None:
    try:
        r = subprocess.run(["git", "log", "-1", "--format=%cI", "--", str(path)], cwd=ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.strip() or None


def sweep_page(out: Path) -> str:
    a = json.loads((SWEEP / "analysis.json").read_text(encoding="utf-8"))
    date = a.get("date") or _git_date(SWEEP / "analysis.json")
    lines = [
        "# sweep-paper-G2-vs-H: the paper's G² against the number of heads",
        "",
        f"- date: {text(date) + (' (of the last commit of `analysis.json`, which records no date)' if not a.get('date') and date else '') if date else 'not recorded'}",
        f"- machine: {machine_line(a['machine']) if a.get('machine') else 'not recorded in analysis.json; this project’s 2-core machine per validation/README.md'}",
        f"- command: {_readme_command(VALIDATION / 'README.md', SWEEP.name) or '-'} (from `validation/README.md`)",
        "- source: `validation/sweep-paper-G2-vs-H/analysis.json` (every number on this page is read from it)",
        "",
        "## Fit",
        "",
        f"Power law {text(a['y'])} = a {text(a['x'])}^b fitted to `{text(a['column'])}` (time average over t >= {cell(a.get('t_min'))}), "
        f"{a.get('runs_used')} runs used, {a.get('runs_excluded')} excluded; 95% interval by {a.get('bootstrap')} bootstrap resamples.",
        "",
        table(["a", "b", "b std. err.", "b 95% interval"],
              [[a["a"], a["b"], a["b_stderr"], f"[{cell(a['b_ci95'][0])}, {cell(a['b_ci95'][1])}]"]]),
        "",
        "## Points",
        "",
        table([a["x"], "mean", "std", "runs"], [[p["x"], p["mean"], p["std"], p["n"]] for p in a["points"]]),
        "",
    ]
    if (SWEEP / "analysis.png").exists():
        lines += ["## Figure", ""] + _figures(out, "sweep-paper-G2-vs-H", SWEEP, ["analysis.png"])
    return "\n".join(lines).rstrip() + "\n"


def benchmark_files() -> list[Path]:
    return sorted(BENCHMARKS.glob("*.json"))


def _met(v) -> str:
    return "n/a (quick)" if v is None else ("yes" if v else "**no**")


def speed_section(d: dict) -> list[str]:
    """The ``spherepde bench --speed`` report (``benchmarks/speed.json``): one table row per entry
    (the ratio against the approach it replaced, the accuracy it is held at, the target), then what
    each side measured."""
    rows, details = [], []
    for key, e in d["entries"].items():
        acc = "; ".join(f"{text(k)} {cell(v)}" for k, v in (e.get("accuracy") or {}).items()) or "-"
        rows.append([cell(key), cell(e.get("ratio")), cell(e.get("ratio_of")), cell(e.get("target_ratio")), acc,
                     cell(e.get("accuracy_bound")), _met(e.get("target_met"))])
        details += [f"- **{text(key)}** ({text(e.get('what', ''))}): previous approach {text(e.get('old'))}; today {text(e.get('new'))}"]
    head = ["entry", "ratio (x faster)", "ratio of", "target", "accuracy measured", "held to", "target met"]
    lines = ["| " + " | ".join(text(h) for h in head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines + [""] + details + [""]


def performance_page(out: Path) -> str:
    lines = [
        "# Performance",
        "",
        "Times measured by the scripts in `benchmarks/`; every number on this page is read from their JSON files. "
        "The work-precision study (accuracy against wall time) is on the validation pages.",
        "",
    ]
    for path in benchmark_files():
        d = json.loads(path.read_text(encoding="utf-8"))
        lines += [f"## benchmarks/{text(path.name)}", ""]
        lines += [f"- date: {text(d.get('date', 'not recorded'))}",
                  f"- machine: {machine_line(d['machine']) if d.get('machine') else 'not recorded'}"]
        if d.get("load_average") is not None:
            lines += [f"- load average at the end (1, 5, 15 min): {', '.join(cell(x) for x in d['load_average'])}"]
        if d.get("command"):
            lines += [f"- command: `{d['command']}`"]
        if d.get("note"):
            lines += [f"- note: {text(d['note'])}"]
        lines += [""]
        meas = d.get("measurements")
        if isinstance(meas, dict):
            rows = []
            for k, m in meas.items():
                lb = m.get("load_average_before")
                rows.append([k, m.get("seconds"), m.get("first_line_s"), m.get("command") or m.get("source"), m.get("date"),
                             cell(lb[0]) if lb else None])
            lines += [table(["measurement", "seconds", "first line (s)", "command", "date", "1-min load before"], rows), ""]
        if isinstance(d.get("ratios"), dict):
            lines += [table(["ratio", "value"], list(d["ratios"].items())), ""]
        if isinstance(d.get("entries"), dict):
            lines += speed_section(d)
    return "\n".join(lines).rstrip() + "\n"


def index_page(names: list[str]) -> str:
    return "\n".join([
        "# Results",
        "",
        "One page per validation report and sweep committed in `validation/`, and one for performance "
        "(`benchmarks/`). The pages are written from those files when the documentation is built.",
        "",
        "```{toctree}",
        ":maxdepth: 1",
        "",
        *names,
        "```",
        "",
    ])


def _write(path: Path, content: str) -> None:
    if not path.exists() or path.read_text(encoding="utf-8") != content:
        path.write_text(content, encoding="utf-8")


def write_results(folder) -> list[Path]:
    """Write the results pages (and copy their figures) into ``folder``; unchanged pages are
    not rewritten. Returns the pages' paths, the index first."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    pages = {slug(f): report_page(f, out) for f in report_folders()}
    if (SWEEP / "analysis.json").exists():
        pages[SWEEP.name] = sweep_page(out)
    pages["performance"] = performance_page(out)
    written = [out / "index.md"]
    _write(written[0], index_page(list(pages)))
    for name, content in pages.items():
        _write(out / f"{name}.md", content)
        written.append(out / f"{name}.md")
    return written


if __name__ == "__main__":  # pragma: no cover
    for p in write_results(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "results"):
        print(p)
