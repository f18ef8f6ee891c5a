"""Parameter sweeps (spherepde.runs.sweep, ``spherepde sweep``): validation, Dask and serial
execution, failure reporting, skip/resume on rerun, the analysis, the CLI.

Runs are tiny particle runs (n = 30, T = 0.1, H in {1, 2}). The Dask sweep uses a local
cluster of 2 single-threaded worker *processes* (``processes=True``, the default of
``run_sweep``): it starts in about 3 s here.
"""

from __future__ import annotations

import json
import math
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from spherepde.cli import main as cli
from spherepde.runs.config import load_config
from spherepde.runs.runfolder import read_diagnostics
from spherepde.runs.sweep import (
    DaskUnavailableError,
    SweepChangedError,
    SweepError,
    analyse,
    example_sweep_path,
    load_sweep,
    read_results,
    run_sweep,
)

BASE = """
[run]
solver = "particles"
[model]
d = 3
H = 1
[weights]
process = "ou"
sigma = 1.4142135623730951
dt = 0.005
[initial]
kind = "octahedral"
n = 30
[solver]
T = 0.1
[output]
record_dt = 0.025
snapshot_dt = 0.05
checkpoint_every = 1
"""

# 5 runs; run 4 reads a corrupt initial-matrix file: the configuration is valid (the file
# exists), the run fails inside (when the weight path is built)
SWEEP = """
base = "base.toml"
[set]
"weights.init_file" = "corrupt.npy"
[list]
"model.H"      = [1, 2, 1, 2, 2]
"weights.seed" = [0, 0, 1, 1, 2]
"weights.init" = ["gaussian", "gaussian", "gaussian", "gaussian", "file"]
[analysis]
x = "model.H"
y = "G2"
t_min = 0.05
"""

OK_SWEEP = """
base = "base.toml"
[grid]
"model.H" = [1, 2]
"""

STAT_COLUMNS = [f"{k}_{c}" for c in ("energy", "G2", "edi_paper", "edi_exact", "mean_resultant") for k in ("final", "mean")]


def write_inputs(folder: Path, sweep: str = SWEEP, name: str = "sweep.toml") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "base.toml").write_text(BASE)
    (folder / "corrupt.npy").write_bytes(b"\x93NUMPY this is not an array" + bytes(range(64)))
    (folder / name).write_text(sweep)
    return folder / name


def run_files(out: Path) -> dict:
    """Every file of every run folder: path -> mtime_ns."""
    return {str(p.relative_to(out)): p.stat().st_mtime_ns for p in sorted((out / "runs").rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def dask_sweep(tmp_path_factory):
    """The sweep on a local Dask cluster of 2 worker processes (run once for the module)."""
    import distributed  # noqa: F401  (in the test extra: a missing install must fail, not skip)

    folder = tmp_path_factory.mktemp("dask")
    sweep = write_inputs(folder)
    res = run_sweep(sweep, folder / "out", workers=2, progress=False)
    return sweep, folder / "out", res


# ------------------------------------------------------------------- validation
@pytest.mark.parametrize(
    "text, message",
    [
        ('base = "base.toml"\ngrids = {}\n[grid]\n"model.H" = [1]', "unknown key 'grids' (did you mean 'grid'?)"),
        ('base = "base.toml"\n[grid]\n"model.HH" = [1, 2]', "[grid] model.HH: unknown configuration key 'model.HH' (did you mean 'model.H'?)"),
        ('base = "base.toml"\n[grid]\nmodel.HH = [1, 2]', "unknown configuration key 'model.HH'"),
        ('base = "base.toml"\n[grid]\nH = [1, 2]', "is not a configuration key; write section.key"),
        ('base = "base.toml"\n[set]\n"modle.H" = 2\n[grid]\n"weights.seed" = [0]', "[set] modle.H: unknown configuration key"),
        ('base = "base.toml"\n[list]\n"model.H" = [1, 2]\n"weights.seed" = [0, 1, 2]', "[list]: the lists are zipped and must have equal lengths"),
        ('base = "base.toml"\n[grid]\n"model.H" = []', "[grid] model.H: expected a non-empty list"),
        ('base = "base.toml"\n[grid]\n"model.H" = [1, 1]', "value 1 appears twice"),
        ('base = "base.toml"\n[set]\n"model.H" = 2\n[grid]\n"model.H" = [1]', "model.H is given in both [set] and [grid]"),
        ('base = "base.toml"\n[set]\n"solver.T" = 0.1', "nothing to vary"),
        ('[grid]\n"model.H" = [1]', "give the base configuration"),
        ('base = "nope.toml"\n[grid]\n"model.H" = [1]', "base: configuration file not found"),
        ('base_example = "paper-ou-particle"\n[grid]\n"model.H" = [1]', "base_example: unknown example 'paper-ou-particle'"),
        ('base = "base.toml"\n[grid]\n"run.name" = ["a", "b"]', "run.name cannot be set in a sweep"),
        ('base = "base.toml"\n[grid]\n"model.H" = [1, 0]', "run 1 (model.H=0): model.H: must be >= 1, got 0"),
        ('base = "base.toml"\n[grid]\n"solver.T" = [0.1, 0.0123]', "run 1 (solver.T=0.0123): solver.T: T = 0.0123 must be a whole multiple of weights.dt"),
        ('base = "base.toml"\n[grid]\n"model.H" = [1, 2]\n[analysis]\nx = "model.h"\ny = "G2"', "[analysis] x: 'model.h' is not a varied key (did you mean 'model.H'?)"),
        ('base = "base.toml"\n[grid]\n"model.H" = [1, 2]\n[analysis]\nx = "model.H"\ny = "g2"', "[analysis] y: 'g2' is not a diagnostics column (did you mean 'G2'?)"),
        ('base = "base.toml"\n[grid]\n"model.H" = [1, 2]\n[analysis]\nx = "model.H"\ny = "G2"\nt_min = 0.5', "t_min = 0.5 must be below the final time solver.T = 0.1"),
        ('base = "base.toml"\n[grid]\n"model.H" = [1, 2\n', "malformed TOML"),
    ],
)
def test_bad_sweep_files_fail_before_anything_runs(tmp_path, text, message):
    sweep = write_inputs(tmp_path, text)
    with pytest.raises(SweepError) as info:
        run_sweep(sweep, tmp_path / "out", serial=True, progress=False)
    assert message in str(info.value)
    assert "\n" not in str(info.value)
    assert str(info.value).startswith(f"{sweep}: ")
    assert not (tmp_path / "out").exists()  # nothing written


def test_bad_sweep_file_cli_exit_2(tmp_path, capsys):
    sweep = write_inputs(tmp_path, 'base = "base.toml"\n[grid]\n"model.H" = [1, 0]')
    assert cli.main(["sweep", str(sweep), "--serial", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "run 1 (model.H=0): model.H: must be >= 1" in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_grid_list_combinations_and_names(tmp_path):
    text = 'base = "base.toml"\n[list]\n"model.H" = [1, 2]\n"weights.sigma" = [0.5, 1.0]\n[grid]\nweights.seed = [0, 1, 2]\n"weights.init_file" = ["corrupt.npy"]\n'
    sw = load_sweep(write_inputs(tmp_path, text))
    assert sw.keys == ["model.H", "weights.sigma", "weights.seed", "weights.init_file"]
    assert [(r.params["model.H"], r.params["weights.sigma"], r.params["weights.seed"]) for r in sw.runs] == [
        (1, 0.5, 0), (1, 0.5, 1), (1, 0.5, 2), (2, 1.0, 0), (2, 1.0, 1), (2, 1.0, 2)
    ]
    assert sw.runs[4].name == "004-model.H=2-weights.sigma=1.0-weights.seed=1-weights.init_file=corrupt"
    cfg = sw.runs[4].config
    assert (cfg.model.H, cfg.weights.sigma, cfg.weights.seed, cfg.solver.T) == (2, 1.0, 1, 0.1)
    assert cfg.weights.init_file == str((tmp_path / "corrupt.npy").resolve())  # relative to the sweep file
    # the same sweep as a dict (TOML dotted keys or quoted keys) gives the same runs and hash
    d = {"base": str(tmp_path / "base.toml"), "list": {"model": {"H": [1, 2]}, "weights.sigma": [0.5, 1.0]},
         "grid": {"weights.seed": [0, 1, 2], "weights.init_file": [str(tmp_path / "corrupt.npy")]}}
    sw2 = load_sweep(d)
    assert [r.config for r in sw2.runs] == [r.config for r in sw.runs] and sw2.keys == sw.keys


def test_any_registered_column_is_an_analysis_target(tmp_path):
    """[analysis] y: every column of the registry (spherepde.model.columns) the sweep's runs write,
    the distances and the token columns of both runs included; refused in one line where the runs
    do not write it."""
    from spherepde.model.columns import COLUMNS, solver_columns

    both = 'base = "base.toml"\n[set]\n"run.solver" = "both"\n[grid]\n"model.H" = [1, 2]\n[analysis]\nx = "model.H"\n'
    for y in ("w1_sliced", "p_G2", "l1_hist", "n_clusters"):
        assert load_sweep(write_inputs(tmp_path, both + f'y = "{y}"\n')).analysis["y"] == y
    particles = 'base = "base.toml"\n[grid]\n"model.H" = [1, 2]\n[analysis]\nx = "model.H"\n'
    for y in solver_columns("particles")[2:]:
        assert load_sweep(write_inputs(tmp_path, particles + f'y = "{y}"\n')).analysis["y"] == y
    assert set(solver_columns("both", "all", noise=True)) | {"speed_rms"} == set(COLUMNS)
    for text, message in (
        (particles + 'y = "w1_sliced"\n', "[analysis] y: 'w1_sliced' is not written by run.solver = 'particles'; it is written by run.solver = 'both' (run 0: model.H=1)"),
        (particles + 'y = "p_G2"\n', "'p_G2' is not written by run.solver = 'particles'"),
        (both + 'y = "w1_exact"\n', "[analysis] y: 'w1_exact' is not written with output.distances = 'cheap'; it needs run.solver = 'both' with output.distances = 'all'"),
        (both + 'y = "t"\n', "[analysis] y: 't' is not a diagnostics column"),
        (particles + 'y = "entropy"\n', "[analysis] y: 'entropy' is written only by runs whose tokens carry noise; it needs model.noise > 0"),
    ):
        with pytest.raises(SweepError) as info:
            load_sweep(write_inputs(tmp_path, text))
        assert message in str(info.value) and "\n" not in str(info.value)
    assert load_sweep(write_inputs(tmp_path, both.replace('[grid]', '"output.distances" = "all"\n[grid]') + 'y = "w1_exact"\n')).analysis["y"] == "w1_exact"
    noisy = particles.replace("[grid]", '[set]\n"model.noise" = 0.1\n[grid]')
    assert load_sweep(write_inputs(tmp_path, noisy + 'y = "entropy"\n')).analysis["y"] == "entropy"
    from spherepde.runs.sweep.analysis import axis_label

    assert (axis_label("G2"), axis_label("p_G2"), axis_label("w1_sliced")) == ("G²", "G² of the tokens", "w1_sliced (rad)")


def test_example_sweep_file_is_valid():
    sw = load_sweep(example_sweep_path("sweep-paper-G2-vs-H"))
    assert len(sw.runs) == 30 and sw.base == "example:paper-ou-particles"
    assert sorted({r.config.model.H for r in sw.runs}) == [1, 10, 100]
    assert sorted({r.config.weights.seed for r in sw.runs}) == list(range(10))
    assert len({r.name for r in sw.runs}) == 30
    for r in sw.runs:
        c = r.config
        assert (c.run.solver, c.solver.T, c.weights.process, c.initial.n, c.weights.dt) == ("particles", 20.0, "ou", 200, 0.005)
        assert math.isclose(c.weights.sigma**2, 2.0)
    assert sw.analysis["x"] == "model.H" and sw.analysis["y"] == "G2" and sw.t_min == 2.5


def test_example_sweep_dry_run(capsys):
    assert cli.main(["sweep", "--example", "sweep-paper-G2-vs-H", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "30 runs over model.H, weights.seed" in out and "runs/029-model.H=100-weights.seed=9" in out and "nothing was run" in out


# ------------------------------------------------------------------ Dask sweep
def test_dask_sweep_table_and_failure_report(dask_sweep):
    _, out, res = dask_sweep
    assert res.status == "failed" and res.counts == {"run": 5, "resumed": 0, "skipped": 0, "failed": 1}
    assert [r["index"] for r in res.table] == [0, 1, 2, 3, 4]
    assert [r["status"] for r in res.table] == ["completed"] * 4 + ["failed"]
    bad = res.table[4]
    assert "weights.init_file" in bad["error"] and "corrupt.npy" in bad["error"]
    assert bad["final_G2"] is None and bad["folder"] == "runs/004-model.H=2-weights.seed=2-weights.init=file"
    # results.csv: one row per run with the varied parameters, status, wall time, error, statistics
    rows = read_results(out / "results.csv")
    assert list(rows[0])[:8] == ["index", "folder", "model.H", "weights.seed", "weights.init", "status", "wall_time_s", "error"]
    assert set(STAT_COLUMNS) <= set(rows[0])
    assert [(r["model.H"], r["weights.seed"]) for r in rows] == [(1, 0), (2, 0), (1, 1), (2, 1), (2, 2)]
    assert rows[4]["status"] == "failed" and rows[4]["error"] == bad["error"]
    for r, t in zip(rows[:4], res.table[:4]):
        assert r["wall_time_s"] > 0 and r["error"] is None
        for c in STAT_COLUMNS:
            assert r[c] == t[c] and math.isfinite(r[c])
        # the statistics are those of the run folder's diagnostics
        d = read_diagnostics(out / r["folder"] / "diagnostics.csv")
        sel = d["t"] >= 0.05 - 1e-9
        assert r["final_G2"] == d["G2"][-1]
        assert r["mean_G2"] == pytest.approx(np.trapezoid(d["G2"][sel], d["t"][sel]) / (d["t"][-1] - 0.05), rel=1e-12)
        assert json.loads((out / r["folder"] / "summary.json").read_text())["status"] == "completed"
        assert load_config(out / r["folder"] / "config.toml").model.H == r["model.H"]
    # the sweep state records the failure (with its traceback) and the sweep's hash
    state = json.loads((out / "sweep_state.json").read_text())
    assert state["status"] == "failed" and len(state["sweep_hash"]) == 64
    assert [e["status"] for e in state["runs"]] == ["completed"] * 4 + ["failed"]
    assert "Traceback" in state["runs"][4]["traceback"] and state["runs"][4]["row"]["error"] == bad["error"]
    assert {e["pid"] for e in state["runs"]} - {None} and all(e["pid"] != __import__("os").getpid() for e in state["runs"])  # ran in worker processes
    # the analysis: means over seeds of mean_G2 at H = 1, 2 (run 4 excluded)
    a = json.loads((out / "analysis.json").read_text())
    assert (a["x"], a["y"], a["t_min"], a["runs_used"], a["runs_excluded"]) == ("model.H", "G2", 0.05, 4, 1)
    assert [p["x"] for p in a["points"]] == [1.0, 2.0]
    assert a["points"][0]["mean"] == pytest.approx(np.mean([rows[0]["mean_G2"], rows[2]["mean_G2"]]))
    assert math.isfinite(a["b"]) and a["b_ci95"] is None  # two seeds per H: no "95 %" interval from two runs
    assert a["interval_note"] == "interval undefined: need >= 3 runs per point"
    assert (out / "analysis.png").stat().st_size > 1000 and (out / "analysis.pdf").stat().st_size > 1000


def test_rerun_skips_completed_runs_and_retries_only_the_failed_one(dask_sweep):
    sweep, out, first = dask_sweep
    before = run_files(out)
    res = run_sweep(sweep, out, workers=2, progress=False)
    assert res.counts == {"run": 1, "resumed": 0, "skipped": 4, "failed": 1}
    assert run_files(out) == before  # no run folder was touched
    assert [r["status"] for r in res.table] == [r["status"] for r in first.table]
    for a, b in zip(res.table, first.table):
        assert {k: a[k] for k in STAT_COLUMNS} == {k: b[k] for k in STAT_COLUMNS}
    # --skip-failed: nothing at all is run
    res = run_sweep(sweep, out, serial=True, progress=False, retry_failed=False)
    assert res.counts == {"run": 0, "resumed": 0, "skipped": 4, "failed": 0} and res.table[4]["status"] == "failed"
    assert run_files(out) == before


def test_serial_sweep_gives_identical_numbers(dask_sweep, tmp_path):
    sweep, out, dres = dask_sweep
    sres = run_sweep(sweep, tmp_path / "serial", serial=True, progress=False)
    assert sres.counts == {"run": 5, "resumed": 0, "skipped": 0, "failed": 1}
    for a, b in zip(sres.table, dres.table):
        assert {k: v for k, v in a.items() if k != "wall_time_s"} == {k: v for k, v in b.items() if k != "wall_time_s"}
        if a["status"] == "completed":
            assert (tmp_path / "serial" / a["folder"] / "diagnostics.csv").read_bytes() == (out / b["folder"] / "diagnostics.csv").read_bytes()
    assert json.loads((tmp_path / "serial" / "analysis.json").read_text())["b"] == dres.analysis["b"]


def test_rerun_resumes_an_interrupted_run(dask_sweep, tmp_path):
    sweep, out, _ = dask_sweep
    work = tmp_path / "out"
    shutil.copytree(out, work)
    run0 = work / "runs" / "000-model.H=1-weights.seed=0-weights.init=gaussian"
    reference = (run0 / "diagnostics.csv").read_bytes()
    # as if the run had been killed after the checkpoint of the next-to-last record
    (run0 / "checkpoint.prev.npz").replace(run0 / "checkpoint.npz")
    (run0 / "snapshots.npz").unlink()
    s = json.loads((run0 / "summary.json").read_text())
    (run0 / "summary.json").write_text(json.dumps({**s, "status": "interrupted"}))
    res = run_sweep(sweep, work, serial=True, progress=False, retry_failed=False)
    assert res.counts == {"run": 0, "resumed": 1, "skipped": 3, "failed": 0}
    assert res.table[0]["status"] == "completed" and (run0 / "snapshots.npz").is_file()
    assert (run0 / "diagnostics.csv").read_bytes() == reference


def test_changed_sweep_is_refused_unless_force(tmp_path, capsys):
    sweep = write_inputs(tmp_path, OK_SWEEP)
    out = tmp_path / "out"
    assert cli.main(["sweep", str(sweep), "--serial", "--out", str(out), "-q"]) == 0
    assert [r["status"] for r in read_results(out / "results.csv")] == ["completed", "completed"]
    sweep.write_text(OK_SWEEP.replace("[1, 2]", "[1, 3]"))
    with pytest.raises(SweepChangedError, match=r"holds a different sweep \(model.H was \[1, 2\], now \[1, 3\]\).*--force"):
        run_sweep(sweep, out, serial=True, progress=False)
    assert cli.main(["sweep", str(sweep), "--serial", "--out", str(out), "-q"]) == 2
    assert "--force" in capsys.readouterr().err
    (tmp_path / "base.toml").write_text(BASE.replace("n = 30", "n = 31"))  # the base file counts too
    sweep.write_text(OK_SWEEP)
    with pytest.raises(SweepChangedError, match="base configuration"):
        run_sweep(sweep, out, serial=True, progress=False)
    res = run_sweep(sweep, out, serial=True, progress=False, force=True)
    assert res.counts["run"] == 2 and res.status == "completed"
    assert sorted(p.name for p in (out / "runs").iterdir()) == ["000-model.H=1", "001-model.H=2"]
    # the analysis settings may change without rerunning anything
    sweep.write_text(OK_SWEEP + '[analysis]\nx = "model.H"\ny = "energy"\n')
    res = run_sweep(sweep, out, serial=True, progress=False)
    assert res.counts["skipped"] == 2 and res.analysis["y"] == "energy" and (out / "analysis.json").is_file()


def test_second_sweep_into_the_same_folder_is_refused(tmp_path):
    import os

    sweep = write_inputs(tmp_path, OK_SWEEP)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "sweep.lock").write_text(json.dumps({"pid": os.getppid(), "host": __import__("socket").gethostname()}))
    with pytest.raises(SweepError, match="another sweep"):
        run_sweep(sweep, tmp_path / "out", serial=True, progress=False)


# -------------------------------------------------------------------- the CLI
def test_cli_serial_sweep(tmp_path, capsys):
    sweep = write_inputs(tmp_path, OK_SWEEP + '[analysis]\nx = "model.H"\ny = "G2"\n')
    out = tmp_path / "out"
    assert cli.main(["sweep", str(sweep), "--serial", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "sweep completed: 2/2 runs completed" in text and "results.csv" in text and "b = " in text
    rows = read_results(out / "results.csv")
    assert [r["status"] for r in rows] == ["completed", "completed"] and all(math.isfinite(r["mean_G2"]) for r in rows)
    assert cli.main(["sweep", str(sweep), "--serial", "--out", str(out), "-q"]) == 0
    assert capsys.readouterr().out == ""


def test_cli_failed_run_exit_1(tmp_path, capsys):
    sweep = write_inputs(tmp_path, SWEEP.replace("[1, 2, 1, 2, 2]", "[1, 2]").replace("[0, 0, 1, 1, 2]", "[0, 0]").replace('"gaussian", "gaussian", "gaussian", "gaussian", "file"', '"gaussian", "file"'))
    assert cli.main(["sweep", str(sweep), "--serial", "--out", str(tmp_path / "out"), "-q"]) == 1
    err = capsys.readouterr().err
    assert "run 1 (runs/001-model.H=2-weights.seed=0-weights.init=file) failed: ValueError: weights.init_file" in err


def test_without_dask(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed -> ImportError
    sweep = write_inputs(tmp_path, OK_SWEEP)
    for opts in (["--workers", "2"], ["--scheduler", "tcp://127.0.0.1:8786"]):
        assert cli.main(["sweep", str(sweep), "--out", str(tmp_path / "out"), *opts]) == 2
        err = capsys.readouterr().err
        assert 'pip install -e ".[distributed]"' in err and "--serial" in err and err.count("\n") == 1
    with pytest.raises(DaskUnavailableError):
        run_sweep(sweep, tmp_path / "out", workers=2)
    assert not (tmp_path / "out").exists()
    # the default path (README's 'pip install -e .' has no Dask): runs serially, and says so
    assert cli.main(["sweep", str(sweep), "--out", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    assert "Dask is not installed: running the" in err and 'pip install -e ".[distributed]"' in err
    assert cli.main(["sweep", str(sweep), "--out", str(tmp_path / "out2"), "--serial", "-q"]) == 0


# --------------------------------------------------------------- the analysis
def test_analysis_fit_on_synthetic_data(tmp_path):
    rng = np.random.default_rng(1)
    table = [
        {"model.H": H, "weights.seed": s, "status": "completed", "mean_G2": 3.0 * H**-0.5 * math.exp(0.05 * rng.standard_normal())}
        for H in (1, 10, 100) for s in range(8)
    ]
    table.append({"model.H": 10, "weights.seed": 99, "status": "failed", "mean_G2": None})
    a = analyse(table, "model.H", "G2", out=tmp_path, t_min=2.5, bootstrap=500, seed=3)
    assert a["b"] == pytest.approx(-0.5, abs=0.03) and a["a"] == pytest.approx(3.0, rel=0.1)
    lo, hi = a["b_ci95"]
    assert lo < a["b"] < hi and lo < -0.5 < hi and hi - lo < 0.1
    assert [p["n"] for p in a["points"]] == [8, 8, 8] and a["runs_excluded"] == 1
    assert a["points"][1]["mean"] == pytest.approx(np.mean([r["mean_G2"] for r in table if r["model.H"] == 10 and r["mean_G2"]]))
    assert a["points"][1]["std"] == pytest.approx(np.std([r["mean_G2"] for r in table if r["model.H"] == 10 and r["mean_G2"]], ddof=1))
    stored = json.loads((tmp_path / "analysis.json").read_text())
    assert stored["b"] == a["b"] and stored["b_ci95"] == a["b_ci95"] and stored["t_min"] == 2.5
    assert (tmp_path / "analysis.png").is_file() and (tmp_path / "analysis.pdf").is_file()
    # exact power law, one replicate per x: exact exponent, no bootstrap interval
    exact = analyse([{"x": x, "mean_y": 2.0 * x**1.5} for x in (1.0, 2.0, 4.0, 8.0)], "x", "y")
    assert exact["b"] == pytest.approx(1.5, abs=1e-12) and exact["a"] == pytest.approx(2.0) and exact["b_ci95"] is None


def test_analysis_with_two_runs_per_point_claims_no_interval(tmp_path, capsys):
    """Two runs per point once printed 'b = -1.30136 ± nan' and drew a '95 % bootstrap CI';
    axis labels were raw keys (model.H) with ticks like 2x10^0."""
    from types import SimpleNamespace

    from spherepde.cli.sweep import _report
    from spherepde.runs.sweep.analysis import analysis_figure

    table = [{"model.H": H, "weights.seed": s, "status": "completed", "mean_G2": 2.0 / H + 0.01 * s} for H in (2, 4) for s in range(2)]
    a = analyse(table, "model.H", "G2", out=tmp_path, t_min=0.5, bootstrap=200)
    assert a["b_ci95"] is None and not math.isfinite(a["b_stderr"]) and a["interval_note"] == "interval undefined: need >= 3 runs per point"
    fig = analysis_figure(a, {2.0: [2.0 / 2, 2.0 / 2 + 0.01], 4.0: [0.5, 0.51]})
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert not any("CI" in lab or "nan" in lab for lab in labels) and any("interval undefined" in lab for lab in labels)
    assert ax.get_xlabel() == "H (heads)" and "model.H" not in ax.get_title()
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig).draw()
    assert [t.get_text() for t in ax.get_xticklabels()] == ["2", "4"]
    res = SimpleNamespace(status="completed", counts={"run": 4}, table=[dict(r, status="completed") for r in table], wall_time_s=1.0, results_csv=tmp_path / "results.csv",
                          analysis=a, folder=tmp_path)
    _report(res)
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("analysis:"))
    assert "nan" not in line and line.endswith("(interval undefined: need >= 3 runs per point)")
    # three runs per point: the interval is there
    table3 = [{"model.H": H, "status": "completed", "mean_G2": 2.0 / H * (1 + 0.01 * s)} for H in (1, 10, 100) for s in range(3)]
    a3 = analyse(table3, "model.H", "G2", bootstrap=200)
    assert a3["b_ci95"] is not None and a3["interval_note"] == ""
