"""Where users wait (issue 36): the long runs, each timed against the approach it replaced.

``spherepde bench --speed [--quick] [--json] [--out FILE]`` runs three entries, each of which
times the previous approach and today's side by side **in one process** (so a loaded machine
slows both alike) and measures the accuracy the ratio is held at:

* ``h100`` -- the paper's density path at H = 100 (:func:`spherepde.studies.bench_h100.bench_h100`):
  a window of Euler steps on the OU weight grid, per-step times, the whole T = 20 path projected
  from them, and the largest relative differences of ``energy`` and ``G2`` over the window's records;
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
import time

#: Entries: key, what it measures, ``module:function`` (each ``function(quick) -> dict``).
ENTRIES = (
    ("h100", "the paper's H = 100 density path (T = 20, level 32, order 2)", "spherepde.studies.bench_h100:bench_h100"),
    ("implicit", "the OU clustering probe (implicit step, point masses, level 16, H = 4)", "spherepde.studies.bench_implicit:bench_implicit"),
    ("tokens", "the metastable token run (400 tokens, T = 1,500)", "spherepde.studies.bench_tokens:bench_tokens"),
)

#: The command that writes the committed report.
COMMAND = "spherepde bench --speed --out benchmarks/speed.json"


def _call(spec: str, quick: bool) -> dict:
    module, func = spec.split(":")
    return getattr(importlib.import_module(module), func)(quick)


def summary(key: str, r: dict) -> dict:
    """One row of the report for entry ``key`` from its full result ``r`` (the entry's own keys are
    kept under ``detail``): ``ratio`` (how many times faster today's approach is, of what), the
    ``accuracy`` figures with their ``bound`` and ``target_met``."""
    return {"ratio": r.get("ratio"), "ratio_of": r.get("ratio_of"), "target_ratio": r.get("target_ratio"),
            "accuracy": r.get("accuracy", {}), "accuracy_bound": r.get("accuracy_bound"),
            "old": r.get("old"), "new": r.get("new"), "target_met": r.get("target_met")}


def run_speed(quick: bool = False, progress=None, only=None) -> dict:
    """Every entry of :data:`ENTRIES` (or those named in ``only``), as a JSON-serialisable dict."""
    from spherepde.studies.benchmarks import _machine

    say = progress or (lambda msg: None)
    keys = [k for k, _, _ in ENTRIES]
    unknown = sorted(set(only or ()) - set(keys))
    if unknown:
        raise ValueError(f"unknown speed entr{'y' if len(unknown) == 1 else 'ies'} {', '.join(unknown)}; choose from {', '.join(keys)}")
    report = {"command": COMMAND + (" --quick" if quick else ""), "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
              "machine": _machine(), "quick": bool(quick), "entries": {}}
    t0 = time.perf_counter()
    for key, what, spec in ENTRIES:
        if only and key not in only:
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
