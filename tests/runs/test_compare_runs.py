"""Validation against the particles as a workflow (issue 16): coupled-run figures labelled by
method, ``spherepde compare``, branching a particle run from a mesh run's weight path, tokens
as VTK, cheap coupled runs, Monte-Carlo and sweep bands."""

from __future__ import annotations

import csv
import json
import math
import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from spherepde.cli.main import main
from spherepde.model.columns import distance_columns
from spherepde.model.weights import OUProcess, generate_weight_path
from spherepde.runs.branch import path_fit_error
from spherepde.runs.compare import CompareError, default_out
from spherepde.runs.config import config_to_toml, default_config
from spherepde.runs.montecarlo import monte_carlo
from spherepde.runs.runfolder import read_diagnostics
from spherepde.runs.runner import run
from spherepde.runs.series import load_series
from spherepde.viz import plots
from spherepde.viz.compare import compare_runs

BOTH = {
    "run.solver": "both", "mesh.level": 2, "model.H": 1, "initial.n": 40, "solver.T": 0.2,
    "output.record_dt": 0.05, "output.snapshot_dt": 0.1,
}


def _labels(fig) -> list[str]:
    return [ln.get_label() for ax in fig.axes for ln in ax.get_lines() if not ln.get_label().startswith("_")]


@pytest.fixture(scope="module")
def both_run(tmp_path_factory):
    return run(default_config().with_overrides({**BOTH, "output.distances": "all"}), out=tmp_path_factory.mktemp("b") / "both", progress=False).folder


@pytest.fixture(scope="module")
def branched(tmp_path_factory):
    """The README's workflow at tiny size: a mesh run (icosphere 4, H = 1, T = 0.2), a particle
    run on its saved weight path, a particle run on another path."""
    root = tmp_path_factory.mktemp("branch")
    mesh = run(default_config().with_overrides({"run.solver": "mesh", "mesh.level": 4, "model.H": 1, "solver.T": 0.2, "output.record_dt": 0.05}),
               out=root / "mesh", progress=False).folder
    assert main(["run", "--set", "run.solver=particles", "--set", "model.H=1", "--set", "solver.T=0.2", "--set", "initial.n=100",
                 "--set", "output.record_dt=0.04", "--set", "output.snapshot_dt=0.2",
                 "--set", "weights.process=file", "--set", f"weights.path_file={mesh / 'weights.npz'}", "--out", str(root / "tokens"), "-q"]) == 0
    other = run(default_config().with_overrides({"run.solver": "particles", "model.H": 1, "solver.T": 0.2, "initial.n": 100, "weights.seed": 7}),
                out=root / "other", progress=False).folder
    return root, mesh, root / "tokens", other


# ---------------------------------------------------------------- plot of a coupled run
def test_both_run_plot_overlays_mesh_and_tokens(both_run, tmp_path):
    paths = {p.name for p in plots.write_figures(both_run, tmp_path)}
    assert {"energy.png", "G2.png", "edi.png", "mean_resultant.png", "distances.png", "energy_balance.png"} <= paths
    for fn in (plots.plot_energy, plots.plot_dissipation, plots.plot_mean_resultant):
        labels = _labels(fn(both_run))
        assert any("mesh" in lab for lab in labels) and any("particles (40 tokens)" in lab for lab in labels), labels
    labels = _labels(plots.plot_edi_residuals(both_run))
    assert sum("paper's form" in lab for lab in labels) == 2 and sum("exact chain rule" in lab for lab in labels) == 2


def test_distances_are_labelled_by_method_and_the_flag_is_never_plotted(both_run):
    fig = plots.plot_distances(both_run)
    labels = [lab for lab in _labels(fig) if "at t = 0" not in lab]  # each distance also has its t = 0 floor
    assert len(labels) == 3
    assert any("exact $W_1$" in lab for lab in labels) and any("sliced spherical" in lab for lab in labels) and any("$L^1$" in lab for lab in labels)
    assert fig.axes[0].get_yscale() == "log"
    # an older coupled run: w_sphere plus the 0/1 method flag w_exact
    d = read_diagnostics(both_run / "diagnostics.csv")
    old = {"t": d["t"], "energy": d["energy"], "w_sphere": d["w1_exact"], "l1_hist": d["l1_hist"], "w_exact": np.ones_like(d["t"])}
    assert distance_columns(old) == ["w_sphere", "l1_hist"]
    labels = [lab for lab in _labels(plots.plot_distances(old)) if "at t = 0" not in lab]
    assert len(labels) == 2 and not any("w_exact" in lab for lab in labels) and labels[0].startswith("exact $W_1$")
    old["w_exact"] = np.zeros_like(d["t"])
    assert "sliced" in _labels(plots.plot_distances(old))[0]


# ---------------------------------------------------------------- cheap coupled runs
def test_cheap_distances_never_compute_the_exact_w1(tmp_path, monkeypatch):
    import spherepde.solvers.coupled as coupled

    def boom(*a, **k):
        raise AssertionError("exact W1 computed")

    monkeypatch.setattr(coupled, "wasserstein_sphere", boom)
    res = run(default_config().with_overrides(BOTH), out=tmp_path / "cheap", progress=False)
    d = res.diagnostics
    assert {"l1_hist", "w1_sliced"} <= set(d) and "w1_exact" not in d and "w_exact" not in d
    assert np.all(np.isfinite(d["w1_sliced"])) and np.all(d["w1_sliced"] > 0)
    res = run(default_config().with_overrides({**BOTH, "output.distances": "none"}), out=tmp_path / "none", progress=False)
    assert not distance_columns(res.diagnostics)


def test_distance_cadence_leaves_nan_rows_and_the_run_completes(tmp_path):
    res = run(default_config().with_overrides({**BOTH, "output.distance_every": 3}), out=tmp_path / "every3", progress=False)
    assert res.status == "completed"
    w = res.diagnostics["w1_sliced"]
    assert list(np.isfinite(w)) == [True, False, False, True, True]  # records 0 and 3, and the last one (t = T)
    fig = plots.plot_distances(tmp_path / "every3")
    assert all(len(ln.get_xdata()) == 3 for ln in fig.axes[0].get_lines() if "at t = 0" not in ln.get_label())  # not the t = 0 floors


def test_config_show_states_the_cost_of_the_distances(capsys):
    assert main(["config", "--show"]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("distances"))
    assert "per record" in line and "'cheap'" in line and "'all'" in line and "'none'" in line
    assert any(ln.startswith("distance_every") for ln in out.splitlines())


def test_sliced_w1_closed_form():
    from scipy.optimize import minimize_scalar

    from spherepde.solvers.distances import w1_circle

    rng = np.random.default_rng(3)
    u, v = rng.random((7, 1)), rng.random((5, 1))
    a, b = rng.random(7), rng.random(5)
    a, b = a / a.sum(), b / b.sum()

    def cost(alpha):  # int_0^1 |F(t) - alpha| dt, F piecewise constant between the points
        pts = np.sort(np.concatenate([[0.0, 1.0], u[:, 0], v[:, 0]]))
        mid = 0.5 * (pts[1:] + pts[:-1])
        F = (u[:, 0][None] <= mid[:, None]) @ a - (v[:, 0][None] <= mid[:, None]) @ b
        return float(np.sum(np.abs(F - alpha) * np.diff(pts)))

    best = minimize_scalar(cost, bounds=(-1, 1), method="bounded", options={"xatol": 1e-12}).fun
    assert w1_circle(u, a, v, b)[0] == pytest.approx(best, abs=1e-9)
    # the sliced distance against POT's (same circles): SSW_1 in turns = ours in radians / 2 pi
    import ot

    from spherepde.geometry import densities
    from spherepde.geometry.meshfiles import icosphere
    from spherepde.solvers.distances import SlicedW1, great_circles, sample_from_density

    mesh = icosphere(4)
    rho = densities.vmf_mixture(mesh, [[0, 0, 1.0]], [4.0])
    X = sample_from_density(mesh, rho, 300, seed=1)
    m = rho * mesh.areas
    pot = ot.sliced_wasserstein_sphere(mesh.centers, X, m / m.sum(), np.full(300, 1 / 300), p=1, n_projections=20, projections=great_circles(20, 5))
    assert SlicedW1(mesh, n_projections=20, seed=5)(rho, X) / (2 * np.pi) == pytest.approx(pot, rel=1e-6)


# ---------------------------------------------------------------- tokens as VTK
def _pvd_times(path) -> list[tuple[float, str]]:
    return [(float(e.get("timestep")), e.get("file")) for e in ET.parse(path).getroot().iter("DataSet")]


def test_tokens_vtk_series_particles_and_both(tmp_path, both_run):
    import pyvista as pv

    folder = run(default_config().with_overrides({"run.solver": "particles", "model.H": 1, "initial.n": 25, "solver.T": 0.2, "output.snapshot_dt": 0.1}),
                 out=tmp_path / "p", progress=False).folder
    for f, n in ((folder, 25), (both_run, 40)):
        entries = _pvd_times(f / "tokens.pvd")
        snaps = np.load(f / "snapshots.npz")
        assert [t for t, _ in entries] == pytest.approx(list(snaps["t"]))
        for (t, name), X in zip(entries, snaps["X"]):
            mesh = pv.read(f / name)
            assert mesh.n_points == n and mesh.n_verts == n
            assert np.allclose(mesh.points, X) and float(mesh.field_data["TimeValue"][0]) == pytest.approx(t)
    assert (both_run / "density.pvd").is_file() and len(list((both_run / "vtk").glob("tokens_*.vtp"))) == 3
    reader = pv.get_reader(both_run / "tokens.pvd")  # the collection opens as a time series
    assert reader.number_time_points == 3 and reader.time_values == pytest.approx([0.0, 0.1, 0.2])
    reader.set_active_time_value(0.1)
    assert reader.read()[0].n_points == 40
    off = run(default_config().with_overrides({"run.solver": "particles", "model.H": 1, "initial.n": 25, "solver.T": 0.1, "output.vtk": False}),
              out=tmp_path / "novtk", progress=False).folder
    assert not (off / "tokens.pvd").exists() and not (off / "vtk").exists()


def test_render_of_a_both_run_draws_the_tokens(both_run):
    from spherepde.viz import render

    snaps = render.load_snapshots(both_run)
    scene, draw = render._scene_for(snaps, particles=None, clim=None, log=False, window_size=(64, 64))
    assert draw and scene.tokens is not None and scene.poly is not None
    scene.plotter.close()
    scene, draw = render._scene_for(snaps, particles=False, clim=None, log=False, window_size=(64, 64))
    assert not draw and scene.tokens is None
    scene.plotter.close()


# ---------------------------------------------------------------- branching
def test_branch_a_particle_run_from_a_mesh_run(branched):
    root, mesh, tokens, _ = branched
    a, b = np.load(mesh / "weights.npz"), np.load(tokens / "weights.npz")
    assert np.array_equal(a["A"], b["A"]) and np.array_equal(a["V"], b["V"]) and float(a["dt"]) == float(b["dt"])


def _run_err(capsys, *args) -> tuple[int, str]:
    code = main(["run", *args, "-q"])
    err = capsys.readouterr().err.strip()
    return code, err


def test_branch_errors_say_what_to_set(branched, capsys, tmp_path):
    _, mesh, _, _ = branched
    wfile = f"weights.path_file={mesh / 'weights.npz'}"
    base = ["--set", "run.solver=particles", "--set", "model.H=1", "--set", "weights.process=file", "--set", wfile]
    # the paper's particle grid (dt = 0.005, record every 0.025) against the mesh path's 0.01
    code, err = _run_err(capsys, *base, "--set", "weights.dt=0.005", "--set", "output.record_dt=0.025", "--set", "solver.T=0.2", "--out", str(tmp_path / "a"))
    assert code == 2 and len(err.splitlines()) == 1 and "weights.path_file" in err
    assert "--set weights.dt=0.01" in err and "--set output.record_dt=" in err
    suggested = float(re.search(r"output.record_dt=([0-9.]+)", err).group(1))
    assert abs(suggested / 0.01 - round(suggested / 0.01)) < 1e-9 and not (tmp_path / "a").exists()
    # the run beyond the path's end
    code, err = _run_err(capsys, *base, "--set", "solver.T=0.4", "--out", str(tmp_path / "b"))
    assert code == 2 and "ends at t = 0.2" in err and "--set solver.T=0.2" in err and not (tmp_path / "b").exists()
    # other heads
    code, err = _run_err(capsys, *base, "--set", "model.H=3", "--set", "solver.T=0.2", "--out", str(tmp_path / "c"))
    assert code == 2 and "--set model.H=1" in err
    # following the advice works
    code, err = _run_err(capsys, *base, "--set", "weights.dt=0.01", f"--set=output.record_dt={suggested}", "--set", "solver.T=0.2", "--set", "output.snapshot_dt=0.2", "--out", str(tmp_path / "d"))
    assert code == 0, err


def test_path_fit_error_is_none_when_it_fits():
    cfg = default_config().with_overrides({"model.H": 2, "solver.T": 0.5, "weights.dt": 0.01, "output.record_dt": 0.05})
    wp = generate_weight_path(OUProcess(), H=2, d=3, T=1.0, dt=0.01, seed=0)
    assert path_fit_error(wp, cfg) is None
    msg = path_fit_error(wp, cfg.with_overrides({"weights.dt": 0.005, "output.record_dt": 0.025, "output.snapshot_dt": 0.5}))
    assert "--set weights.dt=0.01" in msg and "--set output.record_dt=0.05" in msg  # 0.03, 0.04 do not divide snapshot_dt = 0.5


# ---------------------------------------------------------------- compare
def test_compare_mesh_and_particles_on_one_path(branched, capsys, monkeypatch):
    root, mesh, tokens, _ = branched
    monkeypatch.chdir(root)
    assert main(["compare", "mesh", "tokens"]) == 0
    out = capsys.readouterr().out
    assert "| energy | tokens (particles) |" in out and "interpolated linearly" in out
    folder = root / "compare-mesh-vs-tokens"
    assert folder == default_out([mesh, tokens], cwd=root)
    for name in ("energy.png", "G2.png", "edi.png", "mean_resultant.png", "differences.md", "differences.csv", "compare.json"):
        assert (folder / name).is_file(), name
    doc = json.loads((folder / "compare.json").read_text())
    assert doc["weight_path"]["same"] and doc["weight_path"]["compared_until"] == pytest.approx(0.2)
    assert doc["alignment"]["method"].startswith("linear interpolation") and doc["alignment"]["times"] == 5
    assert doc["columns"][:5] == ["energy", "G2", "edi_paper", "edi_exact", "mean_resultant"]
    with open(folder / "differences.csv", newline="") as fh:
        rows = {r["column"]: r for r in csv.DictReader(fh)}
    # the table's numbers are those of the runs' diagnostics, interpolated onto the mesh times
    dm, dp = read_diagnostics(mesh / "diagnostics.csv"), read_diagnostics(tokens / "diagnostics.csv")
    diff = np.abs(np.interp(dm["t"], dp["t"], dp["energy"]) - dm["energy"])
    assert float(rows["energy"]["max_abs_diff"]) == pytest.approx(diff.max(), rel=1e-12)
    assert float(rows["energy"]["mean_abs_diff"]) == pytest.approx(np.trapezoid(diff, dm["t"]) / 0.2, rel=1e-12)
    assert 0 < float(rows["energy"]["rel_mean_diff"]) < 0.5
    # a non-empty output folder is refused without --force
    assert main(["compare", "mesh", "tokens", "-q"]) == 2
    assert "not empty" in capsys.readouterr().err
    assert main(["compare", "mesh", "tokens", "-q", "--force"]) == 0


def test_compare_refuses_different_weight_paths(branched, capsys, tmp_path):
    _, mesh, _, other = branched
    assert main(["compare", str(mesh), str(other), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "NOT driven by the same weight path" in err and "--force" in err
    assert not (tmp_path / "x").exists()
    assert main(["compare", str(mesh), str(other), "--out", str(tmp_path / "x"), "--force", "-q"]) == 0
    assert "NOT driven by the same weight path" in capsys.readouterr().err
    doc = json.loads((tmp_path / "x" / "compare.json").read_text())
    assert doc["forced"] and not doc["weight_path"]["same"] and doc["warnings"]
    assert "WARNING" in (tmp_path / "x" / "differences.md").read_text()


def test_compare_bad_input(branched, capsys, tmp_path):
    _, mesh, _, _ = branched
    assert main(["compare", str(mesh)]) == 2  # one plain run: nothing to compare with
    assert main(["compare", str(mesh), str(tmp_path / "nope")]) == 2
    assert main(["compare", str(mesh), str(mesh)]) == 2
    (tmp_path / "file").write_text("x")
    assert main(["compare", str(mesh), str(mesh.parent / "tokens"), "--out", str(tmp_path / "file")]) == 2
    errs = capsys.readouterr().err.strip().splitlines()
    assert len(errs) == 4 and all(e.startswith("spherepde: error: ") for e in errs)


def test_one_coupled_run_compares_its_mesh_with_its_tokens(both_run, tmp_path):
    res = compare_runs([both_run], tmp_path / "c")
    assert res.alignment["method"] == "common record times"
    tracks = {r["track"] for r in res.rows}
    assert tracks == {"both: particles (40 tokens)"}
    cols = [r["column"] for r in res.rows]
    assert cols == ["energy", "G2", "edi_paper", "edi_exact", "mean_resultant", "n_clusters"]  # the columns both solvers record (one cluster definition)
    d = read_diagnostics(both_run / "diagnostics.csv")
    row = next(r for r in res.rows if r["column"] == "G2")
    assert row["max_abs_diff"] == pytest.approx(np.max(np.abs(d["p_G2"] - d["G2"])), rel=1e-12)
    assert (tmp_path / "c" / "distances-both.png").is_file()


def _fake_run(folder, t, energy, path):
    folder.mkdir(parents=True)
    (folder / "config.toml").write_text(config_to_toml(default_config().with_overrides({"run.solver": "particles"})))
    path.save(folder / "weights.npz")
    with open(folder / "diagnostics.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["t", "step", "energy", "G2"])
        for k in range(len(t)):
            w.writerow([repr(float(t[k])), k, repr(float(energy[k])), repr(1.0 + float(t[k]))])
    return folder


def test_compare_interpolates_onto_the_first_runs_times(tmp_path):
    wp = generate_weight_path(OUProcess(), H=1, d=3, T=1.0, dt=0.05, seed=0)
    ta, tb = np.linspace(0, 1, 11), np.linspace(0, 1.5, 31)
    a = _fake_run(tmp_path / "a", ta, 1 + ta, wp)
    b = _fake_run(tmp_path / "b", tb, 1 + 2 * tb, generate_weight_path(OUProcess(), H=1, d=3, T=1.5, dt=0.05, seed=0))
    res = compare_runs([a, b], tmp_path / "out")
    assert res.weight_path["same"] and res.weight_path["compared_until"] == pytest.approx(1.0)
    assert res.alignment["times"] == 11 and res.alignment["t_end"] == pytest.approx(1.0)
    e = next(r for r in res.rows if r["column"] == "energy")
    assert e["mean_abs_diff"] == pytest.approx(0.5) and e["max_abs_diff"] == pytest.approx(1.0) and e["t_at_max"] == pytest.approx(1.0)
    g = next(r for r in res.rows if r["column"] == "G2")
    assert g["max_abs_diff"] == pytest.approx(0.0, abs=1e-12)
    # b's times are a superset of a's: read there, no interpolation
    assert res.alignment["per_track"]["b (particles)"].startswith("read at")
    with pytest.raises(CompareError, match="not empty"):
        compare_runs([a, b], tmp_path / "out")


# ---------------------------------------------------------------- Monte-Carlo and sweeps
def test_monte_carlo_bands_are_standard_error_and_quantiles(tmp_path):
    cfg = default_config().with_overrides({"run.solver": "particles", "solver.T": 0.1, "model.H": 2, "initial.n": 20, "output.snapshot_dt": 0.1})
    folder = monte_carlo(cfg, paths=4, out=tmp_path / "mc", progress=False).folder
    s = load_series(folder)
    b = s.band("G2")
    stack = np.stack([p["G2"] for p in s.paths])
    assert b.n == 4 and np.allclose(b.sem, stack.std(axis=0, ddof=1) / 2)
    assert np.allclose(b.q05, np.quantile(stack, 0.05, axis=0)) and np.allclose(b.q95, np.quantile(stack, 0.95, axis=0))
    fig = plots.plot_dissipation(folder)
    ax = fig.axes[0]
    assert ax.get_yscale() == "log" and len(ax.collections) == 2
    for coll in ax.collections:  # both bands stay positive on the log axis
        ys = np.concatenate([p.vertices[:, 1] for p in coll.get_paths()])
        assert np.all(ys[np.isfinite(ys)] > 0)
    assert "s.e." in fig._suptitle.get_text() and "5–95 %" in fig._suptitle.get_text() and "4 paths" in fig._suptitle.get_text()
    # the quantiles are kept with the aggregates
    q05 = read_diagnostics(folder / "diagnostics_q05.csv")["G2"]
    assert np.allclose(q05, b.q05)
    import shutil

    agg = shutil.copytree(folder, tmp_path / "agg", ignore=shutil.ignore_patterns("path-*"))
    b2 = load_series(agg).band("G2")
    assert b2.n == 4 and np.allclose(b2.q95, b.q95) and np.allclose(b2.sem, b.sem)


def test_sweep_results_carry_point_statistics_over_seeds(tmp_path):
    from spherepde.runs.sweep import read_results, run_sweep

    base = config_to_toml(default_config().with_overrides({"run.solver": "particles", "solver.T": 0.1, "model.H": 1, "initial.n": 20, "output.snapshot_dt": 0.1}))
    (tmp_path / "base.toml").write_text(base)
    (tmp_path / "sweep.toml").write_text('base = "base.toml"\n[grid]\n"model.H" = [1, 2]\n"weights.seed" = [0, 1, 2]\n[analysis]\nx = "model.H"\ny = "G2"\n')
    res = run_sweep(tmp_path / "sweep.toml", tmp_path / "out", serial=True, progress=False)
    assert res.status == "completed"
    rows = read_results(tmp_path / "out" / "results.csv")
    for H in (1, 2):
        grp = [r for r in rows if r["model.H"] == H]
        vals = np.array([r["mean_G2"] for r in grp])
        for r in grp:
            assert r["point_runs"] == 3
            assert r["point_mean_G2"] == pytest.approx(vals.mean(), rel=1e-12)
            assert r["point_sem_G2"] == pytest.approx(vals.std(ddof=1) / math.sqrt(3), rel=1e-12)
            assert r["point_q05_G2"] == pytest.approx(np.quantile(vals, 0.05)) and r["point_q95_G2"] == pytest.approx(np.quantile(vals, 0.95))
    pts = json.loads((tmp_path / "out" / "analysis.json").read_text())["points"]
    assert all({"sem", "q05", "q95"} <= set(p) for p in pts)


def test_distance_cadence_survives_a_checkpoint():
    from spherepde.runs.runner import build_mesh, build_solver, build_weight_path

    cfg = default_config().with_overrides({**BOTH, "output.distance_every": 2})
    path, mesh = build_weight_path(cfg), build_mesh(cfg)
    s1 = build_solver(cfg, path, mesh=mesh)
    rows, state = [], None
    for r in range(5):
        if r:
            s1.advance(0.05 * r)
        rows.append(s1.record())
        if r == 2:
            state = s1.get_state()
    s2 = build_solver(cfg, path, mesh=mesh)
    s2.set_state(state)
    for r in (3, 4):
        s2.advance(0.05 * r)
        again = s2.record()
        for c, v in rows[r].items():
            assert (math.isnan(v) and math.isnan(again[c])) or v == again[c], c
    assert [math.isnan(r["w1_sliced"]) for r in rows] == [False, True, False, True, False]


# ---------------------------------------------------------------- compare: what the outputs read (issue 26)
def test_compare_figures_of_a_long_named_both_run_have_short_labels_that_fit(both_run, tmp_path, monkeypatch):
    """The folder name once went into every legend and title, cut off on both sides
    (and constrained layout collapsed); now "mesh" / "tokens", and every text fits."""
    import shutil
    import warnings

    long = tmp_path / ("both-ou-H4-seed0-T0.5-level8-vtk-false-and-a-rather-long-folder-name-" + "x" * 40)
    shutil.copytree(both_run, long)
    figs = []
    save = plots._save
    monkeypatch.setattr(plots, "_save", lambda fig, *a, **k: figs.append(fig) or save(fig, *a, **k))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compare_runs([long], tmp_path / "c")
    assert not [w for w in caught if "layout" in str(w.message)], [str(w.message) for w in caught]
    assert len(figs) >= 5
    for fig in figs:
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        canvas = FigureCanvasAgg(fig)
        canvas.draw()
        renderer = canvas.get_renderer()
        box = fig.bbox
        texts = [fig._suptitle] + [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
        for t in texts:
            ext = t.get_window_extent(renderer)
            assert ext.x0 >= box.x0 - 1 and ext.x1 <= box.x1 + 1 and ext.y1 <= box.y1 + 1, (fig._suptitle.get_text(), t)
        for lab in _labels(fig):
            assert long.name[:20] not in lab and len(lab) < 60, lab
    energy = next(f for f in figs if f._suptitle.get_text().startswith("Energy\n") or f._suptitle.get_text().startswith("Energy "))
    assert _labels(energy) == ["$E(t)$, mesh", "$E(t)$, tokens", "tokens − mesh"]


def test_short_labels_of_several_runs():
    from spherepde.viz.compare import _shorten

    assert _shorten(["paper-ou-mesh-level32", "paper-ou-particles-level32"]) == ["mesh", "particles"]
    names = ["a" * 30 + "-one", "a" * 30 + "-two"]
    assert _shorten(names) == ["one", "two"]
    out = _shorten(["x" * 50 + "1", "y" * 50 + "2"])
    assert all(len(n) <= 32 for n in out) and len(set(out)) == 2 and "…" in out[0]


def test_relative_differences_read_right():
    """max rel >= mean rel (one definition, per time, floored); ~0 on one side: none, not 200 %."""
    from spherepde.runs.compare import _relative

    t = np.linspace(0.0, 1.0, 11)
    ref = np.where(t < 0.85, 1.0, 100.0)  # the old table: max |d| / max scale < mean |d| / mean scale
    y = ref + np.where(t < 0.85, 0.5, 0.0)
    ad = np.abs(y - ref)
    mean, mx, note = _relative(ad, ref, y, 0.5 * (np.abs(ref) + np.abs(y)), t)
    assert mx >= mean and mx == pytest.approx(0.5 / 1.25) and note == ""
    old_max, old_mean = ad.max() / (0.5 * (ref + y)).max(), np.trapezoid(ad, t) / np.trapezoid(0.5 * (ref + y), t)
    assert old_max < old_mean  # what the table used to show
    sym = np.full_like(t, 1e-16)  # the mean resultant of a symmetric density
    tok = np.full_like(t, 0.07)
    mean, mx, note = _relative(np.abs(tok - sym), sym, tok, 0.5 * (sym + tok), t)
    assert math.isnan(mean) and math.isnan(mx) and note.startswith("reference ~ 0")
    # a quantity crossing zero is divided by the floor, not by ~0
    r = np.sin(6 * t)
    mean, mx, _ = _relative(np.full_like(t, 1e-3), r, r + 1e-3, np.abs(r) + 5e-4, t)
    assert mx <= 1e-3 / (1e-3 * np.max(np.abs(r) + 5e-4)) + 1e-12 and mx >= mean


def test_compare_table_of_a_both_run(both_run, tmp_path):
    res = compare_runs([both_run], tmp_path / "c")
    for r in res.rows:
        if math.isfinite(r["rel_mean_diff"]):
            assert r["rel_max_diff"] >= r["rel_mean_diff"], r
    md = (tmp_path / "c" / "differences.md").read_text()
    mr = next(line for line in md.splitlines() if line.startswith("| mean_resultant |"))
    assert "200 %" not in mr and "reference ~ 0" in mr
    # the distances with their floor at t = 0 beside them
    d = read_diagnostics(both_run / "diagnostics.csv")
    assert "## Distances between the mesh and its tokens" in md
    l1 = next(line for line in md.splitlines() if "| l1_hist |" in line)
    assert f"{d['l1_hist'][0]:.3e}" in l1
    doc = json.loads((tmp_path / "c" / "compare.json").read_text())
    row = next(r for r in doc["distances"] if r["column"] == "l1_hist")
    assert row["at_t0"] == pytest.approx(d["l1_hist"][0]) and row["final_minus_t0"] == pytest.approx(d["l1_hist"][-1] - d["l1_hist"][0])
    fig = plots.plot_distances(both_run)
    floors = [ln for ln in fig.axes[0].get_lines() if "l1_hist at t = 0" in ln.get_label()]
    assert len(floors) == 1 and floors[0].get_ydata()[0] == pytest.approx(d["l1_hist"][0])


def test_both_run_final_summary_shows_tokens_and_distances(tmp_path, capsys):
    """The final summary of a both run once showed the mesh only: now the tokens beside it, and the distances with their t = 0 floor."""
    sets = [a for k, v in {**BOTH, "output.vtk": "false"}.items() for a in ("--set", f"{k}={v}")]
    assert main(["run", "--out", str(tmp_path / "b"), *sets]) == 0
    out = capsys.readouterr().out.splitlines()
    d = read_diagnostics(tmp_path / "b" / "diagnostics.csv")
    energy = next(line for line in out if line.strip().startswith("energy"))
    assert energy.split()[1:] == [f"{d['energy'][-1]:.6g}", f"{d['p_energy'][-1]:.6g}"]
    assert any(line.split()[0] == "mesh" and line.split()[1] == "tokens" for line in out if line.strip())
    l1 = next(line for line in out if line.strip().startswith("l1_hist"))
    assert f"{d['l1_hist'][-1]:.6g}" in l1 and f"(t = 0: {d['l1_hist'][0]:.6g})" in l1


def test_compare_writes_next_to_the_runs_not_into_the_current_folder(branched, tmp_path, monkeypatch, capsys):
    import shutil

    _, mesh0, tokens0, _ = branched
    root = tmp_path / "runs"
    mesh, tokens = shutil.copytree(mesh0, root / "mesh"), shutil.copytree(tokens0, root / "tokens")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert default_out([mesh, tokens]) == root / "compare-mesh-vs-tokens"
    assert main(["compare", str(mesh), str(tokens), "-q"]) == 0
    assert not any(elsewhere.iterdir())  # nothing in the current folder
    assert (root / "compare-mesh-vs-tokens" / "differences.md").is_file()
    # a path of a Monte-Carlo folder: next to that folder, never inside it
    mc = tmp_path / "mc"
    (mc / "path-000").mkdir(parents=True)
    from spherepde.runs.runfolder import MARKER

    (mc / MARKER).write_text("{}")
    assert default_out([mc / "path-000", mc / "path-001"]) == tmp_path / "compare-path-000-vs-path-001"
