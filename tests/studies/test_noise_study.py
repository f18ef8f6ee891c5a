"""The noise validation study at smoke size (issue 35, item 4): its protocol and outcomes, and that a wrong diffusion
fails it -- the diffusion coefficient halved, its sign flipped, and a non-conservative diffusive flux each fail solver
checks; ``spherepde validate`` then exits 3."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import assert_study_protocol

import spherepde.solvers.diffusion as diffusion
from spherepde.cli.validate import CHECK_FAILED
from spherepde.model.linear import critical_noise
from spherepde.model.stationary import published_threshold, tricritical_beta
from spherepde.studies import noise

#: the density-level parts: what a wrong diffusion must be caught by (the tokens do not use the flux)
MESH_PARTS = ["diffusion", "stability"]


@pytest.fixture(scope="module")
def smoke():
    return noise.run("smoke")


def failed(res) -> list:
    return [k for k, c in res["checks"].items() if not c["passed"]]


def test_protocol_and_outcomes(smoke, tmp_path):
    res = smoke
    assert_study_protocol(noise, res)
    assert not failed(res), failed(res)
    assert len(res["diffusion"]) == 4 and len(res["stability"]) == 4 and len(res["stability_tokens"]) == 4
    for r in res["stability"]:  # the closed form is the module's nu_c; the measured crossing is the solver's
        assert r["nu_c"] == pytest.approx(critical_noise(r["beta"], r["beta"], attention=r["attention"], d=r["d"]), rel=1e-12)
        assert r["rates"][0] > 0 > r["rates"][1] and abs(r["nu_star"] / r["nu_c"] - 1) < 1e-3
    for r in res["diffusion"]:
        assert r["mesh"] == pytest.approx(r["exact"], rel=0.02) and r["mass_err"] < 1e-12
    assert all(r["diff"] < 1e-4 for r in res["stationary"]["mesh"])
    assert res["edi"]["orders"][0] > 1.8
    # the claims: M&R's tricritical beta separates the transitions; their threshold is the measured crossing
    assert [r["transition"] for r in res["bifurcation"]] == ["continuous", "discontinuous"] * 2
    assert all((r["beta"] > tricritical_beta(r["d"])) == (r["transition"] == "discontinuous") for r in res["bifurcation"])
    assert all(c["reproduced"] for c in res["claims"].values()), res["claims"]
    usa = next(r for r in res["stability"] if r["d"] == 3 and r["attention"] == "unnormalised")
    assert usa["nu_star"] == pytest.approx(published_threshold(usa["beta"], 3), rel=1e-3)
    paths = noise.plot(res, tmp_path)
    assert len(paths) == 2 and all(p.stat().st_size > 1000 for p in paths)


def test_parts_run_alone_and_bad_parts_are_refused():
    res = noise.run("smoke", parts=["bifurcation"])
    assert "diffusion" not in res and len(res["claims"]) == 4 and res["checks"] == {}
    with pytest.raises(ValueError, match="parts"):
        noise.run("smoke", parts=["nothing"])


def _mesh_checks(res) -> list:
    return [k for k in res["checks"] if "density level" in k or "zero crossing" in k or "sign flips" in k]


def test_halved_diffusion_coefficient_fails_the_density_checks(monkeypatch):
    real = diffusion.diffusion_coefficients
    monkeypatch.setattr(diffusion, "diffusion_coefficients", lambda g, u, nu, order: 0.5 * real(g, u, nu, order))
    res = noise.run("smoke", parts=MESH_PARTS)
    bad = set(failed(res))
    assert any(k.startswith("pure diffusion") and "decay rate" in k and "density level" in k for k in bad)
    assert any("zero crossing" in k for k in bad)
    assert not any("tokens" in k for k in bad)  # the tokens do not use the flux


def test_wrong_sign_of_the_diffusion_fails_the_density_checks(monkeypatch):
    real = diffusion.diffusion_coefficients
    monkeypatch.setattr(diffusion, "diffusion_coefficients", lambda g, u, nu, order: -real(g, u, nu, order))
    res = noise.run("smoke", parts=MESH_PARTS)
    bad = set(failed(res))
    assert set(k for k in _mesh_checks(res) if "decay rate" in k) <= bad  # anti-diffusion: rho < 0 at once, measured NaN
    assert any(r["error"] and "negative" in r["error"] for r in res["diffusion"])


def test_non_conservative_diffusive_flux_fails_the_mass_checks(monkeypatch):
    """The diffusive flux leaves cell c in full but only 90 % of it enters n."""
    def leaky_add(self, rho, u, rhs, flux=None):
        g = self.geom
        c, n = g.edge_cells[:, 0], g.edge_cells[:, 1]
        F = self.coefficients(u) * (rho[c] - rho[n])
        div = np.zeros(g.n_cells)
        np.add.at(div, c, g.edge_lengths * F)
        np.add.at(div, n, -0.9 * g.edge_lengths * F)
        drhs = -div / g.areas
        rhs += drhs
        if flux is not None:
            flux += F
        return F, drhs

    monkeypatch.setattr(diffusion.MeshDiffusion, "add", leaky_add)
    res = noise.run("smoke", parts=["diffusion"])
    bad = set(failed(res))
    mass = [k for k in res["checks"] if k.endswith("mass error") and "S^2" in k]
    assert len(mass) == 2 and set(mass) <= bad  # (on the uniform circle D is uniform and the lost 10 % telescope to 0)


def test_validate_exits_3_when_a_noise_check_fails(monkeypatch, tmp_path):
    from spherepde.cli.main import main

    real = diffusion.diffusion_coefficients
    monkeypatch.setattr(diffusion, "diffusion_coefficients", lambda g, u, nu, order: 0.5 * real(g, u, nu, order))
    rc = main(["validate", "--smoke", "--only", "noise", "--set", 'noise.parts=["diffusion"]', "--out", str(tmp_path / "v"), "--quiet"])
    assert rc == CHECK_FAILED
    rep = json.loads((tmp_path / "v" / "report.json").read_text(encoding="utf-8"))
    assert rep["failed_checks"]


# ------------------------------------------------------------------ the committed quick report
ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / "validation" / "report-quick-noise" / "report.json"


def test_committed_quick_report_passes():
    """validation/report-quick-noise (``spherepde validate --quick --only noise``): every solver check passed."""
    rep = json.loads(REPORT.read_text(encoding="utf-8"))
    assert rep["meta"]["size"] == "quick" and "noise" in rep["studies"]
    r = rep["studies"]["noise"]["results"]
    assert r["checks"] and all(c["passed"] for c in r["checks"].values())


def test_guide_states_the_quick_tolerances():
    """docs/guide/noise.md states the quick size's tolerances: they are the study's."""
    q = noise.SIZES["quick"]
    text = " ".join((ROOT / "docs" / "guide" / "noise.md").read_text(encoding="utf-8").split())
    assert (q["diff_tol"], q["diff_tol_tokens"], q["stab_tol"], q["stab_nu_tol"], q["stab_tol_tokens"]) == (0.01, 0.03, 0.01, 0.02, 0.05)
    assert (q["edi_min_order"], q["stat_beta"], q["stat_frac"]) == (1.7, 2.0, 0.7)
    for phrase in ("within 1 % at the quick size", "within 3 % plus three standard errors", "within 1 % of γ_1",
                   "cross zero within 2 % of ν_c", "within 5 % of γ_1 plus three standard errors", "at least at order 1.7",
                   "β = 2 at ν = 0.7 ν_c"):
        assert phrase in text, phrase
