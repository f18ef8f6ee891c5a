"""Writing files without losing them: atomic writes and folder locks.

Every file a run or a sweep writes goes through :func:`atomic_write_text` or
:func:`atomic_savez`: the data go to a temporary file in the same folder, are flushed
and fsync'ed, and the temporary file is renamed over the target, so a reader (or a
resumed run after a crash) sees either the old file or the new one, never half of one.

:class:`FolderLock` is a lock file in a folder naming the process that holds it
(pid and host); a second process on the same folder is refused, and a lock left by a
dead process on this host is taken over.
"""

from __future__ import annotations

import json
import math
import os
import socket
from pathlib import Path

import numpy as np

__all__ = ["FolderLock", "atomic_savez", "atomic_write_text", "jsonable", "pid_alive"]


def _tmp_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def atomic_write_text(path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (temporary file, fsync, rename)."""
    path = Path(path)
    tmp = _tmp_path(path)
    try:
        with open(tmp, "w", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_savez(path, **arrays) -> None:
    """``np.savez(path, **arrays)`` atomically (temporary file, fsync, rename)."""
    path = Path(path)
    tmp = _tmp_path(path)
    try:
        with open(tmp, "wb") as fh:
            np.savez(fh, **arrays)
            fh.flush()
            os.fsync(fh.fileno())
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def jsonable(obj):
    """``obj`` made JSON-serialisable: NumPy scalars and arrays to Python, non-finite floats
    to None (JSON has no NaN), paths to strings, dict keys to strings; recursively."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return jsonable(obj.tolist())
    if isinstance(obj, (np.floating, float)):
        v = float(obj)
        return v if math.isfinite(v) else None
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, Path):
        return str(obj)
    return obj


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class FolderLock:
    """``folder/name``: refuses a second process writing into the same folder at the same time.

    ``error(message)`` is raised when another live process on this host holds the lock;
    ``what`` names the holder in that message (e.g. "sweep", "run").
    """

    def __init__(self, folder, name: str, *, error=RuntimeError, what: str = "process"):
        self.path = Path(folder) / name
        self.error = error
        self.what = what
        self.held = False

    def holder(self) -> dict | None:
        """The live process holding the lock on this host (``{"pid", "host"}``), else None."""
        if not self.path.is_file():
            return None
        try:
            other = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        pid = other.get("pid") if isinstance(other, dict) else None
        if other.get("host") == socket.gethostname() and isinstance(pid, int) and pid != os.getpid() and pid_alive(pid):
            return other
        return None

    def acquire(self) -> None:
        other = self.holder()
        if other is not None:
            raise self.error(
                f"another {self.what} (pid {other['pid']}) is writing into {self.path.parent}; "
                f"wait for it to finish or stop it (remove {self.path} if it is stale)"
            )
        atomic_write_text(self.path, json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))
        self.held = True

    def release(self) -> None:
        if self.held:
            self.path.unlink(missing_ok=True)
            self.held = False

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()
