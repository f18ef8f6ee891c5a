"""``spherepde validate``: run the validation studies (:mod:`spherepde.studies`) and write a report.

    spherepde validate [--smoke | --quick | --full] [--out DIR] [--only NAME ...] [--force] [--set STUDY.PARAM=VALUE ...]

The studies and the report are :func:`spherepde.studies.report.run_validation`;
this module only turns options into that call and the result into an exit status:
0 the studies ran and every solver check passed (paper claims not reproduced are findings,
listed in the report and in a one-line summary on stderr -- solver checks passed/total and
paper claims reproduced/total, counted apart), 3 a solver check failed (so a script or CI job
can tell), 1 a study raised an error (including a failed precondition; before 3), 2 bad
options or an existing non-empty output folder without ``--force`` (nothing is written), 130
interrupted (the studies that finished are in a partial report).
"""

from __future__ import annotations

import sys
from pathlib import Path

from spherepde.studies.report import DEFAULT_OUT, OutputExistsError, ValidationInterrupted, headline, run_validation, studies

#: Exit status when a solver check failed (the studies ran; 1 is a study that raised).
CHECK_FAILED = 3


def cmd_validate(args) -> int:
    from spherepde.runs.config import ConfigError, parse_override

    size = "smoke" if args.smoke else "full" if args.full else "quick"
    try:
        overrides: dict = {}
        for text in args.set or []:
            if "=" not in text or "." not in text.partition("=")[0]:
                raise ValueError(f"--set {text!r}: expected STUDY.PARAM=VALUE, e.g. --set 'paper_section6.regimes=[\"ou\"]'")
            key, value = parse_override(text)
            study, _, param = key.partition(".")
            overrides.setdefault(study, {})[param] = value
        only = args.only or (list(overrides) if overrides else None)
        report = run_validation(size, args.out, only, force=args.force, progress=not args.quiet, verbose=args.verbose > 0 and not args.quiet,
                                overrides=overrides)
    except ValidationInterrupted as exc:
        done = len(exc.report["studies"])
        print(f"spherepde: error: interrupted during {exc.report['meta']['interrupted']['during'] or 'the report'}; "
              f"a partial report of the {done} studies that finished is in {exc.out / 'report.md'}", file=sys.stderr)
        return 130
    except (ValueError, OutputExistsError, ConfigError) as exc:
        print(f"spherepde: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # the report could not be written (a full disk): nothing partial is kept
        print(f"spherepde: error: {exc}", file=sys.stderr)
        return 1
    out = Path(args.out)
    print(f"validation ({size}): {headline(report)}", file=sys.stderr)
    for name, msg in report["errors"].items():  # one line per broken study; the traceback is in report.json
        print(f"spherepde: error: {name}: {msg}", file=sys.stderr)
    if not args.quiet:
        print(out / "report.md")
    return 1 if report["errors"] else CHECK_FAILED if report["failed_checks"] else 0


def register(sub, common) -> None:
    """Add ``validate`` to the ``spherepde`` subcommand parser."""
    try:
        names = ", ".join(studies())
    except ImportError:  # pragma: no cover - validation package not installed
        names = "(validation package not found)"
    v = sub.add_parser(
        "validate",
        help="run the validation studies and write a Markdown/JSON report",
        description="Run spherepde's validation studies (" + names + ") and write OUT/report.md, OUT/report.json and "
        "OUT/figures/. Solver checks (must pass) and the paper's claims (reproduced or not, by their 95% intervals) are "
        "counted apart. The expected duration (an estimate from recorded runs) is printed first; Ctrl-C writes a partial "
        "report of the studies that finished (exit 130). Exit status 0 when the studies ran and every solver check passed "
        "(paper claims not reproduced are findings, listed in the report), 3 when a solver check failed, 1 when a study "
        "raised an error or failed a precondition, 2 on bad options or a non-empty OUT without --force.",
    )
    g = v.add_mutually_exclusive_group()
    g.add_argument("--smoke", action="store_true", help="seconds per study (what the test suite runs)")
    g.add_argument("--quick", action="store_true", help="a few minutes in all (default)")
    g.add_argument("--full", action="store_true", help="the complete studies (long)")
    v.add_argument("--out", default=DEFAULT_OUT, help=f"output folder (default: {DEFAULT_OUT}/); must be absent or empty unless --force")
    v.add_argument("--only", nargs="+", metavar="NAME", help="run only these studies")
    v.add_argument("--force", action="store_true", help="write into an existing non-empty output folder")
    v.add_argument("--set", action="append", metavar="STUDY.PARAM=VALUE",
                   help="change one parameter of a study's size (TOML value, e.g. --set 'paper_section6.regimes=[\"ou\"]'); "
                   "repeatable; without --only, runs just the studies named; recorded in the report")
    common(v)
    v.set_defaults(func=cmd_validate)
