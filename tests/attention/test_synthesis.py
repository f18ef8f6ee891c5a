"""The synthesis rule (spherepde.attention.synthesis): the same error statement as the expansion, by another route."""

from __future__ import annotations

import numpy as np
import pytest

from spherepde.attention import harmonic, synthesis
from spherepde.attention.direct import direct_scaled
from spherepde.model.fused import fused_rates


def _points(n, seed):
    X = np.random.default_rng(seed).normal(size=(n, 3))
    return X / np.linalg.norm(X, axis=1)[:, None]


def _heads(H, scale, seed):
    G = np.random.default_rng(seed).normal(size=(H, 3, 3))
    return scale * (G + G.transpose(0, 2, 1)) / 2


def _exact(X, w, A, want_q=True):
    C, Z, M, Q = direct_scaled(X, X, w, A, want_q, True)
    return np.log(Z) + C, M / Z[:, :, None], (Q / Z if want_q else None)


@pytest.mark.parametrize("L", [0, 3, 10])
def test_gauss_grid_is_exact_to_degree_2L(L):
    Xq, Wq = synthesis.gauss_grid(L)
    Y = harmonic.real_sph_harm(Xq, L)
    assert Xq.shape[0] == (L + 1) * (2 * L + 1)
    np.testing.assert_allclose(np.linalg.norm(Xq, axis=1), 1.0, atol=1e-15)
    np.testing.assert_allclose(Y.T @ (Wq[:, None] * Y), np.eye((L + 1) ** 2), atol=1e-13)  # products of degree 2L


def test_source_moments_in_the_columns_of_real_sph_harm():
    X = _points(200, 1)
    w = np.random.default_rng(2).random(200)
    S = harmonic.source_moments(X, w, 9)
    Y = harmonic.real_sph_harm(X, 9)
    ref = np.stack([Y.T @ (w * f) for f in (np.ones(200), X[:, 0], X[:, 1], X[:, 2])])
    np.testing.assert_allclose(synthesis._to_columns(S[:4], 9), ref, atol=1e-14)


def _density(X, kind, seed):
    if kind == "spread":
        w = 1.0 + 0.5 * np.sin(3 * X[:, 0]) * np.cos(2 * X[:, 2])
    else:  # mass around two points: Z varies over decades, the test rejects pairs and the expansion takes them
        c = _points(2, seed)
        w = np.exp(20 * (X @ c[0])) + np.exp(20 * (X @ c[1])) + 1e-3
    return w / w.sum()


@pytest.mark.parametrize("kind,scale", [("spread", 1.0), ("concentrated", 2.0)])
def test_synthesis_meets_the_error_statement(kind, scale):
    X = _points(6000, 3)
    w = _density(X, kind, 4)
    A = _heads(3, scale, 5)
    tol, tol_m = 1e-8, 1e-5
    C, Z, M, Q, info = harmonic.moments(X, X, w, A, want_q=True, tol=tol, tol_moments=tol_m, log_form=True,
                                        degree_rule="synthesis")
    assert info.synthesis["heads"] == 3 and info.synthesis["grid_points"] * synthesis.MIN_TARGETS_PER_POINT <= 6000
    lz, yb, qb = _exact(X, w, A)
    assert np.max(np.abs(Z - lz)) <= tol / 2 * 1.01  # |log(1 + e)| <= |e| / (1 - |e|)
    assert np.max(np.abs(M - yb)) < tol_m
    assert np.max(np.abs(Q - qb)) < tol_m
    if kind == "concentrated":
        assert info.synthesis["rejected_pairs"] > 0  # the a-posteriori test acted; the results above still hold


def test_synthesis_hands_small_problems_and_tolerances_to_the_expansion():
    X = _points(500, 6)
    w = np.full(500, 1 / 500)
    A = _heads(2, 1.0, 7)
    for n, tol in ((500, 1e-8), (500, 1e-11)):
        out = harmonic.moments(X[:n], X, w, A, tol=tol, log_form=True, degree_rule="synthesis")
        assert not hasattr(out[4], "synthesis")  # the adaptive expansion ran
        ref = harmonic.moments(X[:n], X, w, A, tol=tol, log_form=True, degree_rule="adaptive")
        np.testing.assert_array_equal(out[1], ref[1])
    X2 = _points(6000, 8)
    w2 = np.full(6000, 1 / 6000)
    assert synthesis.cell_rates(X2, w2, A, A, np.zeros_like(A), 0.0, tol=1e-11, tol_m=1e-6) is None  # below TOL_MIN
    assert synthesis.cell_rates(X, w, A, A, np.zeros_like(A), 0.0, tol=1e-8, tol_m=1e-6) is None  # too few cells
    assert synthesis.cell_rates(X2, w2, A, A, np.zeros_like(A), 0.0, tol=1e-8, tol_m=1e-6) is not None


def test_synthesis_keeps_the_per_cell_route_above_its_memory_cap(monkeypatch):
    X = _points(6000, 22)
    w = np.full(6000, 1 / 6000)
    A = _heads(2, 1.0, 23)
    monkeypatch.setattr(synthesis, "BASIS_BYTES_MAX", 8 * 6000 * 4)  # the harmonics of degree 1 at most
    assert synthesis.cell_rates(X, w, A, A, np.zeros_like(A), 0.0, tol=1e-8, tol_m=1e-6) is None
    out = harmonic.moments(X, X, w, A, tol=1e-8, log_form=True, degree_rule="synthesis")
    assert not hasattr(out[4], "synthesis")


@pytest.mark.parametrize("sigma", [0.0, 1.2])
@pytest.mark.parametrize("kind", ["spread", "concentrated"])
def test_cell_rates_equal_the_fused_rates(sigma, kind):
    """The rates from log Z_h at the cells and the grid's moments against fused_rates on the exact per-cell fields."""
    X = _points(6000, 9)
    w = _density(X, kind, 10)
    A = _heads(4, 1.0, 11)
    V = -A
    f = _heads(4, 0.3, 12)
    lz, yb, qb = _exact(X, w, A, want_q=sigma > 0)
    ref = fused_rates(X, w, lz, yb, qb if sigma > 0 else None, V, f, sigma)
    out = synthesis.cell_rates(X, w, A, V, f, sigma, tol=1e-8, tol_m=1e-5)
    assert out is not None
    logZ, r = out
    assert np.max(np.abs(logZ - lz)) <= 1e-8
    np.testing.assert_allclose(r["Z"], np.exp(logZ), rtol=1e-14)
    np.testing.assert_allclose(r["Phi"], ref["Phi"], rtol=0, atol=1e-8)
    np.testing.assert_allclose(r["xi"], ref["xi"], rtol=1e-8)
    for key in ("energy", "dEdt_partial"):
        assert abs(r[key] - ref[key]) <= 1e-7 * abs(ref[key]) + 1e-12, key
    np.testing.assert_allclose(r["M"], ref["M"], rtol=0, atol=1e-6 * np.abs(ref["M"]).max())
    assert abs(r["G2"] - ref["G2"]) <= 1e-4 * ref["G2"]  # the head-summed velocity: an interpolant (docstring)
    again = synthesis.cell_rates(X, w, A, V, f, sigma, tol=1e-8, tol_m=1e-5)
    np.testing.assert_array_equal(again[0], logZ)  # deterministic
    assert again[1]["G2"] == r["G2"]


def test_cell_rates_with_a_head_beyond_the_synthesis_degree():
    """A head with a large ||A_h|| (degree > SYNTHESIS_L_MAX) is summed per cell and enters the same sums."""
    X = _points(6000, 18)
    w = _density(X, "spread", 19)
    A = _heads(3, 1.0, 20)
    A[1] *= 12.0 / np.linalg.norm(A[1], 2)  # kappa 12: beyond degree 32 at tol 1e-8
    V, f, sigma = -A, _heads(3, 0.3, 21), 0.8
    lz, yb, qb = _exact(X, w, A)
    ref = fused_rates(X, w, lz, yb, qb, V, f, sigma)
    logZ, r = synthesis.cell_rates(X, w, A, V, f, sigma, tol=1e-8, tol_m=1e-5)
    assert np.max(np.abs(logZ - lz)) <= 1e-8
    for key in ("energy", "dEdt_partial"):
        assert abs(r[key] - ref[key]) <= 1e-6 * abs(ref[key]), key
    np.testing.assert_allclose(r["M"], ref["M"], rtol=0, atol=1e-5 * np.abs(ref["M"]).max())
    np.testing.assert_allclose(r["Phi"], ref["Phi"], rtol=0, atol=1e-8)
    assert abs(r["G2"] - ref["G2"]) <= 1e-4 * ref["G2"]


def test_a_wrong_projection_fails_the_comparison(monkeypatch):
    """The comparison above can fail: a grid of half the degree (not exact for the products it projects)."""
    X = _points(6000, 13)
    w = _density(X, "spread", 14)
    A = _heads(2, 1.0, 15)
    good = synthesis.cell_rates(X, w, A, -A, np.zeros_like(A), 0.0, tol=1e-8, tol_m=1e-5)
    real = synthesis.gauss_grid

    def coarse(L):
        Xq, Wq = real(L // 2)
        return Xq, Wq

    monkeypatch.setattr(synthesis, "gauss_grid", coarse)
    monkeypatch.setattr(synthesis, "_BASIS", {})
    bad = synthesis.cell_rates(X, w, A, -A, np.zeros_like(A), 0.0, tol=1e-8, tol_m=1e-5)
    lz = _exact(X, w, A, want_q=False)[0]
    assert np.max(np.abs(good[0] - lz)) <= 1e-8
    assert np.max(np.abs(bad[0] - lz)) > 1e-6


def test_mesh_solver_synthesis_route_matches_the_per_cell_route():
    """Euler steps of the paper's OU example (H = 6, level 16, order 2) at summation_tol 1e-8: the synthesis route
    (the mesh solver's default there) against the adaptive per-cell route."""
    from pathlib import Path

    from spherepde.runs.config import load_config
    from spherepde.runs.configs import __file__ as examples
    from spherepde.runs.runner import build_mesh, build_solver, build_weight_path

    cfg = load_config(Path(examples).parent / "paper-ou-mesh.toml",
                      {"model.H": 6, "mesh.level": 16, "solver.T": 0.05, "solver.summation": "fast",
                       "solver.summation_tol": 1e-8, "solver.diagnostics_tol": 1e-5})
    none = build_solver(cfg, build_weight_path(cfg), mesh=build_mesh(cfg))
    none.diagnostics_tol, none._cache = None, None  # diagnostics_tol None: summation_tol for the moments (found by CI)
    none.step(0.05)
    runs = {}
    for rule in ("synthesis", "adaptive"):
        path = build_weight_path(cfg)
        ms = build_solver(cfg, path, mesh=build_mesh(cfg))
        ms._degree_rule = rule
        ms._cache = None
        recs = []
        for _ in range(3):
            recs.append(ms.record())
            ms.step(0.05)
        runs[rule] = (ms.rho.copy(), recs)
    np.testing.assert_allclose(runs["synthesis"][0], runs["adaptive"][0], rtol=1e-7)
    for a, b in zip(runs["synthesis"][1], runs["adaptive"][1]):
        assert abs(a["energy"] - b["energy"]) <= 1e-8 * abs(b["energy"])
        assert abs(a["G2"] - b["G2"]) <= 1e-4 * abs(b["G2"])
        assert abs(a["G2_scheme"] - b["G2_scheme"]) <= 1e-6 * abs(b["G2_scheme"])


def test_scheme_g2_with_z_equals_the_exponential_form():
    from spherepde.geometry.meshfiles import icosphere
    from spherepde.geometry.surface import fv_geometry
    from spherepde.solvers.fv import scheme_g2

    g = fv_geometry(icosphere(8))
    rng = np.random.default_rng(17)
    logZ = rng.normal(size=(g.n_cells, 3)) * 0.3 + np.linspace(0, 0.02, g.n_cells)[:, None]
    u = rng.normal(size=g.n_edges)
    flux = rng.random(g.n_edges) * u
    a = scheme_g2(g, logZ, u, flux)
    b = scheme_g2(g, logZ, u, flux, Z=np.exp(logZ))
    assert abs(a - b) <= 1e-13 * abs(a)
    smooth = np.tile(np.linspace(0, 1e-4, g.n_cells)[:, None], (1, 2))  # the series branch
    assert abs(scheme_g2(g, smooth, u, flux) - scheme_g2(g, smooth, u, flux, Z=np.exp(smooth))) <= 1e-13 * abs(scheme_g2(g, smooth, u, flux))


def test_a_synthesis_run_resumes_bit_for_bit(tmp_path):
    """paper-ou-mesh at level 16 goes by synthesis (its tolerances); cut at T = 0.1 and resumed to 0.2, it equals the
    straight run (every column but the wall times)."""
    from spherepde.cli.main import main

    common = ["--example", "paper-ou-mesh", "--set", "mesh.level=16", "--set", "output.record_dt=0.05", "--set",
              "output.snapshot_dt=0.1", "--set", "output.vtk=false", "--set", "output.checkpoint_every=5", "-q"]
    assert main(["run", *common, "--set", "solver.T=0.2", "--out", str(tmp_path / "a")]) == 0
    assert main(["run", *common, "--set", "solver.T=0.1", "--out", str(tmp_path / "b")]) == 0
    assert main(["resume", str(tmp_path / "b"), "--set", "solver.T=0.2", "-q"]) == 0

    def rows(p):
        lines = (p / "diagnostics.csv").read_text(encoding="utf-8").splitlines()
        head = lines[0].split(",")
        keep = [i for i, k in enumerate(head) if not k.startswith("wall")]
        return [[r.split(",")[i] for i in keep] for r in lines[1:]]

    a, b = rows(tmp_path / "a"), rows(tmp_path / "b")
    assert len(a) == len(b) == 5 and a == b
