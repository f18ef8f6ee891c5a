"""``spherepde run`` and ``spherepde resume``: a configuration to a run folder, and on from its checkpoint."""

from __future__ import annotations

import json
import sys

from spherepde.cli.common import fail, load_args_config


def cmd_run(args) -> int:
    from spherepde.runs import runner
    from spherepde.runs.config import ConfigError

    try:
        cfg = load_args_config(args)
    except ConfigError as exc:
        return fail(str(exc))
    progress = False if args.quiet else None
    try:
        if cfg.montecarlo.paths > 1:
            res = runner.monte_carlo(cfg, out=args.out, force=args.force, progress=progress)
        else:
            res = runner.run(cfg, out=args.out, force=args.force, progress=progress)
    except runner.RunExistsError as exc:
        return fail(str(exc))
    except (FileNotFoundError, ValueError) as exc:
        return fail(str(exc))
    except KeyboardInterrupt:
        return fail("aborted by a second Ctrl-C; resume from the last checkpoint with 'spherepde resume RUN_DIR'", 130)
    return _report(res, args.quiet)


def _report(res, quiet: bool) -> int:
    if res.status == "interrupted":
        print(f"interrupted; checkpoint written. Continue with: spherepde resume {res.folder}", file=sys.stderr)
        return 130
    if not quiet:
        summary = json.loads((res.folder / "summary.json").read_text())
        fin = summary.get("final_mean", summary.get("final", {}))
        keys = [k for k in ("t", "energy", "G2", "edi_paper", "edi_exact", "mean_resultant", "mass", "rho_min") if k in fin]
        print(f"run {summary['status']}: {res.folder}")
        if "wall_time_s" in summary:
            print(f"wall time: {summary['wall_time_s']:.1f} s")
        for k in keys:
            v = fin[k]
            print(f"  {k:15s} {v:.6g}" if v is not None else f"  {k:15s} undefined")
    return 0


def cmd_resume(args) -> int:
    from spherepde.runs import runner

    try:
        res = runner.resume(args.run_dir, progress=False if args.quiet else None)
    except (FileNotFoundError, ValueError) as exc:
        return fail(str(exc))
    except KeyboardInterrupt:
        return fail("aborted by a second Ctrl-C; resume again from the last checkpoint with 'spherepde resume RUN_DIR'", 130)
    return _report(res, args.quiet)


def register(sub, common) -> None:
    r = sub.add_parser("run", help="run a simulation from a TOML config (default: the built-in configuration)")
    r.add_argument("config", nargs="?", help="TOML configuration file (see 'spherepde config --show')")
    r.add_argument("--example", help="run a shipped example config (see 'spherepde config --list-examples')")
    r.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a key, e.g. --set solver.T=2 (repeatable)")
    r.add_argument("--out", help="run folder (default: <run.out>/<run.name>)")
    r.add_argument("--force", action="store_true", help="overwrite an existing run folder")
    common(r)
    r.set_defaults(func=cmd_run)

    rs = sub.add_parser("resume", help="continue an interrupted run from its last checkpoint")
    rs.add_argument("run_dir")
    common(rs)
    rs.set_defaults(func=cmd_resume)
