"""Reading run folders: the kind of run, its configuration, its diagnostics, its snapshots.

:func:`read_diagnostics` is the one reader of diagnostics tables (``diagnostics.csv`` and a
Monte-Carlo folder's ``diagnostics_mean.csv`` and friends) for the runner, Monte-Carlo,
compare, the figures, the NetCDF export and sweeps.

Used by the pictures (:mod:`spherepde.viz`) and by runs that start from another run's
state (``initial.kind = "run"``). Snapshots come from ``snapshots.npz`` (``t`` (S,),
``rho`` (S, n_cells) or ``X`` (S, n, d)) or, while a run is incomplete, from
``snapshots/NNNNNN.npz``; mesh runs store the mesh in ``mesh.npz``.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from spherepde._base import load_arrays

__all__ = ["NotARunFolderError", "DiagnosticsError", "MALFORMED", "read_diagnostics", "check_recorded", "run_config", "run_kind", "RunSnapshots", "load_snapshots"]


_log = logging.getLogger(__name__)


class NotARunFolderError(ValueError):
    """The folder is not a spherepde run folder (or not one that can be drawn)."""


class DiagnosticsError(ValueError):
    """A diagnostics table that cannot be read; the one-line message names the file (and the row)."""


#: What :func:`read_diagnostics` does with a malformed row (wrong number of fields, or a
#: field that is not a number): ``"raise"`` always raises; ``"last"`` leaves out an
#: unfinished last line (no line end: a run still writing it) and raises for any other;
#: ``"skip"`` leaves out every malformed row with a warning (figures of a run still going).
MALFORMED = ("raise", "last", "skip")


def read_diagnostics(path, *, malformed: str = "last") -> dict[str, np.ndarray]:
    """A diagnostics table as ``{column: float array}`` (every column, in the file's order).

    Every value is parsed with Python's ``float`` (bit for bit the ``repr`` written). Raises
    :class:`DiagnosticsError` (a ValueError, one line naming the file and the row) for text
    that is not a CSV table, an empty file, a header without the time column ``t`` and a
    malformed row (see :data:`MALFORMED`); OSError when the file cannot be opened.
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
            _log.warning("%s: skipping a malformed row (a run still writing?)", path)
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
        summary = json.loads((path.parent / "summary.json").read_text())
    except (OSError, ValueError):
        return
    if not isinstance(summary, dict) or summary.get("status") != "completed" or path.name != "diagnostics.csv":
        return
    expected = summary.get("records")
    if isinstance(expected, int) and not isinstance(expected, bool):
        n = len(table.get("t", ()))
        if n < expected:
            raise DiagnosticsError(f"{path} holds {n} complete rows, but the completed run recorded {expected} (summary.json): "
                                   "the file was cut short; the run folder is damaged")


def _is_float(x: str) -> bool:
    try:
        float(x)
    except ValueError:
        return False
    return True


# =============================================================================== run folders
def _read_toml(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        _log.warning("cannot read %s (%s)", path, exc)
        return {}


def run_config(run_dir) -> dict:
    """The run folder's ``config.toml`` as a plain dict (empty if it is missing)."""
    p = Path(run_dir) / "config.toml"
    return _read_toml(p) if p.is_file() else {}


def _snapshot_files(folder: Path) -> list[Path]:
    d = folder / "snapshots"
    return sorted(d.glob("[0-9]*.npz")) if d.is_dir() else []


def _mc_paths(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("path-[0-9]*") if p.is_dir())


def run_kind(run_dir) -> str:
    """What a folder holds: ``"particles"``, ``"mesh"`` or ``"montecarlo"``.

    A coupled run (``run.solver = "both"``) counts as a mesh run; its snapshots also
    hold the tokens ``X``, drawn over the density with ``particles=True``.

    Raises :class:`FileNotFoundError` for a missing folder and
    :class:`NotARunFolderError` for a folder that is no spherepde run folder.
    """
    folder = Path(run_dir)
    if not folder.is_dir():
        raise FileNotFoundError(f"run folder {folder} does not exist")
    if (folder / "diagnostics_mean.csv").is_file() or _mc_paths(folder):
        return "montecarlo"
    solver = run_config(folder).get("run", {}).get("solver")
    if solver in ("particles", "mesh"):
        return solver
    if solver == "both":  # coupled mesh + tokens: a mesh run whose snapshots also hold X
        return "mesh"
    if (folder / "mesh.npz").is_file():
        return "mesh"
    snaps = folder / "snapshots.npz"
    files = [snaps] if snaps.is_file() else _snapshot_files(folder)[:1]
    if files:
        try:
            with load_arrays(files[0]) as z:
                return "mesh" if "rho" in z.files else "particles"
        except (OSError, ValueError, zipfile.BadZipFile):
            pass
    if (folder / "diagnostics.csv").is_file():
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
    """

    folder: Path
    kind: str
    t: np.ndarray
    rho: np.ndarray | None
    X: np.ndarray | None
    mesh: object | None
    complete: bool

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


def load_snapshots(run_dir, *, strict: bool = False) -> RunSnapshots:
    """Read a run folder's snapshots (``snapshots.npz``, else ``snapshots/NNNNNN.npz``).

    Snapshots with equal times keep the last one; times are sorted. Raises
    :class:`FileNotFoundError` when the run wrote none, :class:`NotARunFolderError` for
    a Monte-Carlo folder (draw one of its ``path-NNN`` folders) or a foreign folder.
    An unreadable ``snapshots/NNNNNN.npz`` is skipped with a warning, or with ``strict``
    is a ValueError naming it (as is then any unreadable snapshots.npz or mesh.npz).
    """
    return _load_snapshots(run_dir, strict=strict)


_READ_ERRORS = (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile)


def _unreadable(f: Path, exc: BaseException) -> ValueError:
    return ValueError(f"{f} cannot be read ({' '.join(str(exc).split()) or type(exc).__name__})")


def _load_snapshots(run_dir, *, strict: bool) -> RunSnapshots:
    folder = Path(run_dir)
    kind = run_kind(folder)
    if kind == "montecarlo":
        paths = _mc_paths(folder)
        hint = f", e.g. {paths[0]}" if paths else ""
        raise NotARunFolderError(f"{folder} is a Monte-Carlo folder; draw one of its path-NNN runs{hint}")
    arrays: dict[str, list] = {}
    complete = False
    if (folder / "snapshots.npz").is_file():
        try:
            with load_arrays(folder / "snapshots.npz") as z:
                ts = np.atleast_1d(np.asarray(z["t"], float))
                for key in z.files:  # every array is read, so a damaged or pickled one (any key) refuses the file
                    a = z[key]
                    if key in ("rho", "X"):
                        arrays[key] = list(np.asarray(a, float))
        except _READ_ERRORS as exc:
            if strict:
                raise _unreadable(folder / "snapshots.npz", exc) from None
            raise
        complete = True
    else:
        ts_list = []
        for f in _snapshot_files(folder):
            try:
                with load_arrays(f) as z:
                    t = float(z["t"])
                    everything = {k: z[k] for k in z.files}  # every array is read: a damaged one (any key) refuses the file
                    vals = {k: np.array(everything[k], float) for k in ("rho", "X") if k in everything}
            except _READ_ERRORS as exc:
                if strict:
                    raise _unreadable(f, exc) from None
                _log.warning("skipping unreadable snapshot %s (%s)", f, exc)
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
    rho = np.stack([arrays["rho"][i] for i in idx]) if "rho" in arrays else None
    X = np.stack([arrays["X"][i] for i in idx]) if "X" in arrays else None
    mesh = None
    if rho is not None:
        from spherepde.geometry.mesh import SphereMesh

        mfile = folder / "mesh.npz"
        if not mfile.is_file():
            raise FileNotFoundError(f"{folder}: mesh run without mesh.npz; cannot place the cell densities")
        try:
            mesh = SphereMesh.load(mfile)
        except _READ_ERRORS as exc:
            if strict:
                raise _unreadable(mfile, exc) from None
            raise
        if rho.shape[1] != mesh.n_cells:
            raise ValueError(f"{folder}: snapshots have {rho.shape[1]} cells but mesh.npz has {mesh.n_cells}")
    return RunSnapshots(folder, "mesh" if rho is not None else "particles", ts, rho, X, mesh, complete)

