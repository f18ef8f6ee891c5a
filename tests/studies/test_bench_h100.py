"""The H = 100 path benchmark (issue 36) at a tiny size: it runs, and the routes agree (speed never asserted)."""

from spherepde.studies.bench_h100 import ROUTES, bench_h100


def test_bench_h100_smoke_routes_agree():
    r = bench_h100(True, level=6, steps=4, H=3, record_every=2)
    assert set(r["routes"]) == set(ROUTES) and r["records"] == 3 and r["window_steps"] == 4
    for name, row in r["routes"].items():
        assert row["s_per_step"] > 0 and row["projected_T20_s"] == 2000 * row["s_per_step"]
        assert row["same_record_times"] and row["accuracy_held"], name
    assert r["routes"]["old"]["energy_max_rel_diff_vs_old"] == 0.0
    assert r["routes"]["new"]["energy_max_rel_diff_vs_old"] <= 1e-9 and r["routes"]["new"]["G2_max_rel_diff_vs_old"] <= 1e-5
    assert r["target_met"] == (r["best_speedup"] >= 3.0)


def test_bench_h100_later_window_starts_from_the_same_state():
    r = bench_h100(True, level=6, steps=2, H=3, record_every=2, start_steps=3)
    assert r["window_start_t"] > 0 and r["records"] == 2
    assert all(row["same_record_times"] and row["accuracy_held"] for row in r["routes"].values())
