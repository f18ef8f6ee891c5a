"""The density-study benchmark (issue 18) at a tiny size: it runs, and the routes it
times agree with direct summation (speed itself is never asserted here)."""

from spherepde.studies.benchmarks import bench_density_study


def test_density_study_smoke_routes_agree_with_direct():
    r = bench_density_study(True, levels=(6,), H=3, steps=2)
    (c,) = r["cases"]
    assert c["cells"] == 720 and c["H"] == 3
    for route in ("fused", "numpy", "direct"):
        assert c["s_per_step"][route] > 0
        assert c["projected_T20_s"][route] == 20.0 * c["s_per_unit_time"][route]
    for route in ("fused", "numpy"):
        d = c["differences_vs_direct_after_2_steps"][route]
        assert d["rho_max_rel"] <= 1e-9 and d["energy_rel"] <= 1e-9
        assert d["G2_rel"] <= 1e-5 and d["dEdt_rel"] <= 1e-5  # the fused route's moments are at 1e-6
    share = c["fused_time_share"]
    assert abs(sum(share.values()) - 1.0) < 1e-9 and share["_target_kernel"] > 0


def test_auto_crossover_entry_reports_what_auto_picks():
    """Entry (b'): both paths timed, and the path reported for "auto" is the cost model's."""
    from spherepde.attention import harmonic
    from spherepde.studies.benchmarks import bench_auto_crossover

    rows = bench_auto_crossover(True)
    assert [(r["H"], r["N"]) for r in rows] == [(1, 640), (1, 2000), (10, 1280)]
    for r in rows:
        assert r["t_direct_s"] > 0 and r["t_fast_s"] > 0 and r["speedup"] == r["t_direct_s"] / r["t_fast_s"]
        assert r["auto_picks"] in ("direct", "fast")
        if r["predicted_speedup"] is None:  # below the size filter: always direct
            assert r["auto_picks"] == "direct"
        else:
            assert (r["auto_picks"] == "fast") == (r["predicted_speedup"] >= harmonic._AUTO_MARGIN)
