"""A run's diagnostics as time series: one run, or the paths of a Monte-Carlo folder with
their spread, and the curve families ("tracks") of a coupled run's mesh and tokens.

The data model behind the figures (:mod:`spherepde.viz.plots`) and ``spherepde compare``
(:mod:`spherepde.runs.compare`). A *source* is a run folder, a Monte-Carlo folder (its
``path-NNN`` runs, or ``diagnostics_mean.csv``/``diagnostics_std.csv`` and
``diagnostics_q05/q95.csv`` when the path folders are gone), a dict of column arrays
(:func:`spherepde.runs.runfolder.read_diagnostics`) or a list of such dicts (one per path).
Tables are read with :func:`~spherepde.runs.runfolder.read_diagnostics`, leaving out the
malformed rows of a run still writing (with a warning).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from spherepde._base import load_arrays
from spherepde.model.columns import PARTICLE_PREFIX
from spherepde.runs.runfolder import DIAGNOSTICS_FILE, MC_TABLES, MONTE_CARLO, SUMMARY_FILE, WEIGHTS_FILE, RunFolder, read_diagnostics, run_config, run_kind

__all__ = ["Band", "Series", "Track", "load_series", "solver_tracks", "defined", "distance_floor", "run_label"]


def _read(path: Path) -> dict:
    return read_diagnostics(path, malformed="skip")


@dataclass
class Band:
    """A column over time with its spread over Monte-Carlo paths.

    mean : (T,) the value (one run) or the mean over paths; sem : its standard error
    std / sqrt(n) (None for one run); q05, q95 : the 5 % and 95 % quantiles over the paths
    (None for one run, or when only aggregates without quantile files are left); n : paths.
    """

    mean: np.ndarray
    sem: np.ndarray | None = None
    q05: np.ndarray | None = None
    q95: np.ndarray | None = None
    n: int = 1


@dataclass
class Series:
    """Diagnostics of one run or of the paths of a Monte-Carlo folder.

    Attributes
    ----------
    paths : one dict of column arrays per path (one for a single run), equal lengths;
        for a Monte-Carlo folder read from its aggregate files, the mean columns.
    std : per-column standard deviations when only aggregates were available, else None.
    sign : the model's sign s (EDI), from the config (default -1).
    kind : "particles", "mesh" or MONTE_CARLO (:func:`~spherepde.runs.runfolder.run_kind`).
    label : a short description of the run ("mesh, H = 10, ou weights").
    config : the run's config.toml as a dict (empty if unknown).
    quantiles : aggregates only: {"q05": columns, "q95": columns} when the Monte-Carlo
        folder wrote diagnostics_q05.csv / diagnostics_q95.csv.
    n_aggregated : aggregates only: the number of paths behind the means.
    """

    paths: list
    std: dict | None = None
    sign: float = -1.0
    kind: str = "particles"
    label: str = ""
    config: dict = field(default_factory=dict)
    quantiles: dict | None = None
    n_aggregated: int = 0

    @property
    def t(self) -> np.ndarray:
        return self.paths[0]["t"]

    @property
    def columns(self) -> list[str]:
        return list(self.paths[0])

    @property
    def n_paths(self) -> int:
        return len(self.paths) if self.std is None else self.n_aggregated

    @property
    def is_ensemble(self) -> bool:
        return self.std is not None or len(self.paths) > 1

    def has(self, col: str) -> bool:
        return col in self.paths[0]

    def stat(self, what) -> tuple[np.ndarray, np.ndarray | None]:
        """Mean over paths and standard deviation (None for one run) of a column name or of
        a function of a path's columns."""
        f = (lambda d: d[what]) if isinstance(what, str) else what
        vals = np.stack([np.asarray(f(d), float) for d in self.paths])
        if self.std is not None:  # aggregates only: std exists for plain columns
            return vals[0], (self.std[what] if isinstance(what, str) and what in self.std else None)
        if len(vals) == 1:
            return vals[0], None
        return vals.mean(axis=0), vals.std(axis=0, ddof=1)

    def band(self, what) -> Band:
        """The :class:`Band` of a column name or of a function of a path's columns: the
        mean, its standard error and the 5-95 % quantiles over the paths."""
        f = (lambda d: d[what]) if isinstance(what, str) else what
        vals = np.stack([np.asarray(f(d), float) for d in self.paths])
        if self.std is not None:  # aggregates only
            n = max(self.n_aggregated, 1)
            std = self.std.get(what) if isinstance(what, str) else None
            sem = None if std is None or n < 2 else np.asarray(std, float) / math.sqrt(n)
            q = self.quantiles or {}
            q05 = q.get("q05", {}).get(what) if isinstance(what, str) else None
            q95 = q.get("q95", {}).get(what) if isinstance(what, str) else None
            return Band(vals[0], sem, q05, q95, n)
        if len(vals) == 1:
            return Band(vals[0])
        n = len(vals)
        with np.errstate(invalid="ignore"):
            sem = vals.std(axis=0, ddof=1) / math.sqrt(n)
            q05, q95 = np.quantile(vals, [0.05, 0.95], axis=0)
        return Band(vals.mean(axis=0), sem, q05, q95, n)


def load_series(source) -> Series:
    """A :class:`Series` from a run folder, a Monte-Carlo folder, a dict or a list of dicts."""
    if isinstance(source, Series):
        return source
    if isinstance(source, dict):
        return Series([source])
    if isinstance(source, (list, tuple)):
        return Series(list(source))
    folder = Path(source)
    kind = run_kind(folder)
    cfg = run_config(folder)
    sign = float(cfg.get("model", {}).get("sign", -1))
    label = run_label(cfg, folder)
    if kind != MONTE_CARLO:
        csvp = folder / DIAGNOSTICS_FILE
        if not csvp.is_file():
            raise FileNotFoundError(f"{folder}: no diagnostics.csv; the run has recorded nothing yet")
        return Series([_read(csvp)], sign=sign, kind=kind, label=label, config=cfg)
    paths = []
    for p in RunFolder(folder).monte_carlo_paths():
        if (p / DIAGNOSTICS_FILE).is_file():
            paths.append(_read(p / DIAGNOSTICS_FILE))
    n = len(paths[0]["t"]) if paths else 0
    if paths and all(len(d["t"]) == n for d in paths) and n:
        return Series(paths, sign=sign, kind=kind, label=label, config=cfg)
    mean, std = folder / MC_TABLES["mean"], folder / MC_TABLES["std"]
    if mean.is_file():
        quantiles = {q: _read(folder / MC_TABLES[q]) for q in ("q05", "q95") if (folder / MC_TABLES[q]).is_file()}
        return Series(
            [_read(mean)], std=_read(std) if std.is_file() else {}, sign=sign, kind=kind, label=label, config=cfg,
            quantiles=quantiles if len(quantiles) == 2 else None, n_aggregated=_mc_path_count(folder, cfg),
        )
    raise FileNotFoundError(f"{folder}: Monte-Carlo folder with no finished paths and no diagnostics_mean.csv")


def _mc_path_count(folder: Path, cfg: dict) -> int:
    """The number of paths of a Monte-Carlo folder (summary.json, else montecarlo.paths)."""
    import json

    try:
        n = json.loads((folder / SUMMARY_FILE).read_text()).get("paths")
        if isinstance(n, int) and n > 0:
            return n
    except (OSError, ValueError, AttributeError):
        pass
    n = cfg.get("montecarlo", {}).get("paths", 0)
    return int(n) if isinstance(n, int) else 0


def _saved_process(folder) -> str:
    """The process name a run's saved weight path records (a custom process saved and
    driven with weights.process = 'file'), or ''."""
    import json

    try:
        with load_arrays(Path(folder) / WEIGHTS_FILE) as z:
            meta = json.loads(str(z["meta"])) if "meta" in z.files else {}
    except (OSError, ValueError, KeyError):
        return ""
    name = meta.get("process") if isinstance(meta, dict) else None
    return str(name) if isinstance(name, str) and name and name != "file" else ""


def run_label(cfg: dict, folder=None) -> str:
    """'mesh, H = 10, ou weights' from a run's config (empty if unknown); a run on a saved
    path (weights.process = 'file') names the process that made it, e.g. 'rotating-target
    weights (from a file)'."""
    run, model, w = cfg.get("run", {}), cfg.get("model", {}), cfg.get("weights", {})
    parts = []
    if run.get("solver"):
        parts.append(run["solver"])
    if "H" in model:
        parts.append(f"H = {model['H']}")
    if w.get("process"):
        saved = _saved_process(folder) if w["process"] == "file" and folder is not None else ""
        parts.append(f"{saved} weights (from a file)" if saved else f"{w['process']} weights")
    return ", ".join(parts)


@dataclass(frozen=True)
class Track:
    """One curve family of a figure: the columns ``prefix + name`` of a :class:`Series`
    (``prefix = "p_"``: the tokens of a coupled run), shown as ``label``."""

    series: Series
    prefix: str = ""
    label: str = ""

    def has(self, col: str) -> bool:
        return self.series.has(self.prefix + col)

    def defined(self, col: str) -> bool:
        return defined(self.series, self.prefix + col)


def solver_tracks(s: Series, name: str = "") -> list[Track]:
    """The tracks of one run: a coupled run (``p_energy`` present) gives its mesh and its
    particles; any other run one track. ``name`` (e.g. the run folder's name) is put in
    front of the labels."""
    head = f"{name}: " if name else ""
    if s.has(PARTICLE_PREFIX + "energy"):
        n = s.config.get("initial", {}).get("n")
        toks = f"particles ({n} tokens)" if n else "particles"
        return [Track(s, "", head + "mesh (finite volume)"), Track(s, PARTICLE_PREFIX, head + toks)]
    solver = s.config.get("run", {}).get("solver") if name else None
    return [Track(s, "", f"{name} ({solver})" if solver else name)]


def defined(s: Series, col: str) -> bool:
    """Whether the column exists and has a finite value somewhere (the first path)."""
    return s.has(col) and bool(np.any(np.isfinite(s.paths[0][col])))


def distance_floor(s: Series, col: str) -> float:
    """The first recorded value of a distance column (t = 0, tokens just drawn from the
    density): its floor of sampling and smoothing, read beside the later values."""
    v = np.asarray(s.band(col).mean, float)
    fin = np.flatnonzero(np.isfinite(v))
    return float(v[fin[0]]) if fin.size and abs(float(s.t[fin[0]])) <= 1e-9 else math.nan
