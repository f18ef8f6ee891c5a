"""Run folders: their layout, marker, lock, checkpoints, snapshots and diagnostics, written and read.

:class:`RunFolder` is the one owner of a run folder (and of a Monte-Carlo folder) on disk:
the runner, Monte-Carlo, branching, compare, the NetCDF export, the figures and sweeps
create, lock, write and read run folders only through it and the functions of this module.
:data:`LAYOUT` lists every file and folder a run folder can hold, which kinds of run write
it and when; :func:`read_diagnostics` is the one (tolerant) reader of diagnostics tables.

A new folder is created atomically and exclusively (:meth:`RunFolder.check_new`, then
:meth:`RunFolder.create`): the lock ``run.lock`` is taken before anything is written or
deleted, and the marker ``.spherepde-run`` is written with the run kind and the resolved
configuration: ``--force`` replaces only folders that carry it, and ``resume`` refuses a
config.toml edited since. Every file is written atomically; a full disk raises an OSError
naming the file, before VTK is ever reached.

Snapshots come from ``snapshots.npz`` (``t`` (S,), ``rho`` (S, n_cells) or ``X`` (S, n, d))
or, while a run is incomplete, from ``snapshots/NNNNNN.npz``; mesh runs store the mesh in
``mesh.npz``. The NetCDF export (:func:`spherepde.runs.dataset.export_netcdf`) writes
nothing into a run folder: it refuses a target inside one.
"""

from __future__ import annotations

import csv
import errno
import io
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
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

import numpy as np

from spherepde._base import __version__, atomic_savez, atomic_write_text, load_arrays, one_line
from spherepde.model.columns import MESH_SOLVERS, SOLVERS, TOKEN_SOLVERS
from spherepde.runs.config import Config, config_to_toml, load_config
from spherepde.runs.files import FolderLock

log = logging.getLogger(__name__)

__all__ = [
    "MARKER", "LOCK_FILE", "MONTE_CARLO", "CONFIG_FILE", "SUMMARY_FILE", "DIAGNOSTICS_FILE", "WEIGHTS_FILE", "MESH_FILE", "SNAPSHOTS_FILE",
    "LOG_FILE", "CHECKPOINT_FILE", "MC_TABLES", "DiagnosticsWriter", "write_diagnostics_table", "MARKER_KINDS", "VTK_RESERVE_BYTES", "RUN_KINDS", "CONDITIONS", "LayoutEntry", "LAYOUT",
    "RunExistsError", "RunLockedError", "RunFolderError", "NotARunFolderError", "DiagnosticsError", "MALFORMED",
    "RunFolder", "RunSnapshots", "read_diagnostics", "check_recorded", "run_config", "run_kind", "load_snapshots",
    "check_run_target", "check_state_values", "marker_problem", "state_scalars", "writing", "run_folder_above",
]


#: Marker file written into every run folder (and Monte-Carlo folder) when it is created;
#: ``force`` replaces only folders that carry it (or empty ones).
MARKER = ".spherepde-run"


#: Lock file of a run folder while a process writes into it.
LOCK_FILE = "run.lock"


#: The files of a run folder, each name spelled once here (:data:`LAYOUT` says what they hold).
CONFIG_FILE = "config.toml"
SUMMARY_FILE = "summary.json"
DIAGNOSTICS_FILE = "diagnostics.csv"
WEIGHTS_FILE = "weights.npz"
MESH_FILE = "mesh.npz"
SNAPSHOTS_FILE = "snapshots.npz"
LOG_FILE = "run.log"
CHECKPOINT_FILE = "checkpoint.npz"


#: The tables of a Monte-Carlo folder: statistic over the paths -> file name.
MC_TABLES = {q: f"diagnostics_{q}.csv" for q in ("mean", "std", "q05", "q95")}


#: A Monte-Carlo folder's kind: the word its marker, :data:`LAYOUT` and :func:`run_kind` use.
MONTE_CARLO = "monte-carlo"


#: The kinds of folder a marker names (:meth:`RunFolder.write_marker`): a single run, or Monte-Carlo.
MARKER_KINDS = ("run", MONTE_CARLO)


#: Free space kept in reserve when writing a VTK snapshot (VTK's writers do not survive a full disk).
VTK_RESERVE_BYTES = 1 << 20


# ====================================================================================== layout
#: The kinds of run that write into folders: the solvers (``run.solver``,
#: :data:`spherepde.model.columns.SOLVERS`) of a single run, and a Monte-Carlo folder (whose
#: ``path-NNN`` folders are single runs).
RUN_KINDS = (*SOLVERS, MONTE_CARLO)


#: When a :data:`LAYOUT` entry exists (an entry without conditions exists from the run's
#: first record on, or from the creation of a Monte-Carlo folder).
CONDITIONS = {
    "completed": "written when the run completes",
    "output.vtk": "only with output.vtk = true (the default)",
    "two checkpoints": "from the run's second checkpoint on",
    "solver.atoms": "only with solver.atoms = true (point masses)",
    "while writing": "only while a process writes into the folder",
    "plot or render": "written by 'spherepde plot' or 'spherepde render' without --out, not by the run",
}


class LayoutEntry(NamedTuple):
    """One entry of :data:`LAYOUT`: a file (or, ending in ``/``, a folder) of a run folder."""

    path: str  #: the name in the run folder; ``NNN`` stands for digits, and a trailing ``/`` marks a folder
    kinds: tuple[str, ...]  #: the kinds of run that write it (:data:`RUN_KINDS`)
    when: tuple[str, ...]  #: when it exists (:data:`CONDITIONS`; empty: always)
    description: str  #: one line

    @property
    def is_dir(self) -> bool:
        return self.path.endswith("/")

    @property
    def name(self) -> str:
        return self.path.rstrip("/")


_RUNS = SOLVERS
_MESH = MESH_SOLVERS
_TOKENS = TOKEN_SOLVERS
_ALL = RUN_KINDS


#: Every file and folder a run folder (or Monte-Carlo folder) can hold: (path, the kinds of
#: run that write it, when, one line). A folder ``OUT/path-NNN`` of a Monte-Carlo run is a
#: run folder of its own. The NetCDF export writes nothing into run folders.
LAYOUT: tuple[LayoutEntry, ...] = (
    LayoutEntry(CONFIG_FILE, _ALL, (), "the resolved configuration, every key (a new run starts from it)"),
    LayoutEntry(SUMMARY_FILE, _ALL, (), "status, versions, seed(s), wall time, final diagnostics (Monte-Carlo: their mean and std)"),
    LayoutEntry(DIAGNOSTICS_FILE, _RUNS, (), "one row of diagnostics per record (the columns of the solver)"),
    LayoutEntry(WEIGHTS_FILE, _RUNS, (), "the weight path Theta_t that drives the run"),
    LayoutEntry(MESH_FILE, _MESH, (), "the sphere mesh the cell densities live on"),
    LayoutEntry("snapshots/", _RUNS, (), "snapshots/NNNNNN.npz: time t with tokens X and/or cell densities rho (solver.atoms: also "
                "the cells alone rho_cells and the point masses atom_x (k, 3), atom_m (k,)), one per output.snapshot_dt"),
    LayoutEntry(SNAPSHOTS_FILE, _RUNS, ("completed",), "every snapshot gathered: t (S,), X (S, n, d) and/or rho (S, n_cells) (solver.atoms: "
                "rho_cells (S, n_cells), atom_x (S, K, 3), atom_m (S, K), K the most point masses, unused rows mass 0 at (0, 0, 0))"),
    LayoutEntry("vtk/", _RUNS, ("output.vtk",), "vtk/density_NNNNNN.vtp (mesh, both; solver.atoms: the cells alone), vtk/point_masses_NNNNNN.vtp "
                "(solver.atoms: positions with point data mass) and vtk/tokens_NNNNNN.vtp (particles, both) for ParaView"),
    LayoutEntry("density.pvd", _MESH, ("output.vtk", "completed"), "the ParaView time series of vtk/density_NNNNNN.vtp"),
    LayoutEntry("point_masses.pvd", _MESH, ("output.vtk", "completed", "solver.atoms"), "the ParaView time series of vtk/point_masses_NNNNNN.vtp"),
    LayoutEntry("tokens.pvd", _TOKENS, ("output.vtk", "completed"), "the ParaView time series of vtk/tokens_NNNNNN.vtp"),
    LayoutEntry(CHECKPOINT_FILE, _RUNS, (), "the solver's state at the last checkpoint (resume continues from it)"),
    LayoutEntry("checkpoint.prev.npz", _RUNS, ("two checkpoints",), "the checkpoint before it (used when checkpoint.npz is damaged)"),
    LayoutEntry(LOG_FILE, _RUNS, (), "the run's log, and the traceback of a failed run"),
    LayoutEntry(MARKER, _ALL, (), "the marker: spherepde version, folder kind (run or monte-carlo), creator, the config.toml written at the start"),
    LayoutEntry(LOCK_FILE, _ALL, ("while writing",), "the lock: pid and host of the process writing into the folder"),
    LayoutEntry(MC_TABLES["mean"], (MONTE_CARLO,), ("completed",), "the mean of every diagnostic over the paths, per record"),
    LayoutEntry(MC_TABLES["std"], (MONTE_CARLO,), ("completed",), "their standard deviation over the paths (ddof = 1)"),
    LayoutEntry(MC_TABLES["q05"], (MONTE_CARLO,), ("completed",), "their 5 % quantile over the paths"),
    LayoutEntry(MC_TABLES["q95"], (MONTE_CARLO,), ("completed",), "their 95 % quantile over the paths"),
    LayoutEntry("path-NNN/", (MONTE_CARLO,), (), "the run folder of path NNN (seed weights.seed + NNN)"),
    LayoutEntry("figures/", _RUNS, ("plot or render",), "the figures and renderings of the run"),
)


def _layout_names(*, dirs: bool) -> tuple[str, ...]:
    """The fixed names a run or resume keeps writing into (not the files written whole when a
    run completes, nor the figures): they must be of the right kind before a resume."""
    return tuple(e.name for e in LAYOUT if e.is_dir == dirs and "NNN" not in e.path
                 and not {"completed", "plot or render"} & set(e.when))


#: Files and folders of a run folder, checked to be of the right kind on resume.
_RUN_FILES = _layout_names(dirs=False)


_RUN_DIRS = _layout_names(dirs=True)


#: Temporary files of an atomic write cut short by a hard kill (:func:`spherepde._base.atomic_file`
#: names them ``.NAME.PID.tmp`` or ``.NAME.PID.tmp.SUFFIX``; the others are older names).
_TMP_PATTERNS = (".*.tmp", ".*.tmp.*", "*.tmp.npz", "*.npz.tmp")


# ================================================================================== exceptions
class RunExistsError(FileExistsError):
    """The run folder exists already (use --force to overwrite a run folder, or resume it)."""


class RunLockedError(RunExistsError):
    """Another live process is writing into the run folder."""


class RunFolderError(ValueError):
    """The run folder cannot be used: it cannot be created or written, or it is damaged (nothing was written)."""


class NotARunFolderError(ValueError):
    """The folder is not a spherepde run folder (or not one that can be drawn)."""


class DiagnosticsError(ValueError):
    """A diagnostics table that cannot be read; the one-line message names the file (and the row)."""


# ================================================================================= diagnostics
#: What :func:`read_diagnostics` does with a malformed row (wrong number of fields, or a
#: field that is not a number): ``"raise"`` always raises; ``"last"`` leaves out an
#: unfinished last line (no line end: a run still writing it) and raises for any other;
#: ``"skip"`` leaves out every malformed row with a warning (figures of a run still going).
MALFORMED = ("raise", "last", "skip")


def read_diagnostics(path, *, malformed: str = "last") -> dict[str, np.ndarray]:
    """A diagnostics table as ``{column: float array}`` (every column, in the file's order).

    The one reader of diagnostics tables (``diagnostics.csv`` and a Monte-Carlo folder's
    ``diagnostics_mean.csv`` and friends) for the runner, Monte-Carlo, compare, the figures,
    the NetCDF export and sweeps. Every value is parsed with Python's ``float`` (bit for bit
    the ``repr`` written). Raises :class:`DiagnosticsError` (a ValueError, one line naming
    the file and the row) for text that is not a CSV table, an empty file, a header without
    the time column ``t`` and a malformed row (see :data:`MALFORMED`); OSError when the file
    cannot be opened.
    """
    if malformed not in MALFORMED:
        raise ValueError(f"malformed={malformed!r}: expected one of {', '.join(MALFORMED)}")
    path = Path(path)
    with open(path, newline="") as fh:
        try:
            text = fh.read()
            rows = list(csv.reader(io.StringIO(text)))
        except (UnicodeDecodeError, csv.Error) as exc:
            raise DiagnosticsError(f"{path} cannot be read as a diagnostics table ({' '.join(str(exc).split())}); the run folder is damaged") from None
    if not rows:
        raise DiagnosticsError(f"{path} is empty: the run has recorded nothing yet")
    header, body = rows[0], rows[1:]
    if "t" not in header:
        raise DiagnosticsError(f"{path}: row 1 is not a diagnostics header (no column 't'); the run folder is damaged")
    records = []
    it = header.index("t")
    for i, r in enumerate(body):
        problem = None
        if len(r) != len(header):
            problem = f"{len(r)} fields for {len(header)} columns"
        else:
            try:
                values = [float(x) for x in r]
            except ValueError:
                col, x = next((c, x) for c, x in zip(header, r) if not _is_float(x))
                problem = f"column {col!r} holds {x[:40]!r}, not a number"
            else:
                if math.isfinite(values[it]):
                    records.append(values)
                    continue
                problem = f"column 't' holds {r[it][:40]!r}, not a finite time"
        if malformed == "skip":
            log.warning("%s: skipping a malformed row (a run still writing?)", path)
        elif not (malformed == "last" and i == len(body) - 1 and not text.endswith("\n")):
            raise DiagnosticsError(f"{path}: row {i + 2}: {problem}; the run folder is damaged")
    data = np.array(records, dtype=float).reshape(len(records), len(header))
    return {h: data[:, i] for i, h in enumerate(header)}


def check_recorded(path, table: dict) -> None:
    """A run's ``diagnostics.csv`` (``table`` as :func:`read_diagnostics` read it) must hold
    every record its ``summary.json`` lists when that says the run completed: fewer rows
    means the file was cut short. :class:`DiagnosticsError` naming the file otherwise (a run
    still writing, or a folder without a readable summary, is not checked)."""
    path = Path(path)
    try:
        summary = json.loads((path.parent / SUMMARY_FILE).read_text())
    except (OSError, ValueError):
        return
    if not isinstance(summary, dict) or summary.get("status") != "completed" or path.name != DIAGNOSTICS_FILE:
        return
    expected = summary.get("records")
    if isinstance(expected, int) and not isinstance(expected, bool):
        n = len(table.get("t", ()))
        if n < expected:
            raise DiagnosticsError(f"{path} holds {n} complete rows, but the completed run recorded {expected} (summary.json): "
                                   "the file was cut short; the run folder is damaged")


class DiagnosticsWriter:
    """The one writer of diagnostics tables (``diagnostics.csv``, a Monte-Carlo folder's
    :data:`MC_TABLES`), read back by :func:`read_diagnostics`.

    ``with DiagnosticsWriter(path) as w: w.write(row)`` appends rows to ``path`` (``mode="w"``:
    starts it afresh). The columns are those of the first row written (later rows are written
    in that order); the header goes first when the file is empty. Every value is written as
    ``repr(float(value))``, so reading it back gives the same float bit for bit; each row is
    flushed at once. An OSError while writing names the file.
    """

    def __init__(self, path, *, mode: str = "a"):
        self.path = Path(path)
        self.mode = mode
        self.columns: list[str] | None = None
        self._fh = None
        self._writer = None

    def __enter__(self) -> DiagnosticsWriter:
        self._fh = open(self.path, self.mode, newline="")
        self._writer = csv.writer(self._fh)
        return self

    def __exit__(self, *exc) -> None:
        self._fh.close()

    def start(self, columns) -> None:
        """Fix the columns; the header goes first when the file is empty."""
        self.columns = list(columns)
        with writing(self.path):
            if self._fh.tell() == 0:
                self._writer.writerow(self.columns)

    def write(self, row: dict) -> None:
        """Append one row ``{column: value}`` (the first fixes the columns, :meth:`start`)."""
        if self.columns is None:
            self.start(row)
        with writing(self.path):
            self._writer.writerow([repr(float(row[c])) for c in self.columns])
            self._fh.flush()


def write_diagnostics_table(path, table: dict) -> None:
    """Write ``{column: array (k,)}`` (with a time column ``t``) as a diagnostics table of k rows
    (:class:`DiagnosticsWriter`), replacing the file."""
    with writing(path), DiagnosticsWriter(path, mode="w") as w:
        w.start(table)
        for k in range(len(table["t"])):
            w.write({c: table[c][k] for c in w.columns})


def _is_float(x: str) -> bool:
    try:
        float(x)
    except ValueError:
        return False
    return True


# ============================================================================ small helpers
@contextmanager
def writing(path):
    """Name ``path`` in an OSError (e.g. a full disk) raised while writing it."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None:
            exc.filename = str(path)
        raise


def state_scalars(state: dict) -> dict:
    """A checkpoint's state (:meth:`RunFolder.read_checkpoint`) with its 0-d arrays as Python scalars, for ``solver.set_state``."""
    out = {}
    for k, v in state.items():
        a = np.asarray(v)
        out[k] = a.item() if a.ndim == 0 else a
    return out


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
    for k in state:
        if k.endswith("atom_m"):
            from spherepde.solvers.atoms import check_point_masses

            problem = check_point_masses(state.get(k[:-1] + "x", np.zeros((0, 3))), state[k])
            if problem:
                raise ValueError(f"its point masses ({k[:-1]}x, {k}): {problem}")


def _stack_padded(arrays: list) -> np.ndarray:
    """Stack per-snapshot arrays; the point masses (k varies) are padded to the most with zeros
    (mass 0 at (0, 0, 0): they add nothing to any sum over point masses)."""
    shapes = {np.shape(a) for a in arrays}
    if len(shapes) <= 1:
        return np.stack(arrays)
    k = max(np.shape(a)[0] for a in arrays)
    out = np.zeros((len(arrays), k, *np.shape(arrays[0])[1:]))
    for i, a in enumerate(arrays):
        out[i, : np.shape(a)[0]] = a
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


def marker_problem(folder: Path) -> str | None:
    """None when ``folder`` carries a genuine spherepde marker (a JSON table naming the
    spherepde version and the folder's kind, as :meth:`RunFolder.write_marker` writes it),
    else what is wrong with it: ``--force`` deletes only folders whose marker parses."""
    path = Path(folder) / MARKER
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
        own_path = p == where.parent and where.name.startswith("path-") and where.name[5:].isdigit() and RunFolder(p).marker_kind() == MONTE_CARLO
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


def _read_toml(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        log.warning("cannot read %s (%s)", path, exc)
        return {}


# ================================================================================= the folder
class RunFolder:
    """A run folder (or Monte-Carlo folder) on disk, for writing and reading it.

    ``RunFolder(path)`` touches nothing on disk. A new run: :meth:`check_new` (refusals,
    nothing written), then :meth:`create` (lock, marker). A resume: :meth:`check_layout`,
    :meth:`acquire`, :meth:`load_config`, :meth:`check_config_unchanged`,
    :meth:`read_checkpoint`. Reading: :meth:`kind`, :meth:`config`, :meth:`read_summary`,
    :meth:`read_diagnostics`, :meth:`load_snapshots`, :meth:`monte_carlo_paths`.

    Attributes
    ----------
    folder : the folder's path.
    csv : its ``diagnostics.csv``; ``snapdir``, ``vtkdir``: its ``snapshots/`` and ``vtk/``.
    lock : its :class:`~spherepde.runs.files.FolderLock` (``run.lock``).
    last_checkpoint_t : the time of the last checkpoint written or read (None: none yet).
    """

    def __init__(self, folder):
        self.folder = Path(folder)
        self.csv = self.folder / DIAGNOSTICS_FILE
        self.snapdir = self.folder / "snapshots"
        self.vtkdir = self.folder / "vtk"
        self.lock = FolderLock(self.folder, LOCK_FILE, error=RunLockedError, what="spherepde process", force_hint="--force")
        self.last_checkpoint_t: float | None = None

    def __repr__(self) -> str:
        return f"RunFolder({str(self.folder)!r})"

    # ------------------------------------------------------------------ creating, locking
    def check_new(self, *, force: bool = False, what: str = "run folder") -> bool:
        """Check that a new run may be written here (nothing is written): RunFolderError when
        the path cannot be a run folder; for an existing non-empty folder RunLockedError while
        another process writes into it, RunExistsError unless ``force`` and it is a run folder
        (with a genuine marker: :func:`marker_problem`). True when it exists and is not empty
        (then :meth:`create` replaces it)."""
        exists = self._check_out_path()
        if exists:
            self._refuse_existing(force, what)
        return exists

    def _check_out_path(self) -> bool:
        """Check that the folder can be a run folder (refused: RunFolderError); True if it exists and is not empty."""
        folder = self.folder
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

    def _refuse_existing(self, force: bool, what: str = "run folder") -> None:
        """An existing non-empty folder: refused unless ``force`` and it is an unlocked run folder
        (with a genuine marker: :func:`marker_problem`)."""
        folder, lock = self.folder, self.lock
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

    def create(self, cfg: Config, *, kind: str, replace: bool, force: bool = False) -> None:
        """Create (``replace``: replace) the folder, lock it and write the marker of ``kind``
        (:data:`MARKER_KINDS`); RunFolderError when that is impossible.

        Atomic and exclusive: the lock is taken (check and write in one step) before anything
        else is written or deleted, and then the folder is checked again -- a folder that was
        new (or empty) must still hold nothing else, a folder to replace must still be a run
        folder -- so of two processes starting on one folder at the same instant, one refuses
        (RunLockedError / RunExistsError naming the other) and nothing of it is written."""
        folder, lock = self.folder, self.lock
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
            self.acquire(force=force, new=True)  # refuses (nothing written) when another process holds it
            if replace:
                if marker_problem(folder) is not None:
                    raise RunExistsError(f"{folder} is no longer a spherepde run folder (another process changed it while this run was starting); choose another --out")
                try:
                    self._clear(keep=LOCK_FILE)
                except OSError as exc:
                    raise RunFolderError(f"cannot replace the run folder {folder}: {exc.strerror or exc}; choose another --out") from exc
            else:
                others = sorted(p.name for p in folder.iterdir() if p.name != LOCK_FILE)
                if others:
                    raise RunExistsError(
                        f"another spherepde process{self._creator()} created {folder} while this run was starting; "
                        "choose another --out (nothing was written)"
                    )
            try:
                self.write_marker(cfg, kind)
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

    def _clear(self, keep: str) -> None:
        """Delete everything in the folder except the file ``keep`` (symbolic links are removed, not followed)."""
        for p in self.folder.iterdir():
            if p.name == keep:
                continue
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink()

    def acquire(self, *, force: bool = False, new: bool = False) -> None:
        """Take the folder's lock (RunLockedError while another live process holds it); an
        OSError (a full disk, permissions) is one RunFolderError line saying what to do: for
        a ``new`` run choose another --out, else free space or fix the permissions and resume again."""
        folder = self.folder
        try:
            self.lock.acquire(force=force)
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

    def release(self) -> None:
        """Release the folder's lock (if this process holds it)."""
        self.lock.release()

    # ------------------------------------------------------------------------ the marker
    def write_marker(self, cfg: Config, kind: str) -> None:
        """Write the marker: version, ``kind`` (:data:`MARKER_KINDS`), creation time, pid, host, the config."""
        info = {
            "spherepde": __version__,
            "kind": kind,
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "config_toml": config_to_toml(cfg),
        }
        atomic_write_text(self.folder / MARKER, json.dumps(info, indent=1) + "\n")

    def marker_kind(self) -> str | None:
        """The folder kind the marker names (``run`` or :data:`MONTE_CARLO`), None without a readable marker."""
        try:
            info = json.loads((self.folder / MARKER).read_text())
        except (OSError, ValueError, UnicodeDecodeError):
            return None
        return info.get("kind") if isinstance(info, dict) else None

    def marker_problem(self) -> str | None:
        """:func:`marker_problem` of this folder."""
        return marker_problem(self.folder)

    def _creator(self) -> str:
        """Which process created the folder (from its marker), for a refusal message."""
        try:
            info = json.loads((self.folder / MARKER).read_text())
            return f" (pid {int(info['pid'])} on host {info['host']})"
        except (OSError, ValueError, TypeError, KeyError):
            return ""

    # -------------------------------------------------------------- layout and parts
    def damaged(self, what: str) -> RunFolderError:
        """The error for a damaged folder that cannot be resumed (``what``: which part, how)."""
        return RunFolderError(f"cannot resume {self.folder}: {what}; the run folder is damaged")

    def check_layout(self) -> None:
        """RunFolderError when a file or folder a resume writes into (:data:`LAYOUT`) is of the wrong kind."""
        for name in _RUN_FILES:
            p = self.folder / name
            if p.exists() and not p.is_file():
                raise self.damaged(f"{name} is not a file")
        for name in _RUN_DIRS:
            p = self.folder / name
            if p.exists() and not p.is_dir():
                raise self.damaged(f"{name} is not a folder")

    def load_config(self) -> Config:
        """The folder's config.toml as a validated :class:`~spherepde.runs.config.Config` (damaged: RunFolderError)."""
        try:
            return load_config(self.folder / CONFIG_FILE)
        except (ValueError, OSError) as exc:  # ConfigError, UnicodeDecodeError, unreadable file
            raise self.damaged(f"config.toml cannot be read ({one_line(exc)})") from exc

    def config(self) -> dict:
        """The folder's config.toml as a plain dict (:func:`run_config`)."""
        return run_config(self.folder)

    def check_config_unchanged(self) -> None:
        """Refuse a config.toml edited after the run started (compared with the copy in the marker)."""
        folder = self.folder
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
        current = (folder / CONFIG_FILE).read_text()
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

    def read_summary(self) -> dict:
        """summary.json as a dict (empty when missing or unreadable)."""
        try:
            summary = json.loads((self.folder / SUMMARY_FILE).read_text())
        except (OSError, ValueError):
            return {}
        return summary if isinstance(summary, dict) else {}

    def load_part(self, name: str, loader):
        """``loader(folder / name)``; a missing or unreadable part is RunFolderError (:meth:`damaged`)."""
        p = self.folder / name
        if not p.is_file():
            raise self.damaged(f"{name} is missing")
        try:
            return loader(p)
        except Exception as exc:
            raise self.damaged(f"{name} cannot be read ({one_line(exc)})") from exc

    def kind(self) -> str:
        """What the folder holds: ``particles``, ``mesh`` or :data:`MONTE_CARLO` (:func:`run_kind`)."""
        return run_kind(self.folder)

    def monte_carlo_paths(self) -> list[Path]:
        """The ``path-NNN`` run folders of a Monte-Carlo folder, in order (empty for a single run)."""
        return sorted(p for p in self.folder.glob("path-[0-9]*") if p.is_dir())

    # ------------------------------------------------------------------------- checkpoints
    def checkpoint_paths(self) -> tuple[Path, Path]:
        """``checkpoint.npz`` and ``checkpoint.prev.npz``."""
        return self.folder / CHECKPOINT_FILE, self.folder / "checkpoint.prev.npz"

    def has_checkpoint(self) -> bool:
        """Whether either checkpoint exists."""
        return any(p.exists() for p in self.checkpoint_paths())

    def write_checkpoint(self, state: dict, meta: dict) -> None:
        """Write ``state`` (arrays) and ``meta`` (JSON) atomically as checkpoint.npz, the previous one becoming checkpoint.prev.npz."""
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

    def read_checkpoint(self, check=None, check_meta=None) -> tuple[dict, dict]:
        """(state, meta) of the last usable checkpoint (checkpoint.npz, else checkpoint.prev.npz);
        FileNotFoundError naming both when neither serves. Usable: readable, its values pass
        :func:`check_state_values`, ``check(state)`` and ``check_meta(state, meta)`` (a ValueError naming the
        problem otherwise: e.g. the run's own rules, :func:`spherepde.runs.runner.checkpoint_check` and
        :func:`spherepde.runs.runner.checkpoint_times`)."""
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
                if check is not None:
                    check(state)
                if check_meta is not None:
                    check_meta(state, meta)
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

    # --------------------------------------------------------------------------- snapshots
    def write_snapshot(self, index: int, t: float, solver, mesh, *, tokens_vtk: bool = False) -> None:
        """``snapshots/NNNNNN.npz`` of the solver's state at time ``t``; with ``mesh`` also
        ``vtk/density_NNNNNN.vtp``, with ``tokens_vtk`` ``vtk/tokens_NNNNNN.vtp``."""
        snap = solver.snapshot()
        target = self.snapdir / f"{index:06d}.npz"
        with writing(target):
            self.snapdir.mkdir(exist_ok=True)
            atomic_savez(target, t=np.float64(t), **snap)
        if mesh is not None and "rho" in snap:
            from spherepde.geometry.vtk import write_density_vtp, write_point_masses_vtp

            vtp = self.vtkdir / f"density_{index:06d}.vtp"
            with writing(vtp):
                self.vtkdir.mkdir(exist_ok=True)
                _check_free_space(self.vtkdir, _vtp_bytes(mesh), vtp)
                write_density_vtp(mesh, snap.get("rho_cells", snap["rho"]), vtp, t=t)
            if "atom_m" in snap:  # the point masses as points with their masses, not deposited in cells
                vtp = self.vtkdir / f"point_masses_{index:06d}.vtp"
                with writing(vtp):
                    write_point_masses_vtp(snap["atom_x"], snap["atom_m"], vtp, t=t)
        if tokens_vtk and "X" in snap:
            from spherepde.geometry.vtk import write_tokens_vtp

            vtp = self.vtkdir / f"tokens_{index:06d}.vtp"
            with writing(vtp):
                self.vtkdir.mkdir(exist_ok=True)
                write_tokens_vtp(snap["X"], vtp, t=t)

    def finalise_snapshots(self, cfg: Config) -> None:
        """Gather ``snapshots/NNNNNN.npz`` into ``snapshots.npz`` and, with ``output.vtk``, write ``density.pvd`` / ``tokens.pvd``."""
        files = self.snapshot_files()
        if not files:
            return
        folder = self.folder
        ts, vals = [], {}
        for f in files:
            with load_arrays(f) as z:
                ts.append(float(z["t"]))
                for k in z.files:
                    if k != "t":
                        vals.setdefault(k, []).append(np.array(z[k]))
        with writing(folder / SNAPSHOTS_FILE):
            atomic_savez(folder / SNAPSHOTS_FILE, t=np.array(ts), **{k: _stack_padded(v) for k, v in vals.items()})
        if "rho" in vals and cfg.output.vtk:
            from spherepde.geometry.vtk import write_pvd

            with writing(folder / "density.pvd"):
                write_pvd(folder / "density.pvd", [(t, f"vtk/density_{i:06d}.vtp") for i, t in enumerate(ts)])
            if "atom_m" in vals:
                with writing(folder / "point_masses.pvd"):
                    write_pvd(folder / "point_masses.pvd", [(t, f"vtk/point_masses_{i:06d}.vtp") for i, t in enumerate(ts)])
        if "X" in vals and cfg.output.vtk:
            from spherepde.geometry.vtk import write_pvd

            entries = [(t, f"vtk/tokens_{f.stem}.vtp") for f, t in zip(files, ts) if (self.vtkdir / f"tokens_{f.stem}.vtp").is_file()]
            if entries:
                with writing(folder / "tokens.pvd"):
                    write_pvd(folder / "tokens.pvd", entries)

    def snapshot_files(self) -> list[Path]:
        """The ``snapshots/NNNNNN.npz`` files, in order (empty when there is no snapshots/)."""
        d = self.snapdir
        return sorted(d.glob("[0-9]*.npz")) if d.is_dir() else []

    def load_snapshots(self, *, strict: bool = False) -> RunSnapshots:
        """The folder's snapshots (:func:`load_snapshots`)."""
        return load_snapshots(self.folder, strict=strict)

    # -------------------------------------------------------------------------- diagnostics
    def read_diagnostics(self, *, malformed: str = "last") -> dict[str, np.ndarray]:
        """``diagnostics.csv`` (:func:`read_diagnostics`)."""
        return read_diagnostics(self.csv, malformed=malformed)

    # ------------------------------------------------------------------------ housekeeping
    def remove_stale_temporaries(self) -> None:
        """Delete the temporary files a killed process left in the run folder (the lock is held,
        so no other process is writing them); a resumed run then ends with the same files as an
        uninterrupted one."""
        for d in (self.folder, self.snapdir, self.vtkdir):
            if d.is_dir():
                for pattern in _TMP_PATTERNS:
                    for f in d.glob(pattern):
                        if f.is_file():
                            log.info("removing %s, left by an interrupted write", f)
                            f.unlink(missing_ok=True)

    def clear_generated(self) -> None:
        """Remove what a run writes (not config.toml, the marker, run.log) before starting it again from t = 0."""
        folder = self.folder
        for name in (DIAGNOSTICS_FILE, SUMMARY_FILE, WEIGHTS_FILE, MESH_FILE, SNAPSHOTS_FILE, "density.pvd", "tokens.pvd", "point_masses.pvd", "checkpoint.tmp.npz"):
            with writing(folder / name):
                (folder / name).unlink(missing_ok=True)
        for sub, patterns in (("snapshots", ("[0-9]*.npz", ".*.tmp")), ("vtk", ("density_*.vtp", "tokens_*.vtp", "point_masses_*.vtp"))):
            d = folder / sub
            if d.is_dir():
                for pattern in patterns:
                    for f in d.glob(pattern):
                        f.unlink(missing_ok=True)
                try:
                    d.rmdir()
                except OSError:  # something else lives there: leave it
                    pass


# ================================================================================== reading
def run_config(run_dir) -> dict:
    """The run folder's ``config.toml`` as a plain dict (empty if it is missing)."""
    p = Path(run_dir) / CONFIG_FILE
    return _read_toml(p) if p.is_file() else {}


def run_kind(run_dir) -> str:
    """What a folder holds: ``"particles"``, ``"mesh"`` or :data:`MONTE_CARLO` (``monte-carlo``).

    A coupled run (``run.solver = "both"``) counts as a mesh run; its snapshots also
    hold the tokens ``X``, drawn over the density with ``particles=True``. (The marker's
    folder kind, ``run`` or :data:`MONTE_CARLO`, is :meth:`RunFolder.marker_kind`.)

    Raises :class:`FileNotFoundError` for a missing folder and
    :class:`NotARunFolderError` for a folder that is no spherepde run folder.
    """
    folder = Path(run_dir)
    if not folder.is_dir():
        raise FileNotFoundError(f"run folder {folder} does not exist")
    rf = RunFolder(folder)
    if (folder / MC_TABLES["mean"]).is_file() or rf.monte_carlo_paths():
        return MONTE_CARLO
    solver = run_config(folder).get("run", {}).get("solver")
    if solver in ("particles", "mesh"):
        return solver
    if solver == "both":  # coupled mesh + tokens: a mesh run whose snapshots also hold X
        return "mesh"
    if (folder / MESH_FILE).is_file():
        return "mesh"
    snaps = folder / SNAPSHOTS_FILE
    files = [snaps] if snaps.is_file() else rf.snapshot_files()[:1]
    if files:
        try:
            with load_arrays(files[0]) as z:
                return "mesh" if "rho" in z.files else "particles"
        except (OSError, ValueError, zipfile.BadZipFile):
            pass
    if (folder / DIAGNOSTICS_FILE).is_file():
        return "particles"
    raise NotARunFolderError(
        f"{folder} is not a spherepde run folder: it has no config.toml, diagnostics.csv or snapshots "
        "(make one with 'spherepde run')"
    )


@dataclass(frozen=True)
class RunSnapshots:
    """The snapshots of one run folder.

    Attributes
    ----------
    folder : the run folder.
    kind : ``"particles"`` or ``"mesh"``.
    t : (S,) snapshot times, increasing.
    rho : (S, n_cells) cell densities (mesh runs) or None.
    X : (S, n, d) tokens (particle runs; mesh runs that also store tokens) or None.
    mesh : the :class:`~spherepde.geometry.mesh.SphereMesh` of a mesh run, else None.
    complete : True when read from ``snapshots.npz`` (the run has finished).
    rho_cells, atom_x, atom_m : a run with point masses (``solver.atoms``): the cells alone
        (S, n_cells), the point-mass positions (S, K, 3) and masses (S, K), K the most point
        masses of any snapshot (unused rows: mass 0 at (0, 0, 0)); None otherwise. ``rho`` then
        draws every point mass in the cell whose node is nearest; the state is
        rho_cells dsigma + sum_k atom_m[k] delta_{atom_x[k]}.
    """

    folder: Path
    kind: str
    t: np.ndarray
    rho: np.ndarray | None
    X: np.ndarray | None
    mesh: object | None
    complete: bool
    rho_cells: np.ndarray | None = None
    atom_x: np.ndarray | None = None
    atom_m: np.ndarray | None = None

    def point_masses(self, i: int) -> tuple[np.ndarray, np.ndarray] | None:
        """Positions (k, 3) and masses (k,) of the point masses of snapshot ``i`` (padding rows dropped), or None."""
        if self.atom_m is None:
            return None
        keep = self.atom_m[i] > 0
        return np.array(self.atom_x[i][keep]), np.array(self.atom_m[i][keep])

    def __len__(self) -> int:
        return int(self.t.size)

    def nearest(self, t: float) -> int:
        """Index of the snapshot nearest to time ``t``."""
        return int(np.argmin(np.abs(self.t - float(t))))


def _no_snapshots(folder: Path) -> FileNotFoundError:
    return FileNotFoundError(
        f"{folder}: the run wrote no snapshots (neither snapshots.npz nor snapshots/NNNNNN.npz exists); "
        "nothing to draw -- did the run start, and is output.snapshot_dt at most solver.T?"
    )


_READ_ERRORS = (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile)
#: The state arrays of a snapshot file (the rest, e.g. the cluster table, is derived from them).
_SNAPSHOT_STATE = ("rho", "X", "rho_cells", "atom_x", "atom_m")


def _unreadable(f: Path, exc: BaseException) -> ValueError:
    return ValueError(f"{f} cannot be read ({' '.join(str(exc).split()) or type(exc).__name__})")


def load_snapshots(run_dir, *, strict: bool = False) -> RunSnapshots:
    """Read a run folder's snapshots (``snapshots.npz``, else ``snapshots/NNNNNN.npz``).

    Snapshots with equal times keep the last one; times are sorted. Raises
    :class:`FileNotFoundError` when the run wrote none, :class:`NotARunFolderError` for
    a Monte-Carlo folder (draw one of its ``path-NNN`` folders) or a foreign folder.
    An unreadable ``snapshots/NNNNNN.npz`` is skipped with a warning, or with ``strict``
    is a ValueError naming it (as is then any unreadable snapshots.npz or mesh.npz).
    """
    folder = Path(run_dir)
    rf = RunFolder(folder)
    kind = run_kind(folder)
    if kind == MONTE_CARLO:
        paths = rf.monte_carlo_paths()
        hint = f", e.g. {paths[0]}" if paths else ""
        raise NotARunFolderError(f"{folder} is a Monte-Carlo folder; draw one of its path-NNN runs{hint}")
    arrays: dict[str, list] = {}
    complete = False
    if (folder / SNAPSHOTS_FILE).is_file():
        try:
            with load_arrays(folder / SNAPSHOTS_FILE) as z:
                ts = np.atleast_1d(np.asarray(z["t"], float))
                for key in z.files:  # every array is read, so a damaged or pickled one (any key) refuses the file
                    a = z[key]
                    if key in _SNAPSHOT_STATE:
                        arrays[key] = list(np.asarray(a, float))
        except _READ_ERRORS as exc:
            if strict:
                raise _unreadable(folder / SNAPSHOTS_FILE, exc) from None
            raise
        complete = True
    else:
        ts_list = []
        for f in rf.snapshot_files():
            try:
                with load_arrays(f) as z:
                    t = float(z["t"])
                    everything = {k: z[k] for k in z.files}  # every array is read: a damaged one (any key) refuses the file
                    vals = {k: np.array(everything[k], float) for k in _SNAPSHOT_STATE if k in everything}
            except _READ_ERRORS as exc:
                if strict:
                    raise _unreadable(f, exc) from None
                log.warning("skipping unreadable snapshot %s (%s)", f, exc)
                continue
            ts_list.append(t)
            for k, v in vals.items():
                arrays.setdefault(k, []).append(v)
        ts = np.asarray(ts_list, float)
    if ts.size == 0 or not arrays:
        raise _no_snapshots(folder)
    for k, v in arrays.items():
        if len(v) != ts.size:
            raise ValueError(f"{folder}: snapshots disagree: {ts.size} times but {len(v)} '{k}' arrays")
    # sort by time, keep the last of equal times
    order = np.argsort(ts, kind="stable")
    ts = ts[order]
    keep = np.append(ts[1:] != ts[:-1], True)
    idx = order[keep]
    ts = ts[keep]
    picked = {k: _stack_padded([v[i] for i in idx]) for k, v in arrays.items()}
    rho, X = picked.get("rho"), picked.get("X")
    mesh = None
    if rho is not None:
        from spherepde.geometry.meshfiles import load_saved_mesh

        mfile = folder / MESH_FILE
        if not mfile.is_file():
            raise FileNotFoundError(f"{folder}: mesh run without mesh.npz; cannot place the cell densities")
        try:
            mesh = load_saved_mesh(mfile)
        except _READ_ERRORS as exc:
            if strict:
                raise _unreadable(mfile, exc) from None
            raise
        if rho.shape[1] != mesh.n_cells:
            raise ValueError(f"{folder}: snapshots have {rho.shape[1]} cells but mesh.npz has {mesh.n_cells}")
    if "atom_m" in picked and not ("atom_x" in picked and "rho_cells" in picked and picked["atom_x"].shape[:2] == picked["atom_m"].shape):
        raise ValueError(f"{folder}: the snapshots' point masses are incomplete (rho_cells, atom_x (S, K, 3) and atom_m (S, K) belong together)")
    return RunSnapshots(folder, "mesh" if rho is not None else "particles", ts, rho, X, mesh, complete,
                        picked.get("rho_cells"), picked.get("atom_x"), picked.get("atom_m"))


def run_folder_above(path: Path) -> Path | None:
    """The run folder (a folder carrying the run marker) that ``path`` is or lies in, else None."""
    for p in (path, *path.parents):
        try:
            if (p / MARKER).is_file():
                return p
        except OSError:  # a folder we may not look into
            continue
    return None
