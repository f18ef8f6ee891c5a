"""The state of a sweep folder: which runs are done, ``sweep_state.json`` and ``results.csv``.

Both files are rewritten atomically after every run, so an interrupted sweep resumes
from what they say; a run's row holds its parameters, status, wall time, error, and the
final values and time averages (t >= t_min) of the summary diagnostics. Where several
seeds share a parameter point, results.csv adds the point's statistics of the time
averages over its seeds (mean, standard error, 5-95 % quantiles; :func:`point_statistics`).
"""

from __future__ import annotations

import csv
import json
import logging
import math
import re
import threading
import time
from pathlib import Path

import numpy as np

from spherepde._base import __version__, atomic_write_text
from spherepde.model.statistics import time_average
from spherepde.runs.config import Config, ConfigError, load_config
from spherepde.runs.files import jsonable
from spherepde.runs.runfolder import CHECKPOINT_FILE, CONFIG_FILE, DIAGNOSTICS_FILE, MC_TABLES, SUMMARY_FILE, read_diagnostics
from spherepde.runs.sweep.plan import (
    LOCK_FILE,
    RESULTS_FILE,
    STATE_FILE,
    STATE_FORMAT,
    SUMMARY_COLUMNS,
    Sweep,
    SweepChangedError,
    SweepError,
    SweepRun,
)

log = logging.getLogger(__name__)

__all__ = ["summarise_run", "read_results", "point_statistics", "SEED_KEYS"]


# ================================================================== one run (a task)
def _folder_state(folder: Path) -> str:
    """'completed', 'resumable' (a checkpoint to continue from) or 'fresh'."""
    summary_file = folder / SUMMARY_FILE
    if not summary_file.is_file():
        return "fresh"
    try:
        summary = json.loads(summary_file.read_text())
    except (OSError, ValueError):
        return "fresh"
    status = summary.get("status") if isinstance(summary, dict) else None
    if status == "completed" and ((folder / DIAGNOSTICS_FILE).is_file() or (folder / MC_TABLES["mean"]).is_file()):
        return "completed"
    if status in ("running", "interrupted"):
        if "paths" in summary or (folder / CHECKPOINT_FILE).is_file() or (folder / "checkpoint.prev.npz").is_file():
            return "resumable"
    return "fresh"


def _config_matches(folder: Path, cfg: Config) -> bool:
    try:
        return load_config(folder / CONFIG_FILE).to_dict() == cfg.to_dict()
    except (ConfigError, OSError, ValueError):
        return False


def _finite(v) -> float | None:
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def summarise_run(folder, t_min: float = 0.0, columns=SUMMARY_COLUMNS) -> dict:
    """Final values and time averages over t >= t_min of ``columns`` of a run folder
    (a Monte-Carlo folder: of its mean over paths), plus status and wall time."""
    folder = Path(folder)
    summary = json.loads((folder / SUMMARY_FILE).read_text())
    csv_file = folder / DIAGNOSTICS_FILE
    if not csv_file.is_file():
        csv_file = folder / MC_TABLES["mean"]
    diag = read_diagnostics(csv_file, malformed="raise")
    t = diag["t"]
    sel = t >= t_min - 1e-9
    row = {"status": summary.get("status", "unknown"), "wall_time_s": _finite(summary.get("wall_time_s")), "t_end": float(t[-1]) if t.size else None}
    for c in columns:
        y = diag.get(c)
        row[f"final_{c}"] = _finite(y[-1]) if y is not None and y.size else None
        row[f"mean_{c}"] = _finite(time_average(t[sel], y[sel])) if y is not None else None
    return row




def _row_template(run: SweepRun, folder: Path, columns) -> dict:
    row = {"index": run.index, "folder": f"runs/{run.name}"}
    row.update(run.params)
    row.update({"status": "pending", "wall_time_s": None, "error": ""})
    for c in columns:
        row[f"final_{c}"] = None
        row[f"mean_{c}"] = None
    return row


class _State:
    """The sweep's own state, OUT/sweep_state.json, rewritten atomically after every run."""

    def __init__(self, folder: Path, sw: Sweep, columns):
        self.folder, self.sw, self.columns = folder, sw, columns
        self.rows = {r.index: _row_template(r, folder, columns) for r in sw.runs}
        self.extra = {r.index: {} for r in sw.runs}
        self.status = "running"
        self.created = time.strftime("%Y-%m-%dT%H:%M:%S")
        self.lock = threading.Lock()

    def adopt(self, old: dict) -> None:
        """Keep the previous records (used for failed runs that are not retried)."""
        for entry in old.get("runs", []):
            i = entry.get("index")
            if i in self.rows and isinstance(entry.get("row"), dict):
                self.rows[i].update({k: v for k, v in entry["row"].items() if k in self.rows[i]})
                self.extra[i] = {k: entry.get(k) for k in ("action", "traceback", "host", "pid", "finished") if k in entry}
        self.created = old.get("created", self.created)

    def update(self, result: dict) -> None:
        with self.lock:
            i = result["index"]
            row = self.rows[i]
            for k in list(row):
                if k not in ("index", "folder") and k not in self.sw.axes:
                    row[k] = result.get(k, "" if k == "error" else None)
            self.extra[i] = {k: result.get(k) for k in ("action", "traceback", "host", "pid")}
            self.extra[i]["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")

    def mark(self, index: int, status: str) -> None:
        with self.lock:
            self.rows[index]["status"] = status

    def table(self) -> list[dict]:
        return [dict(self.rows[i]) for i in sorted(self.rows)]

    def write(self) -> None:
        with self.lock:
            doc = {
                "format": STATE_FORMAT,
                "spherepde": __version__,
                "sweep_hash": self.sw.hash,
                "status": self.status,
                "created": self.created,
                "updated": time.strftime("%Y-%m-%dT%H:%M:%S"),
                "sweep": self.sw.describe(),
                "counts": _status_counts(self.rows.values()),
                "runs": [{"index": i, "folder": self.rows[i]["folder"], "params": self.sw.runs[i].params, "status": self.rows[i]["status"], **self.extra[i], "row": self.rows[i]} for i in sorted(self.rows)],
            }
            text = json.dumps(jsonable(doc), indent=1)
        atomic_write_text(self.folder / STATE_FILE, text)
        self.write_csv()

    def write_csv(self) -> None:
        rows = point_statistics(self.table(), self.sw.axes, self.columns)
        if not rows:
            return
        header = list(rows[0])
        import io

        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(header)
        for r in rows:
            w.writerow([_csv_cell(r[h]) for h in header])
        atomic_write_text(self.folder / RESULTS_FILE, buf.getvalue())


#: Sweep keys whose values are replicates (noise paths, initial draws), not parameters.
SEED_KEYS = ("weights.seed", "initial.seed", "weights.init_seed")


def point_statistics(rows: list[dict], axes, columns) -> list[dict]:
    """``rows`` with, where several seeds share a parameter point (the values of the
    varied keys other than :data:`SEED_KEYS`), the statistics of every ``mean_<c>`` over
    the point's completed runs: ``point_runs`` (how many), ``point_mean_<c>``,
    ``point_sem_<c>`` (standard error of that mean, std / sqrt(n)), ``point_q05_<c>`` and
    ``point_q95_<c>`` (5 % and 95 % quantiles). Without a seed axis the rows come back as
    they are."""
    seeds = [k for k in axes if k in SEED_KEYS]
    if not seeds or not rows:
        return rows
    params = [k for k in axes if k not in SEED_KEYS]
    groups: dict = {}
    for r in rows:
        groups.setdefault(tuple(json.dumps(r.get(k), sort_keys=True) for k in params), []).append(r)
    out = []
    for r in rows:
        members = [m for m in groups[tuple(json.dumps(r.get(k), sort_keys=True) for k in params)] if m.get("status") == "completed"]
        row = dict(r)
        row["point_runs"] = len(members)
        for c in columns:
            vals = np.array([v for v in (_finite(m.get(f"mean_{c}")) for m in members) if v is not None], float)
            n = vals.size
            row[f"point_mean_{c}"] = float(vals.mean()) if n else None
            row[f"point_sem_{c}"] = float(vals.std(ddof=1) / math.sqrt(n)) if n > 1 else None
            row[f"point_q05_{c}"] = float(np.quantile(vals, 0.05)) if n else None
            row[f"point_q95_{c}"] = float(np.quantile(vals, 0.95)) if n else None
        out.append(row)
    return out


def _csv_cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else ""
    if isinstance(v, (list, dict)):
        return json.dumps(v)
    return str(v)


def _status_counts(rows) -> dict:
    counts: dict = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    return counts


def read_results(path) -> list[dict]:
    """Read ``results.csv`` back (numbers as floats, empty cells as None)."""
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))

    def conv(k, v):
        if v == "":
            return None
        if k in ("folder", "status", "error"):
            return v
        try:
            return int(v) if re.fullmatch(r"-?\d+", v) else float(v)
        except ValueError:
            return v

    return [{k: conv(k, v) for k, v in r.items()} for r in rows]


def _describe_change(old: dict, sw: Sweep) -> str:
    """What differs between a stored sweep and this one, in a few words."""
    prev = old.get("sweep", {}) if isinstance(old.get("sweep"), dict) else {}
    now = jsonable(sw.describe())
    if prev.get("axes") != now["axes"]:
        if list(prev.get("axes") or {}) != list(now["axes"]):
            return f"varied keys were {', '.join(prev.get('axes') or {}) or '?'}, now {', '.join(now['axes'])}"
        changed = [k for k in now["axes"] if prev["axes"].get(k) != now["axes"][k]]
        return "; ".join(f"{k} was {prev['axes'][k]}, now {now['axes'][k]}" for k in changed)
    if prev.get("set") != now["set"]:
        keys = sorted(set(prev.get("set") or {}) | set(now["set"]))
        changed = [k for k in keys if (prev.get("set") or {}).get(k) != now["set"].get(k)]
        return "[set] changed: " + ", ".join(f"{k} was {(prev.get('set') or {}).get(k, 'unset')!r}, now {now['set'].get(k, 'unset')!r}" for k in changed)
    if prev.get("base") != now["base"]:
        return f"base was {prev.get('base')}, now {now['base']}"
    return f"the base configuration {now['base']} (or a default) changed since the runs were made"


def _prepare_folder(folder: Path, sw: Sweep, force: bool) -> dict | None:
    """Check OUT against a previous sweep; returns the previous state (None: a new sweep)."""
    state_file = folder / STATE_FILE
    old = None
    if state_file.is_file():
        try:
            old = json.loads(state_file.read_text())
        except (OSError, ValueError):
            old = None
        if not isinstance(old, dict) or "sweep_hash" not in old:
            if not force:
                raise SweepError(f"{state_file} is unreadable; pass --force to discard the folder's runs and start again")
            old = None
    elif not force and folder.is_dir() and not (folder / "runs").is_dir() and any(p.name != LOCK_FILE for p in folder.iterdir()):
        raise SweepError(f"{folder} exists and is not a sweep folder; choose another --out")
    if old is not None and old.get("sweep_hash") != sw.hash and not force:
        raise SweepChangedError(
            f"{folder} holds a different sweep ({_describe_change(old, sw)}); choose another --out, or pass --force to discard its runs and start again"
        )
    if force:
        import shutil

        if (folder / "runs").is_dir():
            log.warning("--force: discarding the previous runs in %s", folder)
        shutil.rmtree(folder / "runs", ignore_errors=True)
        for name in (STATE_FILE, RESULTS_FILE, "analysis.png", "analysis.pdf", "analysis.json"):
            (folder / name).unlink(missing_ok=True)
        old = None
    return old

