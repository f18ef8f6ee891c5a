"""The claims of the examples noisy-clustering-mesh / noisy-clustering-particles (their leading comments).

Two clusters under one frozen head D = 4 I merge into one with token noise nu = 0.3 (by t = 4), the
mesh run stopping at its stationary state, whose mean resultant is that of the stationary branch
(:mod:`spherepde.model.stationary`, R = 0.887); above nu_c = coth 4 - 1/4 = 0.7507 they dissolve into
the uniform state instead, on both levels.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import spherepde as sp
from spherepde.cli.common import example_path
from spherepde.model import stationary as st
from spherepde.runs.config import load_config

BETA, NU, ABOVE = 4.0, 0.3, 1.0


def _run(name: str, tmp_path, **over):
    cfg = load_config(example_path(name)).with_overrides({"output.vtk": False, **over})
    res = sp.run(cfg, out=tmp_path / f"{name}-{len(over)}-{sorted(over.items())!s:.40}".replace(" ", "").replace("/", ""), progress=False)
    return res, json.loads((res.folder / "summary.json").read_text())


def _at(d: dict, column: str, t: float) -> float:
    return float(d[column][int(np.argmin(np.abs(d["t"] - t)))])


def _branch_order(nu: float) -> float:
    grid = st.ReducedGrid(3, 64)
    p = st.SteadyProblem(d=3, beta=BETA, nu=nu)
    return grid.order(st.solve_stable(grid, p, st.seeded(grid, st.uniform(grid), amplitude=0.3)).rho)


def test_the_comments_numbers():
    """The threshold and the stationary mean resultant quoted in the examples' comments."""
    nu_c = st.critical_nu(BETA)
    assert nu_c == pytest.approx(1 / math.tanh(BETA) - 1 / BETA, rel=1e-12)
    assert f"{nu_c:.4f}" == "0.7507" and f"{nu_c:.6f}" == "0.750671"
    assert f"{_branch_order(NU):.3f}" == "0.887"
    for name in ("noisy-clustering-mesh", "noisy-clustering-particles"):
        text = example_path(name).read_text()
        assert "nu_c = 0.7507" in text and f"noise = {NU}" in text and f"beta = {BETA}" in text
    assert "R = 0.887 at nu = 0.3" in example_path("noisy-clustering-mesh").read_text()


@pytest.mark.slow
def test_noisy_clustering_mesh_merges_below_and_dissolves_above_the_threshold(tmp_path):
    below, s = _run("noisy-clustering-mesh", tmp_path)
    d = below.diagnostics
    assert d["n_clusters"][0] == 2 and _at(d, "n_clusters", 4.0) == 1  # merged by t = 4
    assert s["stopped"] == "stationary" and s["stationary"]["t"] < 20.0  # stops at its stationary state, before T
    assert d["mean_resultant"][-1] == pytest.approx(_branch_order(NU), abs=5e-3)  # the stationary branch (mesh level 16 vs the reduction)
    above, s = _run("noisy-clustering-mesh", tmp_path, **{"model.noise": ABOVE})
    d = above.diagnostics
    assert np.all(d["n_clusters"][d["t"] >= 4.0] == 0) and d["mean_resultant"][-1] < 5e-3  # no merge: the uniform state
    assert s["stopped"] == "stationary"
    # a metastable plateau passes the stationarity test: without noise the run stops with the two clusters apart
    flat, s = _run("noisy-clustering-mesh", tmp_path, **{"model.noise": 0.0})
    assert s["stopped"] == "stationary" and flat.diagnostics["n_clusters"][-1] == 2


@pytest.mark.slow
def test_noisy_clustering_particles_merge_below_and_spread_above_the_threshold(tmp_path):
    below, _ = _run("noisy-clustering-particles", tmp_path)
    d = below.diagnostics
    late = d["t"] >= 10.0
    assert d["t"][-1] == 20.0 and np.all(np.isfinite(d["entropy"]))  # a token run runs to T
    R = d["mean_resultant"][late]
    assert abs(R.mean() - _branch_order(NU)) < 0.03 and R.min() > 0.8  # one noisy cluster: R fluctuates about the branch by ~ 1/sqrt(n)
    above, _ = _run("noisy-clustering-particles", tmp_path, **{"model.noise": ABOVE})
    R = above.diagnostics["mean_resultant"][above.diagnostics["t"] >= 4.0]
    assert R.max() < 0.25 and R.mean() < 0.15  # spread over the sphere: R of order 1/sqrt(n) (enhanced near nu_c)
