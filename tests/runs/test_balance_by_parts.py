"""Every edi_* column of a run recomputed from its diagnostics.csv alone (and the model's sign s
from config.toml), by the formulas of docs/guide/results-as-data.md, to round-off (issue 37):
the point-mass run ``metastable-mesh`` with a merge, an OU clustering run (metastable-mesh with
OU weights, mean 10, H = 4) and the paper example ``paper-ou-mesh``, at small sizes. The
energy-balance figure draws the same terms as its residual panel, and ``compare`` measures
residual columns against the energy scale."""

from __future__ import annotations

import csv
import json
import tomllib
from pathlib import Path

import numpy as np
import pytest

import spherepde as sp
from spherepde.cli.common import example_path
from spherepde.runs.runner import run

_SMALL = {"mesh.level": 8, "output.vtk": False}
CASES = {
    "metastable-mesh": ("metastable-mesh", {"solver.T": 2.0, "output.record_dt": 0.25, "output.snapshot_dt": 1.0}),
    "ou-clustering": ("metastable-mesh", {"weights.process": "ou", "weights.mean": 10.0, "model.H": 4, "solver.T": 1.0,
                                          "output.record_dt": 0.25, "output.snapshot_dt": 0.5}),
    "paper-ou-mesh": ("paper-ou-mesh", {"solver.T": 0.3, "output.record_dt": 0.1, "output.snapshot_dt": 0.1}),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("balance")
    out = {}
    for name, (example, sets) in CASES.items():
        cfg = sp.load_config(example_path(example)).with_overrides({**_SMALL, **sets})
        res = run(cfg, out=root / name, progress=False)
        assert res.status == "completed"
        out[name] = res.folder
    return out


def _csv(folder: Path) -> dict[str, np.ndarray]:
    """The columns of diagnostics.csv, read with the csv module (not the package's reader)."""
    with open(folder / "diagnostics.csv", newline="") as fh:
        rows = list(csv.reader(fh))
    return {c: np.array([float(r[i]) for r in rows[1:]]) for i, c in enumerate(rows[0])}


def _documented(d: dict, s: float) -> dict[str, np.ndarray]:
    """The formulas of docs/guide/results-as-data.md ("The energy balance from the CSV")."""
    dE = d["energy"] - d["energy"][0] - d["int_collapse_energy"]
    g2 = d["int_G2_scheme"] if "int_G2_scheme" in d else d["int_G2"]
    return {
        "edi_exact": dE - d["int_dEdt"] - d["int_transport"] - d["martingale"],
        "edi_paper": dE - d["int_dEdt"] - s * g2 - d["martingale"],
        "edi_transport": dE - d["int_dE_weights"] - d["int_transport"],
        "edi_weights": d["int_dE_weights"] - d["int_dEdt"] - d["martingale"],
    }


@pytest.mark.parametrize("case", list(CASES))
def test_every_edi_column_is_recomputed_from_the_csv(runs, case):
    folder = runs[case]
    d = _csv(folder)
    s = float(tomllib.loads((folder / "config.toml").read_text())["model"]["sign"])
    assert d["t"][0] == 0.0
    mine = _documented(d, s)
    assert set(mine) == {c for c in d if c.startswith("edi_")}  # every residual column has its formula
    tol = 1e-12 * np.max(np.abs(d["energy"]))  # round-off of sums of numbers of the energy's size
    for col, values in mine.items():
        np.testing.assert_allclose(values, d[col], rtol=0, atol=tol, err_msg=f"{case}: {col}")
    np.testing.assert_allclose(d["edi_transport"] + d["edi_weights"], d["edi_exact"], rtol=0, atol=tol)


def test_point_mass_run_books_its_collapses_and_merge(runs):
    d = _csv(runs["metastable-mesh"])
    merges = json.loads((runs["metastable-mesh"] / "summary.json").read_text())["merges"]
    assert merges and merges[0]["t"] < 2.0  # the run holds a merge of two point masses
    J = d["int_collapse_energy"]
    assert J[0] == 0.0 and np.any(J != 0.0)  # collapses after t = 0 and the merge change the energy
    # the formula without J_t (the guide's old one) misses the column by exactly J_t
    old = d["energy"] - d["energy"][0] - d["int_dEdt"] - d["int_transport"] - d["martingale"]
    np.testing.assert_allclose(old - d["edi_exact"], J, rtol=0, atol=1e-12 * np.max(d["energy"]))
    # frozen weights: the weight path's part is exactly zero, the residual is the solver's
    assert np.all(d["edi_weights"] == 0.0) and np.all(d["int_dE_weights"] == 0.0)
    np.testing.assert_allclose(d["edi_transport"], d["edi_exact"], rtol=0, atol=1e-12 * np.max(d["energy"]))


def test_noisy_clustering_residual_is_mostly_the_weight_path(runs):
    """OU weights (mean 10, H = 4): the pathwise Ito error of the weight path dominates edi_exact; the
    solver's part stays a small fraction of it (it shrinks with solver.tol, not with weights.dt)."""
    d = _csv(runs["ou-clustering"])
    assert json.loads((runs["ou-clustering"] / "summary.json").read_text())["merges"]
    assert np.max(np.abs(d["edi_weights"])) > 5 * np.max(np.abs(d["edi_transport"]))
    assert np.any(d["int_collapse_energy"] != 0.0)


def test_runs_without_point_masses_book_no_collapse_energy(runs):
    d = _csv(runs["paper-ou-mesh"])
    assert np.all(d["int_collapse_energy"] == 0.0)
    assert np.all(d["atom_mass"] == 0.0)


def test_balance_figure_draws_the_terms_of_its_residual(runs):
    """Delta E minus the dashed right-hand side of the upper panel is edi_paper (J_t included), at every record."""
    pytest.importorskip("matplotlib")
    from spherepde.viz.plots import plot_energy_balance

    folder = runs["metastable-mesh"]
    d = _csv(folder)
    fig = plot_energy_balance(folder)
    top, bottom = fig.axes[:2]
    lines = {ln.get_label(): ln for ln in top.get_lines()}
    dashed = next(ln for lab, ln in lines.items() if "J_t" in lab and ln.get_linestyle() == "--")
    delta = next(ln for lab, ln in lines.items() if "Delta E" in lab)
    gap = np.asarray(delta.get_ydata()) - np.asarray(dashed.get_ydata())
    np.testing.assert_allclose(gap, d["edi_paper"], rtol=0, atol=1e-9 * np.max(d["energy"]))
    assert any("collapses and merges" in lab for lab in lines)
    drawn = {ln.get_label() for ln in bottom.get_lines()}
    assert {"edi_exact: the solver's transport part", "edi_exact: the weight path's part"} <= drawn


def test_compare_measures_residuals_against_the_energy(runs, tmp_path):
    """Two residuals near zero of opposite sign: their difference against max |E|, not 200 %."""
    from spherepde.runs.compare import comparison

    a = runs["paper-ou-mesh"]
    cfg = sp.load_config(a / "config.toml").with_overrides({"solver.integrator": "heun", "weights.process": "file",
                                                             "weights.path_file": str(a / "weights.npz")})
    b = run(cfg, out=tmp_path / "heun", progress=False).folder
    c = comparison([a, b], tmp_path / "cmp")
    da, db = _csv(a), _csv(b)
    scale = max(np.max(np.abs(da["energy"])), np.max(np.abs(db["energy"])))
    for r in c.rows:
        if r["column"].startswith("edi_"):
            diff = np.abs(db[r["column"]] - da[r["column"]])
            assert r["rel_to"] == "max |E|"
            assert r["rel_max_diff"] == pytest.approx(diff.max() / scale, rel=1e-9)
            assert r["rel_max_diff"] < 0.05  # residuals of two schemes: far from 200 %
    energy = next(r for r in c.rows if r["column"] == "energy")
    assert energy["rel_to"] == "s(t)"
    assert "edi_exact ‖E‖" in c.markdown
