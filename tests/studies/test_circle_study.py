"""The circle validation study at smoke size: its protocol and outcomes, its closed forms (W1 on the
circle, B's Lax--Friedrichs scheme), and that a wrong scheme fails it (issue 34): a sign flip, softmax
computed without its 1/Z, a wrong Bessel index in the circle sums and a shifted reconstruction."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from conftest import assert_study_protocol
from scipy.special import iv

import spherepde.solvers.mesh as mesh_solver
from spherepde.attention import circle as circle_sums
from spherepde.geometry.circle import CircleMesh
from spherepde.solvers.fv import fv_rhs
from spherepde.studies import circle


@pytest.fixture(scope="module")
def smoke():
    return circle.run("smoke")


def failed(res) -> list:
    return [k for k, c in res["checks"].items() if not c["passed"]]


def rate_checks(res, *, level: str, attention: str | None = None) -> list:
    """Names of the linear-rate checks of the density level (``level="density"``) or the tokens, of one attention or all."""
    ks = [k for k in res["checks"] if k.startswith("linear rates") and ("density level" in k) == (level == "density")]
    return [k for k in ks if attention is None or k.startswith(f"linear rates k = 1..4, {attention},")]


def test_protocol_and_outcomes(smoke, tmp_path):
    res = smoke
    assert_study_protocol(circle, res)
    assert not failed(res), failed(res)
    assert len(rate_checks(res, level="density")) == 6 and len(rate_checks(res, level="tokens")) == 6
    for r in res["rates"]:  # the closed form is the module's, against scipy here
        k = np.array(circle.RATE_MODES)
        g = r["c"] / res["params"]["rate_beta"] * k**2 * iv(k, res["params"]["rate_beta"])
        if r["attention"] == "softmax":
            g = g / iv(0, res["params"]["rate_beta"])
        np.testing.assert_allclose(r["gamma"], g, rtol=1e-12)
        assert max(r["mesh_rel_err"]) < 0.01 and max(r["tokens_rel_err"]) < 0.015
    b = res["b"][0]
    assert b["k_star"] == 3 and len(b["mesh_angles"]) == 3 == len(b["token_angles"]) and b["mesh_vs_tokens"] < 0.02
    assert res["merge"][0]["rel_err"] < 2e-3 and res["merge"][0]["atoms0"] == 2
    assert [r["regime"] for r in res["paper"]] == ["ou"] and res["paper"][0]["z"] <= 3.0 and len(res["paper"][0]["tokens_G2"]) == 4
    c = res["cost"]
    assert all(r["w1"] < c["b"]["w1"] for r in c["runs"])  # even 128 arcs beat Lax-Friedrichs on 999 points
    assert abs(c["b"]["mass"] - 1.0) < 1e-12
    paths = circle.plot(res, tmp_path)
    assert len(paths) == 3 and all(p.stat().st_size > 1000 for p in paths)


def test_w1_on_the_circle_against_closed_forms():
    """W1(delta_0, delta_a) = min(a, 2 pi - a); W1(uniform, delta_0) = int min(t, 2 pi - t) dt / (2 pi) = pi / 2;
    a rotation by a of a density moves it by at most a (by exactly a for a von Mises bump, a small shift)."""
    edges = np.linspace(0.0, 2 * math.pi, 65)
    zero = np.zeros(64)
    for a in (0.3, 2.0, 4.0):
        assert circle.w1_circle(edges, zero, edges, zero, ([0.0], [1.0]), ([a], [1.0])) == pytest.approx(min(a, 2 * math.pi - a), abs=1e-4)
    assert circle.w1_circle(edges, np.full(64, 1 / 64), edges, zero, None, ([0.0], [1.0])) == pytest.approx(math.pi / 2, abs=1e-4)
    mid = 0.5 * (edges[1:] + edges[:-1])
    bump = lambda s: np.exp(8 * np.cos(mid - 1.0 - s)) / np.sum(np.exp(8 * np.cos(mid - 1.0 - s)))  # noqa: E731
    assert circle.w1_circle(edges, bump(0.0), edges, bump(2 * math.pi / 64)) == pytest.approx(2 * math.pi / 64, rel=1e-3)


def test_b_scheme_is_lax_friedrichs_with_its_diffusion():
    """B's scheme conserves mass and grows a mode at gamma_k - nu k^2, nu = dx^2 / (2 dt) = 25 dx its numerical
    diffusion (the modified equation of Lax--Friedrichs); B's literal cross-correlation makes a sine mode decay."""
    n, beta, k, T = 999, 5.0, 3, 0.05
    x = 2 * math.pi * np.arange(n) / n
    dx = 2 * math.pi / n
    gamma = k * k * iv(k, beta) / beta
    for f, literal_sign in ((np.cos(k * x), 1), (np.sin(k * x), -1)):
        u0 = 1 / (2 * math.pi) + 1e-5 * f
        for reflected in (False, True):
            u, steps = circle.b_scheme(u0, beta, T, reflected=reflected)
            assert steps == math.ceil(T / (0.02 * dx)) and np.sum(u) * dx == pytest.approx(1.0, abs=1e-13)
            rate = math.log(abs(np.sum(u * np.exp(-1j * k * x))) / abs(np.sum(u0 * np.exp(-1j * k * x)))) / T
            expect = gamma - 25 * dx * k * k
            assert (rate > 0) == (not reflected or literal_sign > 0)
            if not reflected:
                assert rate == pytest.approx(expect, rel=5e-3)


def test_sign_flip_fails_the_density_rate_checks(monkeypatch):
    monkeypatch.setattr(mesh_solver, "fv_rhs", lambda geom, faces, u, **kw: fv_rhs(geom, faces, -u, **kw))
    res = circle.run("smoke")
    bad = failed(res)
    assert set(rate_checks(res, level="density")) <= set(bad)
    assert not set(rate_checks(res, level="tokens")) & set(bad)  # the tokens do not use the flux


def test_softmax_without_its_normalisation_fails_the_softmax_checks(monkeypatch):
    """The mesh solver told that every attention is unnormalised: softmax heads transported without 1/Z_h."""
    monkeypatch.setattr(mesh_solver, "is_normalised", lambda kind: False)
    res = circle.run("smoke")
    bad = set(failed(res))
    assert set(rate_checks(res, level="density", attention="softmax")) <= bad
    assert not set(rate_checks(res, level="density", attention="unnormalised")) & bad


def test_wrong_bessel_index_in_the_circle_sums_fails_the_token_checks(monkeypatch):
    """The series of the circle sums with I_{k+1} in place of I_k (a mode-mixing bug): the tokens' sums go by
    the series and their rates miss gamma_k."""
    real = circle_sums.ive
    monkeypatch.setattr(circle_sums, "ive", lambda k, r: real(np.asarray(k) + 1, r))
    res = circle.run("smoke")
    assert set(rate_checks(res, level="tokens")) <= set(failed(res))


def test_shifted_reconstruction_fails_the_study(monkeypatch):
    """Order-2 face values taken from the neighbouring arc (a shifted reconstruction). About the uniform state the
    face values enter the flux only at second order in the perturbation (rho_face = 1/(2 pi) + O(eps)), so the
    linear rates do not see it; the clustering runs do: the step size collapses and the study stops with an error."""
    from spherepde.solvers.errors import SolverError

    real = CircleMesh.reconstruct
    monkeypatch.setattr(CircleMesh, "reconstruct", lambda self, rho: np.roll(real(self, rho), 1, axis=0))
    with pytest.raises(SolverError):
        circle.run("smoke")


# ------------------------------------------------------------------ the guide quotes the committed report
ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / "validation" / "report-quick-circle" / "report.json"
GUIDE = ROOT / "docs" / "guide" / "validation.md"


def doc_sentences(rep) -> dict:
    """The numbers docs/guide/validation.md quotes from the quick report, formatted as the page writes them."""
    r = rep["studies"]["circle"]["results"]
    p, c = r["params"], r["cost"]
    mine = next(x for x in c["runs"] if x["cells"] == c["cost_cells"])
    b = c["b"]
    out = {}
    out["cost"] = (f"B's scheme on {b['points']:,} points took {b['wall_s']:.1f} s ({b['steps']:,} steps) and ends "
                   f"W1 = {b['w1']:.2g} rad from the {c['ref_cells']:,}-arc reference; the density level on {mine['cells']} arcs took "
                   f"{mine['wall_s']:.2f} s ({mine['steps']} steps) and ends W1 = {mine['w1']:.2g} rad from it: "
                   f"{b['wall_s'] / mine['wall_s']:.1f}× faster and {b['w1'] / mine['w1']:.1f}× closer")
    out["orders"] = "observed orders " + " and ".join(f"{o:.2f}" for o in c["orders"])
    out["rates"] = (f"largest relative error {max(max(x['mesh_rel_err']) for x in r['rates']):.2g} on the density level "
                    f"({p['rate_cells']} arcs, order 2) and {max(max(x['tokens_rel_err']) for x in r['rates']):.2g} with "
                    f"{p['rate_tokens']:,} tokens")
    out["merge"] = f"within {100 * max(x['rel_err'] for x in r['merge']):.2f} % of the two-point ODE"
    bs = {}
    for x in r["b"]:
        bs.setdefault(x["beta"], []).append(x)
    out["b"] = "; ".join(f"β = {beta:g}: {', '.join(str(len(x['mesh_angles'])) for x in xs)} clusters "
                         f"(tokens: {', '.join(str(len(x['token_angles'])) for x in xs)}), "
                         f"{min(x['mesh_vs_prediction'] for x in xs):.2g}–{max(x['mesh_vs_prediction'] for x in xs):.2g} rad from B's predicted positions"
                         for beta, xs in bs.items())
    out["b_agree"] = f"{max(x['mesh_vs_tokens'] for x in r['b']):.2g} rad"
    out["paper"] = "; ".join(f"{x['regime']}: {x['mesh_G2']:.3g} against {x['tokens_mean']:.3g} ± {x['tokens_sd']:.2g} ({x['z']:.2g} sd)"
                             for x in r["paper"])
    rr = c["reflected"]
    out["reflected"] = f"grows at {rr['cos_literal']:.3g} as a cosine and decays at {-rr['sin_literal']:.3g} as a sine"
    out["wall"] = f"{rep['studies']['circle']['wall_s']:.0f} s"
    return out


def doc_short(rep) -> dict:
    """The numbers of the circle row of the findings table."""
    r = rep["studies"]["circle"]["results"]
    c = r["cost"]
    mine = next(x for x in c["runs"] if x["cells"] == c["cost_cells"])
    err = max(max(max(x["mesh_rel_err"]), max(x["tokens_rel_err"])) for x in r["rates"])
    hits = [sum(len(x["mesh_angles"]) == x["k_star"] for x in r["b"] if x["beta"] == beta) for beta in (5.0, 7.0)]
    n = [sum(x["beta"] == beta for x in r["b"]) for beta in (5.0, 7.0)]
    return {"KSHORT": f"B's k* at β = 5 on {hits[0]} of {n[0]} starts, at β = 7 on {hits[1]} of {n[1]};",
            "RATESHORT": f"{100 * err:.2f} %", "MERGESHORT": f"{100 * max(x['rel_err'] for x in r['merge']):.2f} %",
            "COSTSHORT": f"{c['b']['wall_s'] / mine['wall_s']:.0f}× faster and {c['b']['w1'] / mine['w1']:.1f}× closer to the converged reference"}


def test_guide_numbers_are_the_committed_report():
    """Every number the validation guide states about the circle study is read from
    validation/report-quick-circle/report.json (``spherepde validate --quick --only circle``)."""
    rep = json.loads(REPORT.read_text(encoding="utf-8"))
    assert rep["meta"]["size"] == "quick" and rep["counts"]
    text = " ".join(GUIDE.read_text(encoding="utf-8").split())
    for key, sentence in {**doc_sentences(rep), **doc_short(rep)}.items():
        assert " ".join(sentence.split()) in text, (key, sentence)


def test_bench_entry_reports_both_solvers_side_by_side():
    """``spherepde bench`` part (g) on a small grid: both wall times, steps and W1 to the reference, and their ratios."""
    from spherepde.studies.benchmarks import bench_circle_vs_lax_friedrichs

    g = bench_circle_vs_lax_friedrichs(True, b_points=999, cells=256, ref_cells=1024)
    assert g["b_points"] == 999 and g["b_steps"] == math.ceil(0.1 / (0.02 * 2 * math.pi / 999)) and g["cells"] == 256
    assert g["speedup"] == pytest.approx(g["b_wall_s"] / g["wall_s"]) and g["w1_ratio"] == pytest.approx(g["w1"] / g["b_w1"])
    assert g["w1_ratio"] < 1.0  # Lax-Friedrichs on 999 points diffuses far more than order 2 on 256 arcs
