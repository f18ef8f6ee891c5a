"""Counts that mean what they say (issue 37 item 5): the cluster count is drawn with integer
ticks (also a constant count, where Matplotlib's default picks ticks like 5.68 ... 6.32), the
clusters figure says what the count is and what a flicker means, and the spans where the count
goes back and forth are found and shaded."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from spherepde.runs.config import default_config
from spherepde.runs.runner import run
from spherepde.runs.series import load_series, solver_tracks
from spherepde.viz import plots

TINY = {"run.solver": "particles", "solver.T": 0.4, "initial.n": 40, "output.record_dt": 0.05, "output.snapshot_dt": 0.2}


def _with_counts(folder, counts):
    """Rewrite the n_clusters column of a run's diagnostics.csv (one value per row)."""
    path = folder / "diagnostics.csv"
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    k = rows[0].index("n_clusters")
    assert len(rows) - 1 == len(counts)
    for row, c in zip(rows[1:], counts):
        row[k] = str(c)
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows(rows)
    return folder


@pytest.fixture(scope="module")
def token_run(tmp_path_factory):
    return run(default_config().with_overrides(TINY), out=tmp_path_factory.mktemp("counts") / "run").folder


def _count_ticks(fig):
    ax = fig.axes[0]
    lo, hi = ax.get_ylim()
    return [t for t in ax.get_yticks() if lo <= t <= hi]


@pytest.mark.parametrize("counts", [[6] * 9, [6, 6, 6, 4, 6, 4, 6, 6, 6], [5, 5, 4, 4, 4, 3, 3, 3, 2]])
def test_count_ticks_are_integers(token_run, counts):
    fig = plots.plot_clusters(_with_counts(token_run, counts))
    ticks = _count_ticks(fig)
    assert ticks and all(float(t).is_integer() for t in ticks), ticks
    title = " ".join(fig.get_suptitle().split())
    assert "single linkage at chordal 0.1 with >= 1 % of the mass" in title and "not merges" in title


def test_flicker_spans_are_found_and_shaded(token_run):
    t = np.arange(9) * 0.05
    assert plots.flicker_spans(t, [5, 5, 4, 4, 4, 3, 3, 3, 2]) == []  # a staircase of merges
    assert plots.flicker_spans(t, [6, 6, 6, 4, 6, 4, 6, 6, 6]) == [pytest.approx((0.10, 0.30))]
    assert plots.flicker_spans(t, [6, 6, 5, 6, 6, 5, 4, 4, 4]) == [pytest.approx((0.05, 0.25))]  # back and forth, then a merge
    assert plots.flicker_spans(t, [6, 6, np.nan, 6, 6, 6, 6, 6, 6]) == []
    fig = plots.plot_clusters(_with_counts(token_run, [6, 6, 6, 4, 6, 4, 6, 6, 6]))
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert plots.FLICKER_LABEL in labels
    fig = plots.plot_clusters(_with_counts(token_run, [5, 5, 4, 4, 4, 3, 3, 3, 2]))
    assert plots.FLICKER_LABEL not in fig.axes[0].get_legend_handles_labels()[1]


def test_difference_panel_of_a_count_has_integer_ticks(token_run):
    s = load_series(_with_counts(token_run, [6] * 9))
    tr = solver_tracks(s)[0]
    diffs = {"n_clusters": [("other", s.t, np.zeros_like(s.t))], "energy": []}
    fig = plots.plot_columns([tr], plots.PANELS["clusters"], "counts", differences=diffs, reference="this")
    ax = fig.axes[1]
    lo, hi = ax.get_ylim()
    ticks = [v for v in ax.get_yticks() if lo <= v <= hi]
    assert ticks and all(float(v).is_integer() for v in ticks), ticks
