"""Running the validation studies and writing their report (the library behind ``spherepde validate``).

    spherepde validate [--smoke | --quick | --full] [--out DIR] [--only NAME ...] [--force]

Runs the validation studies of the ``validation`` package (one module per name in
``spherepde.studies.STUDIES``; see ``spherepde/studies/__init__.py`` for the protocol): for each study
``results = module.run(size)`` and ``figures = module.plot(results, OUT/"figures")``,
then writes ``OUT/report.md`` (title, date, versions, machine; per study its title,
summary, solver checks, paper claims, key-number tables, figures and wall time) and
``OUT/report.json`` (every number). A study module that is not present is reported as
missing; a study that raises is reported with its error and the others still run; a
study whose precondition fails (``StudyPreconditionError``: non-finite numbers, too few
levels...) is reported as an error with its one-line message.

Two kinds of outcome are counted apart, and the headline, the overview and the CLI's
one-line summary are all derived from the same booleans:

* **solver checks** (``results["checks"]``: ``{name: {passed, measured, expected, lo, hi,
  tolerance}}``, see :func:`spherepde.studies.common.solver_check`) -- must pass; each
  compares a measured number with an analytic value, a reference or an expected order;
* **paper claims** (``results["claims"]``: ``{name: {reproduced, value, interval,
  paper_value, statement}}``, see :func:`spherepde.studies.common.paper_claim`) --
  reproduced or not (the 95% interval contains the paper's value or not); never a pass or
  a failure of the solver.

A study that still returns bare booleans as checks is accepted (measured value unknown).

Exit status: 0 the studies ran and every solver check passed (paper claims not reproduced are
findings: listed in the report and in a one-line summary on stderr), 3 a solver check failed,
1 a study raised an error, 2 bad options or an existing non-empty output folder without
``--force`` (nothing is written), 130 interrupted (Ctrl-C: the studies that finished are in a
partial report).

Before the first study the expected duration is printed: the sum of :data:`ESTIMATED_WALL_S`
over the studies run, an estimate from recorded runs on an idle machine.
"""

from __future__ import annotations

import datetime as _dt
import importlib
import importlib.util
import logging
import math
import os
import platform
import shutil
import sys
import time
import traceback
from pathlib import Path

from spherepde.studies import SIZES

__all__ = ["SIZES", "DEFAULT_OUT", "OutputExistsError", "ValidationInterrupted", "ESTIMATED_WALL_S", "estimated_wall_s", "headline",
           "render_markdown", "run_validation", "studies"]

log = logging.getLogger(__name__)

DEFAULT_OUT = "validation-report"


class OutputExistsError(FileExistsError):
    """The output folder exists and is not empty (pass ``force=True`` / ``--force``)."""


class ValidationInterrupted(KeyboardInterrupt):
    """Ctrl-C during the studies: ``report`` (the studies that finished; ``meta["interrupted"]``
    names the one that was running and those not run) was written to ``out``."""

    def __init__(self, report: dict, out: Path):
        super().__init__(str(out))
        self.report, self.out = report, Path(out)


#: Wall seconds of each study at each size, an estimate: quick and full from the recorded
#: reports under validation/ (idle machine, 2 cores); smoke rough (one interrupted
#: ``validate --smoke`` on a loaded machine, scaled by its load). Load and another machine change
#: them, and ``--set`` changes of a size are not taken into account.
ESTIMATED_WALL_S = {
    "analytic": {"smoke": 15, "quick": 20, "full": 20},
    "structure": {"smoke": 20, "quick": 30, "full": 130},
    "mesh_vs_particles": {"smoke": 30, "quick": 90, "full": 1800},
    "paper_section6": {"smoke": 120, "quick": 170, "full": 3050},
    "stability": {"smoke": 30, "quick": 30, "full": 1930},
    "mesh_convergence": {"smoke": 30, "quick": 470, "full": 4540},
    "work_precision": {"smoke": 30, "quick": 410, "full": 1550},
    "metastability": {"smoke": 30, "quick": 50, "full": 200},
    "circle": {"smoke": 40, "quick": 170, "full": 1600},
    "noise": {"smoke": 70, "quick": 410, "full": 2400},
}


def estimated_wall_s(size: str, names) -> float | None:
    """The estimated wall time of ``names`` at ``size`` (sum of :data:`ESTIMATED_WALL_S`); None
    when a study has no estimate."""
    try:
        return float(sum(ESTIMATED_WALL_S[n][size] for n in names))
    except KeyError:
        return None


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def studies() -> tuple[str, ...]:
    from spherepde.studies import STUDIES

    return tuple(STUDIES)


def _machine() -> dict:
    info = {
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
    }
    try:
        import numba
        import numpy
        import scipy

        info.update(numpy=numpy.__version__, scipy=scipy.__version__, numba=numba.__version__, numba_threads=numba.get_num_threads())
    except Exception as exc:  # noqa: BLE001  # pragma: no cover - reporting only
        log.debug("library versions unavailable: %s", exc)
    try:
        info["load_average_1min"] = os.getloadavg()[0]
    except (AttributeError, OSError):  # pragma: no cover - not on every platform
        pass
    return info


def _progress_printer(enabled: bool):
    def say(msg: str) -> None:
        if enabled:
            print(msg, file=sys.stderr, flush=True)

    return say


def run_validation(
    size: str = "quick", out=DEFAULT_OUT, only=None, *, force: bool = False, progress: bool = True, verbose: bool = False,
    overrides: dict | None = None,
) -> dict:
    """Run the validation studies and write ``out/report.md`` and ``out/report.json``.

    Parameters
    ----------
    size : ``"smoke"``, ``"quick"`` or ``"full"`` (each study's ``SIZES`` entry).
    out : output folder; created if needed. It must be absent or empty unless ``force``.
    only : iterable of study names (default: every name in ``spherepde.studies.STUDIES``).
    force : write into an existing non-empty folder (files of the same name are
        overwritten; nothing else is deleted).
    progress : print which study is running to stderr.
    verbose : also pass ``verbose=True`` to every study, which then prints one line per
        run it finishes (a progress trace for the long ``--full`` studies).
    overrides : ``{study name: {parameter: value}}``, passed to that study's
        ``run(size, **parameters)`` (for a partial rerun, e.g. one regime of a full study);
        recorded in ``meta["overrides"]``. Each name must be among the studies run.

    Returns
    -------
    dict : the report (also written to ``report.json``): ``meta``, ``studies``
        ({name: {status, title, summary, checks, claims, results, figures, wall_s, error}}),
        ``failed_checks`` ([(study, check)]), ``claims_not_reproduced`` ([(study, claim)]),
        ``counts`` ({checks_passed, checks_total, claims_reproduced, claims_total}),
        ``missing``, ``errors``.

    Raises
    ------
    ValueError : unknown size or study name.
    OutputExistsError : ``out`` exists and is not empty and ``force`` is False.
    """
    names, overrides = _selected(size, only, overrides)
    out = Path(out)
    _check_out(out, force)
    fig_dir = out / "figures"
    created = not out.exists()
    try:
        fig_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputExistsError(f"cannot create the output folder {str(out)!r}: {exc.strerror or exc}; choose another --out") from None
    say = _progress_printer(progress)

    report: dict = {"meta": _meta(size, names, overrides), "studies": {}}
    expected = estimated_wall_s(size, names)
    if expected is not None:
        say(f"validate ({size}): {len(names)} studies, estimated {_duration(expected)} on an idle machine (an estimate from recorded runs; "
            "load makes it longer); Ctrl-C writes a partial report of the studies that finished")
    t_all = time.perf_counter()
    try:
        _run_all(report, names, size, overrides, verbose, fig_dir, out, say)
    except KeyboardInterrupt:
        running = next((n for n, e in report["studies"].items() if "status" not in e), None)
        report["studies"].pop(running, None)
        report["meta"]["interrupted"] = {"during": running, "not_run": [n for n in names if n not in report["studies"]]}
        report["meta"]["wall_s"] = time.perf_counter() - t_all
        _tally(report)
        _write_report(report, out, created)
        raise ValidationInterrupted(report, out) from None
    report["meta"]["wall_s"] = time.perf_counter() - t_all
    try:  # other work on the machine inflates every wall time: say how busy it was
        report["meta"]["machine"]["load_average_1min_end"] = os.getloadavg()[0]
    except (AttributeError, OSError):  # pragma: no cover - not on every platform
        pass
    _tally(report)
    _write_report(report, out, created)
    return report


def _run_all(report: dict, names: list[str], size: str, overrides: dict, verbose: bool, fig_dir: Path, out: Path, say) -> None:
    """Run and plot each study into ``report["studies"]`` (an entry without ``status`` is the one running)."""
    for i, name in enumerate(names, 1):
        entry: dict = {"name": name}
        report["studies"][name] = entry
        tag = f"[{i}/{len(names)}] {name}"
        mod = _run_study(entry, name, size, overrides, verbose, tag, say)
        if mod is None:
            continue
        _plot_study(entry, mod, fig_dir, out, tag, say)
        say(f"{tag}: done in {entry['wall_s']:.1f} s, {_outcome(entry)}")


def _selected(size: str, only, overrides: dict | None) -> tuple[list[str], dict]:
    """The study names to run and a copy of their overrides; ValueError on unknown size, name or override."""
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; use one of {', '.join(SIZES)}")
    known = studies()
    names = list(known) if not only else list(dict.fromkeys(only))
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown study {', '.join(map(repr, unknown))}; known studies: {', '.join(known)}")
    overrides = {k: dict(v) for k, v in (overrides or {}).items()}
    stray = [k for k in overrides if k not in names]
    if stray:
        raise ValueError(f"overrides for {', '.join(map(repr, stray))}, which is not among the studies run ({', '.join(names)})")
    for name, kv in overrides.items():
        _check_overrides(name, size, kv)
    return names, overrides


def _meta(size: str, names: list[str], overrides: dict) -> dict:
    """The report's ``meta`` block: title, date, version, size, machine, studies requested, overrides."""
    from spherepde._base import __version__

    return {
        "title": "spherepde validation report",
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "spherepde_version": __version__,
        "size": size,
        "machine": _machine(),
        "studies_requested": names,
        "overrides": overrides,
    }


def _run_study(entry: dict, name: str, size: str, overrides: dict, verbose: bool, tag: str, say):
    """Import and run one study, filling ``entry``; the module, or None when missing or raising."""
    from spherepde.studies.common import StudyPreconditionError

    modname = f"spherepde.studies.{name}"
    if importlib.util.find_spec(modname) is None:
        entry.update(status="missing", error=f"module {modname} is not present")
        say(f"{tag}: module {modname} is missing -- skipped")
        return None
    say(f"{tag}: running ({size}) ...")
    t0 = time.perf_counter()
    try:
        mod = importlib.import_module(modname)
        entry["title"] = getattr(mod, "TITLE", name)
        kw = dict(overrides.get(name, {}))
        if verbose:
            kw["verbose"] = True
        results = mod.run(size, **kw)
    except StudyPreconditionError as exc:
        entry.update(status="error", error=f"precondition failed: {exc}", precondition=True, wall_s=time.perf_counter() - t0)
        say(f"{tag}: ERROR after {entry['wall_s']:.1f} s: {entry['error']}")
        return None
    except Exception as exc:  # noqa: BLE001 - a broken study must not stop the others
        entry.update(status="error", error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc(), wall_s=time.perf_counter() - t0)
        say(f"{tag}: ERROR after {entry['wall_s']:.1f} s: {entry['error']}")
        return None
    entry["wall_s"] = time.perf_counter() - t0
    entry.update(
        status="ok",
        results=results,
        summary=results.get("summary", ""),
        checks={k: _normalise_check(v) for k, v in results.get("checks", {}).items()},
        claims=dict(results.get("claims", {})),
    )
    entry["title"] = results.get("title", entry["title"])
    return mod


def _plot_study(entry: dict, mod, fig_dir: Path, out: Path, tag: str, say) -> None:
    """``entry["figures"]`` from ``mod.plot`` (paths relative to ``out``); a failing plot keeps the numbers."""
    try:
        figs = mod.plot(entry["results"], fig_dir) or []
        entry["figures"] = [os.path.relpath(Path(f), out) for f in figs]
    except Exception as exc:  # noqa: BLE001 - a broken plot must not lose the numbers
        entry["figures"] = []
        entry["plot_error"] = f"{type(exc).__name__}: {exc}"
        say(f"{tag}: plotting failed: {entry['plot_error']}")


def _tally(report: dict) -> None:
    """Add ``failed_checks``, ``claims_not_reproduced``, ``counts``, ``missing`` and ``errors`` to ``report``."""
    entries = report["studies"]
    report["failed_checks"] = [[n, k] for n, e in entries.items() for k, v in e.get("checks", {}).items() if not v["passed"]]
    report["claims_not_reproduced"] = [[n, k] for n, e in entries.items() for k, v in e.get("claims", {}).items() if not v["reproduced"]]
    report["counts"] = {
        "checks_passed": sum(v["passed"] for e in entries.values() for v in e.get("checks", {}).values()),
        "checks_total": sum(len(e.get("checks", {})) for e in entries.values()),
        "claims_reproduced": sum(v["reproduced"] for e in entries.values() for v in e.get("claims", {}).values()),
        "claims_total": sum(len(e.get("claims", {})) for e in entries.values()),
    }
    report["missing"] = [n for n, e in entries.items() if e["status"] == "missing"]
    report["errors"] = {n: e["error"] for n, e in entries.items() if e["status"] == "error"}


def _write_report(report: dict, out: Path, created: bool) -> None:
    """Write ``report.md`` and ``report.json`` in ``out``, both or neither (a folder made here is removed on failure)."""
    from spherepde._base import atomic_write_text
    from spherepde.studies.common import save_json

    try:  # both or neither: a full disk leaves no partial report (and no folder made here)
        atomic_write_text(out / "report.md", render_markdown(report))
        save_json(report, out / "report.json")
    except OSError as exc:
        (out / "report.md").unlink(missing_ok=True)
        if created:
            shutil.rmtree(out, ignore_errors=True)
        raise OSError(f"cannot write the report in {out}: {exc.strerror or exc}; nothing was kept"
                      if created else f"cannot write the report in {out}: {exc.strerror or exc}; no report was written") from None


def _kind(v) -> str:
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, (int, float)):
        return "a number"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, (list, tuple)):
        return "a list"
    if isinstance(v, dict):
        return "a table"
    return type(v).__name__


def _all_finite(v) -> bool:
    if isinstance(v, float):
        return math.isfinite(v)
    if isinstance(v, (list, tuple)):
        return all(_all_finite(x) for x in v)
    if isinstance(v, dict):
        return all(_all_finite(x) for x in v.values())
    return True


def _check_overrides(name: str, size: str, kv: dict) -> None:
    """Each overridden parameter must exist at ``size`` and keep its kind (number, list, ...); ValueError otherwise."""
    if importlib.util.find_spec(f"spherepde.studies.{name}") is None:
        return  # reported as missing when it runs
    from spherepde.studies.common import range_problem

    mod = importlib.import_module(f"spherepde.studies.{name}")
    params = getattr(mod, "SIZES", {}).get(size, {})
    ranges = getattr(mod, "RANGES", {})
    for k, v in kv.items():
        if k not in params:
            raise ValueError(f"{name}: no parameter {k!r} at size {size!r}; valid: {', '.join(sorted(params))}")
        if not _all_finite(v):
            raise ValueError(f"{name}.{k}: {v!r} is not finite; give finite numbers")
        was = params[k]
        if was is not None and _kind(v) != _kind(was):
            raise ValueError(f"{name}.{k}: expected {_kind(was)} like {was!r}, got {v!r}")
        if k in ranges:  # kind, sign, size and the memory it implies (the study's own RANGES)
            problem = range_problem(f"{name}.{k}", ranges[k], v)
            if problem:
                raise ValueError(f"{problem}; the default at size {size!r} is {was!r}")
    joint = getattr(mod, "check_params", None)  # the study's rules across values (shapes, an index into a list, ...)
    problem = joint({**params, **kv}) if joint is not None else None
    if problem:
        raise ValueError(f"{name}.{problem}")
    _check_grids(name, {**params, **kv}, set(kv))


#: (final time, weight-grid step, heads) parameters of the studies: their weight paths
#: hold T/dt + 1 grid points of H 3 x 3 matrices, four arrays of doubles.
_GRIDS = (("T", "dt", "H"), ("T", "weights_dt", "H"), ("T", "weights_dt", "b_H"), ("mesh_T", "mesh_weights_dt", "mesh_H"), ("mesh_T", "mesh_weights_dt", "H"))


def _largest(v) -> float:
    if isinstance(v, dict):
        v = list(v.values())
    if isinstance(v, (list, tuple)):
        return max((_largest(x) for x in v), default=0.0)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0.0


def _check_grids(name: str, p: dict, changed: set) -> None:
    """The weight path a changed final time or step implies must fit in memory (ValueError naming the keys)."""
    from spherepde._base import available_memory, format_bytes
    from spherepde.studies.common import path_bytes

    for tk, dk, hk in _GRIDS:
        if tk not in p or dk not in p or not ({tk, dk, hk} & changed):
            continue
        T, dt, H = _largest(p[tk]), _largest(p[dk]), max(1.0, _largest(p.get(hk, 1)))
        if dt <= 0:
            continue
        need = path_bytes(T / dt, H)
        limit, source = available_memory()
        if need > limit:
            raise ValueError(f"{name}.{tk} = {p[tk]!r} with {name}.{dk} = {p[dk]!r} gives {T / dt:.3g} weight-grid steps"
                             + (f" for up to {H:g} heads" if hk in p else "") + f", a weight path of about {format_bytes(need)}, "
                             f"but {format_bytes(limit)} of memory is {source}; reduce {tk} or increase {dk}")


def _check_out(out: Path, force: bool) -> None:
    """The output folder must be a folder we can create or write into (OutputExistsError otherwise, nothing written)."""
    from spherepde.runs.runfolder import run_folder_above

    inside = run_folder_above(out.resolve())
    if inside is not None:
        where = "is the run folder" if inside == out.resolve() else f"lies inside the run folder {inside}"
        raise OutputExistsError(f"--out {out} {where}; only 'spherepde run' and 'resume' write into a run folder -- choose another --out")
    if out.exists() and not out.is_dir():
        raise OutputExistsError(f"output path {str(out)!r} exists and is not a folder")
    if out.is_dir():
        if any(out.iterdir()) and not force:
            raise OutputExistsError(f"output folder {str(out)!r} exists and is not empty; choose another --out or pass --force")
        if not os.access(out, os.W_OK | os.X_OK):
            raise OutputExistsError(f"cannot write into the output folder {str(out)!r}: permission denied; choose another --out")
        return
    p = out.parent
    while not (p.exists() or p.is_symlink()) and p != p.parent:
        p = p.parent
    if not p.is_dir():
        raise OutputExistsError(f"cannot create the output folder {str(out)!r}: {str(p)!r} is a file, not a folder; choose another --out")
    if not os.access(p, os.W_OK | os.X_OK):
        raise OutputExistsError(f"cannot create the output folder {str(out)!r}: {str(p)!r} is not writable; choose another --out")


def _normalise_check(v) -> dict:
    """A check as a dict (older studies return bare booleans: measured value unknown)."""
    if isinstance(v, dict):
        return {"passed": bool(v["passed"]), **{k: v.get(k) for k in ("measured", "expected", "lo", "hi", "tolerance")}}
    return {"passed": bool(v), "measured": None, "expected": None, "lo": None, "hi": None, "tolerance": None}


def _outcome(entry: dict) -> str:
    """'a/b solver checks pass[, c/d paper claims reproduced]' for one study."""
    checks, claims = entry.get("checks", {}), entry.get("claims", {})
    out = f"{sum(v['passed'] for v in checks.values())}/{len(checks)} solver checks pass" if checks else "no solver checks"
    if claims:
        out += f", {sum(v['reproduced'] for v in claims.values())}/{len(claims)} paper claims reproduced"
    return out


def headline(report: dict) -> str:
    """One line: solver checks passed/total, paper claims reproduced/total, failures, missing and broken studies.

    The report's headline and ``spherepde validate``'s summary on stderr are this line.
    """
    c = report["counts"]
    msg = f"solver checks {c['checks_passed']}/{c['checks_total']} pass"
    if report["failed_checks"]:
        msg += " (FAILED: " + "; ".join(f"{n}: {k}" for n, k in report["failed_checks"]) + ")"
    msg += f"; paper claims {c['claims_reproduced']}/{c['claims_total']} reproduced"
    if report["claims_not_reproduced"]:
        msg += " (not reproduced: " + "; ".join(f"{n}: {k}" for n, k in report["claims_not_reproduced"]) + ")"
    if report["errors"]:
        msg += f"; studies with errors: {', '.join(report['errors'])}"
    if report["missing"]:
        msg += f"; missing studies: {', '.join(report['missing'])}"
    return msg


# ------------------------------------------------------------------ Markdown
def _cell(v) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return "nan" if not math.isfinite(v) else f"{v:.4g}"
    if v is None:
        return "-"
    return str(v).replace("|", "\\|")


def _table(headers, rows) -> str:
    lines = ["| " + " | ".join(_cell(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _key_numbers(results: dict, limit: int = 40) -> list[tuple[str, object]]:
    """Scalar numbers of a study without its own ``tables``: top-level and one level down."""
    skip = {"summary", "checks", "claims", "tables", "title", "name", "size", "params"}
    out = []
    for k, v in results.items():
        if k in skip:
            continue
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out.append((k, v))
        elif isinstance(v, dict):
            for k2, v2 in v.items():
                if isinstance(v2, (int, float)) and not isinstance(v2, bool):
                    out.append((f"{k}.{k2}", v2))
    return out[:limit]


def render_markdown(report: dict) -> str:
    """``report.md`` from the report dict of :func:`run_validation`."""
    lines = _md_header(report["meta"]) + _md_overview(report)
    for name, e in report["studies"].items():
        lines += _md_study(name, e)
    lines += ["", "Every number is in `report.json`."]
    return "\n".join(lines) + "\n"


def _md_header(m: dict) -> list[str]:
    """The report's title and meta lines (date, version, machine, wall time, overrides), then the overview heading."""
    mach = m["machine"]
    return [
        f"# {m['title']}",
        "",
        f"- date: {m['date']}",
        f"- spherepde {m['spherepde_version']}, size `{m['size']}`",
        f"- machine: {mach.get('cpu_count')} cores ({mach.get('processor')}), {mach.get('platform')}, Python {mach.get('python')}"
        + (f", numpy {mach['numpy']}, scipy {mach['scipy']}, numba {mach['numba']} ({mach['numba_threads']} threads)" if "numba" in mach else "")
        + (f"; 1-min load average at the start {mach['load_average_1min']:.1f}" if "load_average_1min" in mach else "")
        + (f", at the end {mach['load_average_1min_end']:.1f}" if "load_average_1min_end" in mach else ""),
        f"- total wall time: {m['wall_s']:.1f} s",
        *([f"- **interrupted** (Ctrl-C) during {m['interrupted']['during'] or '-'}: a partial report of the studies that finished; "
           f"not run: {', '.join(m['interrupted']['not_run']) or '-'}"] if m.get("interrupted") else []),
        *([f"- parameters changed from size `{m['size']}`: "
           + "; ".join(f"{n}: " + ", ".join(f"{k} = {v!r}" for k, v in kv.items()) for n, kv in m["overrides"].items())]
          if m.get("overrides") else []),
        "",
        "## Overview",
        "",
    ]


def _md_overview(report: dict) -> list[str]:
    """The overview table (one row per study) and the counts of checks and claims, failures, errors, missing modules."""
    rows = []
    for name, e in report["studies"].items():
        if e["status"] == "ok":
            checks, claims = e.get("checks", {}), e.get("claims", {})
            nfail = sum(not v["passed"] for v in checks.values())
            chk = f"{len(checks) - nfail}/{len(checks)} pass" + (f" (**{nfail} failed**)" if nfail else "") if checks else "-"
            nrep = sum(v["reproduced"] for v in claims.values())
            clm = f"{nrep}/{len(claims)} reproduced" if claims else "-"
        else:
            chk = clm = {"missing": "not run: module missing", "error": "**error**"}[e["status"]]
        rows.append([name, e.get("title", "-"), chk, clm, f"{e['wall_s']:.1f} s" if "wall_s" in e else "-"])
    lines = [_table(["study", "title", "solver checks", "paper claims", "wall time"], rows), ""]
    c = report["counts"]
    counted = (
        (f"**Solver checks: {c['checks_passed']}/{c['checks_total']} pass.** Each compares a measured number with an analytic value, "
         "a reference or an expected order, within the tolerance shown; a wrong scheme fails them.",
         "Failed solver checks:", report["failed_checks"]),
        (f"**Paper claims: {c['claims_reproduced']}/{c['claims_total']} reproduced.** A claim is reproduced only when the 95% interval "
         "of the measured value contains the paper's value; claims are not counted as passes or failures of the solver.",
         "Not reproduced:", report["claims_not_reproduced"]),
    )
    for count, heading, misses in counted:
        lines += [count, ""]
        if misses:
            lines += [heading, ""] + [f"- {n}: {k}" for n, k in misses] + [""]
    if report["errors"]:
        lines += ["**Studies that raised an error** (their checks and claims are not counted):", ""]
        lines += [f"- {n}: {err}" for n, err in report["errors"].items()] + [""]
    if report["missing"]:
        lines += [f"Missing study modules (not run): {', '.join(report['missing'])}.", ""]
    return lines


def _md_study(name: str, e: dict) -> list[str]:
    """One study's section: status, summary, checks, claims, key numbers, figures."""
    lines = [f"## {e.get('title', name)}", ""]
    if e["status"] == "missing":
        lines += [f"Study `{name}`: not run, {e['error']}.", ""]
        return lines
    if e["status"] == "error":
        if e.get("precondition"):
            lines += [f"Study `{name}`: **error** after {e['wall_s']:.1f} s -- {e['error']}", ""]
        else:
            lines += [f"Study `{name}`: **the study raised an error** after {e['wall_s']:.1f} s: `{e['error']}`", "", "```", e.get("traceback", "").rstrip(), "```", ""]
        return lines
    lines += [f"Study `{name}`, wall time {e['wall_s']:.1f} s.", "", e.get("summary", ""), ""]
    if e["checks"]:
        lines += ["### Solver checks", ""]
        lines += [
            _table(
                ["check", "measured", "target", "tolerance", "result"],
                [[k, v["measured"], v["expected"], v["tolerance"], "pass" if v["passed"] else "**FAIL**"] for k, v in e["checks"].items()],
            ),
            "",
        ]
    if e.get("claims"):
        lines += ["### Paper claims", ""]
        lines += [
            _table(
                ["claim", "measured", "95% interval", "paper", "verdict"],
                [
                    [k, v["value"], f"[{_cell(v['interval'][0])}, {_cell(v['interval'][1])}]", v["paper_value"], "reproduced" if v["reproduced"] else "**not reproduced**"]
                    for k, v in e["claims"].items()
                ],
            ),
            "",
        ]
    res = e["results"]
    tables = res.get("tables")
    if tables:
        lines += ["### Key numbers", ""]
        for t in tables:
            lines += [f"**{t.get('title', '')}**", "", _table(t["headers"], t["rows"]), ""]
    else:
        kn = _key_numbers(res)
        if kn:
            lines += ["### Key numbers", "", _table(["quantity", "value"], kn), ""]
    if e.get("plot_error"):
        lines += [f"Plotting failed: `{e['plot_error']}`", ""]
    if e.get("figures"):
        lines += ["### Figures", ""]
        for f in e["figures"]:
            f = Path(f).as_posix()
            lines += [f"[{f}]({f})", "", f"![{Path(f).stem}]({f})", ""]
    return lines
