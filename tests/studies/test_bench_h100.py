"""The H = 100 path benchmark (issue 36) at a tiny size: it runs, and the routes agree (speed never asserted)."""

from spherepde.studies.bench_h100 import ROUTES, bench_h100


def test_bench_h100_smoke_routes_agree():
    r = bench_h100(True, level=6, steps=4, H=3, record_every=2)
    assert set(r["routes"]) == set(ROUTES) and r["records"] == 3 and r["window_steps"] == 4 and r["lead_route"] == "synthesis"
    for name, row in r["routes"].items():
        assert row["s_per_step"] > 0 and abs(row["projected_T20_s"] - 2000 * row["s_per_step"]) <= 1e-9 * row["projected_T20_s"]
        assert row["same_record_times"] and row["accuracy_held"], name
    assert r["routes"]["old"]["energy_max_rel_diff_vs_old"] == 0.0
    assert r["routes"]["new"]["energy_max_rel_diff_vs_old"] <= 1e-9 and r["routes"]["new"]["G2_max_rel_diff_vs_old"] <= 1e-5
    assert r["target_met"] == (r["best_speedup"] >= 3.0)


def test_bench_h100_later_window_starts_from_the_same_state():
    r = bench_h100(True, level=6, steps=2, H=3, record_every=2, start_steps=3)
    assert r["window_start_t"] > 0 and r["records"] == 2
    assert all(row["same_record_times"] and row["accuracy_held"] for row in r["routes"].values())


def test_bench_h100_windows_along_the_path():
    """Two windows: the second starts where the lead route carried the path (half of T = 20 at 2,000 steps), every route
    from its state; the projection weighs each window's median step by its half of the path."""
    r = bench_h100(True, level=6, steps=2, H=3, record_every=2, windows=2)
    assert r["window_starts_t"][0] == 0.0 and abs(r["window_starts_t"][1] - 10.0) < 1e-9 and r["records"] == 4
    for row in r["routes"].values():
        assert len(row["s_per_step_by_window"]) == 2 and row["same_record_times"] and row["accuracy_held"]
        assert abs(row["projected_T20_s"] - 1000 * sum(row["s_per_step_by_window"])) <= 1e-9 * row["projected_T20_s"]
