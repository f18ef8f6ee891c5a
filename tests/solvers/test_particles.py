"""The particle solver (spherepde.solvers.particles): steps, energy balance, sign convention,
initial tokens, checkpoints, and a small version of the paper's S^2 experiment.

Measured on the reference configurations below (for the record; the assertions use bands):

* EDI, H = 1, oscillating weights, n = 40, T = 1, dt = 0.04 / 0.02 / 0.01:
  Euler (Euler weight path) slope ~1.07; Heun (exact weight path) slope ~2.07;
  frozen weights: Euler ~1.04, Heun ~2.17. For H = 1 edi_paper == edi_exact.
* H = 4 (oscillating, 'shift'): edi_exact slope ~2.0 (Heun) / ~1.0 (Euler), while
  edi_paper levels off: edi_paper - edi_exact = int transport + int G2 -> ~1.27e-3
  (dt = 0.01), a Theta-covariance term (docs/model.md §3), not a discretisation error.
* OU noise (H = 1, one fine Brownian path, dt = m/512, m = 1, 4, 16): RMS residual
  over 8 noise paths ~ dt^0.6 (strong order ~1/2).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from spherepde.model.weights import FrozenProcess, OscillatingProcess, OUProcess, generate_weight_path
from spherepde.solvers.particles import ParticleSolver, initial_tokens, sample_vmf


# ------------------------------------------------------------ hand-written NumPy steps
def _v_numpy(X, w, A, V):
    """v(x_i) = (1/H) sum_h P_{x_i} V_h sum_j w_j e^{x_i A_h x_j} x_j / sum_j w_j e^{x_i A_h x_j}."""
    H = A.shape[0]
    v = np.zeros_like(X)
    for h in range(H):
        K = np.exp(X @ A[h] @ X.T) * w[None, :]
        a = (K @ X) @ V[h].T / K.sum(axis=1, keepdims=True)
        v += a - np.sum(a * X, axis=1, keepdims=True) * X
    return v / H


def _nrm(X):
    return X / np.linalg.norm(X, axis=1, keepdims=True)


@pytest.mark.parametrize("heads", ["gradient", "general"])
def test_euler_step_equals_numpy(heads):
    """The paper's scheme: x <- (x + dt v) / |x + dt v|, with Theta at the step start."""
    path = generate_weight_path(OscillatingProcess(), H=3, d=3, T=0.2, dt=0.01, seed=4, heads=heads)
    X0 = initial_tokens("octahedral", 30, 3, seed=1, sigma=0.2)
    s = ParticleSolver(X0, path, dt=0.02)  # two path steps per solver step
    X, w = X0.copy(), np.full(30, 1 / 30)
    for k in range(4):
        A, V = path.A[2 * k], path.V[2 * k]
        X = _nrm(X + 0.02 * _v_numpy(X, w, A, V))
        s.step()
        np.testing.assert_allclose(s.X, X, rtol=0, atol=1e-14)
    assert s.t == pytest.approx(0.08)
    np.testing.assert_allclose(np.linalg.norm(s.X, axis=1), 1.0, atol=1e-15)


def test_heun_step_equals_numpy():
    path = generate_weight_path(OscillatingProcess(), H=2, d=4, T=0.2, dt=0.01, seed=5)
    X0 = initial_tokens("uniform", 25, 4, seed=2)
    w = np.random.default_rng(0).random(25)
    w /= w.sum()
    s = ParticleSolver(X0, path, dt=0.03, integrator="heun", weights=w)
    X = X0.copy()
    for k in range(3):
        t0, t1 = 3 * k, 3 * k + 3
        v1 = _v_numpy(X, w, path.A[t0], path.V[t0])
        Xp = _nrm(X + 0.03 * v1)
        v2 = _v_numpy(Xp, w, path.A[t1], path.V[t1])
        X = _nrm(X + 0.015 * (v1 + v2))
        s.step()
        np.testing.assert_allclose(s.X, X, rtol=0, atol=1e-14)


def test_first_record_matches_numpy_energy():
    path = generate_weight_path(OUProcess(), H=2, d=3, T=0.1, dt=0.01, seed=1)
    X0 = initial_tokens("octahedral", 20, 3, seed=3)
    s = ParticleSolver(X0, path)
    r = s.record()
    w = np.full(20, 1 / 20)
    E = sum(w @ np.exp(s.X @ path.D[0][h] @ s.X.T) @ w for h in range(2)) / 4
    assert r["energy"] == pytest.approx(E, rel=1e-13)
    assert r["t"] == 0.0 and r["step"] == 0
    assert r["edi_paper"] == 0.0 and r["edi_exact"] == 0.0 and r["martingale"] == 0.0
    v = _v_numpy(s.X, w, path.A[0], path.V[0])
    assert r["speed_rms"] == pytest.approx(np.sqrt(np.sum(w * np.sum(v**2, axis=1))), rel=1e-12)


# -------------------------------------------------------------- energy balance orders
def _edi(path, X0, dt, integrator, T):
    s = ParticleSolver(X0, path, dt=dt, integrator=integrator)
    s.advance(T)
    r = s.record()
    return r


def _slope(dts, vals):
    return np.polyfit(np.log(dts), np.log(np.abs(vals)), 1)[0]


DTS = (0.04, 0.02, 0.01)
T_EDI = 1.0


@pytest.fixture(scope="module")
def X_edi():
    return initial_tokens("octahedral", 40, 3, seed=1, sigma=0.3)


@pytest.mark.parametrize(
    "proc,scheme,integrator,band",
    [
        (OscillatingProcess(), "euler", "euler", (0.8, 1.3)),
        (OscillatingProcess(), "exact", "heun", (1.7, 2.4)),
        (FrozenProcess(), "euler", "euler", (0.8, 1.3)),
        (FrozenProcess(), "euler", "heun", (1.7, 2.4)),
    ],
    ids=["osc-euler", "osc-heun", "frozen-euler", "frozen-heun"],
)
def test_edi_order_one_head(X_edi, proc, scheme, integrator, band):
    """H = 1: the paper's EDI residual -> 0 at the integrator's order (path dt = solver dt)."""
    rows = []
    for dt in DTS:
        path = generate_weight_path(proc, H=1, d=3, T=T_EDI, dt=dt, seed=3, scheme=scheme)
        rows.append(_edi(path, X_edi, dt, integrator, T_EDI))
    paper = np.array([r["edi_paper"] for r in rows])
    exact = np.array([r["edi_exact"] for r in rows])
    np.testing.assert_allclose(paper, exact, rtol=1e-10, atol=1e-14)  # transport = s G2 for H = 1
    slope = _slope(DTS, paper)
    assert band[0] <= slope <= band[1], (slope, paper)
    # residual is small compared with the energy change itself
    dE = abs(rows[-1]["energy"] - ParticleSolver(X_edi, path).record()["energy"])
    assert abs(paper[-1]) < 0.1 * max(dE, abs(rows[-1]["int_G2"]))


@pytest.mark.parametrize("phase", ["shift", "in-phase"])
def test_edi_several_heads_exact_converges_paper_does_not(X_edi, phase):
    """H = 4: edi_exact -> 0 at order 2 (Heun, exact weight path) while edi_paper levels off
    at int transport + int G2 (the Theta-covariance term, docs/model.md §3)."""
    rows = []
    for dt in DTS:
        path = generate_weight_path(OscillatingProcess(phase=phase), H=4, d=3, T=T_EDI, dt=dt, seed=3, scheme="exact")
        rows.append(_edi(path, X_edi, dt, "heun", T_EDI))
    paper = np.array([r["edi_paper"] for r in rows])
    exact = np.array([r["edi_exact"] for r in rows])
    plateau = paper - exact
    np.testing.assert_allclose(plateau, [r["int_transport"] + r["int_G2"] for r in rows], rtol=1e-9, atol=1e-15)
    assert 1.7 <= _slope(DTS, exact) <= 2.4, exact
    assert abs(plateau[-1] - plateau[-2]) < 0.1 * abs(plateau[-1])  # converged, nonzero limit
    assert abs(paper[-1]) > 5 * abs(exact[-1])
    assert abs(paper[-1]) > 0.5 * abs(paper[-2])  # does not go to zero
    # Euler: edi_exact is first order
    rows_e = []
    for dt in DTS:
        path = generate_weight_path(OscillatingProcess(phase=phase), H=4, d=3, T=T_EDI, dt=dt, seed=3)
        rows_e.append(_edi(path, X_edi, dt, "euler", T_EDI)["edi_exact"])
    assert 0.8 <= _slope(DTS, rows_e) <= 1.3, rows_e


def test_edi_ou_noise_shrinks_strong_order(X_edi):
    """OU weights with sigma^2 = 2 (H = 1): one fine noise path per seed (dt0 = 1/512) driven at
    solver steps dt0, 4 dt0, 16 dt0 (the same Brownian path at three resolutions)."""
    dt0, T = 1 / 512, 0.5
    res, mart = [], []
    for seed in range(8):
        path = generate_weight_path(OUProcess(), H=1, d=3, T=T, dt=dt0, seed=seed, init_seed=7)
        row = []
        for m in (1, 4, 16):
            r = _edi(path, X_edi, m * dt0, "euler", T)
            assert r["edi_paper"] == pytest.approx(r["edi_exact"], rel=1e-9, abs=1e-14)
            row.append(r["edi_exact"])
            if m == 1:
                mart.append(r["martingale"])
        res.append(row)
    rms = np.sqrt(np.mean(np.array(res) ** 2, axis=0))
    assert rms[0] < rms[1] < rms[2], rms
    slope = _slope(np.array([1, 4, 16]) * dt0, rms)
    assert 0.25 <= slope <= 1.0, (slope, rms)
    # the martingale term is much larger than what is left: without it no balance
    assert np.sqrt(np.mean(np.square(mart))) > 5 * rms[0]


def test_edi_ou_ito_term_matters(X_edi):
    """Without the Ito term (sigma^2/4)(1 + (x.y)^2) the balance would be off by its integral,
    which is far larger than the residual."""
    from spherepde.model.energy import state_rates
    from spherepde.model.velocity import head_fields, velocity_from_fields

    dt0, T = 1 / 512, 0.5
    path = generate_weight_path(OUProcess(), H=1, d=3, T=T, dt=dt0, seed=0, init_seed=7)
    s = ParticleSolver(X_edi, path)
    ito = 0.0
    w = s.w
    while s.t < T - 1e-12:
        A, V = path.matrices(s.t)
        F = head_fields(s.X, w, A, want_q=True)
        zero = np.zeros_like(A)
        ito += dt0 * state_rates(s.X, w, F, A, zero, path.sigma, velocity_from_fields(s.X, F, V))["dEdt_partial"]
        s.step()
    r = s.record()
    assert ito > 0.1
    assert abs(r["edi_exact"]) < 0.25 * ito


# ----------------------------------------------------------------- sign convention
def test_sign_plus_clusters():
    """s = +1, D = 4 I frozen: tokens cluster (GLPR); energy and mean resultant length grow."""
    X0 = initial_tokens("uniform", 100, 3, seed=2)
    path = generate_weight_path(FrozenProcess(), H=1, d=3, T=4.0, dt=0.02, init="beta", beta=4.0, sign=1)
    s = ParticleSolver(X0, path)
    r0 = s.record()
    E = [r0["energy"]]
    for k in range(1, 21):
        s.advance(0.2 * k)
        E.append(s.record()["energy"])
    r1 = s.record()
    assert np.all(np.diff(E) > -1e-12)
    assert r1["energy"] > 3 * r0["energy"]
    assert r1["mean_resultant"] > r0["mean_resultant"] + 0.2
    assert r0["n_clusters"] > 50 and r1["n_clusters"] <= 3
    assert r1["transport"] > 0 and r1["G2"] >= 0
    # H = 1: transport = s G2, so both residuals agree (s = +1 here) and are small
    assert r1["edi_paper"] == pytest.approx(r1["edi_exact"], rel=1e-9, abs=1e-12)
    assert abs(r1["edi_exact"]) < 0.05 * (r1["energy"] - r0["energy"])
    assert r1["int_G2"] == pytest.approx(r1["int_transport"], rel=1e-12)


@pytest.mark.parametrize("init,H", [("beta", 1), ("gaussian", 3)])
def test_sign_minus_frozen_energy_decreases(init, H):
    X0 = initial_tokens("vmf", 80, 3, seed=2, kappas=10.0)
    path = generate_weight_path(FrozenProcess(), H=H, d=3, T=3.0, dt=0.02, init=init, beta=4.0, seed=5, sign=-1)
    s = ParticleSolver(X0, path)
    E = [s.record()["energy"]]
    for k in range(1, 31):
        s.advance(0.1 * k)
        r = s.record()
        E.append(r["energy"])
        assert r["transport"] <= 0 and r["dEdt_partial"] == 0.0
    assert np.all(np.diff(E) < 0), np.diff(E).max()
    assert E[-1] < 0.9 * E[0]
    if init == "beta":  # D = 4 I with s = -1 is repulsive: tokens spread
        assert s.record()["mean_resultant"] < 0.1


# ------------------------------------------------------------------ checkpoints
@pytest.mark.parametrize("integrator", ["euler", "heun"])
def test_get_set_state_resume_bit_identical(integrator):
    path = generate_weight_path(OUProcess(), H=3, d=3, T=0.4, dt=0.01, seed=9)
    X0 = initial_tokens("octahedral", 30, 3, seed=4)
    full = ParticleSolver(X0, path, integrator=integrator)
    full.advance(0.4)
    a = ParticleSolver(X0, path, integrator=integrator)
    a.advance(0.17)
    st = a.get_state()
    b = ParticleSolver(initial_tokens("uniform", 30, 3, seed=99), path, integrator=integrator)
    b.set_state(st)
    assert b.t == pytest.approx(0.17)
    b.advance(0.4)
    assert np.array_equal(b.X, full.X)
    rf, rb = full.record(), b.record()
    for k in rf:
        assert rf[k] == rb[k] or (math.isnan(rf[k]) and math.isnan(rb[k])), k
    with pytest.raises(ValueError, match="shape"):
        b.set_state({**st, "X": st["X"][:5]})


# --------------------------------------------------------------- initial tokens
def test_octahedral_tokens():
    n, sigma = 6000, 0.05
    X = initial_tokens("octahedral", n, 3, seed=0, sigma=sigma)
    assert X.shape == (n, 3)
    np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1.0, atol=1e-14)
    k = np.argmax(np.abs(X), axis=1)
    vertex = k + 3 * (X[np.arange(n), k] < 0)
    counts = np.bincount(vertex, minlength=6)
    assert np.all(np.abs(counts - n / 6) < 5 * math.sqrt(n / 6))  # uniform over the six vertices
    assert np.abs(X[np.arange(n), k]).min() > 0.9
    off = np.abs(X[np.arange(n)[:, None], (k[:, None] + np.array([1, 2])) % 3])
    assert np.std(np.concatenate([X[np.arange(n), (k + 1) % 3], X[np.arange(n), (k + 2) % 3]])) == pytest.approx(sigma, rel=0.05)
    assert off.max() < 8 * sigma
    assert np.array_equal(X, initial_tokens("octahedral", n, 3, seed=0, sigma=sigma))
    assert not np.array_equal(X, initial_tokens("octahedral", n, 3, seed=1, sigma=sigma))
    X5 = initial_tokens("octahedral", 3000, 5, seed=0)
    assert len(np.unique(np.argmax(np.abs(X5), axis=1) + 5 * (X5[np.arange(3000), np.argmax(np.abs(X5), axis=1)] < 0))) == 10


def test_uniform_tokens():
    X = initial_tokens("uniform", 20000, 3, seed=0)
    np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1.0, atol=1e-14)
    assert np.linalg.norm(X.mean(axis=0)) < 0.03
    np.testing.assert_allclose(X.T @ X / len(X), np.eye(3) / 3, atol=0.015)


@pytest.mark.parametrize("d,kappa", [(3, 5.0), (3, 1.0), (5, 8.0)])
def test_vmf_mean_resultant_matches_theory(d, kappa):
    """E[x . mu] = A_d(kappa) = I_{d/2}(kappa) / I_{d/2-1}(kappa); for d = 3: coth k - 1/k."""
    from scipy.special import iv

    n = 20000
    mu = np.arange(1.0, d + 1)
    mu /= np.linalg.norm(mu)
    X = sample_vmf(np.random.default_rng(1), mu, kappa, n)
    np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1.0, atol=1e-12)
    A = iv(d / 2, kappa) / iv(d / 2 - 1, kappa)
    if d == 3:
        assert A == pytest.approx(1 / math.tanh(kappa) - 1 / kappa, rel=1e-12)
    t = X @ mu
    assert t.mean() == pytest.approx(A, abs=5 * t.std() / math.sqrt(n))
    # second moment of the component along mu: E[t^2] = 1 - (d-1) A / kappa
    assert np.mean(t**2) == pytest.approx(1 - (d - 1) * A / kappa, abs=5 * np.std(t**2) / math.sqrt(n))
    # no drift orthogonal to mu
    perp = X - t[:, None] * mu
    assert np.linalg.norm(perp.mean(axis=0)) < 5 / math.sqrt(n)


def test_vmf_tokens_mixture():
    means = np.array([[0, 0, 1.0], [1.0, 0, 0]])
    X = initial_tokens("vmf", 4000, 3, seed=0, means=means, kappas=[50.0, 50.0], weights=[3, 1])
    near0 = (X @ means[0]) > 0.8
    near1 = (X @ means[1]) > 0.8
    assert near0.sum() + near1.sum() == 4000
    assert near0.mean() == pytest.approx(0.75, abs=0.03)
    Xu = initial_tokens("vmf", 5000, 3, seed=0, kappas=0.0)
    assert np.linalg.norm(Xu.mean(axis=0)) < 0.05
    with pytest.raises(ValueError, match="vmf"):
        initial_tokens("vmf", 10, 3, means=np.eye(2))


def test_token_files(tmp_path):
    X = np.random.default_rng(0).standard_normal((7, 3)) * 3
    np.save(tmp_path / "x.npy", X)
    Y = initial_tokens("file", 0, 3, file=tmp_path / "x.npy")
    np.testing.assert_allclose(Y, X / np.linalg.norm(X, axis=1, keepdims=True), rtol=1e-15)
    np.savez(tmp_path / "x.npz", X=X, other=np.zeros(2))
    np.testing.assert_array_equal(initial_tokens("file", 5, 3, file=tmp_path / "x.npz"), Y)
    with pytest.raises(FileNotFoundError):
        initial_tokens("file", 7, 3, file=tmp_path / "none.npy")
    with pytest.raises(ValueError, match="shape"):
        initial_tokens("file", 7, 4, file=tmp_path / "x.npy")
    np.save(tmp_path / "flat.npy", X.ravel())
    with pytest.raises(ValueError, match="shape"):
        initial_tokens("file", 7, 3, file=tmp_path / "flat.npy")
    Xn = X.copy()
    Xn[3, 1] = np.nan
    np.save(tmp_path / "nan.npy", Xn)
    with pytest.raises(ValueError, match="NaN"):
        initial_tokens("file", 7, 3, file=tmp_path / "nan.npy")
    Xz = X.copy()
    Xz[2] = 0.0
    np.save(tmp_path / "zero.npy", Xz)
    with pytest.raises(ValueError, match="zero"):
        initial_tokens("file", 7, 3, file=tmp_path / "zero.npy")
    (tmp_path / "junk.npy").write_bytes(b"junk")
    with pytest.raises(ValueError, match="junk.npy"):
        initial_tokens("file", 7, 3, file=tmp_path / "junk.npy")
    with pytest.raises(ValueError, match="unknown token"):
        initial_tokens("gaussian", 7, 3)
    with pytest.raises(ValueError, match="d >= 2"):
        initial_tokens("uniform", 7, 1)
    with pytest.raises(ValueError, match="at least one"):
        initial_tokens("uniform", 0, 3)


# ------------------------------------------------------------------------- errors
def test_solver_errors():
    path = generate_weight_path(OUProcess(), H=2, d=3, T=0.1, dt=0.01, seed=0)
    X0 = initial_tokens("uniform", 10, 3, seed=0)
    with pytest.raises(ValueError, match="d = 3"):
        ParticleSolver(X0[:, :2], path)
    with pytest.raises(ValueError, match="shape"):
        ParticleSolver(X0[0], path)
    bad = X0.copy()
    bad[4, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        ParticleSolver(bad, path)
    with pytest.raises(ValueError, match="multiple"):
        ParticleSolver(X0, path, dt=0.015)
    with pytest.raises(ValueError, match="multiple"):
        ParticleSolver(X0, path, dt=0.004)
    assert ParticleSolver(X0, path, dt=0.005).split == 2  # a whole fraction of the grid step
    with pytest.raises(ValueError, match="integrator"):
        ParticleSolver(X0, path, integrator="rk4")
    with pytest.raises(ValueError, match="weights"):
        ParticleSolver(X0, path, weights=np.full(10, 0.2))
    with pytest.raises(ValueError, match="weights"):
        ParticleSolver(X0, path, weights=np.full(9, 1 / 9))
    s = ParticleSolver(X0, path, dt=0.05)
    with pytest.raises(ValueError, match="grid"):
        s.advance(0.07)
    s.advance(0.1)
    with pytest.raises(ValueError, match="past the end"):
        s.step()
    # tokens are normalised on input
    s2 = ParticleSolver(3 * X0, path)
    np.testing.assert_allclose(s2.X, X0, rtol=1e-15)


def test_general_heads_energy_undefined_velocity_works():
    path = generate_weight_path(OUProcess(), H=2, d=3, T=0.1, dt=0.01, seed=3, heads="general", value_init="gaussian")
    assert not np.allclose(path.V, path.A) and not np.allclose(path.V, -path.A)
    X0 = initial_tokens("octahedral", 20, 3, seed=5)
    s = ParticleSolver(X0, path)
    r = s.record()
    for k in ("energy", "dEdt_partial", "martingale", "transport", "G2", "int_dEdt", "int_transport", "int_G2", "edi_paper", "edi_exact"):
        assert math.isnan(r[k]), k
    w = np.full(20, 1 / 20)
    v = _v_numpy(s.X, w, path.A[0], path.V[0])
    assert r["speed_rms"] == pytest.approx(np.sqrt(np.sum(w * np.sum(v**2, axis=1))), rel=1e-12) and r["speed_rms"] > 0
    s.advance(0.1)
    r = s.record()
    assert math.isnan(r["edi_exact"]) and np.isfinite(r["mean_resultant"]) and np.all(np.isfinite(s.X))
    st = s.get_state()
    s.set_state(st)


# ------------------------------------------------ the paper's S^2 experiment, small
@pytest.mark.parametrize("example", ["paper-ou-particles", "paper-oscillating-particles"])
@pytest.mark.parametrize("H", [1, 10])
def test_paper_experiment_small(tmp_path, example, H):
    from importlib.resources import files

    from spherepde.runs.config import load_config
    from spherepde.runs.runfolder import read_diagnostics
    from spherepde.runs.runner import run

    toml = files("spherepde.runs.configs") / f"{example}.toml"
    cfg = load_config(toml, {"solver.T": 0.5, "model.H": H, "output.snapshot_dt": 0.25})
    assert cfg.initial.n == 200 and cfg.weights.dt == 0.005 and cfg.model.sign == -1 and cfg.integrator == "euler"
    res = run(cfg, out=tmp_path / "run", progress=False)
    assert res.status == "completed"
    diag = read_diagnostics(tmp_path / "run" / "diagnostics.csv")
    cols = ("t", "energy", "dEdt_partial", "martingale", "transport", "G2", "edi_paper", "edi_exact")
    for c in cols:
        assert c in diag, c
        assert np.all(np.isfinite(diag[c])), c
    assert len(diag["t"]) == 21  # records every 0.025 (5 steps), t = 0 .. 0.5
    np.testing.assert_allclose(diag["t"], np.linspace(0, 0.5, 21), atol=1e-12)
    assert np.all(diag["G2"] >= 0)
    if example == "paper-ou-particles":
        assert np.any(diag["martingale"] != 0)
    else:
        assert np.all(diag["martingale"] == 0)
    # energy balance: residual small relative to the energy change and the dissipation
    scale = max(np.ptp(diag["energy"]), diag["int_G2"][-1], 1e-3)
    assert np.abs(diag["edi_exact"]).max() < 0.1 * scale
    if H == 1:
        np.testing.assert_allclose(diag["edi_paper"], diag["edi_exact"], rtol=1e-8, atol=1e-12)


# ---------------------------------------------------- the bound on the displacement per step
def test_speed_bound_bounds_the_velocity():
    """|v| <= (1/H) sum_h ||V_h||_2 everywhere, at grid times and between them."""
    from spherepde.model.velocity import head_fields, velocity_from_fields
    from spherepde.solvers.particles import speed_bound

    path = generate_weight_path(OUProcess(), H=3, d=4, T=0.2, dt=0.01, seed=2, init="beta", beta=6.0)
    bound = speed_bound(path)
    X = initial_tokens("vmf", 200, 4, seed=3, kappas=30.0)
    w = np.full(200, 1 / 200)
    for t in (0.0, 0.055, 0.2):
        A, V = path.matrices(t)
        v = velocity_from_fields(X, head_fields(X, w, A), V)
        assert np.max(np.linalg.norm(v, axis=1)) <= bound
    assert bound < 2 * np.max(np.linalg.norm(path.V, ord=2, axis=(-2, -1)))


def test_particle_step_chosen_or_refused():
    from spherepde.solvers.particles import MAX_DISPLACEMENT, particle_step

    path = generate_weight_path(FrozenProcess(), H=1, d=3, T=2.0, dt=1.0, init="beta", beta=10.0)  # |v| <= 10
    assert particle_step(path) == pytest.approx(1.0 / math.ceil(10 / MAX_DISPLACEMENT))
    with pytest.raises(ValueError, match=r"solver.dt: the particle step 1 moves a token up to 10 rad .* use solver.dt = 0.02 or smaller"):
        particle_step(path, 1.0)
    assert particle_step(path, 0.02) == 0.02
    small = generate_weight_path(FrozenProcess(), H=1, d=3, T=0.1, dt=0.01, init="beta", beta=4.0)
    assert particle_step(small) == 0.01  # a stable grid step is kept as it is


def test_fraction_of_grid_step_converges_with_noise(X_edi):
    """dt = grid step / m (OU noise, martingale at the grid points) stays close to dt = grid step."""
    path = generate_weight_path(OUProcess(), H=1, d=3, T=0.2, dt=0.02, seed=1)
    rows = []
    for dt in (0.02, 0.01, 0.005):
        s = ParticleSolver(X_edi, path, dt=dt, integrator="heun")
        s.advance(0.2)
        rows.append((s.X, s.record()))
    assert np.max(np.abs(rows[2][0] - rows[1][0])) < np.max(np.abs(rows[1][0] - rows[0][0])) < 0.05
    assert rows[2][1]["martingale"] == pytest.approx(rows[0][1]["martingale"], rel=0.2)


def test_cli_refuses_a_token_step_that_jumps_and_chooses_a_stable_one(tmp_path, capsys):
    """A frozen head with beta = 10 and weights.dt = 1 once ran with steps of up to 10 rad (exit 0)."""
    from spherepde.cli.main import main

    base = ["--set", "run.solver=particles", "--set", "weights.process=frozen", "--set", "weights.init=beta", "--set", "weights.beta=10",
            "--set", "weights.dt=1", "--set", "solver.T=2", "--set", "output.record_dt=1", "--set", "output.snapshot_dt=1", "--set", "initial.n=20",
            "--set", "output.vtk=false"]
    code = main(["run", "--out", str(tmp_path / "big"), "--set", "solver.dt=1", *base])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "use solver.dt = 0.02 or smaller" in err[0]
    assert not (tmp_path / "big").exists()
    code = main(["run", "--out", str(tmp_path / "auto"), *base])
    assert code == 0, capsys.readouterr().err
    assert "token step 0.02 = weights.dt / 50" in (tmp_path / "auto" / "run.log").read_text()
    with open(tmp_path / "auto" / "diagnostics.csv") as fh:
        steps = [line.split(",")[1] for line in fh][1:]
    assert [float(x) for x in steps] == [0.0, 50.0, 100.0]
