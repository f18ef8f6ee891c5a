"""The bottom layer of spherepde: what every other layer may import, importing nothing of spherepde.

The package version, :class:`ConfigError` (a configuration problem, raised from any layer
with a one-line message naming the key), and the memory a run may use on this machine:
:func:`available_memory` (psutil, /proc/meminfo or sysconf, lowered to a cgroup limit;
``SPHEREPDE_MAX_MEMORY=32G`` overrides it) with :func:`format_bytes` to name sizes.

Files, the one implementation of each for the whole package:

* :func:`atomic_file` (and :func:`atomic_write_text`, :func:`atomic_savez` on top of it): the
  data go to a temporary file ``.NAME.PID.tmp[SUFFIX]`` in the target's folder, are fsync'ed,
  and the temporary file is renamed over the target, so a reader (or a resumed run after a
  crash) sees the old file or the new one, never half of one; on an error the temporary file
  is removed and the target is left as it was.
* :func:`load_arrays`: ``np.load`` of a .npy/.npz file after every array header was checked:
  no Python objects (nothing is unpickled), no array whose header claims more bytes than the
  file holds or than the memory available (:func:`check_array_header`), before anything is
  allocated. Every problem is a ValueError naming the file (FileNotFoundError when missing).
"""

from __future__ import annotations

import math
import os
from contextlib import contextmanager
from pathlib import Path

__all__ = [
    "__version__",
    "ConfigError",
    "format_bytes",
    "one_line",
    "FALLBACK_MEMORY",
    "available_memory",
    "atomic_file",
    "atomic_savez",
    "atomic_write_text",
    "check_array_file",
    "check_array_header",
    "load_arrays",
    "read_array_header",
]

__version__ = "0.1.0"


class ConfigError(ValueError):
    """A configuration problem; the message names the key and what to do."""


def log_once(logger, seen: set, level: int, key, msg: str, *args) -> None:
    """Log ``msg % args`` on ``logger`` at ``level`` the first time ``key`` is added to ``seen``, at DEBUG after that."""
    if key in seen:
        logger.debug(msg, *args)
        return
    seen.add(key)
    logger.log(level, msg + " (logged once per process)", *args)


def one_line(exc: BaseException) -> str:
    """An exception's message on one line (whitespace runs joined), else its class name."""
    return " ".join(str(exc).split()) or type(exc).__name__


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


# ------------------------------------------------------------------------------ atomic writing
def _tmp_path(path: Path, suffix: str = "") -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.tmp{suffix}")


@contextmanager
def atomic_file(path, *, suffix: str = "", rotate_to=None):
    """Write ``path`` atomically: yields a temporary path in the same folder for the caller to
    write (by name; ``suffix`` is appended for writers that choose the format by extension,
    e.g. ``".vtp"``); when the block ends without error the file is fsync'ed and renamed over
    ``path`` (first renaming an existing ``path`` to ``rotate_to``, if given); on an error the
    temporary file is removed and ``path`` is untouched."""
    path = Path(path)
    tmp = _tmp_path(path, suffix)
    try:
        yield tmp
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        if rotate_to is not None and path.exists():
            path.replace(rotate_to)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write_text(path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (:func:`atomic_file`; newlines written as given)."""
    with atomic_file(path) as tmp, open(tmp, "w", newline="") as fh:
        fh.write(text)


def atomic_savez(path, *, rotate_to=None, **arrays) -> None:
    """``np.savez(path, **arrays)`` atomically (:func:`atomic_file`)."""
    import numpy as np

    with atomic_file(path, rotate_to=rotate_to) as tmp, open(tmp, "wb") as fh:
        np.savez(fh, **arrays)


# ------------------------------------------------------------------------- safe array reading
def read_array_header(fh):
    """(shape, dtype) from the header of an open .npy stream (None: a format version this
    NumPy cannot parse without reading the data). ValueError when it is no .npy header."""
    import numpy as np

    fmt = np.lib.format
    version = fmt.read_magic(fh)
    if version == (1, 0):
        shape, _, dtype = fmt.read_array_header_1_0(fh)
    elif version == (2, 0):
        shape, _, dtype = fmt.read_array_header_2_0(fh)
    else:
        return None
    return tuple(shape), np.dtype(dtype)


def check_array_header(where: str, shape: tuple, dtype, stored: int) -> None:
    """Refuse, before anything is allocated, an array of Python objects, or one whose header
    asks for more bytes than the file holds (``stored``; damaged or forged) or than the memory
    available. ValueError starting with ``where``."""
    if dtype.hasobject:
        raise ValueError(f"{where}: holds Python objects (dtype {dtype}), which are never loaded (nothing is unpickled); save a numeric array")
    nbytes = math.prod(int(s) for s in shape) * dtype.itemsize
    if nbytes > stored:
        raise ValueError(
            f"{where}: damaged: its header claims an array of shape {shape} ({format_bytes(nbytes)}) "
            f"but the file holds only {stored} bytes of data"
        )
    if nbytes > 2**28:
        limit, source = available_memory()
        if nbytes > limit:
            raise ValueError(f"{where}: the array of shape {shape} needs {format_bytes(nbytes)}, but {format_bytes(limit)} of memory is {source}")


def check_array_file(path, *, tolerant: bool = False) -> None:
    """:func:`check_array_header` for every array of the .npy file or .npz archive ``path``,
    reading headers only. A header that cannot be read is a ValueError naming the file, or,
    with ``tolerant``, ends the check (what could be read is checked; the rest is left to
    whoever reads the file)."""
    import zipfile

    path = Path(path)
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as zf:
                for info in zf.infolist():
                    if not info.filename.endswith(".npy"):
                        continue
                    name = info.filename[:-4]
                    with zf.open(info) as fh:
                        try:
                            header = read_array_header(fh)
                        except ValueError as exc:
                            raise _Unreadable(f"{path}: array {name!r} is not a NumPy array ({' '.join(str(exc).split())})") from None
                        if header is not None:
                            check_array_header(f"{path} (array {name!r})", *header, stored=info.file_size - fh.tell())
        else:
            with open(path, "rb") as fh:
                if fh.read(4) == b"PK\x03\x04":  # a zip archive whose end (the central directory) is missing
                    raise _Unreadable(f"{path}: not a complete .npz archive: truncated, damaged or another kind of file")
                fh.seek(0)
                try:
                    header = read_array_header(fh)
                except ValueError as exc:
                    raise _Unreadable(f"{path}: not a NumPy .npy/.npz array file ({' '.join(str(exc).split())})") from None
                if header is not None:
                    check_array_header(str(path), *header, stored=path.stat().st_size - fh.tell())
    except _Unreadable:
        if not tolerant:
            raise
    except (OSError, EOFError, zipfile.BadZipFile):
        if not tolerant:
            raise


class _Unreadable(ValueError):
    """A header that cannot be parsed (as opposed to one that is refused)."""


def load_arrays(path, *, mmap_mode=None):
    """``np.load(path, allow_pickle=False)`` of a .npy or .npz file after its headers were
    checked (:func:`check_array_header`: no pickles, no allocation a header merely claims).

    Returns an ndarray (.npy; memory-mapped with ``mmap_mode``) or an ``NpzFile`` (use it as a
    context manager). FileNotFoundError when the file is missing; every other problem
    (a folder, a damaged or forged file, a zip that is not an .npz) is a ValueError naming it.
    """
    import zipfile

    import numpy as np

    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{path} is a directory; give a .npy or .npz file")
    if not path.is_file():
        raise FileNotFoundError(f"file not found: {path}")
    try:
        check_array_file(path)
        return np.load(path, allow_pickle=False, mmap_mode=mmap_mode)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        msg = " ".join(str(exc).split())
        if str(path) in msg:
            raise ValueError(msg) from exc
        raise ValueError(f"{path}: not a readable NumPy .npy/.npz array file ({msg})") from exc
