"""Recompute every bootstrap interval of b (G^2 ~ H^b) that README.md, docs/model.md and the
READMEs under validation/ quote,
from the per-path data stored in the reports, with the one estimator
(:func:`spherepde.model.statistics.exponent_fit`; the sweep through
:func:`spherepde.runs.sweep.analysis.analyse`, which calls it). No solver runs.

    python validation/recompute_intervals.py          # table of the intervals
    python validation/recompute_intervals.py --check  # and whether each quote matches (exit 1 if not)

Resamples and seed: the study's own (``params["bootstrap"]``, seed 0; two paths per H
allowed, as the studies allow), the sweep's ``bootstrap`` and ``bootstrap_seed`` from its
analysis.json (three runs per point at least). ``QUOTES`` lists where each interval is quoted;
a quote matches when the recomputed values, rounded to the decimals the quote shows, equal it.
"""

from __future__ import annotations

import csv
import json
import re
import sys
from functools import cache
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


@cache
def _study(report: str, name: str) -> dict:
    return json.loads((HERE / report / "report.json").read_text())["studies"][name]["results"]


def _interval(H, per_H, resamples: int) -> dict:
    from spherepde.model.statistics import exponent_fit

    f = exponent_fit(H, per_H, resamples=resamples, seed=0, min_runs=2)
    return {"b": f["b"], "ci95": f["ci95"], "paths": [len(v) for v in per_H], "resamples": resamples}


def _ps6_particles(report: str, regime: str, key: str = "tavg") -> dict:
    r = _study(report, "paper_section6")
    d = r["particles"][regime]
    return _interval(d["H"], d[key], int(r["params"]["bootstrap"]))


def _ps6_mesh(report: str, regime: str, who: str) -> dict:
    r = _study(report, "paper_section6")
    f = r["mesh"]["fits"][regime]
    return _interval(f["H"], f[f"{who}_tavg"], int(r["params"]["bootstrap"]))


def _mesh_convergence(who: str) -> dict:
    r = _study("report-full/mesh_convergence", "mesh_convergence")
    e = r["exponent"]
    return _interval(e["H"], e[f"{who}_tavg"], int(r["params"]["bootstrap"]))


def _more_paths(who: str) -> dict:
    """validation/exponent-more-paths/analysis.json holds the merged per-path values (analyse.py)."""
    a = json.loads((HERE / "exponent-more-paths" / "analysis.json").read_text())
    from spherepde.studies.mesh_convergence import SIZES

    return _interval(a["H"], a[who]["per_path"], int(SIZES["full"]["bootstrap"]))


def _sweep() -> dict:
    from spherepde.runs.sweep.analysis import analyse

    folder = HERE / "sweep-paper-G2-vs-H"
    a = json.loads((folder / "analysis.json").read_text())
    with (folder / "results.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    res = analyse(rows, a["x"], a["y"], t_min=a["t_min"], bootstrap=int(a["bootstrap"]), seed=int(a["bootstrap_seed"]))
    return {"b": res["b"], "ci95": res["b_ci95"], "paths": [p["n"] for p in res["points"]], "resamples": res["bootstrap"]}


FULL, OU32, SHIFT32, QUICK = ("report-full/paper_section6", "report-full/paper_section6-ou-level32",
                              "report-full/paper_section6-osc-shift-level32", "report-quick")

#: name -> how to recompute it from stored data
INTERVALS = {
    "particles, OU (full, 20 paths per H)": lambda: _ps6_particles(FULL, "ou"),
    "particles, oscillating in-phase (full, 5 paths)": lambda: _ps6_particles(FULL, "osc-in-phase"),
    "particles, oscillating shift (full, 5 paths)": lambda: _ps6_particles(FULL, "osc-shift"),
    "sweep, OU particles (10 paths per H)": _sweep,
    "mesh level 32 order 2, OU (5 paths)": lambda: _ps6_mesh(OU32, "ou", "mesh"),
    "particles on the mesh's OU paths (5 paths)": lambda: _ps6_mesh(OU32, "ou", "particles"),
    "mesh level 16 order 1, OU (5 paths)": lambda: _ps6_mesh(FULL, "ou", "mesh"),
    "mesh level 16 order 1, in-phase (2 paths)": lambda: _ps6_mesh(FULL, "osc-in-phase", "mesh"),
    "particles on the mesh's in-phase paths (2 paths)": lambda: _ps6_mesh(FULL, "osc-in-phase", "particles"),
    "mesh level 16 order 1, shift (2 paths)": lambda: _ps6_mesh(FULL, "osc-shift", "mesh"),
    "mesh level 32 order 2, shift (2 paths)": lambda: _ps6_mesh(SHIFT32, "osc-shift", "mesh"),
    "particles on the mesh's shift paths (2 paths)": lambda: _ps6_mesh(SHIFT32, "osc-shift", "particles"),
    "mesh_convergence, level 32 (3 paths)": lambda: _mesh_convergence("mesh"),
    "mesh_convergence, 200 tokens (3 paths)": lambda: _mesh_convergence("particles"),
    "exponent-more-paths, level 32 (7/7/5 paths)": lambda: _more_paths("mesh"),
    "exponent-more-paths, 200 tokens (7/7/5 paths)": lambda: _more_paths("tokens"),
    "quick, particles shift (2 paths)": lambda: _ps6_particles(QUICK, "osc-shift"),
    "quick, mesh level 8 OU, H = 1, 10 (2 paths)": lambda: _ps6_mesh(QUICK, "ou", "mesh"),
}

#: (file, quoted text, interval): the text's first ``b [lo, hi]`` (or ``lo … hi``) is compared.
QUOTES = [
    ("README.md", "| −0.972 [−1.01, −0.932] |", "particles, OU (full, 20 paths per H)"),
    ("docs/guide/paper.md", "| −0.972 [−1.01, −0.932] |", "particles, OU (full, 20 paths per H)"),
    ("README.md", "| +0.006 [+0.00008, 0.012] |", "particles, oscillating in-phase (full, 5 paths)"),
    ("docs/guide/paper.md", "| +0.006 [+0.00008, 0.012] |", "particles, oscillating in-phase (full, 5 paths)"),
    ("docs/model.md", "| +0.006 [+0.00008, 0.012] |", "particles, oscillating in-phase (full, 5 paths)"),
    ("README.md", "| −1.06 [−1.08, −1.04] |", "particles, oscillating shift (full, 5 paths)"),
    ("docs/guide/paper.md", "| −1.06 [−1.08, −1.04] |", "particles, oscillating shift (full, 5 paths)"),
    ("docs/model.md", "| −1.06 [−1.08, −1.04] |", "particles, oscillating shift (full, 5 paths)"),
    ("docs/guide/paper.md", "b = −0.95 [−0.99, −0.91]", "sweep, OU particles (10 paths per H)"),
    ("docs/guide/sweeps.md", "−0.985 … −0.914", "sweep, OU particles (10 paths per H)"),
    ("README.md", "| −0.886 [−0.914, −0.860] |", "mesh level 32 order 2, OU (5 paths)"),
    ("docs/guide/paper.md", "| −0.886 [−0.914, −0.860] |", "mesh level 32 order 2, OU (5 paths)"),
    ("README.md", "| −0.925 [−0.988, −0.856] |", "particles on the mesh's OU paths (5 paths)"),
    ("docs/guide/paper.md", "| −0.925 [−0.988, −0.856] |", "particles on the mesh's OU paths (5 paths)"),
    ("docs/guide/paper.md", "| −0.870 [−0.901, −0.837] |", "mesh level 16 order 1, OU (5 paths)"),
    ("README.md", "| −0.0003 [−0.0012, 0.0007] |", "mesh level 16 order 1, in-phase (2 paths)"),
    ("docs/guide/paper.md", "| −0.0003 [−0.0012, 0.0007] |", "mesh level 16 order 1, in-phase (2 paths)"),
    ("docs/guide/paper.md", "| −0.014 [−0.017, −0.011] |", "particles on the mesh's in-phase paths (2 paths)"),
    ("README.md", "| −1.09 [−1.10, −1.08] |", "mesh level 32 order 2, shift (2 paths)"),
    ("docs/guide/paper.md", "| −1.09 [−1.10, −1.08] |", "mesh level 32 order 2, shift (2 paths)"),
    ("docs/guide/paper.md", "| −1.05 [−1.07, −1.03] |", "particles on the mesh's shift paths (2 paths)"),
    ("docs/guide/paper.md", "| −1.15 [−1.15, −1.14] |", "mesh level 16 order 1, shift (2 paths)"),
    ("docs/guide/validation.md", "| −0.89 [−0.94, −0.84] |", "mesh_convergence, level 32 (3 paths)"),
    ("docs/guide/validation.md", "| −0.98 [−1.01, −0.94] |", "mesh_convergence, 200 tokens (3 paths)"),
    ("docs/guide/validation.md", "−0.87 [−0.90, −0.84] on five other paths", "mesh level 16 order 1, OU (5 paths)"),
    ("docs/guide/validation.md", "b = −0.92 [−0.95, −0.89]", "exponent-more-paths, level 32 (7/7/5 paths)"),
    ("docs/guide/validation.md", "200 tokens give −0.98 [−1.01, −0.94]", "exponent-more-paths, 200 tokens (7/7/5 paths)"),
    ("docs/guide/validation.md", "(b = −0.90 [−0.94, −0.86])", "quick, particles shift (2 paths)"),
    ("docs/guide/validation.md", "(b = −0.63 [−0.79, −0.48])", "quick, mesh level 8 OU, H = 1, 10 (2 paths)"),
    ("docs/guide/validation.md", "b = −0.87 [−0.90, −0.84] pass", "mesh level 16 order 1, OU (5 paths)"),
    ("docs/guide/validation.md", "OU b = −0.97 [−1.01, −0.93]", "particles, OU (full, 20 paths per H)"),
    ("docs/guide/validation.md", "in-phase oscillating b = +0.006 [+0.00008, 0.012] misses", "particles, oscillating in-phase (full, 5 paths)"),
    ("docs/guide/validation.md", "OU b = −0.886 [−0.914, −0.860]", "mesh level 32 order 2, OU (5 paths)"),
    ("docs/guide/validation.md", "shift b = −1.09 [−1.10, −1.08]", "mesh level 32 order 2, shift (2 paths)"),
    ("docs/guide/validation.md", "b = −0.89 [−0.94, −0.84] (not reproduced)", "mesh_convergence, level 32 (3 paths)"),
    ("docs/guide/validation.md", "against −0.98 [−1.01, −0.94] for 200 tokens", "mesh_convergence, 200 tokens (3 paths)"),
    ("docs/model.md", "| −0.97 [−1.01, −0.93] |", "particles, OU (full, 20 paths per H)"),
    ("docs/model.md", "| +0.006 [+0.00008, 0.012] |", "particles, oscillating in-phase (full, 5 paths)"),
    ("docs/model.md", "| −1.06 [−1.08, −1.04] |", "particles, oscillating shift (full, 5 paths)"),
    ("docs/model.md", "| −0.886 [−0.914, −0.860] (level 16", "mesh level 32 order 2, OU (5 paths)"),
    ("docs/model.md", "(level 16, order 1: −0.87 [−0.90, −0.84])", "mesh level 16 order 1, OU (5 paths)"),
    ("docs/model.md", "| −0.93 [−0.99, −0.86] |", "particles on the mesh's OU paths (5 paths)"),
    ("docs/model.md", "| −1.09 [−1.10, −1.08] (level 16", "mesh level 32 order 2, shift (2 paths)"),
    ("docs/model.md", "is b = −0.89 [−0.94, −0.84]", "mesh_convergence, level 32 (3 paths)"),
    ("docs/model.md", "give −0.98 [−1.01, −0.94]", "mesh_convergence, 200 tokens (3 paths)"),
    ("validation/report-full/README.md", "b = −0.886 [−0.914, −0.860] on 5 path", "mesh level 32 order 2, OU (5 paths)"),
    ("validation/report-full/README.md", "exponent is −0.972 [−1.01, −0.932]", "particles, OU (full, 20 paths per H)"),
    ("validation/report-full/README.md", "b = −1.09 [−1.10, −1.08] on 2 path", "mesh level 32 order 2, shift (2 paths)"),
    ("validation/report-full/README.md", "the particles give −1.06 [−1.08, −1.04]", "particles, oscillating shift (full, 5 paths)"),
    ("validation/exponent-more-paths/README.md", "| −0.922 [−0.952, −0.887] |", "exponent-more-paths, level 32 (7/7/5 paths)"),
    ("validation/exponent-more-paths/README.md", "| −0.977 [−1.015, −0.936] |", "exponent-more-paths, 200 tokens (7/7/5 paths)"),
]

_N = r"([−+-]?\d+(?:\.\d+)?)"
_PAT = (re.compile(rf"(?:{_N}\s*)?\[{_N}, {_N}\]"), re.compile(rf"(){_N} … {_N}"))


def _parse(text: str) -> tuple[str | None, str, str]:
    """(b or None, lo, hi) of the first ``b [lo, hi]`` (or ``lo … hi``) in a quote."""
    for pat in _PAT:
        m = pat.search(text)
        if m:
            b, lo, hi = (x.replace("−", "-") if x else None for x in m.groups())
            return b, lo, hi
    raise ValueError(f"no interval in {text!r}")


def _matches(quoted: str, value: float) -> bool:
    decimals = len(quoted.split(".")[1]) if "." in quoted else 0
    return abs(round(value, decimals) - float(quoted)) < 0.5 * 10.0 ** -decimals


@cache
def recompute() -> dict:
    """name -> {"b", "ci95": [lo, hi], "paths", "resamples"} for every interval in :data:`INTERVALS`."""
    return {name: f() for name, f in INTERVALS.items()}


def check(root: Path = ROOT) -> list[str]:
    """One line per quote in :data:`QUOTES` that is missing from its file or does not match."""
    res = recompute()
    bad = []
    for file, text, name in QUOTES:
        if text not in (root / file).read_text():
            bad.append(f"{file}: quote {text!r} not found")
            continue
        b, lo, hi = _parse(text)
        want = [(lo, res[name]["ci95"][0]), (hi, res[name]["ci95"][1])]
        if b is not None:
            want.insert(0, (b, res[name]["b"]))
        for q, v in want:
            if v is None or not _matches(q, v):
                r = res[name]
                bad.append(f"{file}: {text!r} ({name}) vs recomputed b = {r['b']:.4g} [{r['ci95'][0]:.4g}, {r['ci95'][1]:.4g}]")
                break
    return bad


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    for name, r in recompute().items():
        lo, hi = r["ci95"]
        print(f"{name}: b = {r['b']:.4g} [{lo:.4g}, {hi:.4g}] ({r['resamples']} resamples, seed 0, paths per H {r['paths']})")
    if "--check" in argv:
        bad = check()
        for line in bad:
            print("MISMATCH", line)
        print(f"{len(QUOTES) - len(bad)}/{len(QUOTES)} quotes match")
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
