"""The ``spherepde`` command line: wires configuration to library calls, nothing more.

Exit status: 0 success, 1 run failed, 2 bad input (config, files, options; nothing is
written), 130 interrupted (a checkpoint was written; ``spherepde resume`` continues).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import logging
import sys
from importlib import resources
from pathlib import Path

from spherepde import __version__

log = logging.getLogger("spherepde")

EXAMPLES_PACKAGE = "spherepde.examples"


def _examples() -> dict[str, str]:
    files = resources.files(EXAMPLES_PACKAGE)
    return {p.name[:-5]: p.read_text() for p in files.iterdir() if p.name.endswith(".toml") and not p.name.startswith("sweep-")}


def _example_path(name: str) -> Path:
    ex = _examples()
    if name not in ex:
        raise SystemExit(_fail(f"unknown example {name!r}; available: {', '.join(sorted(ex))}"))
    return Path(str(resources.files(EXAMPLES_PACKAGE) / f"{name}.toml"))


def _fail(msg: str, code: int = 2) -> int:
    print(f"spherepde: error: {msg}", file=sys.stderr)
    return code


def _setup_logging(verbose: int, quiet: bool) -> None:
    level = logging.WARNING if quiet else (logging.DEBUG if verbose > 1 else logging.INFO if verbose == 1 else logging.WARNING)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
    log.handlers[:] = [handler]
    log.setLevel(min(level, logging.INFO))
    handler.setLevel(level)
    log.propagate = False


def _load(args):
    from spherepde.config import default_config, load_config, parse_override

    overrides = dict(parse_override(s) for s in (args.set or []))
    if getattr(args, "example", None):
        return load_config(_example_path(args.example), overrides)
    if args.config:
        return load_config(args.config, overrides)
    return default_config().with_overrides(overrides) if overrides else default_config()


# ------------------------------------------------------------------ subcommands
def cmd_run(args) -> int:
    from spherepde import runner
    from spherepde.config import ConfigError

    try:
        cfg = _load(args)
    except ConfigError as exc:
        return _fail(str(exc))
    progress = False if args.quiet else None
    try:
        if cfg.montecarlo.paths > 1:
            res = runner.monte_carlo(cfg, out=args.out, force=args.force, progress=progress)
        else:
            res = runner.run(cfg, out=args.out, force=args.force, progress=progress)
    except runner.RunExistsError as exc:
        return _fail(str(exc))
    except (FileNotFoundError, ValueError) as exc:
        return _fail(str(exc))
    except KeyboardInterrupt:
        return _fail("aborted by a second Ctrl-C; resume from the last checkpoint with 'spherepde resume RUN_DIR'", 130)
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
    from spherepde import runner

    try:
        res = runner.resume(args.run_dir, progress=False if args.quiet else None)
    except (FileNotFoundError, ValueError) as exc:
        return _fail(str(exc))
    except KeyboardInterrupt:
        return _fail("aborted by a second Ctrl-C; resume again from the last checkpoint with 'spherepde resume RUN_DIR'", 130)
    return _report(res, args.quiet)


def cmd_config(args) -> int:
    from spherepde.config import ConfigError, config_to_toml, default_config

    if args.list_examples:
        for name, text in sorted(_examples().items()):
            first = text.splitlines()[0].lstrip("# ") if text else ""
            print(f"{name:32s} {first}")
        return 0
    if args.example and not args.check:
        print(_example_path(args.example).read_text(), end="")
        return 0
    try:
        cfg = _load(args) if (args.config or args.set or args.example) else default_config()
    except ConfigError as exc:
        return _fail(str(exc))
    if args.check:
        print("configuration is valid")
        return 0
    print(config_to_toml(cfg, comments=True), end="")
    return 0


def cmd_mesh(args) -> int:
    from spherepde.mesh import MeshError, icosphere, read_mesh

    try:
        if args.file:
            mesh = read_mesh(args.file)
        else:
            mesh = icosphere(args.level)
    except (MeshError, FileNotFoundError) as exc:
        return _fail(str(exc))
    q = mesh.quality()
    if args.json:
        print(json.dumps(q, indent=2))
    else:
        print(f"mesh {q['name']}")
        print(f"  cells      {q['n_cells']}")
        print(f"  edges      {q['n_edges']}")
        print(f"  vertices   {q['n_vertices']}")
        print(f"  area total {q['area_total']:.15f}  (4 pi = 12.566370614359172)")
        print(f"  area ratio {q['area_ratio']:.4f}  (min/max)")
        print(f"  h          {q['h']:.6f}  (max great-circle edge length)")
    if args.out:
        from spherepde.mesh import write_mesh

        write_mesh(mesh, args.out)
        print(f"written {args.out}", file=sys.stderr)
    return 0


# ------------------------------------------------------------------------ parser
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="spherepde",
        description="Mean-field multi-head attention (the Transformer PDE) on the sphere: finite-volume density solver and particle reference solver.",
        epilog="Examples:\n  spherepde run                      # the built-in default run\n  spherepde config --list-examples\n  spherepde run --example paper-ou-particles --set model.H=10\n  spherepde mesh 16 --json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"spherepde {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    def common(sp):
        sp.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)")
        sp.add_argument("-q", "--quiet", action="store_true", help="no progress bar, warnings only")

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

    c = sub.add_parser("config", help="show the commented default configuration, examples, or check a file")
    c.add_argument("config", nargs="?", help="a TOML file to show resolved (or check with --check)")
    c.add_argument("--show", action="store_true", help="print the fully commented configuration (default action)")
    c.add_argument("--example", help="print a shipped example config")
    c.add_argument("--list-examples", action="store_true", help="list the shipped example configs")
    c.add_argument("--check", action="store_true", help="validate only")
    c.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a key")
    common(c)
    c.set_defaults(func=cmd_config)

    m = sub.add_parser("mesh", help="mesh quality summary (icosphere level or a mesh file)")
    m.add_argument("level", nargs="?", type=int, default=16, help="icosphere subdivision n (20 n^2 cells; default 16)")
    m.add_argument("--file", help="read a mesh file instead (.npz/.vtp/.vtk/.ply/.obj/.stl)")
    m.add_argument("--json", action="store_true", help="print JSON")
    m.add_argument("--out", help="also write the mesh to this file")
    common(m)
    m.set_defaults(func=cmd_mesh)

    _register_optional(sub, common)
    return p


def _register_optional(sub, common) -> None:
    """Subcommands contributed by optional modules (rendering, validation, ...)."""
    for modname in ("spherepde.viz_cli", "spherepde.validate_cli", "spherepde.sweep_cli", "spherepde.bench_cli"):
        if importlib.util.find_spec(modname) is None:
            continue
        importlib.import_module(modname).register(sub, common)


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 0
    saved = (list(log.handlers), log.level, log.propagate)
    _setup_logging(args.verbose, args.quiet)
    try:
        return int(args.func(args) or 0)
    finally:  # leave the library logger as we found it (main() may be called in-process)
        log.handlers[:], log.level, log.propagate = saved


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
