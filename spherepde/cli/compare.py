"""The ``compare`` subcommand (picked up by :func:`spherepde.cli.main.build_parser`).

    spherepde compare RUN [RUN ...] [--out DIR] [--force] [--format png pdf svg]

Compares runs driven by one weight path (a mesh run and a particle run branched from its
``weights.npz``, two meshes, two integrators; one ``run.solver = "both"`` run compares its
mesh with its tokens): checks the weight paths, aligns the records in time, prints the
table of differences and writes figures, ``differences.md``/``.csv`` and ``compare.json``
(:func:`spherepde.viz.compare.compare_runs`). Exit status: 0 success, 2 bad input
(nothing written).
"""

from __future__ import annotations

import argparse

from spherepde.cli.common import fail


def cmd_compare(args) -> int:
    from spherepde.runs.compare import CompareError
    from spherepde.runs.runfolder import NotARunFolderError
    from spherepde.viz.compare import compare_runs

    try:
        res = compare_runs(args.runs, args.out, force=args.force, formats=args.format, dpi=args.dpi)
    except (CompareError, NotARunFolderError, FileNotFoundError, NotADirectoryError) as exc:
        return fail(str(exc))
    except (OSError, ValueError) as exc:  # unreadable diagnostics, an output folder that cannot be written
        return fail(f"{exc}")
    if not args.quiet:  # a weight-path warning went to the log (stderr) already
        print(res.markdown)
        print(f"written to {res.out}:")
        for p in res.files:
            print(f"  {p}")
    return 0


def register(sub, common) -> None:
    """Add ``compare`` to the ``spherepde`` subcommand parser."""
    c = sub.add_parser(
        "compare",
        help="compare runs on one weight path (mesh vs particles, two meshes, two integrators): figures and a table of differences",
        description="Compare run folders driven by the same weight path: checks that their weights.npz agree (refuses otherwise "
        "unless --force), aligns their records in time (the first run's record times; others interpolated linearly where "
        "their times differ), and writes overlay figures, a table of time-averaged and maximum differences per column "
        "(absolute and relative; differences.md, differences.csv) and compare.json. The first run is the reference. "
        "One run.solver = 'both' run alone compares its mesh with its tokens.",
        epilog="example (a particle run on a mesh run's weight path, then the comparison):\n"
        "  spherepde run --example paper-ou-mesh --set solver.T=2 --out runs/mesh\n"
        "  spherepde run --example paper-ou-particles --set solver.T=2 --out runs/tokens \\\n"
        "      --set weights.process=file --set weights.path_file=runs/mesh/weights.npz \\\n"
        "      --set weights.dt=0.01 --set output.record_dt=0.1\n"
        "  spherepde compare runs/mesh runs/tokens      # -> runs/compare-mesh-vs-tokens/",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    c.add_argument("runs", nargs="+", metavar="RUN", help="run folders (or Monte-Carlo folders); the first is the reference")
    c.add_argument("--out", help="output folder (default: compare-<name1>-vs-<name2> next to the first run, in its parent folder)")
    c.add_argument("--force", action="store_true", help="compare even when the weight paths differ (with a warning), and write into a non-empty --out")
    c.add_argument("--format", nargs="+", default=["png"], choices=["png", "pdf", "svg"], help="figure formats (default png)")
    c.add_argument("--dpi", type=int, default=150, help="resolution of PNG output (default 150)")
    common(c)
    c.set_defaults(func=cmd_compare)
