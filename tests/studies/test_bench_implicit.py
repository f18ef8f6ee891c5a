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
    seq = r["step_sequence"]  # what sets the steps: the same probe without the weights' noise, and at tol / 10
    assert seq["tol"] == 1e-3 and seq["steps"] > 0 and seq["steps_tol_over_10"] > seq["steps"]
    assert 0 < seq["steps_without_weight_noise"] <= seq["steps"] and seq["energy_max_rel_diff_tol_over_10"] > 0
