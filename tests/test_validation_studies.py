"""Smoke-size runs of the validation studies mesh_vs_particles, paper_section6 and stability.

Each study runs once per module (fixtures) at its ``smoke`` size; the tests assert the
protocol of ``validation/__init__.py`` and each study's key outcome, and that ``plot``
writes its figures.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from spherepde.validation.common import to_jsonable


def _protocol(mod, res):
    assert isinstance(mod.NAME, str) and isinstance(mod.TITLE, str)
    assert set(mod.SIZES) == {"smoke", "quick", "full"}
    assert res["name"] == mod.NAME
    assert isinstance(res["summary"], str) and len(res["summary"]) > 100
    assert isinstance(res["checks"], dict) and res["checks"]
    assert all(isinstance(v, bool) for v in res["checks"].values())
    json.dumps(to_jsonable(res))  # JSON-serialisable


def _plots(mod, res, tmp_path):
    paths = mod.plot(res, tmp_path)
    assert paths
    for p in paths:
        assert p.exists() and p.stat().st_size > 1000


# ---------------------------------------------------------------- mesh versus particles
@pytest.fixture(scope="module")
def mvp():
    import spherepde.validation.mesh_vs_particles as mod

    return mod, mod.run("smoke")


def test_mesh_vs_particles_protocol(mvp, tmp_path):
    mod, res = mvp
    _protocol(mod, res)
    _plots(mod, res, tmp_path)
    with pytest.raises(ValueError):
        mod.run("huge")


def test_mesh_vs_particles_outcomes(mvp):
    _, res = mvp
    for case, r in res["cases"].items():
        ns, hs = r["n_study"], r["h_study"]
        # mass conservation on the mesh and finite distances
        assert res["checks"][f"{case}_mass_conserved"]
        assert res["checks"][f"{case}_all_finite"]
        # the sampling distance at t = 0 decays at a Monte-Carlo-like rate in n
        assert -0.75 <= ns["rates_0"]["w1"] <= -0.2, ns["rates_0"]
        # distance decreases with n and with mesh refinement at t = T
        w = [v[-1] for v in ns["w1"]]
        assert w[-1] < w[0]
        assert hs["rates_T"]["w1"] > 0
        # all distances are non-negative numbers, W1 on the sphere is at most pi
        assert all(0 <= x <= math.pi for v in hs["w1"] for x in v)


# ------------------------------------------------------------------------ paper Sec. 6
@pytest.fixture(scope="module")
def paper():
    import spherepde.validation.paper_section6 as mod

    return mod, mod.run("smoke")


def test_paper_section6_protocol(paper, tmp_path):
    mod, res = paper
    _protocol(mod, res)
    _plots(mod, res, tmp_path)


def test_paper_section6_outcomes(paper):
    _, res = paper
    parts = res["particles"]
    assert set(parts) == {"ou", "osc-shift", "osc-in-phase"}
    for r in parts.values():
        assert np.isfinite(r["fit"]["b"]) and np.isfinite(r["fit_half"]["b"])
        lo, hi = r["fit"]["ci95"]
        assert lo <= hi
        G = np.asarray(r["G2_mean_curve"], float)
        assert G.shape == (len(r["H"]), len(r["t"])) and np.all(np.isfinite(G)) and np.all(G >= 0)
        for H in r["H"]:
            bal = r["balance"][str(H)]
            assert np.all(np.isfinite(bal["edi_exact"]))
        # snapshots of the largest H were taken at the requested times
        assert len(r["snapshots"]) == len(res["params"]["snapshots"])
    # H = 1: the paper-form and the exact EDI residual coincide
    e = parts["ou"]["edi_max"][0]
    assert e["paper_abs"] == pytest.approx(e["exact_abs"], rel=1e-6, abs=1e-12)
    # the mesh part ran on the shared paths and produced finite G2 curves
    assert res["checks"]["mesh_curves_finite"]
    for v in res["mesh"]["runs"].values():
        assert np.all(np.isfinite(v["mesh_G2"])) and np.all(np.isfinite(v["particles_G2"]))
        assert v["G2_rel_diff_t0"] < 0.5
    # density snapshots of the largest-H run at the snapshot times within mesh_T, a density each
    m, prm = res["mesh"], res["params"]
    want = sorted(f"{s:g}" for s in prm["snapshots"] if s <= prm["mesh_T"] + 1e-9)
    snapped = [v for v in m["runs"].values() if "mesh_snapshots" in v]
    from spherepde.geometry.meshio import icosphere

    areas = np.asarray(icosphere(m["level"]).areas)
    assert snapped and all(v["H"] == max(prm["mesh_H"]) and v["path"] == 0 for v in snapped)
    for v in snapped:
        assert sorted(v["mesh_snapshots"]) == want
        for rho in v["mesh_snapshots"].values():
            rho = np.asarray(rho)
            assert rho.shape == (m["cells"],) and rho.min() >= 0
            assert np.isclose(rho @ areas, 1.0, rtol=1e-5)  # a probability density (6 stored digits)
    # density-level exponent fitted over mesh_H for each mesh regime, for mesh and same-path particles
    assert set(m["fits"]) == set(prm["mesh_regimes"])
    for f in m["fits"].values():
        assert f["H"] == list(prm["mesh_H"]) and np.isfinite(f["mesh_fit"]["b"]) and np.isfinite(f["particles_fit"]["b"])
        assert [len(v) for v in f["mesh_tavg"]] == [f["paths"]] * len(f["H"])
    # with two OU paths per H the bootstrap interval over paths exists
    lo, hi = m["fits"]["ou"]["mesh_fit"]["ci95"]
    assert m["fits"]["ou"]["paths"] == 2 and np.isfinite(lo) and lo <= hi
    # one path per H: no interval, said as nan
    assert all(np.isnan(x) for x in m["fits"]["osc-in-phase"]["mesh_fit"]["ci95"])
    assert "Density-level exponent" in res["summary"]


# --------------------------------------------------------------------------- stability
@pytest.fixture(scope="module")
def stab():
    import spherepde.validation.stability as mod

    return mod, mod.run("smoke")


def test_stability_protocol(stab, tmp_path):
    mod, res = stab
    _protocol(mod, res)
    _plots(mod, res, tmp_path)


def test_stability_outcomes(stab):
    _, res = stab
    for H, r in res["initial"].items():
        # Gronwall: the measured ratio stays below the a-priori bound and is bounded
        assert r["bound_respected"]
        assert all(np.isfinite(r["L_fit_w1"]))
        assert max(max(v) for v in r["r_w1"]) < 1e3
        # Lipschitz flow map: d(T) proportional to d(0)
        assert 0.8 <= r["order_T_coupling"] <= 1.2
    for H, r in res["weights"].items():
        if H == "S":
            continue
        assert 0.8 <= r["order_w1"] <= 1.2, r["order_w1"]
    m = res["mesh"]
    assert 0.8 <= m["weights"]["order_l1"] <= 1.2
    assert all(np.isfinite(m["initial"]["ratio_T_l1"]))
