"""Comparing runs that share one weight path: mesh against particles, two meshes, two integrators.

:func:`spherepde.viz.compare.compare_runs` answers "how far apart are these runs?" in one call:

1. **Tracks.** Each run folder gives one track (its diagnostics); a coupled run
   (``run.solver = "both"``) gives two, its mesh and its tokens (the ``p_`` columns); a
   Monte-Carlo folder gives the mean over its paths. The first track is the reference.
2. **Weight path.** The runs must have been driven by the same Theta_t: their
   ``weights.npz`` files must agree in grid step, heads, sign, H and d, and their
   matrices A and V must agree up to the end of the shortest path (Monte-Carlo
   folders: path by path). Otherwise :class:`CompareError`, or with ``force=True`` a
   loud warning that is also written into every output.
3. **Alignment.** The comparison uses the reference's record times inside the common
   time range. A track recorded at those times is read there; any other track is
   interpolated linearly onto them (and the outputs say so).
4. **Differences.** For every column the tracks share (energy, G2, the EDI residuals,
   the mean resultant, ...): the time average (trapezoid rule) and the maximum of
   |y - y_ref| (absolute), and the time average and maximum of the relative difference
   |y - y_ref| / s at each time, s = (|y| + |y_ref|)/2 with the floor REL_FLOOR x max s
   (so the maximum is never below the mean; at most 200 %). Where one side is ~0 throughout
   (the mean resultant of a symmetric density) no relative difference is given. The
   energy-balance residuals (:data:`~spherepde.model.columns.RESIDUAL_COLUMNS`, ``edi_*``) are
   measured against the energy scale instead: |y - y_ref| / max_t max(|E|, |E_ref|).
5. **Outputs** (in ``out``): overlay figures ``energy``, ``G2``, ``edi``,
   ``mean_resultant`` (each with the differences to the reference below), ``distances-NAME``
   for coupled runs, the table ``differences.md`` / ``differences.csv`` and
   ``compare.json`` (runs, weight-path check, alignment, table, files).

:func:`comparison` checks and computes (nothing written); :func:`write_tables` writes the
tables; ``spherepde compare`` (:func:`spherepde.viz.compare.compare_runs`) draws the figures
between the two. Whether a saved weight path fits a run is
:func:`spherepde.runs.branch.path_fit_error`.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from spherepde._base import atomic_write_text, load_arrays
from spherepde.model.columns import HEADLINE_COLUMNS, RESIDUAL_COLUMNS, compared, distance_columns, is_token_column
from spherepde.model.statistics import time_average
from spherepde.runs.runfolder import (
    DIAGNOSTICS_FILE,
    MC_TABLES,
    MONTE_CARLO,
    WEIGHTS_FILE,
    DiagnosticsError,
    RunFolder,
    check_recorded,
    read_diagnostics,
    run_config,
    run_kind,
)

__all__ = ["CompareError", "CompareResult", "Comparison", "comparison", "write_tables", "file_stem", "check_dpi", "DPI_RANGE", "MAX_PIXELS", "check_weight_paths", "default_out"]

log = logging.getLogger(__name__)

_TIME_TOL = 1e-9


class CompareError(ValueError):
    """The runs cannot be compared as given (one line: what is wrong and what to do)."""


@dataclass
class CompareResult:
    """What ``spherepde compare`` (:func:`spherepde.viz.compare.compare_runs`) found and wrote.

    out : the output folder; rows : the table (one dict per column and compared track);
    weight_path : the weight-path check; alignment : how the times were matched;
    warnings : what the outputs warn about; files : the files written.
    """

    out: Path
    rows: list
    weight_path: dict
    alignment: dict
    warnings: list = field(default_factory=list)
    files: list = field(default_factory=list)
    markdown: str = ""


# ================================================================ weight paths
def _fmt(x: float) -> str:
    return f"{float(x):.12g}"


def _weight_files(folder: Path, kind: str) -> list[Path]:
    if kind == MONTE_CARLO:
        return [p / WEIGHTS_FILE for p in RunFolder(folder).monte_carlo_paths()]
    return [folder / WEIGHTS_FILE]


def _read_path(file: Path) -> dict:
    try:
        with load_arrays(file) as z:
            keys = set(z.files)
            if not {"dt", "A", "V"} <= keys:
                raise CompareError(f"{file} is not a spherepde weight path (no dt/A/V arrays)")
            return {
                "dt": float(z["dt"]), "A": np.asarray(z["A"], float), "V": np.asarray(z["V"], float),
                "sign": float(z["sign"]) if "sign" in keys else None, "heads": str(z["heads"]) if "heads" in keys else None,
            }
    except CompareError:
        raise
    except (OSError, ValueError, EOFError) as exc:
        raise CompareError(f"cannot read the weight path {file}: {exc}") from None


def _path_differences(a: dict, b: dict) -> tuple[list[str], float]:
    """What differs between two weight paths (empty: the same up to the shorter one's end)
    and the time up to which they were compared."""
    probs = []
    if abs(a["dt"] - b["dt"]) > 1e-12 * max(1.0, a["dt"]):
        probs.append(f"grid step {_fmt(a['dt'])} vs {_fmt(b['dt'])}")
    if a["A"].shape[1:] != b["A"].shape[1:]:
        H1, d1 = a["A"].shape[1], a["A"].shape[2]
        H2, d2 = b["A"].shape[1], b["A"].shape[2]
        probs.append(f"H = {H1}, d = {d1} vs H = {H2}, d = {d2}")
    for key in ("heads", "sign"):
        if a[key] is not None and b[key] is not None and a[key] != b[key]:
            probs.append(f"{key} {a[key]} vs {b[key]}")
    K = min(len(a["A"]), len(b["A"]))
    t_end = (K - 1) * a["dt"]
    if not probs:
        for key in ("A", "V"):
            x, y = a[key][:K], b[key][:K]
            if x.shape != y.shape or not np.allclose(x, y, rtol=1e-10, atol=1e-12):
                diff = np.abs(x - y) if x.shape == y.shape else np.array([np.inf])
                k = int(np.argmax(diff.reshape(K, -1).max(axis=1))) if x.shape == y.shape else 0
                probs.append(f"{key} differs (max |Δ{key}| = {float(diff.max()):.3g}, first at t = {_fmt(k * a['dt'])})")
                break
    return probs, t_end


def check_weight_paths(folders, kinds) -> dict:
    """Whether the runs in ``folders`` were driven by one weight path.

    Returns {"same": bool, "compared_until": t, "problems": [...], "files": [...]}:
    every run's ``weights.npz`` against the first run's (Monte-Carlo folders path by path),
    up to the end of the shortest path.
    """
    groups = [_weight_files(Path(f), k) for f, k in zip(folders, kinds)]
    problems: list[str] = []
    files = [[str(p) for p in g] for g in groups]
    missing = [str(p) for g in groups for p in g if not p.is_file()]
    if missing or any(not g for g in groups):
        empty = [str(f) for f, g in zip(folders, groups) if not g]
        return {"same": False, "compared_until": None, "problems": [f"no weights.npz in {m}" for m in missing + empty], "files": files}
    t_end = math.inf
    ref = groups[0]
    for f, g in zip(folders[1:], groups[1:]):
        if len(g) != len(ref):
            problems.append(f"{f}: {len(g)} weight path(s) against {len(ref)} in {folders[0]}")
            continue
        for pa, pb in zip(ref, g):
            probs, te = _path_differences(_read_path(pa), _read_path(pb))
            t_end = min(t_end, te)
            problems += [f"{pa} vs {pb}: {p}" for p in probs]
    return {"same": not problems, "compared_until": None if math.isinf(t_end) else t_end, "problems": problems, "files": files}


# ================================================================ tracks and times
def _name(folder: Path) -> str:
    return Path(folder).resolve().name or "run"


def file_stem(name: str) -> str:
    """A run name as a file-name part: letters, digits and ._+- kept, anything else "_"."""
    return re.sub(r"[^A-Za-z0-9._+-]+", "_", name).strip("._") or "run"


def default_out(folders, *, cwd=None) -> Path:
    """``compare-<name1>-vs-<name2>[-vs-...]`` next to the first run (in its parent folder,
    or above a Monte-Carlo folder that holds it; ``cwd``: in that folder instead), never in
    the current folder by chance (one coupled run: ``compare-<name>-mesh-vs-particles``)."""
    names = [file_stem(_name(Path(f))) for f in folders]
    stem = f"compare-{names[0]}-mesh-vs-particles" if len(names) == 1 else "compare-" + "-vs-".join(names)
    if len(stem) > 120:
        stem = stem[:120].rstrip("-_")
    if cwd is not None:
        return Path(cwd) / stem
    from spherepde.runs.runfolder import run_folder_above

    first = Path(folders[0])
    parent = first.parent
    inside = run_folder_above(parent.resolve())
    while inside is not None:  # runs/mc/path-000: next to the Monte-Carlo folder, not inside it
        parent = Path(inside).parent
        inside = run_folder_above(parent.resolve())
    return parent / stem


def _columns(track) -> list[str]:
    """The columns of a track that compare compares (the registry's ``compare``; a token
    track: its columns without the prefix; never the distances between mesh and tokens)."""
    cols = track.series.columns
    dist = set(distance_columns(cols))
    if track.prefix:
        out = [c[len(track.prefix):] for c in cols if c.startswith(track.prefix)]
    else:
        out = [c for c in cols if not is_token_column(c) and c not in dist]
    return [c for c in out if compared(c) and track.defined(c)]


def _values(track, col: str) -> np.ndarray:
    return np.asarray(track.series.band(track.prefix + col).mean, float)


def _align(tracks) -> tuple[np.ndarray, list[np.ndarray | None], dict]:
    """The reference times inside the common range, and for every track the indices of
    those times in its own records (None: interpolated)."""
    ref_t = np.asarray(tracks[0].series.t, float)
    lo = max(float(np.nanmin(tr.series.t)) for tr in tracks)
    hi = min(float(np.nanmax(tr.series.t)) for tr in tracks)
    tol = _TIME_TOL * max(1.0, abs(hi))
    tgrid = ref_t[(ref_t >= lo - tol) & (ref_t <= hi + tol)]
    if tgrid.size < 2:
        raise CompareError(
            f"the runs share no time range with two records of {tracks[0].label or 'the first run'} "
            f"(common range [{_fmt(lo)}, {_fmt(hi)}]); compare runs that cover the same times"
        )
    index: list[np.ndarray | None] = []
    per: dict = {}
    for tr in tracks:
        t = np.asarray(tr.series.t, float)
        j = np.clip(np.searchsorted(t, tgrid), 0, len(t) - 1)
        jm = np.clip(j - 1, 0, len(t) - 1)
        best = np.where(np.abs(t[jm] - tgrid) < np.abs(t[j] - tgrid), jm, j)
        if np.all(np.abs(t[best] - tgrid) <= tol):
            index.append(best)
            per[tr.label] = "read at the common record times"
        else:
            index.append(None)
            per[tr.label] = "interpolated linearly onto the reference's record times"
    exact = all(i is not None for i in index)
    ref = tracks[0].label
    if exact:
        note = f"aligned on {tgrid.size} common record times in [{_fmt(tgrid[0])}, {_fmt(tgrid[-1])}]"
    else:
        interp = [lab for lab, how in per.items() if how.startswith("interpolated")]
        note = (f"aligned on the {tgrid.size} record times of {ref} in the common range [{_fmt(tgrid[0])}, {_fmt(tgrid[-1])}]; "
                f"{', '.join(interp)} interpolated linearly onto them")
    return tgrid, index, {"method": "common record times" if exact else "linear interpolation onto the reference's record times",
                          "reference": ref, "t_start": float(tgrid[0]), "t_end": float(tgrid[-1]), "times": int(tgrid.size),
                          "per_track": per, "note": note}


def _on_grid(track, col: str, tgrid: np.ndarray, idx) -> np.ndarray:
    y = _values(track, col)
    if idx is not None:
        return y[idx]
    t = np.asarray(track.series.t, float)
    ok = np.isfinite(y)
    if ok.sum() < 2:
        return np.full(tgrid.shape, np.nan)
    return np.interp(tgrid, t[ok], y[ok])


def _time_mean(t: np.ndarray, y: np.ndarray) -> float:
    """Time average (trapezoid rule, :func:`spherepde.model.statistics.time_average`) over the finite values of y."""
    ok = np.isfinite(y)
    return time_average(t[ok], y[ok])


#: Relative differences: the scale (|y| + |y_ref|)/2 at each time has the floor
#: REL_FLOOR x its maximum over the run (a quantity crossing zero is not divided by ~0).
REL_FLOOR = 1e-3
#: One side of a comparison is ~0 (e.g. by symmetry) when its largest |value| is at most
#: ZERO_SIDE x the other's: no relative difference is given then (it would read 200 %).
ZERO_SIDE = 1e-9


def _against_energy(ad, e_ref, e, t) -> tuple[float, float, str]:
    """(mean, max, note) over time of |y - y_ref| / max_t max(|E|, |E_ref|): a residual's difference
    against the energy scale of both runs (two residuals near zero are not divided by each other)."""
    scale = float(np.nanmax(np.abs(np.concatenate([np.asarray(e_ref, float), np.asarray(e, float)]))))
    ad = np.asarray(ad, float)
    fin = np.isfinite(ad)
    if not (fin.any() and math.isfinite(scale) and scale > 0):
        return math.nan, math.nan, ""
    rel = ad / scale
    return _time_mean(t, rel), float(np.max(rel[fin])), ""


def _relative(ad, yref, y, scale, t) -> tuple[float, float, str]:
    """(mean, max, note) over time of rel(t) = |y - y_ref| / max(scale(t), REL_FLOOR max scale):
    both of one definition, so max >= mean; NaN with a note when one side is ~0."""
    ar, ay = np.abs(np.asarray(yref, float)), np.abs(np.asarray(y, float))
    if not (np.any(np.isfinite(ar)) and np.any(np.isfinite(ay))):
        return math.nan, math.nan, ""
    mr, my = float(np.nanmax(ar)), float(np.nanmax(ay))
    if mr == 0.0 and my == 0.0:
        return 0.0, 0.0, ""
    if min(mr, my) <= ZERO_SIDE * max(mr, my):
        return math.nan, math.nan, ("reference" if mr <= my else "run") + " ~ 0 throughout (e.g. by symmetry): see the absolute differences"
    smax = float(np.nanmax(scale))
    rel = np.asarray(ad, float) / np.maximum(scale, REL_FLOOR * smax)
    fin = np.isfinite(rel)
    if not fin.any():
        return math.nan, math.nan, ""
    return _time_mean(t, rel), float(np.max(rel[fin])), ""


# ================================================================ the comparison
#: Resolution of the figures (dots per inch) and the largest image they may make: the
#: tallest figure (edi: two panels and their differences) is 6.4 x 11.4 inches.
DPI_RANGE = (10, 1200)
_MAX_FIGURE_INCHES = (6.4, 11.4)
MAX_PIXELS = 2**27


def check_dpi(dpi) -> int:
    """``dpi`` as an int in :data:`DPI_RANGE` whose largest figure stays under
    :data:`MAX_PIXELS`; :class:`CompareError` otherwise (checked before anything is written)."""
    lo, hi = DPI_RANGE
    w, h = (round(x * dpi) if isinstance(dpi, (int, float)) and math.isfinite(dpi) else 0 for x in _MAX_FIGURE_INCHES)
    if isinstance(dpi, bool) or not isinstance(dpi, int) or not lo <= dpi <= hi or w * h > MAX_PIXELS:
        size = f" (at {dpi} dpi the largest figure would be {w} x {h} pixels)" if w * h > MAX_PIXELS else ""
        raise CompareError(f"--dpi {dpi!r}: expected a whole number of dots per inch from {lo} to {hi}{size}; e.g. --dpi 150")
    return dpi


def _check_diagnostics(path: Path) -> None:
    """A diagnostics table must parse (:func:`spherepde.runs.runfolder.read_diagnostics`: a
    header with 't' and rows of numbers; an unfinished last line of a run still writing is
    left out) and hold a record; CompareError naming the file and row."""
    try:
        table = read_diagnostics(path)
        if len(table["t"]):
            check_recorded(path, table)  # a completed run must hold all its rows
    except DiagnosticsError as exc:
        raise CompareError(str(exc)) from None
    except OSError as exc:
        raise CompareError(f"{path} cannot be read as a diagnostics table ({' '.join(str(exc).split())}); the run folder is damaged") from None
    if len(table["t"]) == 0:
        raise CompareError(f"{path} holds no records yet; compare runs that have recorded diagnostics")


def _check_parts(folder: Path) -> None:
    """The run's files (arrays with the safe loader, config.toml, summary.json), checked before anything is read or written."""
    from spherepde.runs.dataset import RunFileError, check_run_parts

    try:
        check_run_parts(folder)
    except RunFileError as exc:
        raise CompareError(str(exc)) from None


def _check_folder(folder: Path, kind: str) -> None:
    """The diagnostics tables compare reads, checked before anything is read or written."""
    if kind == MONTE_CARLO:
        files = [p / DIAGNOSTICS_FILE for p in RunFolder(folder).monte_carlo_paths() if (p / DIAGNOSTICS_FILE).is_file()]
        files += [folder / name for name in MC_TABLES.values() if (folder / name).is_file()]
    else:
        files = [folder / DIAGNOSTICS_FILE] if (folder / DIAGNOSTICS_FILE).is_file() else []
    for f in files:
        _check_diagnostics(f)


def _tracks(folders):
    from spherepde.runs.series import load_series, solver_tracks

    tracks, runs, kinds = [], [], []
    names = [_name(Path(f)) for f in folders]
    if len(set(names)) < len(names):  # runs/a/run and runs/b/run: tell them apart
        names = [str(Path(f)) for f in folders]
    for f, name in zip(folders, names):
        folder = Path(f)
        if not folder.is_dir():
            raise FileNotFoundError(f"run folder {folder} " + ("is a file, not a run folder" if folder.exists() else "does not exist"))
        _check_parts(folder)  # before anything of it is read
        kind = run_kind(folder)
        _check_folder(folder, kind)
        s = load_series(folder)
        trs = solver_tracks(s, name)
        tracks += trs
        kinds.append(kind)
        cfg = run_config(folder)
        runs.append({"folder": str(folder.resolve()), "name": name, "kind": kind, "solver": cfg.get("run", {}).get("solver"),
                     "attention": cfg.get("model", {}).get("attention", "softmax"),
                     "label": s.label, "paths": s.n_paths if s.is_ensemble else 1, "tracks": [t.label for t in trs]})
    return tracks, runs, kinds


def _check_out(out: Path, force: bool) -> None:
    from spherepde.runs.runfolder import run_folder_above

    inside = run_folder_above(out.resolve())
    if inside is not None:
        raise CompareError(f"--out {out} lies inside the run folder {inside}; only 'spherepde run' and 'resume' write into a run folder -- choose another --out")
    if out.exists() and not out.is_dir():
        raise CompareError(f"--out {out} is a file; give a folder")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise CompareError(f"output folder {out} exists and is not empty; choose another --out, or pass --force to write into it")
    p = out
    while not p.exists() and p != p.parent:
        p = p.parent
    if p.exists() and not p.is_dir():
        raise CompareError(f"--out {out}: {p} is a file, not a folder")


@dataclass
class Comparison:
    """What :func:`comparison` found, before anything is written: the output folder, the
    tracks (the first is the reference), the differences per column ``{column: [(label, t,
    y - y_ref)]}`` for the figures, and the table, checks and notes for the outputs."""

    out: Path
    tracks: list
    diffs: dict
    alignment: dict
    warnings: list
    rows: list
    markdown: str
    doc: dict
    weight_path: dict

    @property
    def reference(self) -> str:
        return self.tracks[0].label


def comparison(folders, out=None, *, force: bool = False, dpi: int = 150) -> Comparison:
    """Check and compare run folders that share one weight path (see the module docstring);
    nothing is written. ``spherepde compare`` (:func:`spherepde.viz.compare.compare_runs`)
    then draws the figures and writes the tables (:func:`write_tables`).

    Parameters
    ----------
    folders : run folders (at least two, or one coupled run), the first is the reference.
    out : output folder (default :func:`default_out`); a non-empty one is refused unless
        ``force``.
    force : go on when the weight paths differ (warning everywhere) and write into a
        non-empty output folder (only the comparison's own files are replaced).

    Raises :class:`CompareError` (bad input) and FileNotFoundError.
    """
    check_dpi(dpi)
    folders = [Path(f) for f in folders]
    if not folders:
        raise CompareError("give at least two run folders (or one run.solver = 'both' run)")
    resolved = [f.resolve() for f in folders]
    if len(set(resolved)) != len(resolved):
        raise CompareError("the same run folder is given twice; give different runs")
    tracks, runs, kinds = _tracks(folders)
    if len(tracks) < 2:
        raise CompareError(f"only one run to compare ({folders[0]}); give a second run folder (or a run.solver = 'both' run)")
    out = Path(out) if out is not None else default_out(folders)
    _check_out(out, force)
    warnings: list[str] = []
    wcheck = check_weight_paths(folders, kinds) if len(folders) > 1 else {"same": True, "compared_until": None, "problems": [], "files": [], "note": "one coupled run: mesh and tokens share its weight path"}
    if not wcheck["same"]:
        msg = "the runs were NOT driven by the same weight path: " + "; ".join(wcheck["problems"][:4]) + (" ..." if len(wcheck["problems"]) > 4 else "")
        if not force:
            raise CompareError(msg + " -- branch the second run from the first one's weights.npz (--set weights.process=file --set weights.path_file=RUN/weights.npz), or pass --force to compare anyway")
        msg += "; the differences mix the solvers' error with the difference of the weights"
        warnings.append("WARNING: " + msg)
        log.warning("%s", msg)
    kinds_of_attention = sorted({r["attention"] for r in runs})
    if len(kinds_of_attention) > 1:  # a legitimate comparison of two models, never of two solvers of one
        msg = (f"the runs use different attention ({' vs '.join(kinds_of_attention)}, model.attention): the differences are "
               "those of the two models, not errors of a solver")
        warnings.append("WARNING: " + msg)
        log.warning("%s", msg)
    tgrid, index, alignment = _align(tracks)
    if alignment["method"] != "common record times":
        log.info("%s", alignment["note"])
    ref = tracks[0]
    shared = [c for c in _columns(ref) if all(c in _columns(tr) for tr in tracks[1:])]
    shared = [c for _, c in sorted(enumerate(shared), key=lambda ic: (HEADLINE_COLUMNS.index(ic[1]) if ic[1] in HEADLINE_COLUMNS else len(HEADLINE_COLUMNS), ic[0]))]
    if not shared:
        raise CompareError("the runs share no diagnostics column to compare")
    ref_vals = {c: _on_grid(ref, c, tgrid, index[0]) for c in shared}
    rows, diffs = [], {}
    for tr, idx in zip(tracks[1:], index[1:]):
        for c in shared:
            y = _on_grid(tr, c, tgrid, idx)
            d = y - ref_vals[c]
            ad = np.abs(d)
            fin = np.isfinite(ad)
            mean_abs = _time_mean(tgrid, ad)
            max_abs = float(np.max(ad[fin])) if fin.any() else math.nan
            t_max = float(tgrid[fin][np.argmax(ad[fin])]) if fin.any() else math.nan
            ref_abs = 0.5 * (np.abs(ref_vals[c]) + np.abs(y))  # symmetric scale: finite when y_ref ~ 0
            ref_mean = _time_mean(tgrid, ref_abs)
            ref_max = float(np.nanmax(ref_abs)) if np.any(np.isfinite(ref_abs)) else math.nan
            if c in RESIDUAL_COLUMNS and "energy" in shared:  # residuals: against the energy scale, not each other
                rel_mean, rel_max, rel_note = _against_energy(ad, ref_vals["energy"], _on_grid(tr, "energy", tgrid, idx), tgrid)
                rel_to = "max |E|"
            else:
                rel_mean, rel_max, rel_note = _relative(ad, ref_vals[c], y, ref_abs, tgrid)
                rel_to = "s(t)"
            rows.append({
                "column": c, "track": tr.label, "reference": ref.label,
                "mean_abs_diff": mean_abs, "max_abs_diff": max_abs, "t_at_max": t_max, "final_diff": float(d[-1]),
                "ref_mean_abs": ref_mean, "ref_max_abs": ref_max,
                "rel_mean_diff": rel_mean, "rel_max_diff": rel_max, "rel_note": rel_note, "rel_to": rel_to,
            })
            diffs.setdefault(c, []).append((tr.label, tgrid, d))
    dist_rows = _distance_rows(tracks)
    markdown = _markdown(rows, alignment, wcheck, warnings, runs, dist_rows)
    doc = {
        "runs": runs, "reference": ref.label, "tracks": [t.label for t in tracks], "weight_path": wcheck, "forced": bool(force and not wcheck["same"]),
        "alignment": alignment, "columns": shared, "differences": rows, "distances": dist_rows, "warnings": warnings, "files": [],
        "relative": (f"rel(t) = |y - y_ref| / max(s(t), {REL_FLOOR:g} max_t s), s = (|y| + |y_ref|)/2; rel_mean_diff / rel_max_diff = its time average / "
                     "maximum (so max >= mean); none when one side is ~0 throughout (rel_note). ref_mean_abs / ref_max_abs: time average / maximum of s. "
                     f"Residual columns ({', '.join(RESIDUAL_COLUMNS)}; rel_to = 'max |E|'): rel(t) = |y - y_ref| / max_t max(|E|, |E_ref|), "
                     "the energy scale of both runs, since two residuals near zero are compared by how far apart they are in energy"),
    }
    return Comparison(out, tracks, diffs, alignment, warnings, rows, markdown, doc, wcheck)


def write_tables(c: Comparison, figures: list[Path]) -> CompareResult:
    """Write ``differences.md``, ``differences.csv`` and ``compare.json`` (listing the
    ``figures`` already drawn) into ``c.out``."""
    from spherepde.runs.files import jsonable

    out = c.out
    atomic_write_text(out / "differences.md", c.markdown)
    atomic_write_text(out / "differences.csv", _csv(c.rows))
    files = [*figures, out / "differences.md", out / "differences.csv", out / "compare.json"]
    doc = {**c.doc, "files": [str(p) for p in files]}
    atomic_write_text(out / "compare.json", json.dumps(jsonable(doc), indent=2))
    return CompareResult(out, c.rows, c.weight_path, c.alignment, c.warnings, files, c.markdown)




def _e(x) -> str:
    return "–" if x is None or not math.isfinite(x) else f"{x:.3e}"


def _pct(x) -> str:
    return "–" if x is None or not math.isfinite(x) else f"{100 * x:.3g} %"


def _distance_rows(tracks) -> list[dict]:
    """The mesh-versus-token distances of coupled runs with their floor: the value at t = 0,
    where the tokens are drawn from the density (sampling and smoothing, not disagreement)."""
    from spherepde.runs.series import distance_floor

    out, seen = [], set()
    for tr in tracks:
        s = tr.series
        if id(s) in seen:
            continue
        seen.add(id(s))
        for c in distance_columns(s.columns):
            v = np.asarray(s.band(c).mean, float)
            fin = np.isfinite(v)
            if not fin.any():
                continue
            floor = distance_floor(s, c)
            run = tr.label.rsplit(": ", 1)[0]
            out.append({"run": run, "column": c, "at_t0": floor, "final": float(v[fin][-1]), "max": float(np.max(v[fin])),
                        "final_minus_t0": float(v[fin][-1]) - floor})
    return out


def _markdown(rows, alignment, wcheck, warnings, runs, distances=()) -> str:
    lines = ["# Differences between runs", ""]
    for w in warnings:
        lines += [f"**{w}**", ""]
    lines.append("Runs: " + "; ".join(f"`{r['name']}` ({r['label'] or r['kind']})" for r in runs) + ".")
    lines.append(f"Reference: {alignment['reference']}. Times: {alignment['note']}.")
    if wcheck.get("same"):
        until = wcheck.get("compared_until")
        lines.append("Weight path: the same" + (f" (checked up to t = {_fmt(until)})" if until is not None else "") + ".")
    lines += [
        "",
        f"Δ = y − y_ref on the aligned times; mean = time average (trapezoid rule); relative: |Δ(t)| / s(t) at each time, s = (|y| + |y_ref|)/2 "
        f"with the floor {REL_FLOOR:g} × max s, then its time average and maximum (at most 200 %; – where one side is ~0 throughout, e.g. by symmetry). "
        "The energy-balance residuals (edi_*, marked ‖E‖) are relative to the energy scale max |E| of both runs instead: two residuals near "
        "zero are compared by how far apart they are in energy, not relative to each other.",
        "",
        "| column | run | mean abs Δ | max abs Δ | at t | mean rel Δ | max rel Δ | Δ at end |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        mark = " ‖E‖" if r.get("rel_to") == "max |E|" else ""
        lines.append(f"| {r['column']}{mark} | {r['track']} | {_e(r['mean_abs_diff'])} | {_e(r['max_abs_diff'])} | {_fmt(r['t_at_max']) if math.isfinite(r['t_at_max']) else '–'} "
                     f"| {_pct(r['rel_mean_diff']) if not r.get('rel_note') else '– (' + r['rel_note'].split(' (')[0] + ')'} | {_pct(r['rel_max_diff'])} | {_e(r['final_diff'])} |")
    if distances:
        lines += [
            "", "## Distances between the mesh and its tokens", "",
            "At t = 0 the tokens are drawn from the density, so the value there is the distance's floor (sampling and, for l1_hist, "
            "the smoothing of the token histogram), not a disagreement: read the later values against it.", "",
            "| run | distance | at t = 0 (floor) | at end | end − floor | max |", "|---|---|---|---|---|---|",
        ]
        for r in distances:
            lines.append(f"| {r['run']} | {r['column']} | {_e(r['at_t0'])} | {_e(r['final'])} | {_e(r['final_minus_t0'])} | {_e(r['max'])} |")
    return "\n".join(lines) + "\n"


def _csv(rows) -> str:
    buf = io.StringIO()
    cols = ["column", "track", "reference", "mean_abs_diff", "max_abs_diff", "t_at_max", "final_diff", "ref_mean_abs", "ref_max_abs", "rel_mean_diff", "rel_max_diff",
            "rel_note", "rel_to"]
    w = csv.writer(buf)
    w.writerow(cols)
    for r in rows:
        w.writerow([(repr(float(r[c])) if math.isfinite(r[c]) else "") if isinstance(r[c], float) else r[c] for c in cols])
    return buf.getvalue()
