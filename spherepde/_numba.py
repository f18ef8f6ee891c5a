"""The one place that sets spherepde's Numba flags.

Every compiled kernel in the package is declared with :func:`njit` from this module,
so caching, threading and floating-point flags are chosen once:

* ``cache=True`` -- compiled machine code is stored next to the sources, so a second
  process starts instantly;
* ``fastmath=False`` -- IEEE semantics, so results are reproducible and comparable
  with the NumPy references to round-off;
* ``parallel`` only where a kernel is a per-target gather (no shared writes), so the
  result does not depend on the number of threads.
"""

from __future__ import annotations

import numba

__all__ = ["njit", "prange"]

prange = numba.prange


def njit(func=None, *, parallel: bool = False):
    """Compile ``func`` with the package-wide Numba flags (``cache=True``, no fastmath)."""

    def wrap(f):
        return numba.njit(cache=True, fastmath=False, nogil=True, parallel=parallel)(f)

    if func is None:
        return wrap
    return wrap(func)
