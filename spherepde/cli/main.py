"""The ``spherepde`` command line: wires configuration to library calls, nothing more.

Exit status: 0 success, 1 run failed, 2 bad input (config, files, options; nothing is
written), 130 interrupted (a checkpoint was written; ``spherepde resume`` continues).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys
import threading

from spherepde._base import __version__
from spherepde.runs import interrupt as _interrupt

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
class _Parser(argparse.ArgumentParser):
    """An option that cannot be parsed is one line ('spherepde compare: error: ...', and where
    to read the options), exit 2 -- no usage block before it (subcommand parsers are this class too)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {' '.join(str(message).split())} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
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
SUBCOMMAND_MODULES = ("run", "config", "mesh", "viz", "compare", "export", "validate", "sweep", "steady", "bench")


def _register_optional(sub, common) -> None:
    """Each module in :data:`SUBCOMMAND_MODULES` adds its subcommands through ``register``."""
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(f"spherepde.cli.{name}").register(sub, common)


def _inside_llvm_callback(frame) -> bool:
    """Whether Python code runs inside a callback from LLVM (Numba's object cache): an
    exception raised there is printed and swallowed by ctypes, so the Ctrl-C would be lost."""
    while frame is not None:
        if str(frame.f_globals.get("__name__", "")).startswith("llvmlite."):
            return True
        frame = frame.f_back
    return False


class _InterruptOnce:
    """The SIGINT handler while :func:`main` runs: the first Ctrl-C raises KeyboardInterrupt
    (the run loop's own guard turns it into a checkpoint); another within a second is ignored
    while the first is handled (a summary or checkpoint being written), so a double Ctrl-C
    exits 130 with one line too. A Ctrl-C that lands inside an LLVM callback is delivered
    again 20 ms later. Once main is done, the previous handler is back (in the command line:
    Ctrl-C is ignored while the process exits with main's status)."""

    def __init__(self, previous):
        self.previous = previous
        self.active = True

    def __call__(self, signum, frame):
        if not self.active:
            if self.previous is _interrupt.interrupted_while_starting:  # main is returning its status: ignored
                return None
            if callable(self.previous):
                return self.previous(signum, frame)
            raise KeyboardInterrupt
        if _interrupt.recent():  # the first one (here or in the run loop) is being handled
            return
        if _inside_llvm_callback(frame):
            timer = threading.Timer(0.02, os.kill, (os.getpid(), signal.SIGINT))
            timer.daemon = True
            timer.start()
            return
        _interrupt.note()
        raise KeyboardInterrupt


class _LostInterrupts:
    """``sys.unraisablehook`` while :func:`main` runs: a Ctrl-C raised inside a callback Python
    cannot propagate from (a weakref callback, a ``__del__``) would be printed as 'Exception
    ignored' and lost; it is remembered instead, and main exits 130 once the command returns."""

    def __init__(self, previous):
        self.previous = previous
        self.lost = False

    def __call__(self, unraisable):
        if isinstance(unraisable.exc_value, KeyboardInterrupt) or unraisable.exc_type is KeyboardInterrupt:
            self.lost = True
            return
        self.previous(unraisable)


def _quiet_unraisable(unraisable) -> None:
    """After a Ctrl-C: objects left half-built by the interrupt may fail in ``__del__`` as the
    process exits; that noise is not printed (the one line 'interrupted' said what happened)."""


def main(argv=None) -> int:
    _interrupt.started()
    try:
        handler = _InterruptOnce(signal.getsignal(signal.SIGINT))
        signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread: Ctrl-C is the caller's
        handler = None
    hook = _LostInterrupts(sys.unraisablehook) if handler is not None else None
    if hook is not None:
        sys.unraisablehook = hook
    status = None
    try:
        status = _main(argv)
        if hook is not None and hook.lost and status == 0:
            raise KeyboardInterrupt  # a Ctrl-C swallowed by a callback: still an interrupt
        return status
    except KeyboardInterrupt:
        print("spherepde: error: interrupted", file=sys.stderr)
        status = 130
        return 130
    finally:
        if hook is not None and sys.unraisablehook is hook:
            # the command line exits next: after a Ctrl-C its exit stays quiet; in-process, the caller's hook is back
            sys.unraisablehook = _quiet_unraisable if status == 130 and _interrupt.is_command_line() else hook.previous
        if handler is not None:
            handler.active = False
            if signal.getsignal(signal.SIGINT) is handler:
                # the command line is about to exit with main's status: a Ctrl-C now would kill it
                # with -2 (Python resets handlers to the default while it shuts down), so it is ignored
                previous = signal.SIG_IGN if handler.previous is _interrupt.interrupted_while_starting else handler.previous
                signal.signal(signal.SIGINT, previous if previous is not None else signal.default_int_handler)


def _main(argv) -> int:
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
