"""Parameter sweeps: many runs of one base configuration, on Dask or in this process.

A *sweep file* (TOML) names a base run configuration, fixed overrides and the axes to
vary::

    base_example = "paper-ou-particles"   # or: base = "my-run.toml" (relative to this file)
    [set]                                 # fixed overrides of the base configuration
    "solver.T" = 20.0
    [grid]                                # cartesian product of the axes
    "model.H" = [1, 10, 100]
    "weights.seed" = [0, 1, 2, 3, 4]
    [list]                                # zipped axes (equal lengths; optional)
    [analysis]                            # optional: y (time-averaged) against x, log-log
    x = "model.H"
    y = "G2"
    t_min = 2.5

Top-level keys: ``base`` (a config file, or an inline ``[base]`` table) or
``base_example`` (a shipped example), ``description``, ``out`` (default output folder,
relative to the working folder), ``t_min`` (start of the time averages in
``results.csv``; may be given in ``[analysis]`` instead), and the tables ``set``,
``grid``, ``list``, ``analysis``. Keys of ``set``/``grid``/``list`` are configuration
keys ``section.key`` (quoted, or as TOML dotted keys); relative file paths in them are
resolved against the sweep file's folder. ``[list]`` axes are zipped into one axis that
varies slowest; ``[grid]`` axes vary in the order given (the last fastest).

Every combination becomes one run folder ``OUT/runs/<index>-<key=value...>`` (the same
layout as ``spherepde run``); every combination's configuration is validated before
anything starts. Results are gathered into ``OUT/results.csv`` (one row per run: the
varied parameters, status, wall time, error, final values and time averages over
t >= t_min of the summary diagnostics), the state of the sweep into
``OUT/sweep_state.json`` (written atomically after every run) and, with
``[analysis]``, ``OUT/analysis.{png,pdf,json}``.

Running the same sweep again into the same OUT skips completed runs, resumes runs that
have a checkpoint and reruns failed ones; a *changed* sweep (different resolved run
configurations) is refused unless ``force=True``, which discards the old runs.

Execution: one Dask task per run on a ``distributed.LocalCluster`` (``workers``
processes, one thread each), on an existing scheduler (``scheduler="tcp://host:8786"``;
run folders must then be on a file system shared by the workers), or ``serial=True``
in this process without Dask.

The package is split in the order a sweep runs: :mod:`.plan` (the sweep file),
:mod:`.state` (the folder's state and results table), :mod:`.execute` (Dask or serial
execution), :mod:`.analysis` (the power-law study).
"""

from spherepde.runs.sweep.analysis import analyse
from spherepde.runs.sweep.execute import SweepResult, execute_run, run_sweep
from spherepde.runs.sweep.plan import (
    INSTALL_HINT,
    SUMMARY_COLUMNS,
    DaskUnavailableError,
    Sweep,
    SweepChangedError,
    SweepError,
    SweepRun,
    example_sweep_path,
    load_sweep,
    sweep_hash,
)
from spherepde.runs.sweep.state import read_results, summarise_run

__all__ = [
    "run_sweep",
    "load_sweep",
    "analyse",
    "execute_run",
    "example_sweep_path",
    "read_results",
    "summarise_run",
    "sweep_hash",
    "Sweep",
    "SweepRun",
    "SweepResult",
    "SweepError",
    "SweepChangedError",
    "DaskUnavailableError",
    "SUMMARY_COLUMNS",
    "INSTALL_HINT",
]
