"""Weight paths Theta_t (spherepde.model.weights, docs/model.md §2)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.integrate import quad_vec

from spherepde.model.weights import (
    DriftProcess,
    FrozenProcess,
    OscillatingProcess,
    OUProcess,
    WeightPath,
    generate_weight_path,
    initial_matrices,
    oscillating_target,
    weight_path_from_arrays,
)


# ----------------------------------------------------------------- OU stationary law
@pytest.mark.parametrize("scheme,dt", [("euler", 0.01), ("exact", 0.5)])
def test_ou_stationary_law(scheme, dt):
    """D_t for t >> 1/kappa: mean M, Var(D_ii) = sigma^2/(2 kappa), Var(D_ij) = sigma^2/(4 kappa),
    distinct entries uncorrelated, D symmetric; H = 2000 heads are independent samples."""
    H, d, kappa, sigma, T = 2000, 3, 2.0, 1.0, 4.0
    M = np.array([[1.5, 0.3, -0.2], [0.3, 0.5, 0.1], [-0.2, 0.1, -1.0]])
    path = generate_weight_path(OUProcess(mean=M, kappa=kappa, sigma=sigma), H=H, d=d, T=T, dt=dt, seed=11, scheme=scheme)
    DT = path.D[-1]
    assert np.array_equal(DT, np.swapaxes(DT, 1, 2))
    iu = np.triu_indices(d)
    samples = DT[:, iu[0], iu[1]]  # (H, 6): 3 diagonal, 3 off-diagonal entries
    diag = iu[0] == iu[1]
    var_d, var_o = sigma**2 / (2 * kappa), sigma**2 / (4 * kappa)  # 0.25, 0.125
    # mean: standard error sqrt(var/H) <= 0.011
    np.testing.assert_allclose(samples.mean(axis=0), M[iu], atol=5 * math.sqrt(var_d / H))
    C = np.cov(samples.T)
    expected = np.diag(np.where(diag, var_d, var_o))
    # relative MC error of a variance from H samples: sqrt(2/H) = 0.032; Euler bias kappa dt / 2 = 1%
    pooled_d = np.mean(np.diag(C)[diag])
    pooled_o = np.mean(np.diag(C)[~diag])
    assert pooled_d == pytest.approx(var_d, rel=0.08)
    assert pooled_o == pytest.approx(var_o, rel=0.08)
    np.testing.assert_allclose(np.diag(C), np.diag(expected), rtol=0.15)
    off = C - np.diag(np.diag(C))
    assert np.abs(off).max() < 5 * var_d / math.sqrt(H)
    # the recorded drift is kappa (M - D) at the grid points
    np.testing.assert_allclose(path.drift[-1], kappa * (M[None] - DT), rtol=1e-14, atol=1e-14)


def test_ou_exact_transition_moments_one_step():
    """One exact step from D0: mean M + e^{-kappa dt}(D0 - M), diag variance sigma^2 (1 - e^{-2 kappa dt})/(2 kappa);
    also for kappa < 0 (explosive, Python API)."""
    for kappa in (1.5, -0.5):
        H, d, sigma, dt = 4000, 2, 0.8, 0.7
        D0 = np.array([[2.0, 0.5], [0.5, -1.0]])
        p = generate_weight_path(OUProcess(mean=0.0, kappa=kappa, sigma=sigma), H=H, d=d, T=dt, dt=dt, init=D0, seed=3, scheme="exact")
        D1 = p.D[1]
        mean = math.exp(-kappa * dt) * D0
        var = sigma**2 * (1 - math.exp(-2 * kappa * dt)) / (2 * kappa)
        np.testing.assert_allclose(D1.mean(axis=0), mean, atol=5 * math.sqrt(var / H))
        assert D1[:, 0, 0].var() == pytest.approx(var, rel=0.1)
        assert D1[:, 0, 1].var() == pytest.approx(var / 2, rel=0.1)
        # the recorded stochastic increment is the Gaussian part of the transition
        np.testing.assert_allclose(p.dM[0], D1 - mean[None], atol=1e-13)


def test_ou_euler_step_is_euler_maruyama():
    """D_{k+1} = D_k + dt kappa (M - D_k) + dM_k, dM_k = sigma sqrt(dt) (G + G^T)/2."""
    p = generate_weight_path(OUProcess(mean=1.0, kappa=1.0, sigma=math.sqrt(2)), H=3, d=3, T=0.1, dt=0.01, seed=5)
    I = np.eye(3)[None, None]
    np.testing.assert_allclose(p.D[1:], p.D[:-1] + 0.01 * (I - p.D[:-1]) + p.dM, rtol=0, atol=1e-14)
    np.testing.assert_array_equal(p.dM, np.swapaxes(p.dM, 2, 3))
    # the increments have the right size: diag var sigma^2 dt, off-diagonal sigma^2 dt / 2
    big = generate_weight_path(OUProcess(sigma=1.0), H=500, d=3, T=0.2, dt=0.01, seed=6)
    inc = big.dM.reshape(-1, 3, 3)
    assert inc[:, 0, 0].var() == pytest.approx(0.01, rel=0.1)
    assert inc[:, 0, 1].var() == pytest.approx(0.005, rel=0.1)
    assert p.sigma == pytest.approx(math.sqrt(2))
    assert np.array_equal(p.V, -p.A)


# --------------------------------------------------------------- oscillating weights
def _F_explicit(t, d, H, phase):
    """docs/model.md §2 written out entry by entry; phi_h = 2 pi h / H, h = 0..H-1."""
    out = np.zeros((H, d, d))
    for h in range(H):
        phi = 0.0 if phase == "in-phase" else 2 * math.pi * h / H
        if phase == "figure":
            c1, s2, s1, c2, c1q = (
                math.cos(t + phi), math.sin(2 * t + phi), math.sin(t + phi), math.cos(2 * t + phi), math.cos(t + phi + math.pi / 4),
            )
            s1d = math.sin(t + phi)
        else:  # shift / in-phase: tau = t + phi in every argument
            tau = t + phi
            c1, s2, s1, c2, c1q = math.cos(tau), math.sin(2 * tau), math.sin(tau), math.cos(2 * tau), math.cos(tau + math.pi / 4)
            s1d = math.sin(tau)
        if d == 2:
            out[h] = [[2 + 1.5 * c1, s2], [s2, 2 - 1.5 * c1]]
        elif d == 3:
            out[h] = [[2 + 1.5 * c1, s2, s1], [s2, 2 + 1.5 * s1d, c2], [s1, c2, 2 + 1.5 * c1q]]
        else:
            P = d * (d - 1) // 2
            p = 0
            for i in range(d):
                if phase == "figure":
                    out[h, i, i] = 2 + 1.5 * math.cos(t + 2 * math.pi * i / d + phi)
                else:
                    out[h, i, i] = 2 + 1.5 * math.cos(t + phi + 2 * math.pi * i / d)
            for i in range(d):
                for j in range(i + 1, d):
                    if phase == "figure":
                        val = math.sin(2 * t + 2 * math.pi * p / P + phi)
                    else:
                        val = math.sin(2 * (t + phi) + 2 * math.pi * p / P)
                    out[h, i, j] = out[h, j, i] = val
                    p += 1
    return out


@pytest.mark.parametrize("d", [2, 3, 4])
@pytest.mark.parametrize("phase", ["shift", "figure", "in-phase"])
def test_oscillating_target_matches_model(d, phase):
    for t in (0.0, 0.37, 2.9, 11.0):
        for H in (1, 3, 5):
            np.testing.assert_allclose(oscillating_target(t, d, H, phase), _F_explicit(t, d, H, phase), rtol=0, atol=1e-14)


@pytest.mark.parametrize("d", [2, 3, 4])
def test_phase_conventions_coincide_for_one_head_only(d):
    t = 0.81
    F = {ph: oscillating_target(t, d, 1, ph) for ph in ("shift", "figure", "in-phase")}
    np.testing.assert_array_equal(F["shift"], F["figure"])
    np.testing.assert_array_equal(F["shift"], F["in-phase"])
    G = {ph: oscillating_target(t, d, 5, ph) for ph in ("shift", "figure", "in-phase")}
    # head 0 has phi = 0 under every convention
    np.testing.assert_allclose(G["shift"][0], G["figure"][0], atol=1e-15)
    np.testing.assert_allclose(G["shift"][0], G["in-phase"][0], atol=1e-15)
    for a, b in (("shift", "figure"), ("shift", "in-phase"), ("figure", "in-phase")):
        assert np.abs(G[a][1:] - G[b][1:]).max() > 0.1, (a, b)
    # in-phase: all heads equal; shift: head h is head 0 at time t + phi_h
    assert np.ptp(G["in-phase"], axis=0).max() == 0.0
    np.testing.assert_allclose(G["shift"][2], oscillating_target(t + 2 * 2 * math.pi / 5, d, 1)[0], atol=1e-13)
    # symmetric
    for g in G.values():
        np.testing.assert_array_equal(g, np.swapaxes(g, 1, 2))


def test_unknown_phase_and_d1():
    with pytest.raises(ValueError, match="phase"):
        OscillatingProcess(phase="random")
    with pytest.raises(ValueError, match="d >= 2"):
        oscillating_target(0.0, 1, 1)


def _relaxation_closed_form(t, D0, d, H, phase):
    """D(t) = e^{-t} D0 + int_0^t e^{-(t-u)} F_h(u) du, by adaptive quadrature of the explicit F."""
    integral, err = quad_vec(lambda u: math.exp(-(t - u)) * _F_explicit(u, d, H, phase), 0.0, t, epsabs=1e-13, epsrel=1e-13)
    assert err < 1e-11
    return math.exp(-t) * D0 + integral


@pytest.mark.parametrize("d,H,phase", [(3, 1, "shift"), (3, 3, "figure"), (2, 2, "shift"), (4, 3, "in-phase")])
def test_oscillating_path_relaxation(d, H, phase):
    T = 2.0
    rng = np.random.default_rng(d * H)
    G = rng.standard_normal((H, d, d))
    D0 = G + np.swapaxes(G, 1, 2)
    proc = OscillatingProcess(phase=phase)
    ref = {t: _relaxation_closed_form(t, D0, d, H, phase) for t in (0.5, 1.0, T)}
    # exact scheme: to round-off, even with a coarse grid
    pe = generate_weight_path(proc, H=H, d=d, T=T, dt=0.1, init=D0, scheme="exact")
    for t, Dt in ref.items():
        A, V = pe.matrices(t)
        np.testing.assert_allclose(A, Dt, rtol=0, atol=1e-12)
        np.testing.assert_allclose(V, -Dt, rtol=0, atol=1e-12)
    np.testing.assert_allclose(pe.drift, np.stack([oscillating_target(t, d, H, phase) for t in pe.times]) - pe.D, atol=1e-13)
    assert np.all(pe.dM == 0)
    # Euler: error O(dt) -- halves with dt
    errs = []
    for dt in (4e-3, 2e-3):
        p = generate_weight_path(proc, H=H, d=d, T=T, dt=dt, init=D0, scheme="euler")
        errs.append(np.abs(p.matrices(T)[0] - ref[T]).max())
    assert errs[0] < 0.05
    assert errs[0] / errs[1] == pytest.approx(2.0, rel=0.1)


def test_oscillating_exact_with_noise_refused():
    with pytest.raises(ValueError, match="sigma = 0"):
        generate_weight_path(OscillatingProcess(sigma=0.5), H=1, d=3, T=0.1, dt=0.01, scheme="exact")


def test_oscillating_with_noise_euler():
    p = generate_weight_path(OscillatingProcess(sigma=0.3), H=2, d=3, T=0.05, dt=0.01, seed=1)
    F = np.stack([oscillating_target(t, 3, 2) for t in p.times[:-1]])
    np.testing.assert_allclose(p.D[1:], p.D[:-1] + 0.01 * (F - p.D[:-1]) + p.dM, atol=1e-14)
    assert np.abs(p.dM).max() > 0 and p.sigma == 0.3


def test_frozen_path():
    p = generate_weight_path(FrozenProcess(), H=2, d=3, T=1.0, dt=0.25, init="beta", beta=4.0, sign=1)
    assert np.all(p.D == 4.0 * np.eye(3)) and np.all(p.V == p.A) and np.all(p.drift == 0) and np.all(p.dM == 0)
    pe = generate_weight_path(FrozenProcess(), H=2, d=3, T=1.0, dt=0.25, seed=4, scheme="exact")
    assert np.all(pe.D == pe.D[0])


# ------------------------------------------------------------------- seeds, I/O
def test_seeds_reproducible_and_distinct():
    kw = {"H": 3, "d": 3, "T": 0.2, "dt": 0.01}
    a = generate_weight_path(OUProcess(), seed=7, **kw)
    b = generate_weight_path(OUProcess(), seed=7, **kw)
    c = generate_weight_path(OUProcess(), seed=8, **kw)
    for name in ("A", "V", "drift", "dM"):
        assert np.array_equal(getattr(a, name), getattr(b, name))
    assert not np.allclose(a.D[0], c.D[0]) and not np.allclose(a.dM, c.dM)
    # a fixed initial draw with different noise paths (Monte-Carlo over noise)
    e = generate_weight_path(OUProcess(), seed=8, init_seed=99, **kw)
    f = generate_weight_path(OUProcess(), seed=9, init_seed=99, **kw)
    assert np.array_equal(e.D[0], f.D[0]) and not np.allclose(e.dM, f.dM)


def test_save_load_round_trip(tmp_path):
    p = generate_weight_path(OUProcess(kappa=0.5), H=2, d=3, T=0.1, dt=0.01, seed=3, sign=1, scheme="exact")
    p.save(tmp_path / "w.npz")
    q = WeightPath.load(tmp_path / "w.npz")
    for name in ("A", "V", "drift", "dM"):
        assert np.array_equal(getattr(p, name), getattr(q, name))
    assert (q.dt, q.sigma, q.heads, q.sign, q.meta) == (p.dt, p.sigma, p.heads, p.sign, p.meta)
    assert q.meta["process"] == "ou" and q.meta["scheme"] == "exact" and q.meta["params"]["kappa"] == 0.5
    assert not list(tmp_path.glob("*.tmp*"))
    g = generate_weight_path(OUProcess(), H=2, d=2, T=0.05, dt=0.01, heads="general", value_init="beta", beta=2.0)
    g.save(tmp_path / "g.npz")
    g2 = WeightPath.load(tmp_path / "g.npz")
    assert g2.heads == "general" and np.array_equal(g2.V, g.V) and not g2.is_gradient
    with pytest.raises(FileNotFoundError):
        WeightPath.load(tmp_path / "missing.npz")
    np.savez(tmp_path / "other.npz", x=np.zeros(3))
    with pytest.raises(ValueError, match="not a spherepde weight path"):
        WeightPath.load(tmp_path / "other.npz")


def test_path_queries():
    p = generate_weight_path(OUProcess(), H=2, d=3, T=1.0, dt=0.1, seed=2)
    assert p.K == 10 and p.T == pytest.approx(1.0) and p.H == 2 and p.d == 3
    for k in range(p.K + 1):
        A, V = p.matrices(k * 0.1)
        assert np.array_equal(A, p.A[k]) and np.array_equal(V, p.V[k])
        assert np.array_equal(p.drift_at(k * 0.1), p.drift[k])
        assert p.grid_index(k * 0.1) == k
    A, V = p.matrices(0.37)
    np.testing.assert_allclose(A, 0.3 * p.A[3] + 0.7 * p.A[4], atol=1e-14)
    np.testing.assert_allclose(V, 0.3 * p.V[3] + 0.7 * p.V[4], atol=1e-14)
    assert p.grid_index(0.37) is None
    assert p.next_grid_time(0.37) == pytest.approx(0.4)
    assert p.next_grid_time(0.4) == pytest.approx(0.5)
    assert np.array_equal(p.matrices(1.0)[0], p.A[-1])
    for bad in (1.0 + 1e-6, 1.5, -0.01):
        with pytest.raises(ValueError, match="outside the weight path"):
            p.matrices(bad)
    with pytest.raises(ValueError):
        p.A[0, 0, 0, 0] = 1.0  # read-only
    # on the grid and between its points alike: new writable arrays (one Numba specialisation per kernel, not one for
    # read-only views as well), and writing to them leaves the path as it was
    for t in (0.3, 0.37, 1.0):
        for arr in (*p.matrices(t), p.drift_at(t)):
            assert arr.flags.writeable and arr.flags.c_contiguous and arr.base is None
        A = p.matrices(t)[0]
        before = A.copy()
        A[0, 0, 0] += 1.0
        assert np.array_equal(p.matrices(t)[0], before)
    g = generate_weight_path(OUProcess(), H=1, d=3, T=0.1, dt=0.1, heads="general")
    with pytest.raises(ValueError, match="gradient"):
        _ = g.D


def test_generate_errors():
    with pytest.raises(ValueError, match="multiple"):
        generate_weight_path(OUProcess(), H=1, d=3, T=0.105, dt=0.01)
    with pytest.raises(ValueError, match="sign"):
        generate_weight_path(OUProcess(), H=1, d=3, T=0.1, dt=0.01, sign=0)
    with pytest.raises(ValueError, match="H >= 1"):
        generate_weight_path(OUProcess(), H=0, d=3, T=0.1, dt=0.01)
    with pytest.raises(ValueError, match="symmetric"):
        generate_weight_path(OUProcess(), H=1, d=2, T=0.1, dt=0.01, init=np.array([[1.0, 2.0], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="scheme"):
        generate_weight_path(OUProcess(), H=1, d=3, T=0.1, dt=0.01, scheme="rk4")
    with pytest.raises(ValueError, match="shape"):
        generate_weight_path(OUProcess(), H=2, d=3, T=0.1, dt=0.01, init=np.zeros((3, 3, 3)))
    with pytest.raises(ValueError, match="mean matrix"):
        generate_weight_path(OUProcess(mean=np.eye(2)), H=1, d=3, T=0.1, dt=0.01)
    with pytest.raises(FloatingPointError), np.errstate(over="ignore", invalid="ignore"):
        generate_weight_path(OUProcess(kappa=1e200, sigma=0.0), H=1, d=2, T=0.1, dt=0.01, init="beta", beta=3.0)


# --------------------------------------------------------------- paths from arrays
def test_weight_path_from_arrays():
    rng = np.random.default_rng(0)
    G = rng.standard_normal((5, 2, 3, 3))
    D = G + np.swapaxes(G, 2, 3)
    p = weight_path_from_arrays(D, 0.5, sign=1)
    assert p.is_gradient and p.K == 4 and p.T == pytest.approx(2.0) and p.sign == 1.0
    assert np.array_equal(p.A, D) and np.array_equal(p.V, D)
    np.testing.assert_allclose(p.drift[:4], (D[1:] - D[:-1]) / 0.5)
    np.testing.assert_array_equal(p.drift[4], p.drift[3])
    assert np.all(p.dM == 0) and p.sigma == 0.0
    D[0, 0, 0, 0] = 123.0  # the caller's array stays writable and the path is a copy
    assert p.A[0, 0, 0, 0] != 123.0
    np.testing.assert_allclose(p.matrices(0.25)[0], 0.5 * (p.A[0] + p.A[1]))
    pg = weight_path_from_arrays(G, 0.5, V=2 * G)
    assert pg.heads == "general" and np.array_equal(pg.V, 2 * G)
    with pytest.raises(ValueError, match="symmetric"):
        weight_path_from_arrays(G, 0.5)
    with pytest.raises(ValueError, match="shape"):
        weight_path_from_arrays(D[0], 0.5)
    with pytest.raises(ValueError, match="shape"):
        weight_path_from_arrays(D[:1], 0.5)
    bad = D.copy()
    bad[2, 1, 0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        weight_path_from_arrays(bad, 0.5)
    with pytest.raises(ValueError, match="inconsistent"):
        weight_path_from_arrays(G, 0.5, V=G[:, :1])


# ---------------------------------------------------------------- initial matrices
def test_initial_matrices_kinds(tmp_path):
    rng = np.random.default_rng(0)
    G = initial_matrices("gaussian", 4000, 3, rng)
    assert G.shape == (4000, 3, 3) and np.array_equal(G, np.swapaxes(G, 1, 2))
    assert G[:, 0, 0].var() == pytest.approx(4.0, rel=0.08)  # 2 G_ii
    assert G[:, 0, 1].var() == pytest.approx(2.0, rel=0.08)  # G_ij + G_ji
    assert abs(G.mean()) < 0.05
    assert np.array_equal(initial_matrices("identity", 2, 3), np.broadcast_to(np.eye(3), (2, 3, 3)))
    assert np.array_equal(initial_matrices("beta", 2, 2, beta=2.5), np.broadcast_to(2.5 * np.eye(2), (2, 2, 2)))
    with pytest.raises(ValueError, match="random generator"):
        initial_matrices("gaussian", 1, 3)
    with pytest.raises(ValueError, match="unknown initial matrix kind"):
        initial_matrices("wishart", 1, 3, rng)
    # files
    M3 = np.arange(2 * 9, dtype=float).reshape(2, 3, 3)
    np.save(tmp_path / "m.npy", M3)
    assert np.array_equal(initial_matrices("file", 2, 3, file=tmp_path / "m.npy"), M3)
    np.save(tmp_path / "one.npy", np.eye(3) * 2)
    assert np.array_equal(initial_matrices("file", 4, 3, file=tmp_path / "one.npy"), np.broadcast_to(2 * np.eye(3), (4, 3, 3)))
    np.savez(tmp_path / "k.npz", D0=M3, other=np.zeros(2))
    assert np.array_equal(initial_matrices("file", 2, 3, file=tmp_path / "k.npz"), M3)
    np.savez(tmp_path / "single.npz", whatever=M3)
    assert np.array_equal(initial_matrices("file", 2, 3, file=str(tmp_path / "single.npz")), M3)
    # bad files
    with pytest.raises(FileNotFoundError):
        initial_matrices("file", 2, 3, file=tmp_path / "nope.npy")
    with pytest.raises(ValueError, match="file path is required"):
        initial_matrices("file", 2, 3)
    with pytest.raises(ValueError, match="shape"):
        initial_matrices("file", 3, 3, file=tmp_path / "m.npy")
    np.save(tmp_path / "nan.npy", np.where(M3 == 4.0, np.nan, M3))
    with pytest.raises(ValueError, match="NaN"):
        initial_matrices("file", 2, 3, file=tmp_path / "nan.npy")
    np.savez(tmp_path / "two.npz", a=M3, b=M3)
    with pytest.raises(ValueError, match="D0"):
        initial_matrices("file", 2, 3, file=tmp_path / "two.npz")
    (tmp_path / "text.npy").write_text("not an array")
    with pytest.raises(ValueError, match="text.npy"):
        initial_matrices("file", 2, 3, file=tmp_path / "text.npy")
    np.save(tmp_path / "str.npy", np.array(["a", "b"]))
    with pytest.raises(ValueError, match="numeric"):
        initial_matrices("file", 2, 3, file=tmp_path / "str.npy")
    # through generate_weight_path; an asymmetric file is refused for gradient heads
    p = generate_weight_path(FrozenProcess(), H=4, d=3, T=0.1, dt=0.1, init="file", init_file=tmp_path / "one.npy")
    assert np.array_equal(p.D[0], np.broadcast_to(2 * np.eye(3), (4, 3, 3)))
    with pytest.raises(ValueError, match="symmetric"):
        generate_weight_path(FrozenProcess(), H=2, d=3, T=0.1, dt=0.1, init="file", init_file=tmp_path / "m.npy")


# ------------------------------------------------------------------ user drift
def test_drift_process_user_callable():
    calls = []

    def fn(D, t):
        calls.append(t)
        D[...] = 0.0  # mutating the argument must not affect the path
        return -2.0 * np.ones_like(D) * t

    D0 = np.eye(2)
    p = generate_weight_path(DriftProcess(fn), H=2, d=2, T=0.3, dt=0.1, init=D0, seed=0)
    # Euler: D_{k+1} = D_k + dt f(D_k, t_k) with f = -2 t
    expected = [D0, D0, D0 - 0.1 * 0.2, D0 - 0.1 * 0.2 - 0.1 * 0.4]
    for k in range(4):
        np.testing.assert_allclose(p.D[k], np.broadcast_to(expected[k], (2, 2, 2)), atol=1e-15)
        np.testing.assert_allclose(p.drift[k], -2.0 * 0.1 * k * np.ones((2, 2, 2)), atol=1e-15)
    assert calls == pytest.approx([0.0, 0.1, 0.2, 0.3])
    assert p.meta["process"] == "drift"
    # relaxation toward a target with noise
    q = generate_weight_path(DriftProcess(lambda D, t: 3.0 * np.eye(2) - D, sigma=0.5), H=3, d=2, T=0.2, dt=0.05, seed=1)
    np.testing.assert_allclose(q.D[1:], q.D[:-1] + 0.05 * (3 * np.eye(2) - q.D[:-1]) + q.dM, atol=1e-14)
    assert q.sigma == 0.5 and np.abs(q.dM).max() > 0
    with pytest.raises(ValueError, match="shape"):
        generate_weight_path(DriftProcess(lambda D, t: D[0]), H=2, d=2, T=0.1, dt=0.1)
    with pytest.raises(ValueError, match="non-finite"):
        generate_weight_path(DriftProcess(lambda D, t: D * np.nan), H=1, d=2, T=0.1, dt=0.1)
    with pytest.raises(ValueError, match="exact"):
        generate_weight_path(DriftProcess(lambda D, t: -D), H=1, d=2, T=0.1, dt=0.1, scheme="exact")
    with pytest.raises(TypeError, match="callable"):
        DriftProcess()


def test_print_of_a_weight_path_is_one_short_line():
    """print(path) once dumped every array (thousands of lines for a real path)."""
    path = generate_weight_path(OUProcess(), H=3, d=3, T=2.0, dt=0.01, seed=5)
    text = repr(path)
    assert text == str(path) and "\n" not in text and len(text) < 200
    assert text.startswith("WeightPath(H=3, d=3, K=200, dt=0.01, T=2, heads='gradient', sign=-1") and "seed=5" in text and "array" not in text
