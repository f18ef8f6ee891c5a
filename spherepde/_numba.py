"""The one place that sets spherepde's Numba flags.

Every compiled kernel in the package is declared with :func:`njit` from this module,
so caching, threading and floating-point flags are chosen once:

* ``cache=True`` -- compiled machine code is stored next to the sources, so a second
  process starts instantly;
* ``fastmath=False`` (IEEE semantics, so results are reproducible and comparable with
  the NumPy references to round-off) on every kernel except the SIMD attention kernels
  (:mod:`spherepde.attention.direct`, :mod:`spherepde.attention.harmonic`), which pass
  :data:`SIMD_FASTMATH`: the single flag ``reassoc``, so that LLVM may reassociate and
  vectorise their sums; their result still does not depend on the thread count. No kernel
  uses ``contract`` (fused multiply-add): whether LLVM fuses may differ between a kernel
  compiled in the running process and the same kernel loaded from the on-disk cache, and
  the first run after an install must be bit for bit a later run (tests/cli/test_first_run.py);
* ``parallel`` only where a kernel is a per-target gather (no shared writes), so the
  result does not depend on the number of threads.
"""

from __future__ import annotations

import contextlib

import numba

__all__ = ["njit", "prange", "SIMD_FASTMATH", "serial_below"]

#: Work (loop iterations x inner size) below which a parallel kernel runs on one thread:
#: waking the thread pool costs more than such a loop (and much more on a loaded machine).
SERIAL_WORK = 50_000

prange = numba.prange


#: The only fastmath flags used in the package (SIMD reductions of the attention sums); no
#: "contract": see the module docstring.
SIMD_FASTMATH = frozenset({"reassoc"})


def njit(func=None, *, parallel: bool = False, fastmath=False):
    """Compile ``func`` with the package-wide Numba flags (``cache=True``, no fastmath
    unless :data:`SIMD_FASTMATH` is passed)."""
    if fastmath not in (False, SIMD_FASTMATH):
        raise ValueError("use fastmath=False or fastmath=SIMD_FASTMATH")

    def wrap(f):
        return numba.njit(cache=True, fastmath=set(fastmath) if fastmath else False, nogil=True, parallel=parallel)(f)

    if func is None:
        return wrap
    return wrap(func)


@contextlib.contextmanager
def serial_below(work: float):
    """Run the parallel kernels inside on one thread when ``work`` < :data:`SERIAL_WORK`.

    The kernels' results do not depend on the thread count (module docstring), so this
    changes only their speed."""
    if work >= SERIAL_WORK:
        yield
        return
    n = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        yield
    finally:
        numba.set_num_threads(n)
