"""One progress bar for runs and sweeps, built on tqdm.

A :class:`ProgressBar` is a no-op when disabled (``-q``, or stderr not a terminal), so
callers never test for it; it writes to stderr only, leaving stdout to results.
"""

from __future__ import annotations

import sys

__all__ = ["ProgressBar"]


class ProgressBar:
    """A tqdm bar on stderr, or nothing when ``enabled`` is false.

    ``total`` and ``initial`` may be floats (simulated time) or integers (runs done).
    """

    def __init__(self, total, initial=0, *, enabled: bool = True, unit: str = "it", desc: str | None = None,
                 bar_format: str | None = None):
        self.bar = None
        if enabled:
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=initial, unit=unit, desc=desc, bar_format=bar_format,
                            file=sys.stderr, dynamic_ncols=True)

    def set(self, n, postfix: str | None = None) -> None:
        """Move the bar to ``n`` (e.g. the simulated time reached)."""
        if self.bar is not None:
            self.bar.n = n
            if postfix is not None:
                self.bar.set_postfix_str(postfix, refresh=False)
            self.bar.refresh()

    def advance(self, k=1) -> None:
        if self.bar is not None:
            self.bar.update(k)

    def postfix(self, text: str) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(text, refresh=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
