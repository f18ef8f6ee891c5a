"""The figures of ``spherepde compare``, and the command's driver :func:`compare_runs`.

:mod:`spherepde.runs.compare` checks the runs and computes the differences (nothing
drawn); here they are drawn (:func:`compare_figures`: overlays with the differences below,
the distances of coupled runs, short legend labels) and :func:`compare_runs` writes the
figures and the tables into the output folder.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import replace
from pathlib import Path

from spherepde.model.columns import distance_columns
from spherepde.runs.compare import CompareResult, comparison, file_stem, write_tables
from spherepde.viz import plots

__all__ = ["compare_runs", "compare_figures", "short_labels", "LABEL_WIDTH"]

log = logging.getLogger(__name__)


def compare_runs(folders, out=None, *, force: bool = False, formats=("png",), dpi: int = 150) -> CompareResult:
    """Compare run folders that share one weight path (:mod:`spherepde.runs.compare`) and
    write the figures and tables into ``out``.

    Parameters
    ----------
    folders : run folders (at least two, or one coupled run), the first is the reference.
    out : output folder (default :func:`spherepde.runs.compare.default_out`); a non-empty
        one is refused unless ``force``.
    force : go on when the weight paths differ (warning everywhere) and write into a
        non-empty output folder (only the comparison's own files are replaced).
    formats : figure formats (png, pdf, svg).

    Raises :class:`~spherepde.runs.compare.CompareError` (bad input, nothing written) and
    FileNotFoundError.
    """
    c = comparison(folders, out, force=force, dpi=dpi)
    created = _new_folders(c.out)
    try:
        c.out.mkdir(parents=True, exist_ok=True)
        files = compare_figures(c.tracks, c.diffs, c.reference, c.out, c.alignment, c.warnings, formats, dpi)
        return write_tables(c, files)
    except BaseException as exc:  # a full disk, Ctrl-C: the folders made here go again (with what was written into them)
        for folder in created:
            shutil.rmtree(folder, ignore_errors=True)
        if isinstance(exc, OSError):
            where = exc.filename or c.out
            raise OSError(f"cannot write {where}: {exc.strerror or exc}"
                          + ("; nothing was kept" if created else "")) from None
        raise


def _new_folders(out: Path) -> list[Path]:
    """The folders ``out.mkdir(parents=True)`` would create, outermost first."""
    new, p = [], Path(out).absolute()
    while not p.exists() and p != p.parent:
        new.append(p)
        p = p.parent
    return new[::-1][:1]


#: The longest run name a legend shows (longer ones keep their start and end around "…").
LABEL_WIDTH = 32


def _word_cuts(name: str) -> list[int]:
    return [0] + [i + 1 for i, ch in enumerate(name) if ch in "-_ ./"] + [len(name)]


def _shorten(names: list[str], width: int = LABEL_WIDTH) -> list[str]:
    """Short, distinct legend names for run names: the words all names share at their start
    and end are dropped (when that leaves every name non-empty and distinct), then names
    longer than ``width`` keep their start and end around "…"; "run 1", "run 2", ... if
    that is not enough to tell them apart."""
    names = [str(n) for n in names]
    if len(names) > 1:
        pre = min((i for i in _word_cuts(names[0]) if all(n[:i] == names[0][:i] and i < len(n) for n in names)), key=lambda i: -i, default=0)
        rev = [n[::-1] for n in names]
        suf = min((i for i in _word_cuts(rev[0]) if all(r[:i] == rev[0][:i] and i < len(r) for r in rev)), key=lambda i: -i, default=0)
        cut = [n[pre: len(n) - suf].strip("-_ ./") for n in names]
        if all(cut) and len(set(cut)) == len(cut):
            names = cut
    half = (width - 1) // 2
    out = [n if len(n) <= width else n[:half] + "…" + n[len(n) - (width - 1 - half):] for n in names]
    return out if len(set(out)) == len(out) else [f"run {k + 1}" for k in range(len(out))]


def short_labels(tracks) -> dict[str, str]:
    """Legend labels of compared tracks (full label -> short one): one coupled run gives
    "mesh" and "tokens"; several runs their shortened names (": mesh" / ": tokens" for the
    tracks of a coupled run, " (solver)" when the name does not say it). The full names
    stay in differences.md and compare.json."""
    order: list = []
    for tr in tracks:
        if not any(tr.series is s for s in order):
            order.append(tr.series)
    coupled = {id(s) for s in order if sum(tr.series is s for tr in tracks) > 1}

    def solver(s) -> str:
        return str(s.config.get("run", {}).get("solver") or "")

    def run_name(s) -> str:
        tr = next(t for t in tracks if t.series is s)
        if id(s) in coupled:
            return tr.label.rsplit(": ", 1)[0]
        tail = f" ({solver(s)})"  # solver_tracks: "<name> (<solver>)"; the solver is added back below
        return tr.label[: -len(tail)] if solver(s) and tr.label.endswith(tail) else tr.label

    short = _shorten([run_name(s) for s in order]) if len(order) > 1 else [""]
    labels = {}
    for tr in tracks:
        i = next(k for k, s in enumerate(order) if tr.series is s)
        if id(tr.series) in coupled:
            part = "tokens" if tr.prefix else "mesh"
        else:
            part = solver(tr.series) if solver(tr.series) and solver(tr.series) not in short[i] else ""
        labels[tr.label] = (f"{short[i]} ({part})" if short[i] and part and id(tr.series) not in coupled
                            else ": ".join(x for x in (short[i], part) if x)) or tr.label
    return labels


def compare_figures(tracks, diffs, ref_label, out: Path, alignment, warnings, formats, dpi) -> list[Path]:
    """Draw the overlay figures (with the differences to the reference below) and the
    distances of coupled runs into ``out``; the files written."""
    short = short_labels(tracks)
    full, tracks = tracks, [replace(tr, label=short[tr.label]) for tr in tracks]
    diffs = {c: [(short.get(lab, lab), t, d) for lab, t, d in v] for c, v in diffs.items()}
    ref_label = short.get(ref_label, ref_label)
    how = "interpolated onto" if alignment["method"].startswith("linear") else "at"
    note = f"lower panels: difference to {ref_label} {how} its record times"
    if warnings:
        note = "DIFFERENT WEIGHT PATHS; " + note
    written: list[Path] = []
    for stem, panels in plots.PANELS.items():
        try:
            fig = plots.plot_columns(tracks, panels, plots.figure_title(stem, tracks[0].series.sign), differences={p.column: diffs.get(p.column, []) for p in panels}, reference=ref_label, note=note)
        except ValueError as exc:
            log.info("no %s figure: %s", stem, exc)
            continue
        written += plots._save(fig, out, stem, formats, dpi)
    seen = set()
    for tr in full:
        s = tr.series
        if id(s) in seen or not distance_columns(s.columns):
            continue
        seen.add(id(s))
        name = tr.label.split(":")[0] if ":" in tr.label else "run"
        try:
            written += plots._save(plots.plot_distances(s), out, f"distances-{file_stem(name)}", formats, dpi)
        except ValueError as exc:
            log.info("no distances figure for %s: %s", name, exc)
    return written
