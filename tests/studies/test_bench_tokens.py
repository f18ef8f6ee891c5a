"""spherepde.studies.bench_tokens: the merge-time locator and the quick benchmark's report."""

from __future__ import annotations

import json
import math

import numpy as np

from spherepde.model.clusters import MERGE_ANGLE
from spherepde.studies.bench_tokens import GroupMerges, bench_tokens


def _pair(angle: float) -> np.ndarray:
    """Two groups of two tokens each, their centres ``angle`` apart in the xz plane."""
    a = np.array([0.0, 0.0, 1.0])
    b = np.array([math.sin(angle), 0.0, math.cos(angle)])
    return np.array([a, a, b, b])


def test_group_merges_interpolates_an_exponential_approach_exactly():
    """angle(t) = 0.1 e^{-t}: below MERGE_ANGLE = 0.01 at t = ln 10, found inside one coarse step."""
    gm = GroupMerges([2, 2], 0.0, _pair(0.1))
    for t in (1.0, 2.0, 3.0):
        gm.add(t, _pair(0.1 * math.exp(-t)))
    assert len(gm.times) == 1 and abs(gm.times[0] - math.log(0.1 / MERGE_ANGLE)) < 1e-9
    assert len(gm.groups) == 1 and sorted(gm.groups[0].tolist()) == [0, 1, 2, 3]


def test_quick_report():
    r = bench_tokens(True)
    json.dumps(r)  # JSON-able
    assert r["quick"] and r["target_met"] == "n/a (quick)" and r["tol"] > 0
    assert r["fixed"]["integrator"] == "heun" and r["adaptive"]["integrator"] == "rk23"
    assert r["step_ratio"] == r["fixed"]["steps"] / r["adaptive"]["steps"] >= 10
    assert r["merge_count_equal"] and len(r["fixed"]["merge_times"]) == 1  # the first merge, t ~ 1.7
    assert r["merge_max_rel_diff"] < 0.005 and r["energy_max_rel_diff"] < 1e-4
    assert r["fixed"]["repeats"] == r["adaptive"]["repeats"] == 2
