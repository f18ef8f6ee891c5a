"""Where users wait (issue 36): the long runs, each timed against the approach it replaced.

``spherepde bench --speed [--quick] [--json] [--out FILE]`` runs three entries, each of which
times the previous approach and today's side by side **in one process** (so a loaded machine
slows both alike) and measures the accuracy the ratio is held at:

* ``h100`` -- the paper's density path at H = 100 (:func:`spherepde.studies.bench_h100.bench_h100`):
  windows of Euler steps on the OU weight grid along the path, per-step times, the whole T = 20 path projected
  from them, and the largest relative differences of ``energy`` and ``G2`` over the windows' records;
* ``implicit`` -- the OU clustering probe with the implicit step and point masses
  (:func:`spherepde.studies.bench_implicit.bench_implicit`): wall time per unit of simulated time,
  velocity evaluations, and the largest relative differences of ``energy``, ``G2``, ``n_clusters``;
* ``tokens`` -- the metastable token run (:func:`spherepde.studies.bench_tokens.bench_tokens`):
  fixed Heun steps against the error-controlled pair, steps and wall time, and the merge times'
  largest relative difference.

Every entry is summarised by :func:`summary` as one row: what was compared, the ratio (and of
what), the accuracy measured and the bound it is held to, and whether the issue's target is met
(``None`` -- "n/a" -- for ``--quick``, which runs shortened problems that do not measure the targets).
The report (:func:`run_speed`) is JSON-serialisable; ``--out benchmarks/speed.json`` is the file
the documentation's performance page is written from (``docs/_ext/spherepde_results.py``).
"""

from __future__ import annotations

import datetime as _dt
import importlib
import os
import platform
import shlex
import time

#: Entries: key, what it measures, ``module:function`` (each ``function(quick) -> dict``).
ENTRIES = (
    ("h100", "the paper's H = 100 density path (T = 20, level 32, order 2)", "spherepde.studies.bench_h100:bench_h100"),
    ("implicit", "the OU clustering probe (implicit step, point masses, level 16, H = 4)", "spherepde.studies.bench_implicit:bench_implicit"),
    ("tokens", "the metastable token run (400 tokens, T = 1,500)", "spherepde.studies.bench_tokens:bench_tokens"),
)

#: The command that runs the report (the committed one adds ``--out`` :data:`REPORT_FILE`); the report records the
#: command as run (:func:`run_speed`).
COMMAND = "spherepde bench --speed"
REPORT_FILE = "benchmarks/speed.json"


def _call(spec: str, quick: bool) -> dict:
    module, func = spec.split(":")
    return getattr(importlib.import_module(module), func)(quick)


def _h100(r: dict) -> dict:
    """The lead route (``synthesis``: what ``spherepde run --example paper-ou-mesh`` does) against ``old``; the other routes
    stay in ``detail``."""
    lead = r.get("lead_route", "new_mass")
    o, n = r["routes"]["old"], r["routes"][lead]
    starts = ", ".join(f"{t:g}" for t in r.get("window_starts_t", [r["window_start_t"]]))
    window = f"windows of {r['window_steps']} steps from t = {starts}, {r['workload']}"
    return {"ratio": n["speedup_vs_old"], "ratio_of": f"the T = 20 path (2,000 steps) projected from the median seconds per step in {window}",
            "target_ratio": r["target_speedup"],
            "accuracy": {"energy_max_rel_diff": n["energy_max_rel_diff_vs_old"], "G2_max_rel_diff": n["G2_max_rel_diff_vs_old"]},
            "accuracy_bound": f"{r['accuracy']:g} relative at each of the windows' {r['records']} records",
            "old": f"a-priori degree, per-cell moments, summation_tol 1e-10: T = 20 path projected {o['projected_T20_s']:.0f} s "
                   f"({o['s_per_step']:.3g} s per step)",
            "new": f"{lead} route, summation_tol {n['summation_tol']:g}, diagnostics_tol {n['diagnostics_tol']:g} (the example's): "
                   f"projected {n['projected_T20_s']:.0f} s ({n['s_per_step']:.3g} s per step)",
            "target_met": bool(n["accuracy_held"] and n["speedup_vs_old"] >= r["target_speedup"])}


def _implicit(r: dict) -> dict:
    o, n = r["old"], r["new"]

    def side(x):
        return f"{x['wall_s']:.3g} s, {x['steps']} steps, {x['evaluations']} evaluations, {x['full_cell_sums']} full cell sums"

    after = r.get("ratio_after_collapse")
    return {"ratio": r["ratio_per_unit_time"], "ratio_of": f"wall time per unit of simulated time, T = {r['T']:g}"
            + (f" ({after:.3g}x after the collapse at t = {r['collapsed_from_t']:g})" if after else ""),
            "target_ratio": r["target_ratio"], "accuracy": {f"{k}_max_rel_diff": v for k, v in r["max_rel_diff"].items()},
            "accuracy_bound": f"{r['tolerance']:g} relative at each of {r['records']} records",
            "old": "previous route (sparse LU, cell sums for every source): " + side(o), "new": side(n) + _ceiling(r),
            "target_met": r["target_met"]}


def _ceiling(r: dict) -> str:
    """The new route's records before the collapse in words, with the ratio the whole probe cannot exceed."""
    b = r.get("before_collapse")
    if not b or not b.get("records") or b.get("ceiling_ratio") is None:
        return ""
    return (f"; {b['new_s']:.3g} s of it before the collapse ({b['records']} records, {b['new_evaluations']} evaluations, each summing "
            f"all cells, {1e3 * b['s_per_cell_sum']:.3g} ms per cell sum): at most {b['ceiling_ratio']:.3g}x for the whole probe "
            "however little the steps after the collapse cost")


def _tokens(r: dict) -> dict:
    f, a = r["fixed"], r["adaptive"]

    def side(x, what):
        return (f"{what}: {x['steps']:,} steps, {x['evaluations']:,} evaluations, {x['wall_s']:.3g} s, "
                f"merges at t = {', '.join(f'{m:.6g}' for m in x['merge_times']) or 'none'}")

    return {"ratio": r["step_ratio"], "ratio_of": f"steps to T = {r['T']:g} ({r['evaluation_ratio']:.3g}x fewer evaluations, "
            f"{r['wall_ratio']:.3g}x less wall time)",
            "target_ratio": r["target"]["step_ratio"],
            "accuracy": {"merge_times_max_rel_diff": r["merge_max_rel_diff"], "energy_max_rel_diff": r["energy_max_rel_diff"]},
            "accuracy_bound": f"merge times within {r['target']['merge_max_rel_diff']:g} relative (the same number of merges)",
            "old": side(f, f"fixed Heun, dt = {f['dt']:g}"), "new": side(a, f"rk23, tol {r['tol']:g}"),
            "target_met": r["target_met"] if isinstance(r["target_met"], bool) else None}


def _generic(r: dict) -> dict:
    return {k: r.get(k) for k in ("ratio", "ratio_of", "target_ratio", "accuracy", "accuracy_bound", "old", "new", "target_met")}


_SUMMARIES = {"h100": _h100, "implicit": _implicit, "tokens": _tokens}


def summary(key: str, r: dict) -> dict:
    """One row of the report for entry ``key`` from its full result ``r`` (kept whole under ``detail``):
    ``ratio`` (how many times faster today's approach is) and what it is the ratio ``of``, the
    ``accuracy`` figures and the ``accuracy_bound`` they are held to, the previous (``old``) and today's
    (``new``) measurements in words, and ``target_met`` (the issue's target: ratio and accuracy)."""
    return _SUMMARIES.get(key, _generic)(r)


def run_speed(quick: bool = False, progress=None, only=None, out=None) -> dict:
    """Every entry of :data:`ENTRIES` (or those named in ``only``), as a JSON-serialisable dict; its ``command`` is
    the CLI command that makes it (``out``: the file the CLI writes it to, None: none)."""
    from spherepde.studies.benchmarks import _machine

    say = progress or (lambda msg: None)
    keys = [k for k, _, _ in ENTRIES]
    unknown = sorted(set(only or ()) - set(keys))
    if unknown:
        raise ValueError(f"unknown speed entr{'y' if len(unknown) == 1 else 'ies'} {', '.join(unknown)}; choose from {', '.join(keys)}")
    picked = [k for k in keys if not only or k in only]
    command = COMMAND + (f" --out {shlex.quote(str(out))}" if out else "") + (" --quick" if quick else "") + ("" if picked == keys else " --only " + " ".join(picked))
    report = {"command": command, "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
              "machine": {**_machine(), "platform": platform.platform()}, "quick": bool(quick), "entries": {}}
    t0 = time.perf_counter()
    for key, what, spec in ENTRIES:
        if key not in picked:
            continue
        say(f"{key}: {what} ...")
        s = time.perf_counter()
        r = _call(spec, quick)
        row = {"what": what, **summary(key, r), "wall_s": time.perf_counter() - s, "detail": r}
        if quick:
            row["target_met"] = None
        report["entries"][key] = row
    report["wall_time_s"] = time.perf_counter() - t0
    report["load_average"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    return report
