"""The circle examples (Bruno, Pasqualotto & Agazzi's metastable clustering): the configs, their shared
start, the nucleation entry of summary.json against the closed-form prediction, mesh against tokens."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy.special import iv

from spherepde.cli.common import example_path
from spherepde.cli.main import main as spherepde
from spherepde.geometry import circle_densities as cd
from spherepde.geometry.circle import uniform_circle
from spherepde.runs.config import ConfigError, load_config

MESH, TOKENS = "circle-metastable-mesh", "circle-metastable-particles"
#: (T, k*) of B's two runs, and the largest offset from the predicted angles the shipped start reaches (None: no
#: bound -- at beta = 7 modes 3 and 5 grow almost as fast as mode 4, and for this start the clusters sit off the
#: predicted angles; docs/guide/circle.md).
B_RUNS = {5.0: (0.5, 3), 7.0: (0.1, 4)}
OFFSET = {5.0: 0.05, 7.0: None}
#: the small size of the tests: cells of the mesh, tokens of the twin (the examples: 512 and 2000).
SMALL = {MESH: ["mesh.cells=256"], TOKENS: ["initial.n=500"]}


def _kstar(beta: float) -> int:
    """argmax_k k^2 I_k(beta) by plain scipy (independent of spherepde.model.linear)."""
    return 1 + int(np.argmax([k * k * iv(k, beta) for k in range(1, 40)]))


def _run(tmp_path, name: str, beta: float, sets=()) -> tuple:
    T = B_RUNS[beta][0]
    out = tmp_path / f"{name}-{beta:g}"
    args = ["run", "--example", name, "--out", str(out), "-q", "--set", f"weights.beta={beta}", "--set", f"solver.T={T}", "--set", "output.vtk=false"]
    for s in [*SMALL[name], *sets]:
        args += ["--set", s]
    assert spherepde(args) == 0
    return out, json.loads((out / "summary.json").read_text())["circle_nucleation"]


def test_the_examples_are_b_model_with_one_shared_start():
    m, t = (load_config(example_path(n)) for n in (MESH, TOKENS))
    for cfg in (m, t):
        assert (cfg.model.d, cfg.model.H, cfg.model.heads, cfg.model.attention) == (2, 1, "general", "unnormalised")
        assert (cfg.weights.process, cfg.weights.init, cfg.weights.value_init, cfg.weights.beta) == ("frozen", "beta", "identity", 5.0)
        assert cfg.solver.T == 0.5
    assert m.mesh.kind == "circle" and m.run.solver == "mesh" and t.run.solver == "particles"
    assert (m.initial.kind, m.initial.noise, m.initial.seed) == (t.initial.kind, t.initial.noise, t.initial.seed) == ("uniform", 0.003, m.initial.seed)
    assert t.initial.placement == "stratified" and not m.initial.sample
    # the guide says: for the shipped seed modes 3 and 5 start larger than mode 4 (why beta = 7 lands off the prediction)
    amp = np.hypot(*cd.noise_coefficients(m.initial.seed).T)
    assert amp[3] < amp[2] and amp[3] < amp[4]


def test_quantile_tokens_carry_the_meshs_fourier_coefficients():
    """Tokens at the quantiles of (1 + eps f)/(2 pi) and the mesh's exact cell averages of the same density have the
    same low Fourier coefficients, eps (a_k - i b_k) / (2 max|f|) by the field's coefficients (a_k, b_k)."""
    eps, seed = 0.003, 5
    a = cd.noise_coefficients(seed)
    th = np.linspace(0, 2 * np.pi, 1 << 16, endpoint=False)
    fmax = np.max(np.abs(sum(a[k - 1, 0] * np.cos(k * th) + a[k - 1, 1] * np.sin(k * th) for k in range(1, 9))))
    tokens = cd.quantile_angles(2000, eps, seed=seed)
    mesh = uniform_circle(512)
    rho = cd.with_noise(mesh, cd.uniform(mesh), eps, seed=seed)
    for k in range(1, 9):
        exact = eps * (a[k - 1, 0] - 1j * a[k - 1, 1]) / (2 * fmax)
        assert abs(np.mean(np.exp(-1j * k * tokens)) - exact) < 1e-3 * abs(exact) + 1e-9
        # cell averages at the nodes: a factor sinc(k h / 2) and the field's max over the cells
        assert abs(np.sum(rho * mesh.areas * np.exp(-1j * k * mesh.theta)) - exact) < 1e-3 * abs(exact) + 1e-9
    assert np.all(np.diff(np.sort(tokens)) > 0) and np.allclose(cd.quantile_angles(8), 2 * np.pi * (np.arange(8) + 0.5) / 8)


def test_with_noise_keeps_its_draws():
    """with_noise now draws its coefficients through noise_coefficients: the same numbers as one pair per mode."""
    mesh = uniform_circle(64)
    rng = np.random.default_rng(3)
    f = np.zeros(64)
    for k in range(1, 9):
        a, b = rng.normal(scale=math.sqrt(0.5), size=2)
        f += a * cd.fourier_average(mesh, k, "cos") + b * cd.fourier_average(mesh, k, "sin")
    f /= np.max(np.abs(f))
    want = cd.normalise(mesh, cd.uniform(mesh) * (1.0 + 0.2 * f))
    np.testing.assert_array_equal(cd.with_noise(mesh, cd.uniform(mesh), 0.2, seed=3), want)


@pytest.mark.parametrize("beta", [5.0, 7.0])
def test_mesh_and_tokens_end_with_kstar_clusters_at_the_predicted_angles(beta, tmp_path):
    T, k = B_RUNS[beta]
    assert _kstar(beta) == k
    ends = {}
    for name in (MESH, TOKENS):
        _, e = _run(tmp_path, name, beta)
        assert e["predicted"]["k_star"] == k and e["final"]["n"] == k and e["matches"]
        if OFFSET[beta] is not None:
            assert e["max_offset"] < OFFSET[beta], (name, e["offsets"])
        ends[name] = np.sort(e["final"]["angles"])
    # the token twin ends where the mesh does
    d = np.mod(ends[MESH] - ends[TOKENS] + np.pi, 2 * np.pi) - np.pi
    assert np.max(np.abs(d)) < 0.05


def test_the_summary_entry_is_recomputable_from_the_files(tmp_path):
    out, e = _run(tmp_path, MESH, 5.0)
    with np.load(out / "snapshots.npz") as z:
        rho0, rho1, t = z["rho"][0], z["rho"][-1], z["t"]
    with np.load(out / "mesh.npz") as z:
        phi = z["circle_phi"]
    h = np.diff(np.append(phi, phi[0] + 2 * np.pi))
    theta = phi + h / 2
    k = e["predicted"]["k_star"]
    mu = np.sum(rho0 * h * np.exp(-1j * k * theta))
    assert e["predicted"]["mu_hat"] == pytest.approx([mu.real, mu.imag], rel=1e-12, abs=1e-15)
    want = np.sort(np.mod((2 * np.pi * np.arange(k) - np.angle(mu)) / k, 2 * np.pi))
    np.testing.assert_allclose(e["predicted"]["angles"], want, rtol=0, atol=1e-12)
    assert e["t_final"] == t[-1] == 0.5
    # the clusters at T: runs of cells denser than 5/(2 pi), joined across gaps below the linking radius
    dense = rho1 >= 5 / (2 * np.pi)
    groups, cur = [], []
    for c in np.concatenate([np.flatnonzero(dense)]):
        if cur and theta[c] - theta[cur[-1]] > 0.1:
            groups.append(cur)
            cur = []
        cur.append(c)
    groups.append(cur)
    if len(groups) > 1 and theta[groups[0][0]] + 2 * np.pi - theta[groups[-1][-1]] <= 0.1:
        groups[0] = groups.pop() + groups[0]
    m = rho1 * h
    masses = sorted((float(np.sum(m[g])) for g in groups), reverse=True)
    np.testing.assert_allclose(sorted(e["final"]["masses"], reverse=True), masses, rtol=1e-12)
    gamma = [k2 ** 2 * iv(k2, 5.0) / 5.0 for k2 in range(1, 9)]
    np.testing.assert_allclose(e["rates"], gamma, rtol=1e-12)
    assert "circle nucleation: predicted k* = 3" in (out / "run.log").read_text()


def test_only_one_frozen_isotropic_head_on_the_circle_gets_the_entry(tmp_path):
    out = tmp_path / "ou"
    args = ["run", "--example", MESH, "--out", str(out), "-q", "--set", "mesh.cells=64", "--set", "solver.T=0.01", "--set", "output.vtk=false",
            "--set", "output.record_dt=0.005", "--set", "output.snapshot_dt=0.005", "--set", "weights.value_init=beta"]
    assert spherepde(args) == 0
    assert "circle_nucleation" in json.loads((out / "summary.json").read_text())  # V = beta I: still isotropic, c = beta
    assert spherepde([*args[:4], str(tmp_path / "h2"), *args[5:], "--set", "model.H=2"]) == 0
    assert "circle_nucleation" not in json.loads((tmp_path / "h2" / "summary.json").read_text())


def test_noise_for_tokens_only_on_circle_quantiles():
    t = example_path(TOKENS)
    with pytest.raises(ConfigError, match="initial.sample / initial.noise"):
        load_config(t, overrides={"initial.placement": "random"})
    with pytest.raises(ConfigError, match="already carry the noise field"):
        load_config(example_path(MESH), overrides={"initial.sample": True, "initial.placement": "stratified"})
    assert load_config(t, overrides={"initial.noise": 0.0}).initial.noise == 0.0


@pytest.mark.slow
@pytest.mark.parametrize("beta", [5.0, 7.0])
def test_the_full_examples(beta, tmp_path):
    T, k = B_RUNS[beta]
    ends = []
    for name in (MESH, TOKENS):
        out = tmp_path / name
        assert spherepde(["run", "--example", name, "--out", str(out), "-q", "--set", f"weights.beta={beta}", "--set", f"solver.T={T}"]) == 0
        e = json.loads((out / "summary.json").read_text())["circle_nucleation"]
        assert e["final"]["n"] == k and (OFFSET[beta] is None or e["max_offset"] < OFFSET[beta])
        ends.append(np.sort(e["final"]["angles"]))
        if beta == 5.0:  # docs/guide/circle.md: the column n_clusters counts 3 on the mesh, 1 for the tokens still linked by their spread
            final = json.loads((out / "summary.json").read_text())["final"]["n_clusters"]
            assert final == (3 if name == MESH else 1), (name, final)
    assert np.max(np.abs(np.mod(ends[0] - ends[1] + np.pi, 2 * np.pi) - np.pi)) < 0.05
