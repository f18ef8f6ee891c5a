"""The ``sweep`` subcommand (picked up by :func:`spherepde.cli.main.build_parser`).

    spherepde sweep SWEEP.toml [--workers N | --scheduler ADDRESS | --serial]
                    [--out DIR] [--force] [--skip-failed] [--dry-run] [--quiet]
    spherepde sweep --example sweep-paper-G2-vs-H [...]

Exit status as in :mod:`spherepde.cli.main`: 0 every run completed, 1 some runs failed
(listed; the others ran), 2 bad input (sweep file, configurations, options, a different
sweep in OUT, Dask missing; nothing was run), 130 interrupted (run the same command
again to continue).
"""

from __future__ import annotations

import argparse
import math
import sys

from spherepde.cli.common import fail


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def cmd_sweep(args) -> int:
    from spherepde.runs import sweep as sw_mod
    from spherepde.runs.config import ConfigError

    if bool(args.sweep_file) == bool(args.example):
        return fail("give a sweep file or --example NAME (shipped sweeps: " + ", ".join(sorted(sw_mod.plan._shipped("sweep"))) + ")")
    if args.workers is not None and args.workers < 1:
        return fail(f"--workers: expected a positive number of worker processes, got {args.workers}")
    try:
        source = sw_mod.example_sweep_path(args.example) if args.example else args.sweep_file
        if args.dry_run:
            return _dry_run(sw_mod.load_sweep(source), args)
        res = sw_mod.run_sweep(
            source, args.out, workers=args.workers, scheduler=args.scheduler, serial=args.serial,
            progress=False if args.quiet else None, force=args.force, retry_failed=not args.skip_failed,
        )
    except ConfigError as exc:  # SweepError is a ConfigError: sweep file, configurations, OUT, Dask
        return fail(str(exc))
    except OSError as exc:  # the sweep folder could not be written (a full disk): what was written is kept
        where = exc.filename or args.out or "(the sweep's out)"
        return fail(f"cannot write {where}: {exc.strerror or exc}; free some space (or fix the permissions) and run the same command again to continue", 1)
    except KeyboardInterrupt:
        return fail("interrupted; run the same command again to continue (completed runs are kept, checkpointed ones resume)", 130)
    if res.status == "interrupted":
        print(f"sweep interrupted; run the same command again to continue ({res.folder})", file=sys.stderr)
        return 130
    if not args.quiet:
        _report(res)
    for r in res.failed:
        print(f"spherepde: run {r['index']} ({r['folder']}) failed: {r['error']}", file=sys.stderr)
    return 1 if res.failed else 0


def _dry_run(sw, args) -> int:
    print(f"sweep {sw.source}: {len(sw.runs)} runs over {', '.join(sw.axes)} (base: {sw.base})")
    for r in sw.runs:
        print(f"  runs/{r.name}")
    if sw.analysis:
        a = sw.analysis
        print(f"analysis: time average of {a['y']} over t >= {a['t_min']:g} against {a['x']} (log-log power-law fit, {a['bootstrap']} bootstrap resamples)")
    print("sweep file is valid; nothing was run")
    return 0


def _report(res) -> None:
    c = res.counts
    done = sum(1 for r in res.table if r["status"] == "completed")
    print(f"sweep {res.status}: {done}/{len(res.table)} runs completed ({c.get('run', 0)} run, {c.get('resumed', 0)} resumed, "
          f"{c.get('skipped', 0)} already complete, {c.get('failed', 0)} failed) in {res.wall_time_s:.1f} s")
    print(f"results: {res.results_csv}")
    a = res.analysis
    if a and "error" not in a:
        from spherepde.runs.sweep.analysis import interval_note

        ci = a.get("b_ci95")
        se = a.get("b_stderr")
        se_text = f" ± {_fmt(se)}" if isinstance(se, (int, float)) and math.isfinite(se) else ""
        ci_text = f", 95% bootstrap CI [{ci[0]:.4g}, {ci[1]:.4g}]" if ci else ""
        note = a.get("interval_note", interval_note(a))
        print(f"analysis: {a['y']} ~ {_fmt(a['a'])} * {a['x']}^b, b = {_fmt(a['b'])}{se_text}{ci_text}" + (f" ({note})" if note else ""))
        print(f"          {res.folder / 'analysis.png'}, {res.folder / 'analysis.json'}")


def register(sub, common) -> None:
    """Add ``sweep`` to the ``spherepde`` subcommand parser."""
    s = sub.add_parser(
        "sweep",
        help="parameter sweeps / Monte-Carlo ensembles: many runs of one config, on Dask or in-process",
        description="Run every combination of a sweep file (a base run config, fixed overrides, [grid] and/or [list] axes) "
        "as its own run folder OUT/runs/<index>-<key=value...>, one Dask task each, and gather OUT/results.csv "
        "(and OUT/analysis.png/.pdf/.json with an [analysis] table). Running it again skips completed runs, resumes "
        "checkpointed ones and retries failed ones.",
        epilog="Sweep file:\n"
        '  base_example = "paper-ou-particles"   # or: base = "run.toml" (relative to the sweep file)\n'
        "  [set]\n"
        '  "solver.T" = 20.0\n'
        "  [grid]                                # cartesian product; [list]: zipped, equal lengths\n"
        '  "model.H" = [1, 10, 100]\n'
        '  "weights.seed" = [0, 1, 2, 3, 4]\n'
        "  [analysis]                            # optional: time-averaged y against x, log-log fit\n"
        '  x = "model.H"\n'
        '  y = "G2"\n'
        "  t_min = 2.5\n\n"
        "Dask: the default is a local cluster with one single-threaded worker process per core (--workers N to choose);\n"
        "--scheduler tcp://HOST:8786 uses a running cluster ('dask scheduler', 'dask worker tcp://HOST:8786'); the run\n"
        "folders must be on a file system the workers share. Install Dask with: pip install -e \".[distributed]\" in a clone "
        "(pip install \"spherepde[distributed]\" from PyPI); without Dask the default runs serially",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    s.add_argument("sweep_file", nargs="?", help="the sweep file (TOML)")
    s.add_argument("--example", metavar="NAME", help="run a shipped sweep file (e.g. sweep-paper-G2-vs-H)")
    mode = s.add_mutually_exclusive_group()
    mode.add_argument("--workers", type=int, metavar="N", help="local Dask cluster of N single-threaded worker processes (default: one per CPU core)")
    mode.add_argument("--scheduler", metavar="ADDRESS", help="use a running Dask scheduler, e.g. tcp://head-node:8786")
    mode.add_argument("--serial", action="store_true", help="run in this process, one run after another, without Dask")
    s.add_argument("--out", help="sweep folder (default: the sweep file's 'out', else sweeps/<sweep file name>)")
    s.add_argument("--force", action="store_true", help="discard the runs already in the sweep folder (also a different sweep's) and start again")
    s.add_argument("--skip-failed", action="store_true", help="do not retry runs that failed last time")
    s.add_argument("--dry-run", action="store_true", help="validate the sweep file and list its runs; run nothing")
    common(s)
    s.set_defaults(func=cmd_sweep)

