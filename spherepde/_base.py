"""The bottom layer of spherepde: what every other layer may import, importing nothing of spherepde.

The package version, :class:`ConfigError` (a configuration problem, raised from any layer
with a one-line message naming the key), and the memory a run may use on this machine:
:func:`available_memory` (psutil, /proc/meminfo or sysconf, lowered to a cgroup limit;
``SPHEREPDE_MAX_MEMORY=32G`` overrides it) with :func:`format_bytes` to name sizes.
"""

from __future__ import annotations

import math
from pathlib import Path

__all__ = ["__version__", "ConfigError", "format_bytes", "FALLBACK_MEMORY", "available_memory"]

__version__ = "0.1.0"


class ConfigError(ValueError):
    """A configuration problem; the message names the key and what to do."""


def format_bytes(n: float) -> str:
    """``1.5 GiB``; an overflowing estimate reads ``more than 1e300 bytes``."""
    if not math.isfinite(n) or n > 1e300:
        return "more than 1e300 bytes"
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)} bytes"


def _parse_size(text: str) -> int:
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}.get(t[-1:], 1)
    number = t[:-1] if t[-1:] in "KMGT" and t else t
    value = float(number) * mult
    if not math.isfinite(value) or value <= 0:
        raise ValueError(text)
    return int(value)


#: Memory assumed when the machine does not tell (no psutil, no /proc, no sysconf).
FALLBACK_MEMORY = 16 * 2**30


def available_memory() -> tuple[int, str]:
    """(bytes a run may use, where that number comes from).

    ``SPHEREPDE_MAX_MEMORY`` (e.g. ``8G``) wins; otherwise the memory available now
    (psutil, else /proc/meminfo MemAvailable, else the physical memory from sysconf),
    capped by a cgroup (container, batch job) limit; else :data:`FALLBACK_MEMORY`.
    """
    import os

    env = os.environ.get("SPHEREPDE_MAX_MEMORY", "").strip()
    if env:
        try:
            return _parse_size(env), "SPHEREPDE_MAX_MEMORY"
        except (ValueError, IndexError):
            raise ConfigError(f"SPHEREPDE_MAX_MEMORY: {env!r} is not a size; use e.g. 8G, 512M or a number of bytes") from None
    avail, source = None, "available"
    try:
        import psutil

        avail = int(psutil.virtual_memory().available)
    except Exception:  # psutil missing or unusable: ask the kernel
        try:
            for line in Path("/proc/meminfo").read_text().splitlines():
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
                    break
        except (OSError, ValueError, IndexError):
            pass
    if avail is None:
        try:
            avail, source = int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")), "installed"
        except (AttributeError, ValueError, OSError):
            return FALLBACK_MEMORY, "assumed (the machine's memory is unknown)"
    try:  # a cgroup v2 limit (containers, batch jobs) below the machine's memory
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            used = int(Path("/sys/fs/cgroup/memory.current").read_text().strip())
            if int(limit) - used < avail:
                avail, source = max(int(limit) - used, 0), "available (cgroup limit)"
    except (OSError, ValueError):
        pass
    return avail, source
