"""Smoke-size runs of the validation studies mesh_vs_particles, paper_section6 and stability.

Each study runs once per module (fixtures) at its ``smoke`` size; the tests assert the
protocol of ``validation/__init__.py`` (solver checks with measured/target/tolerance, paper
claims by their intervals, summary text derived from the same booleans), each study's key
outcomes (convergence-order bands, signs and rough values of the exponents), and that
``plot`` writes its figures.

Measured at smoke size (2-core machine, idle):
* mesh_vs_particles (~5 s; levels 3 / 6 / 9, n = 200 / 800, T = 0.5): W1 between levels
  order 1.04 (repulsive) / 1.07 (clustering), L1 0.93 / 1.01; mesh-to-token W1 at T order
  in n -0.44 / -0.40, in h 0.42 / 0.19; at t = 0 in n -0.43 / -0.46.
* paper_section6 (~6 s; n = 100, T = 5, H = 1, 4): particles b = -1.31 [-2.11, -0.22] (OU),
  -1.80 [-2.01, -1.43] (shift), 0.13 [0.07, 0.20] (in-phase); density level (icosphere 3)
  OU b = -0.15 [-0.39, 0.10], in-phase -0.04 [-0.11, 0.09].
* stability (~2 s): orders of d(T) in d(0) 1.00 / 1.00, in eps 1.01 / 1.00; mesh 1.00 / 0.99.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import assert_plots, assert_study_protocol


# ---------------------------------------------------------------- mesh versus particles
@pytest.fixture(scope="module")
def mvp():
    import spherepde.studies.mesh_vs_particles as mod

    return mod, mod.run("smoke")


def test_mesh_vs_particles_protocol(mvp, tmp_path):
    mod, res = mvp
    assert_study_protocol(mod, res)
    assert_plots(mod, res, tmp_path)
    with pytest.raises(ValueError):
        mod.run("huge")


def test_mesh_vs_particles_outcomes(mvp):
    _, res = mvp
    assert all(c["passed"] for c in res["checks"].values()), res["checks"]
    for case, r in res["cases"].items():
        ns, hs = r["n_study"], r["h_study"]
        # convergence orders (README): W1 between mesh levels ~ h (1.04 / 1.07), L1 ~ h for the smooth case (0.93)
        assert 0.9 <= hs["rates_T"]["w1_self"] <= 1.2, hs["rates_T"]
        assert 0.8 <= hs["rates_T"]["l1_self"] <= 1.2, hs["rates_T"]
        # the mesh-to-token distance decays like Monte-Carlo in n (-0.44 / -0.40), at t = 0 and at t = T
        assert -0.6 <= ns["rates_T"]["w1"] <= -0.3, ns["rates_T"]
        assert -0.6 <= ns["rates_0"]["w1"] <= -0.3, ns["rates_0"]
        # ... and decreases with h towards the tokens' sampling floor (0.42 / 0.19)
        assert 0.1 <= hs["rates_T"]["w1"] <= 0.7
        # mass conserved to round-off on every level
        assert max(r["curves"]["mesh_mass_err"].values()) < 1e-13
        # all distances are non-negative numbers, W1 on the sphere is at most pi
        assert all(0 <= x <= math.pi for v in hs["w1"] for x in v)
        names = [k for k in res["checks"] if k.startswith(case)]
        assert len(names) == 4 and any("order in n" in k for k in names)


def test_mesh_vs_particles_precondition():
    """Too few levels for a self-convergence order: the study aborts with a one-line error, it does not count a check."""
    import spherepde.studies.mesh_vs_particles as mod
    from spherepde.studies.common import StudyPreconditionError

    with pytest.raises(StudyPreconditionError, match="at least 3 levels"):
        mod.run("smoke", levels=(2, 3), n_list=(50, 100), cases=("repulsive",), T={"repulsive": 0.1})


# ------------------------------------------------------------------------ paper Sec. 6
@pytest.fixture(scope="module")
def paper():
    import spherepde.studies.paper_section6 as mod

    return mod, mod.run("smoke")


def test_paper_section6_protocol(paper, tmp_path):
    mod, res = paper
    assert_study_protocol(mod, res, checks=False)  # claims only: the solvers are checked by the other studies
    assert_plots(mod, res, tmp_path)


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
    # the mesh part ran on the shared paths and produced finite G2 curves (a precondition of the study)
    for v in res["mesh"]["runs"].values():
        assert np.all(np.isfinite(v["mesh_G2"])) and np.all(np.isfinite(v["particles_G2"]))
        assert v["G2_rel_diff_t0"] < 0.5
        assert v["G2_rel_L2_diff"] < 0.5  # mesh (icosphere 3) and 100 same-path tokens: 0.10..0.34
    # density snapshots of the largest-H run at the snapshot times within mesh_T, a density each
    m, prm = res["mesh"], res["params"]
    want = sorted(f"{s:g}" for s in prm["snapshots"] if s <= prm["mesh_T"] + 1e-9)
    snapped = [v for v in m["runs"].values() if "mesh_snapshots" in v]
    from spherepde.geometry.meshfiles import icosphere

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
    assert "Density-level exponent" in res["summary"]


def test_paper_section6_claims(paper):
    """Exponents: signs and rough values at smoke size; claims decided by the intervals; text and counts agree."""
    _, res = paper
    parts, fits, claims = res["particles"], res["mesh"]["fits"], res["claims"]
    assert set(claims) == {f"{r}: b = {-1 if r == 'ou' else 0} (particles)" for r in parts} | {
        f"{r}: b = {-1 if r == 'ou' else 0} (density level)" for r in fits
    }
    # particles (n = 100, T = 5, H = 1, 4): OU decays with H (-1.31), shift decays too (-1.80), in-phase is flat (0.13)
    assert -2.0 <= parts["ou"]["fit"]["b"] <= -0.7
    assert parts["osc-shift"]["fit"]["b"] <= -1.0
    assert abs(parts["osc-in-phase"]["fit"]["b"]) <= 0.3
    # density level, same paths: OU b < 0 (-0.15, a coarse icosphere(3) and H <= 4), in-phase flat (-0.04)
    assert -1.0 <= fits["ou"]["mesh_fit"]["b"] < 0
    assert abs(fits["osc-in-phase"]["mesh_fit"]["b"]) <= 0.2
    # every interval exists (two paths per H at every size)
    for c in claims.values():
        assert all(x is not None and np.isfinite(x) for x in c["interval"]), c
    # the shift convention is not b = 0: its interval excludes 0, and the summary says NOT reproduced for it
    shift = claims["osc-shift: b = 0 (particles)"]
    assert not shift["reproduced"] and shift["interval"][1] < 0
    assert "osc-shift (particles): b = -1.8, 95% interval" in res["summary"]
    # the closing line counts the same booleans as the claims
    n_rep = sum(c["reproduced"] for c in claims.values())
    assert f"Paper claims: {n_rep}/{len(claims)} reproduced" in res["summary"]
    assert res["summary"].count("NOT reproduced") == len(claims) - n_rep
    assert res["summary"].count("REPRODUCED") == n_rep


# --------------------------------------------------------------------------- stability
@pytest.fixture(scope="module")
def stab():
    import spherepde.studies.stability as mod

    return mod, mod.run("smoke")


def test_stability_protocol(stab, tmp_path):
    mod, res = stab
    assert_study_protocol(mod, res)
    assert_plots(mod, res, tmp_path)


def test_stability_outcomes(stab):
    _, res = stab
    assert all(c["passed"] for c in res["checks"].values()), res["checks"]
    assert not any("gronwall" in k.lower() for k in res["checks"])  # reported, not checked: nothing can violate it
    for H, r in res["initial"].items():
        # perturbations grow mildly (fitted exponents ~0.12..0.16 at T = 1), far below the a-priori exponent (~25)
        assert all(-0.5 < L < 1.0 for L in r["L_fit_w1"]), r["L_fit_w1"]
        assert r["gronwall_exponent"][-1] > 10 * max(r["L_fit_w1"]) * r["t"][-1]
        # Lipschitz flow map: d(T) proportional to d(0) (1.00 / 1.00)
        assert 0.95 <= r["order_T_coupling"] <= 1.05
        assert 0.95 <= r["order_T_w1"] <= 1.05
    for H, r in res["weights"].items():
        if H == "S":
            continue
        assert 0.95 <= r["order_w1"] <= 1.05, r["order_w1"]
    m = res["mesh"]
    assert 0.95 <= m["weights"]["order_l1"] <= 1.05
    assert 0.95 <= m["initial"]["order_T_l1"] <= 1.05
    # the mesh perturbation of the repulsive flow decays (L1 ratio at T ~0.70)
    assert all(0.4 < x < 1.0 for x in m["initial"]["ratio_T_l1"])
