"""A run folder on disk: its layout, its marker and lock, and writing into it safely.

A run folder holds ``config.toml``, ``summary.json``, ``diagnostics.csv``, ``weights.npz``,
``snapshots/`` (and ``snapshots.npz`` at the end), ``mesh.npz`` and ``vtk/`` for mesh runs,
``checkpoint.npz`` / ``checkpoint.prev.npz``, ``run.log``, the marker ``.spherepde-run``
(written at creation, with the resolved configuration: ``--force`` replaces only folders
that carry it, and ``resume`` refuses a config.toml edited since) and, while a process
writes into it, the lock ``run.lock``. Every file is written atomically; a full disk
raises an OSError naming the file, before VTK is ever reached.
"""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import shutil
import socket
import stat
import tomllib
import zipfile
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from spherepde._base import __version__, atomic_savez, atomic_write_text, load_arrays
from spherepde.runs.config import Config, config_to_toml
from spherepde.runs.files import FolderLock

log = logging.getLogger(__name__)

__all__ = ["MARKER", "LOCK_FILE", "VTK_RESERVE_BYTES", "RunExistsError", "RunLockedError", "RunFolderError"]


#: Marker file written into every run folder (and Monte-Carlo folder) when it is created;
#: ``force`` replaces only folders that carry it (or empty ones).
MARKER = ".spherepde-run"


#: Lock file of a run folder while a process writes into it.
LOCK_FILE = "run.lock"


#: Free space kept in reserve when writing a VTK snapshot (VTK's writers do not survive a full disk).
VTK_RESERVE_BYTES = 1 << 20


class RunExistsError(FileExistsError):
    """The run folder exists already (use --force to overwrite a run folder, or resume it)."""


class RunLockedError(RunExistsError):
    """Another live process is writing into the run folder."""


class RunFolderError(ValueError):
    """The run folder cannot be used: it cannot be created or written, or it is damaged (nothing was written)."""


# ------------------------------------------------------------------- the run loop
class _RunFolder:
    def __init__(self, folder: Path):
        self.folder = folder
        self.csv = folder / "diagnostics.csv"
        self.snapdir = folder / "snapshots"
        self.vtkdir = folder / "vtk"
        self.last_checkpoint_t: float | None = None

    def checkpoint_paths(self):
        return self.folder / "checkpoint.npz", self.folder / "checkpoint.prev.npz"

    def write_checkpoint(self, state: dict, meta: dict) -> None:
        cur, prev = self.checkpoint_paths()
        arrays = {"state_" + k: np.asarray(v) for k, v in state.items()}
        arrays["meta"] = np.array(json.dumps(meta))
        try:
            atomic_savez(cur, rotate_to=prev, **arrays)
        except OSError as exc:  # e.g. a full disk: the previous checkpoints stay as they were
            if exc.filename is None:
                exc.filename = str(cur)
            raise
        self.last_checkpoint_t = meta.get("t")

    def read_checkpoint(self) -> tuple[dict, dict]:
        errors, first = [], ""
        cur, prev = self.checkpoint_paths()
        for p in (cur, prev):
            if not p.exists():
                continue
            try:
                with load_arrays(p) as z:
                    meta = json.loads(str(z["meta"]))
                    state = {k[6:]: np.array(z[k]) for k in z.files if k.startswith("state_")}
                if not isinstance(meta, dict):
                    raise ValueError("the checkpoint's meta data is not a table")
                check_state_values(state, meta)
                if errors:  # said only when the previous one serves (else the error below names both)
                    log.warning("checkpoint %s is unreadable or damaged (%s); continuing from the previous one", cur, first)
                return state, meta
            except (zipfile.BadZipFile, OSError, ValueError, KeyError, EOFError) as exc:
                first = " ".join(str(exc).split()).removeprefix(f"{p}: ")
                errors.append(f"{p.name}: {first}")
        raise FileNotFoundError(
            f"no usable checkpoint in {self.folder}" + (f" ({'; '.join(errors)})" if errors else "")
            + f"; the run cannot be continued -- start it again with: spherepde run {self.folder / 'config.toml'} --out {self.folder} --force"
        )


def check_state_values(state: dict, meta: dict) -> None:
    """A checkpoint's state must be one a run can reach: finite, non-negative times, finite
    token positions, finite non-negative densities and point masses (ValueError naming the
    array otherwise; a resume from it would fail after rewriting the run's files)."""
    times = [("meta t", meta.get("t", 0.0))] + [(k, v) for k, v in state.items() if k == "t" or k.endswith("_t")]
    for name, value in times:
        try:
            value = float(value)
            ok = math.isfinite(value) and value >= 0
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise ValueError(f"its time {name} is {' '.join(repr(value).split())[:40]}, not a finite time >= 0")
    for k, v in state.items():
        leaf = k.rsplit("_", 1)[-1] if not k.endswith(("atom_x", "atom_m")) else k[-6:]
        if leaf not in ("rho", "X", "atom_x", "atom_m"):
            continue
        a = np.asarray(v)
        if a.dtype.kind not in "iuf":
            raise ValueError(f"its array {k} holds {a.dtype}, not numbers")
        bad = ~np.isfinite(a)
        if bad.any():
            raise ValueError(f"its array {k} holds {int(bad.sum())} NaN/inf value(s)")
        if leaf in ("rho", "atom_m") and (a < 0).any():
            raise ValueError(f"its density {k} holds {int((a < 0).sum())} negative value(s) (min {float(a.min()):.3e})")


@contextmanager
def _writing(path):
    """Name ``path`` in an OSError (e.g. a full disk) raised while writing it."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None:
            exc.filename = str(path)
        raise


def _state_scalars(state: dict) -> dict:
    out = {}
    for k, v in state.items():
        a = np.asarray(v)
        out[k] = a.item() if a.ndim == 0 else a
    return out


def _vtp_bytes(mesh) -> int:
    """A generous estimate of the size of one density .vtp file."""
    nv, nc = len(np.asarray(mesh.points)), int(mesh.n_cells)
    return 4096 + 3 * (24 * nv + 50 * nc)


def _check_free_space(folder: Path, need: int, target: Path) -> None:
    """Raise OSError(ENOSPC) before a write that would fill the disk (VTK's writers crash on a full disk)."""
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return
    if free < need + VTK_RESERVE_BYTES:
        raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} ({free} bytes free; a VTK snapshot needs about {need})", str(target))


def _write_snapshot(rf: _RunFolder, index: int, t: float, solver, mesh, *, tokens_vtk: bool = False) -> None:
    snap = solver.snapshot() if hasattr(solver, "snapshot") else {"rho": solver.rho.copy()}
    target = rf.snapdir / f"{index:06d}.npz"
    with _writing(target):
        rf.snapdir.mkdir(exist_ok=True)
        atomic_savez(target, t=np.float64(t), **snap)
    if mesh is not None and "rho" in snap and rf.vtkdir is not None:
        from spherepde.geometry.vtk import write_density_vtp

        vtp = rf.vtkdir / f"density_{index:06d}.vtp"
        with _writing(vtp):
            rf.vtkdir.mkdir(exist_ok=True)
            _check_free_space(rf.vtkdir, _vtp_bytes(mesh), vtp)
            write_density_vtp(mesh, snap["rho"], vtp, t=t)
    if tokens_vtk and "X" in snap and rf.vtkdir is not None:
        from spherepde.geometry.vtk import write_tokens_vtp

        vtp = rf.vtkdir / f"tokens_{index:06d}.vtp"
        with _writing(vtp):
            rf.vtkdir.mkdir(exist_ok=True)
            write_tokens_vtp(snap["X"], vtp, t=t)


def _finalise_snapshots(rf: _RunFolder, cfg: Config) -> None:
    files = sorted(rf.snapdir.glob("[0-9]*.npz"))
    if not files:
        return
    ts, vals = [], {}
    for f in files:
        with load_arrays(f) as z:
            ts.append(float(z["t"]))
            for k in z.files:
                if k != "t":
                    vals.setdefault(k, []).append(np.array(z[k]))
    with _writing(rf.folder / "snapshots.npz"):
        atomic_savez(rf.folder / "snapshots.npz", t=np.array(ts), **{k: np.stack(v) for k, v in vals.items()})
    if "rho" in vals and cfg.output.vtk:
        from spherepde.geometry.vtk import write_pvd

        with _writing(rf.folder / "density.pvd"):
            write_pvd(rf.folder / "density.pvd", [(t, f"vtk/density_{i:06d}.vtp") for i, t in enumerate(ts)])
    if "X" in vals and cfg.output.vtk and rf.vtkdir is not None:
        from spherepde.geometry.vtk import write_pvd

        entries = [(t, f"vtk/tokens_{f.stem}.vtp") for f, t in zip(files, ts) if (rf.vtkdir / f"tokens_{f.stem}.vtp").is_file()]
        if entries:
            with _writing(rf.folder / "tokens.pvd"):
                write_pvd(rf.folder / "tokens.pvd", entries)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


# ---------------------------------------------------------------- run folders
def _folder_lock(folder: Path) -> FolderLock:
    return FolderLock(folder, LOCK_FILE, error=RunLockedError, what="spherepde process", force_hint="--force")


def _acquire(lock: FolderLock, folder: Path, *, force: bool = False, new: bool = False) -> None:
    """Take the run folder's lock; an OSError (a full disk, permissions) is one RunFolderError
    line saying what to do: for a ``new`` run choose another --out, else free space or fix
    the permissions and resume again."""
    try:
        lock.acquire(force=force)
    except RunLockedError:
        raise
    except OSError as exc:
        if new:
            hint = "choose another --out"
        elif exc.errno in (errno.ENOSPC, errno.EDQUOT):
            hint = f"free some space, then run the same command again (spherepde resume {folder})"
        else:
            hint = f"make the folder writable, then run the same command again (spherepde resume {folder})"
        raise RunFolderError(f"cannot write into the run folder {folder}: {exc.strerror or exc}; {hint}") from exc


def _write_marker(folder: Path, cfg: Config, kind: str) -> None:
    info = {
        "spherepde": __version__,
        "kind": kind,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "config_toml": config_to_toml(cfg),
    }
    atomic_write_text(folder / MARKER, json.dumps(info, indent=1) + "\n")


def check_run_target(out, folder: Path, cfg: Config) -> None:
    """Where a new run may go (RunFolderError, nothing written): ``out`` not empty text, not
    inside another run folder (a Monte-Carlo folder holds only its own ``path-NNN`` runs), and
    not the folder a branch (``initial.kind = "run"``) starts from."""
    if out is not None and not str(out).strip():
        raise RunFolderError("--out is empty; give the run folder to write, e.g. --out runs/my-run")
    where = folder.absolute()
    for p in where.parents:
        try:
            if not (p / MARKER).is_file():
                continue
        except OSError:
            continue
        own_path = p == where.parent and where.name.startswith("path-") and where.name[5:].isdigit() and _marker_kind(p) == "monte-carlo"
        if not own_path:
            raise RunFolderError(f"cannot create the run folder {folder}: it lies inside the run folder {p}, "
                                 "which only its own run writes into; choose another --out")
        break
    if cfg.initial.kind == "run" and cfg.initial.run:
        try:
            same = Path(cfg.initial.run).resolve() == folder.resolve()
        except OSError:
            same = False
        if same:
            raise RunFolderError(f"initial.run {cfg.initial.run} is the run folder this run would write ({folder}): "
                                 "a branch cannot replace the run it starts from; choose another --out")


def _marker_kind(folder: Path):
    try:
        info = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return info.get("kind") if isinstance(info, dict) else None


def _check_out_path(folder: Path) -> bool:
    """Check that ``folder`` can be a run folder (refused: RunFolderError); True if it exists and is not empty."""
    try:
        try:
            mode = folder.stat().st_mode  # one look: another process may create the folder meanwhile
        except (FileNotFoundError, NotADirectoryError):
            mode = None
        if mode is not None and stat.S_ISDIR(mode):
            if not os.access(folder, os.W_OK | os.X_OK):
                raise RunFolderError(f"cannot write into the run folder {folder}: permission denied; choose another --out")
            return any(folder.iterdir())
        if mode is not None or folder.is_symlink():
            raise RunFolderError(f"cannot use {folder} as a run folder: it is a file, not a folder; choose another --out")
        p = folder.parent
        while not (p.exists() or p.is_symlink()) and p != p.parent:
            p = p.parent
        if not p.is_dir():
            raise RunFolderError(f"cannot create the run folder {folder}: {p} is a file, not a folder; choose another --out")
        if not os.access(p, os.W_OK | os.X_OK):
            raise RunFolderError(f"cannot create the run folder {folder}: {p} is not writable; choose another --out")
    except OSError as exc:  # e.g. a folder we may not list
        raise RunFolderError(f"cannot use {folder} as a run folder: {exc.strerror or exc}; choose another --out") from exc
    return False


#: The kinds of folder a marker names (``_write_marker``).
MARKER_KINDS = ("run", "monte-carlo")


def marker_problem(folder: Path) -> str | None:
    """None when ``folder`` carries a genuine spherepde marker (a JSON table naming the
    spherepde version and the folder's kind, as :func:`_write_marker` writes it), else what
    is wrong with it: ``--force`` deletes only folders whose marker parses."""
    path = folder / MARKER
    if path.is_symlink() or not path.is_file():
        return f"it has no {MARKER} marker"
    try:
        if path.stat().st_size > 1 << 22:
            raise ValueError("too large")
        info = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return f"its {MARKER} is not a spherepde marker (not readable JSON)"
    if not (isinstance(info, dict) and isinstance(info.get("spherepde"), str) and info.get("kind") in MARKER_KINDS):
        return f"its {MARKER} is not a spherepde marker (no spherepde version and folder kind)"
    return None


def _refuse_existing(folder: Path, force: bool, lock: FolderLock, what: str = "run folder") -> None:
    """An existing non-empty folder: refused unless ``force`` and it is an unlocked run folder
    (with a genuine marker: :func:`marker_problem`)."""
    with lock.mutex():  # a process creating the folder right now has either written its lock or nothing yet
        other = lock.holder(force=force)
        problem = marker_problem(folder)
    if other is not None:
        raise RunLockedError(lock.refusal(other))
    if problem is not None:
        raise RunExistsError(
            f"{folder} exists and is not a spherepde run folder ({problem}); choose another --out "
            "(--force replaces only run folders, so nothing was deleted)"
        )
    if not force:
        raise RunExistsError(f"{what} {folder} exists already; choose another name, pass --force (force=True in Python) to overwrite it, or 'spherepde resume {folder}' to continue it")


def _creator(folder: Path) -> str:
    """Which process created ``folder`` (from its marker), for a refusal message."""
    try:
        info = json.loads((folder / MARKER).read_text())
        return f" (pid {int(info['pid'])} on host {info['host']})"
    except (OSError, ValueError, TypeError, KeyError):
        return ""


def _clear_folder(folder: Path, keep: str) -> None:
    """Delete everything in ``folder`` except the file ``keep`` (symbolic links are removed, not followed)."""
    for p in folder.iterdir():
        if p.name == keep:
            continue
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()


def _create_folder(folder: Path, cfg: Config, lock: FolderLock, *, replace: bool, kind: str, force: bool = False) -> None:
    """Create (or replace) the folder, lock it and write the marker; RunFolderError when that is impossible.

    Atomic and exclusive: the lock is taken (check and write in one step) before anything
    else is written or deleted, and then the folder is checked again -- a folder that was
    new (or empty) must still hold nothing else, a folder to replace must still be a run
    folder -- so of two processes starting on one folder at the same instant, one refuses
    (RunLockedError / RunExistsError naming the other) and nothing of it is written."""
    created = False
    try:
        if not replace:
            folder.parent.mkdir(parents=True, exist_ok=True)
            try:
                folder.mkdir()
                created = True
            except FileExistsError:
                if not folder.is_dir():
                    raise RunFolderError(f"cannot use {folder} as a run folder: it is a file, not a folder; choose another --out") from None
    except OSError as exc:
        raise RunFolderError(f"cannot create the run folder {folder}: {exc.strerror or exc}; choose another --out") from exc
    try:
        _acquire(lock, folder, force=force, new=True)  # refuses (nothing written) when another process holds it
        if replace:
            if marker_problem(folder) is not None:
                raise RunExistsError(f"{folder} is no longer a spherepde run folder (another process changed it while this run was starting); choose another --out")
            try:
                _clear_folder(folder, LOCK_FILE)
            except OSError as exc:
                raise RunFolderError(f"cannot replace the run folder {folder}: {exc.strerror or exc}; choose another --out") from exc
        else:
            others = sorted(p.name for p in folder.iterdir() if p.name != LOCK_FILE)
            if others:
                raise RunExistsError(
                    f"another spherepde process{_creator(folder)} created {folder} while this run was starting; "
                    "choose another --out (nothing was written)"
                )
        try:
            _write_marker(folder, cfg, kind)
        except OSError as exc:
            raise RunFolderError(f"cannot write into the run folder {folder}: {exc.strerror or exc}; choose another --out") from exc
    except BaseException:
        lock.release()
        if created:
            try:
                folder.rmdir()
            except OSError:
                pass
        raise


def _damaged(folder: Path, what: str) -> str:
    return f"cannot resume {folder}: {what}; the run folder is damaged"


#: Files and folders of a run folder, checked to be of the right kind on resume.
_RUN_FILES = ("config.toml", "summary.json", "diagnostics.csv", "weights.npz", "mesh.npz", "checkpoint.npz", "checkpoint.prev.npz", "run.log", MARKER, LOCK_FILE)


_RUN_DIRS = ("snapshots", "vtk")


def _check_layout(folder: Path) -> None:
    for name in _RUN_FILES:
        p = folder / name
        if p.exists() and not p.is_file():
            raise RunFolderError(_damaged(folder, f"{name} is not a file"))
    for name in _RUN_DIRS:
        p = folder / name
        if p.exists() and not p.is_dir():
            raise RunFolderError(_damaged(folder, f"{name} is not a folder"))


def _config_changes(old: dict, new: dict) -> list[str]:
    out = []
    for sec in sorted(set(old) | set(new)):
        a, b = old.get(sec, {}), new.get(sec, {})
        if not isinstance(a, dict) or not isinstance(b, dict):
            if a != b:
                out.append(f"{sec}: {a!r} -> {b!r}")
            continue
        for key in sorted(set(a) | set(b)):
            if a.get(key, "(missing)") != b.get(key, "(missing)"):
                out.append(f"{sec}.{key}: {a.get(key, '(missing)')!r} -> {b.get(key, '(missing)')!r}")
    return out


def _check_config_unchanged(folder: Path) -> None:
    """Refuse a config.toml edited after the run started (compared with the copy in the marker)."""
    try:
        info = json.loads((folder / MARKER).read_text())
    except FileNotFoundError:  # a run folder of an older version: nothing to compare with
        return
    except (OSError, ValueError) as exc:
        log.warning("%s is unreadable (%s); cannot check that config.toml is unchanged", folder / MARKER, exc)
        return
    stored = info.get("config_toml") if isinstance(info, dict) else None
    if not isinstance(stored, str):
        return
    current = (folder / "config.toml").read_text()
    if current == stored:
        return
    try:
        changes = _config_changes(tomllib.loads(stored), tomllib.loads(current))
    except tomllib.TOMLDecodeError:
        return
    if changes:
        raise RunFolderError(
            f"cannot resume {folder}: config.toml was edited after the run started ({'; '.join(changes)}); put the values back, "
            f"or start a new run from it: spherepde run {folder / 'config.toml'} --out NEW_FOLDER"
        )


def _load_part(folder: Path, name: str, loader):
    p = folder / name
    if not p.is_file():
        raise RunFolderError(_damaged(folder, f"{name} is missing"))
    try:
        return loader(p)
    except Exception as exc:
        raise RunFolderError(_damaged(folder, f"{name} cannot be read ({_one_line(exc)})")) from exc


def _read_summary(folder: Path) -> dict:
    try:
        summary = json.loads((folder / "summary.json").read_text())
    except (OSError, ValueError):
        return {}
    return summary if isinstance(summary, dict) else {}


#: Temporary files of an atomic write cut short by a hard kill (:func:`spherepde._base.atomic_file`
#: names them ``.NAME.PID.tmp`` or ``.NAME.PID.tmp.SUFFIX``; the others are older names).
_TMP_PATTERNS = (".*.tmp", ".*.tmp.*", "*.tmp.npz", "*.npz.tmp")


def _remove_stale_temporaries(folder: Path) -> None:
    """Delete the temporary files a killed process left in the run folder (the lock is held,
    so no other process is writing them); a resumed run then ends with the same files as an
    uninterrupted one."""
    for d in (folder, folder / "snapshots", folder / "vtk"):
        if d.is_dir():
            for pattern in _TMP_PATTERNS:
                for f in d.glob(pattern):
                    if f.is_file():
                        log.info("removing %s, left by an interrupted write", f)
                        f.unlink(missing_ok=True)


def _clear_generated(folder: Path) -> None:
    """Remove what a run writes (not config.toml, the marker, run.log) before starting it again from t = 0."""
    for name in ("diagnostics.csv", "summary.json", "weights.npz", "mesh.npz", "snapshots.npz", "density.pvd", "tokens.pvd", "checkpoint.tmp.npz"):
        with _writing(folder / name):
            (folder / name).unlink(missing_ok=True)
    for sub, patterns in (("snapshots", ("[0-9]*.npz", ".*.tmp")), ("vtk", ("density_*.vtp", "tokens_*.vtp"))):
        d = folder / sub
        if d.is_dir():
            for pattern in patterns:
                for f in d.glob(pattern):
                    f.unlink(missing_ok=True)
            try:
                d.rmdir()
            except OSError:  # something else lives there: leave it
                pass

