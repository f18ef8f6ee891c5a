"""The ``spherepde`` command line: wires configuration to library calls, nothing more.

Exit status: 0 success, 1 run failed, 2 bad input (config, files, options; nothing is
written), 130 interrupted (a checkpoint was written; ``spherepde resume`` continues).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from spherepde import __version__

log = logging.getLogger("spherepde")


def _setup_logging(verbose: int, quiet: bool) -> None:
    level = logging.WARNING if quiet else (logging.DEBUG if verbose > 1 else logging.INFO if verbose == 1 else logging.WARNING)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
    log.handlers[:] = [handler]
    log.setLevel(min(level, logging.INFO))
    handler.setLevel(level)
    log.propagate = False


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

    _register_optional(sub, common)
    return p


#: One module per subcommand group, in the order ``spherepde --help`` lists them.
SUBCOMMAND_MODULES = ("run", "config", "mesh", "viz", "compare", "export", "validate", "sweep", "bench")


def _register_optional(sub, common) -> None:
    """Each module in :data:`SUBCOMMAND_MODULES` adds its subcommands through ``register``."""
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(f"spherepde.cli.{name}").register(sub, common)


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help(sys.stderr)
        print("spherepde: error: give a command, e.g. 'spherepde run' (see the list above)", file=sys.stderr)
        return 2
    saved = (list(log.handlers), log.level, log.propagate)
    _setup_logging(args.verbose, args.quiet)
    try:
        return int(args.func(args) or 0)
    finally:  # leave the library logger as we found it (main() may be called in-process)
        log.handlers[:], log.level, log.propagate = saved


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
