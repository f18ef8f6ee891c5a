"""Folder locks, and JSON for what runs and sweeps write.

Every file a run or a sweep writes goes through the atomic writers of
:mod:`spherepde._base` (:func:`~spherepde._base.atomic_write_text`,
:func:`~spherepde._base.atomic_savez`, :func:`~spherepde._base.atomic_file`).

:class:`FolderLock` is a lock file in a folder naming the process that holds it
(pid and host); a second process on the same folder is refused, and a lock left by a
dead process on this host is taken over. Checking and writing the lock is one step
(under an exclusive ``flock`` of the folder), so of two processes starting at the same
instant exactly one holds it. A lock written on another host (whose processes cannot be
checked from here), or a lock file that is not a spherepde lock, counts as held unless
the caller forces it.
"""

from __future__ import annotations

import json
import math
import os
import socket
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from spherepde._base import atomic_write_text

__all__ = ["FolderLock", "jsonable", "pid_alive"]


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


#: The largest pid any POSIX system hands out (a C ``int``); a lock naming a larger one is not a lock.
MAX_PID = 2**31 - 1


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists on this host."""
    if not 0 < pid <= MAX_PID:
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:
        return True
    return True


@contextmanager
def _folder_mutex(folder: Path):
    """An exclusive ``flock`` of the folder itself while checking and writing its lock file
    (no-op where flock is unavailable, e.g. Windows or some network file systems, or where
    the folder cannot be opened: the write that follows then fails and says why)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:  # pragma: no cover - a file system without flock
            pass
        yield
    finally:
        os.close(fd)  # releases the flock


class FolderLock:
    """``folder/name``: refuses a second process writing into the same folder at the same time.

    ``error(message)`` is raised when another live process on this host holds the lock, when
    the lock was written on another host, or when the lock file is not a lock (unless
    ``acquire(force=True)``: then only a live process on this host refuses); ``what`` names
    the holder in that message (e.g. "sweep", "run"), ``force_hint`` says how to force it.
    """

    def __init__(self, folder, name: str, *, error=RuntimeError, what: str = "process", force_hint: str | None = None):
        self.path = Path(folder) / name
        self.error = error
        self.what = what
        self.force_hint = force_hint
        self.held = False

    def _read(self):
        """The lock file's content: a ``{"pid", "host"}`` dict, None (no lock file) or a string saying what is wrong."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            return f"cannot be read ({exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__})"
        try:
            other = json.loads(text)
        except ValueError:
            return "is not a spherepde lock (not JSON)"
        pid = other.get("pid") if isinstance(other, dict) else None
        if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0 or not isinstance(other.get("host"), str):
            return "is not a spherepde lock (expected {\"pid\": ..., \"host\": ...})"
        if pid > MAX_PID:
            return f"is not a spherepde lock (pid {pid} is not a possible process id)"
        return other

    def holder(self, *, force: bool = False) -> dict | None:
        """Who holds the lock (``{"pid", "host"}``), else None. A live process on this host holds
        it; so does a process on another host, and an unreadable lock file holds it too
        (``{"problem": ...}``), unless ``force``. A dead process on this host does not."""
        if not (self.path.is_file() or self.path.is_symlink()):
            return None
        other = self._read()
        if other is None:
            return None
        if isinstance(other, str):
            return None if force else {"problem": other}
        pid = other["pid"]
        if other["host"] != socket.gethostname():
            return None if force else other
        if pid != os.getpid() and pid_alive(pid):
            return other
        return None

    def mutex(self):
        """Hold while looking at the folder: no other process takes or writes the lock meanwhile."""
        return _folder_mutex(self.path.parent)

    def refusal(self, other: dict) -> str:
        """The one-line message refusing a lock held by ``other`` (from :meth:`holder`)."""
        folder = self.path.parent
        hint = f", or pass {self.force_hint} to take the lock over" if self.force_hint else ""
        if "problem" in other:
            return (f"the lock file {self.path} {other['problem']}; remove it if no {self.what} is writing into {folder}{hint}")
        if other.get("host") != socket.gethostname():
            return (f"another {self.what} (pid {other['pid']} on host {other['host']}) holds the lock on {folder}; "
                    f"wait for it to finish, or if no process on {other['host']} writes into it remove {self.path}{hint}")
        return (f"another {self.what} (pid {other['pid']}) is writing into {folder}; "
                f"wait for it to finish or stop it (remove {self.path} if it is stale)")

    def acquire(self, *, force: bool = False) -> None:
        """Take the lock, or raise ``error`` naming its holder; the check and the write are one atomic step."""
        with _folder_mutex(self.path.parent):
            other = self.holder(force=force)
            if other is not None:
                raise self.error(self.refusal(other))
            if self.path.is_symlink() or (self.path.exists() and not self.path.is_file()):
                raise self.error(f"{self.path} is not a lock file; remove it if no {self.what} is writing into {self.path.parent}")
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
