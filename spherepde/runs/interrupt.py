"""Ctrl-C in the ``spherepde`` command: at start-up, and twice in a row.

Imported first by ``spherepde/__init__.py`` (stdlib only). When the process is the command line (the
``spherepde`` console script or ``python -m spherepde``), a Ctrl-C before
:func:`spherepde.cli.main.main` takes over exits at once with status 130 and one line:
nothing has been written yet. A library import changes nothing.

:func:`note` records the time of a Ctrl-C taken by a handler (the run loop's guard, the
command line's), so that a second one a moment later is not taken for a new request while
the first is being handled.
"""

from __future__ import annotations

import os
import signal
import sys
import time

#: The one line printed for a Ctrl-C during start-up.
MESSAGE = b"spherepde: error: interrupted while starting; nothing was written\n"

#: A second Ctrl-C within this many seconds of the first is the same request (a double key press).
REPEAT_S = 1.0

_last: list[float] = []

#: Set once :func:`spherepde.cli.main.main` has taken over: from then on the start-up handler never
#: speaks (a run may have written files, so "nothing was written" would be false).
_started: list[bool] = []


def started() -> None:
    """The command has started: the start-up handler, if a signal still reaches it, ignores it."""
    _started[:] = [True]


def note() -> None:
    """A Ctrl-C (or SIGTERM) was taken now."""
    _last[:] = [time.monotonic()]


def recent(seconds: float = REPEAT_S) -> bool:
    """Whether a Ctrl-C was taken in the last ``seconds``."""
    return bool(_last) and time.monotonic() - _last[0] < seconds


def is_command_line() -> bool:
    """Whether this process is the ``spherepde`` command (console script or ``python -m spherepde``)."""
    name = os.path.basename(sys.argv[0]) if sys.argv else ""
    if name in ("spherepde", "spherepde.exe", "spherepde-script.py"):
        return True
    orig = list(getattr(sys, "orig_argv", []))
    return any(a == "-m" and b in ("spherepde", "spherepde.cli.main") for a, b in zip(orig, orig[1:])) or "-mspherepde" in orig


def interrupted_while_starting(signum, frame) -> None:  # pragma: no cover - runs in a subprocess
    if _started:  # main has taken over (and may be exiting with its own status): not a start-up interrupt
        return
    try:
        os.write(2, MESSAGE)
    finally:
        os._exit(130)


def install() -> None:
    if is_command_line():
        try:
            signal.signal(signal.SIGINT, interrupted_while_starting)
        except ValueError:  # not the main thread
            pass


install()
