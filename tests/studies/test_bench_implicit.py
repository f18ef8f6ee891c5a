"""The implicit-step benchmark (spherepde.studies.bench_implicit) runs old and new in one process and says what it measured."""

import json

from spherepde.studies.bench_implicit import COLUMNS, bench_implicit


def test_bench_implicit_reports_ratio_counts_and_differences():
    r = bench_implicit(True, T=0.1, overrides={"mesh.level": 4})
    json.dumps(r)  # JSON-able
    assert r["T"] == 0.1 and r["records"] == 3
    for route in ("old", "new"):
        assert r[route]["steps"] > 0 and r[route]["wall_s"] > 0 and r[route]["evaluations"] >= r[route]["steps"]
    assert r["old"]["steps"] == r["new"]["steps"]
    assert r["ratio_per_unit_time"] > 0
    assert set(r["max_rel_diff"]) == set(COLUMNS)
    assert all(d <= 1e-9 for d in r["max_rel_diff"].values())  # before any collapse: the sweep's round-off only
    assert r["target_met"] in (True, False)
    b = r["before_collapse"]  # no collapse in 0.1: every record is before it, and the ceiling is the whole ratio
    assert b["records"] == 2 and b["new_evaluations"] == r["new"]["evaluations"] and b["s_per_cell_sum"] > 0
    assert abs(b["new_s"] - r["new"]["wall_s"]) <= 1e-9 * r["new"]["wall_s"]
    assert abs(b["ceiling_ratio"] - r["ratio_per_unit_time"]) <= 1e-9 * r["ratio_per_unit_time"]
    assert abs(b["cell_sums_s"] - b["new_evaluations"] * b["s_per_cell_sum"]) <= 1e-12
    seq = r["step_sequence"]  # what sets the steps: the same probe without the weights' noise, and at tol / 10
    assert seq["tol"] == 1e-3 and seq["steps"] > 0 and seq["steps_tol_over_10"] > seq["steps"]
    assert 0 < seq["steps_without_weight_noise"] <= seq["steps"] and seq["energy_max_rel_diff_tol_over_10"] > 0
