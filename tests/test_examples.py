"""The scripts in examples/ run at their tiny size (and say something true about their result)."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import numpy as np
import pytest

from spherepde.runs.series import load_series

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _load(name: str) -> dict:
    return runpy.run_path(str(EXAMPLES / name), run_name="not_main")


def test_custom_density_and_process(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    mod = _load("custom_density_and_process.py")
    row = mod["main"](["--tiny"])
    assert row["mass"] == pytest.approx(1.0, abs=1e-12) and row["rho_min"] >= 0
    # the custom process is a frozen dataclass usable by generate_weight_path
    proc = mod["RotatingTarget"]()
    f = proc.drift(np.zeros((2, 3, 3)), 0.0)
    assert f.shape == (2, 3, 3) and np.allclose(f, f.transpose(0, 2, 1))


def test_custom_process_as_a_run_folder(tmp_path, monkeypatch):
    """The custom example once gave no way to a run folder for plot / render / open_run."""

    monkeypatch.chdir(tmp_path)
    row = _load("custom_density_and_process.py")["main"](["--tiny", "--out", str(tmp_path / "custom")])
    assert row["mass"] == pytest.approx(1.0, abs=1e-12)
    assert (tmp_path / "custom" / "snapshots.npz").is_file() and (tmp_path / "custom-inputs" / "weights.npz").is_file()
    assert load_series(tmp_path / "custom").label == "mesh, H = 2, rotating-target weights (from a file)"


def test_mesh_vs_particles(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rows = _load("mesh_vs_particles.py")["main"](["--tiny"])
    assert len(rows) == 4
    for r in rows:  # 200 tokens stay within a sampling distance of the density
        assert 0 < r["W1"] < 0.2 and r["G2_mesh"] > 0 and r["G2_tokens"] > 0


def test_g2_vs_H_density_sweep(tmp_path, monkeypatch):
    pytest.importorskip("distributed")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["g2_vs_H_density.py"])
    res = _load("g2_vs_H_density.py")["main"](["--tiny", "--workers", "1", "--out", str(tmp_path / "sw")])
    assert res.status == "completed" and len(res.table) == 4
    assert res.analysis["b"] < 0  # more heads average the fluctuations out: G2 falls with H
    assert (tmp_path / "sw" / "analysis.png").is_file()


SHIPPED = sorted(p.stem for p in (Path(__file__).resolve().parents[1] / "spherepde" / "runs" / "configs").glob("*.toml") if not p.stem.startswith("sweep"))
assert len(SHIPPED) >= 8, SHIPPED  # the shipped configs are found (an empty list would test nothing)


def _tiny(name: str) -> list[str]:
    """--set options that shrink a shipped example to a second, outputs left at their defaults:
    two records of max(0.01, weights.dt) each."""
    from spherepde.cli.common import example_path
    from spherepde.runs.config import load_config

    step = max(0.01, load_config(example_path(name)).weights.dt)
    sets = [f"solver.T={2 * step!r}", f"output.record_dt={step!r}", f"output.snapshot_dt={step!r}"]
    sets += ["mesh.level=4"] if name.endswith("-mesh") else ["initial.n=12"]
    return [a for s in sets for a in ("--set", s)]


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_example_runs_with_default_outputs(name, tmp_path, capsys):
    from spherepde.cli.main import main

    assert len(SHIPPED) >= 6
    code = main(["run", "--example", name, "--out", str(tmp_path / "r"), *_tiny(name)])
    assert code == 0, capsys.readouterr().err
    assert list((tmp_path / "r" / "vtk").glob("*.vtp"))  # the default outputs were written


@pytest.mark.parametrize("d", [2, 3, 5])
def test_particle_runs_in_any_dimension_with_default_outputs(d, tmp_path, capsys):
    """The token VTK writer once refused d > 3 (exit 1); it writes the first three coordinates, noted in run.log."""
    from spherepde.cli.main import main

    out = tmp_path / "r"
    code = main(["run", "--out", str(out), "--set", "run.solver=particles", "--set", f"model.d={d}", "--set", "solver.T=0.02",
                 "--set", "initial.n=10", "--set", "output.record_dt=0.01", "--set", "output.snapshot_dt=0.01"])
    assert code == 0, capsys.readouterr().err
    vtps = sorted((out / "vtk").glob("tokens_*.vtp"))
    assert len(vtps) == 3 and (out / "tokens.pvd").is_file()
    text = vtps[-1].read_text()
    assert 'NumberOfPoints="10"' in text and 'NumberOfComponents="3"' in text
    with np.load(out / "snapshots.npz") as z:
        X = z["X"][-1]
    assert X.shape == (10, d)
    pts = np.array(text.split('Name="Points" NumberOfComponents="3" format="ascii">')[1].split("<")[0].split(), float).reshape(10, 3)
    np.testing.assert_array_equal(pts[:, : min(d, 3)], X[:, :3])
    assert ("first three coordinates" in (out / "run.log").read_text()) == (d > 3)


def test_two_clusters_merge(tmp_path, monkeypatch):
    """Point masses give the two-point ODE's merge time; cells alone pin the clusters (the example's point)."""
    monkeypatch.chdir(tmp_path)
    res = _load("two_clusters_merge.py")["main"](["--tiny"])
    assert abs(res["t_atoms"] - res["t_ode"]) < 0.05 * res["t_ode"]
    assert res["t_cells"] > 1.2 * res["t_ode"]


def test_circle_nucleation(tmp_path, monkeypatch):
    """k* = 3 clusters at the angles the start's third Fourier coefficient predicts (the example's point)."""
    from spherepde.geometry.circle import arc_between

    monkeypatch.chdir(tmp_path)
    res = _load("circle_nucleation.py")["main"](["--tiny"])
    pred, found = res["predicted"], res["final"]
    assert pred["k_star"] == 3 and found["n"] == 3
    assert max(float(np.min(arc_between(a, np.array(found["angles"])))) for a in pred["angles"]) < 0.05


@pytest.mark.parametrize("name", ["custom_density_and_process.py", "mesh_vs_particles.py", "two_clusters_merge.py", "circle_nucleation.py"])
def test_examples_draw_their_gallery_figure(name, tmp_path, monkeypatch):
    """Each script draws the figure the documentation's gallery shows (at its tiny size here)."""
    import matplotlib.pyplot as plt

    monkeypatch.chdir(tmp_path)
    plt.close("all")
    _load(name)["main"](["--tiny"])
    figs = [plt.figure(n) for n in plt.get_fignums()]
    assert len(figs) == 1 and all(ax.has_data() for ax in figs[0].axes if ax.get_label() != "<colorbar>")
    plt.close("all")
