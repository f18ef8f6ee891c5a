"""The fast sums' degree stopped a posteriori (spherepde.attention.adaptive): the same error statement
as the a-priori degree, checked against direct summation; fewer degrees where the density allows it.

Accuracy only -- speed is measured by ``spherepde.studies.bench_h100`` and never asserted here.
"""

from __future__ import annotations

import numba
import numpy as np
import pytest
from conftest import unit_vectors

from spherepde.attention import adaptive as ad
from spherepde.attention import attention_moments
from spherepde.attention import harmonic as fs
from spherepde.geometry.meshfiles import icosphere
from spherepde.solvers import fv


@pytest.fixture(autouse=True)
def _fresh_log_once():
    fs._LOGGED.clear()
    yield
    fs._LOGGED.clear()


def _rand_A(rng, H, norms):
    A = rng.standard_normal((H, 3, 3))
    return A * (np.broadcast_to(norms, (H,)) / np.linalg.norm(A, ord=2, axis=(1, 2)))[:, None, None]


def _mesh_case(kind, seed=0, level=12):
    rng = np.random.default_rng(seed)
    g = fv.fv_geometry(icosphere(level))
    X = np.ascontiguousarray(g.nodes)
    if kind == "uniform":
        rho = np.ones(len(X))
    elif kind == "vmf":  # two bumps plus a floor
        mu = unit_vectors(rng, 2)
        rho = np.exp(8.0 * (X @ mu[0] - 1)) + 0.5 * np.exp(20.0 * (X @ mu[1] - 1)) + 1e-3
    else:  # almost all mass in a few cells
        rho = np.exp(400.0 * (X @ unit_vectors(rng, 1)[0] - 1))
    w = g.areas * rho
    return X, w / w.sum(), rng


def test_tail_table_is_the_tail_bound():
    """Row kq of the table: T_L(kq / 64) of :func:`harmonic.tail_bound` (an upper bound), to round-off."""
    tab = ad.tail_table(700, fs.L_MAX)
    for kq in (0, 1, 37, 64, 300, 699):
        for L in (0, 1, 5, 20, 40, 64):
            ref = fs.tail_bound(kq / 64.0, L)
            assert tab[kq, L] >= ref * (1 - 1e-13)
            assert tab[kq, L] <= ref * (1 + 1e-9) + 1e-300


def test_legendre_rows_are_the_full_recurrence():
    rng = np.random.default_rng(1)
    z = rng.uniform(-1.0, 1.0, fs._P)
    L = 30
    tabs = fs._legendre_tables(L)
    q = np.zeros((L + 1, L + 1, fs._P))
    fs._legendre_v(z, L, *tabs, q)
    rows = np.zeros((3, L + 1, fs._P))
    for l in range(L + 1):
        ad._legendre_row(z, l, *tabs, rows[l % 3], rows[(l + 2) % 3], rows[(l + 1) % 3])
        np.testing.assert_array_equal(rows[l % 3][: l + 1], q[l, : l + 1])


@pytest.mark.parametrize("kind", ["uniform", "vmf", "point"])
@pytest.mark.parametrize("tol", [1e-6, 1e-10])
def test_adaptive_meets_the_tolerance_against_direct(kind, tol):
    """Relative error of Z and errors of Y/Z, Q/Z within tol (Z) and tol_m (moments) of the direct sums."""
    X, w, rng = _mesh_case(kind, seed=hash((kind, tol)) % 2**32)
    A = _rand_A(rng, 4, [0.5, 2.0, 4.0, 6.0])
    tol_m = 100 * tol
    Zd, Md, Qd = attention_moments(X, X, w, A, want_q=True, summation="direct")
    Zf, Mf, Qf = attention_moments(X, X, w, A, want_q=True, summation="fast", tol=tol, tol_moments=tol_m, degree_rule="adaptive")
    assert np.max(np.abs(Zf / Zd - 1)) <= tol
    assert np.max(np.linalg.norm(Mf / Zf[..., None] - Md / Zd[..., None], axis=-1)) <= tol_m
    assert np.max(np.abs(Qf / Zf - Qd / Zd)) <= tol_m


def test_adaptive_stops_no_later_than_the_a_priori_degree_and_earlier_on_spread_mass():
    X, w, rng = _mesh_case("vmf", seed=3)
    A = _rand_A(rng, 6, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    tol, tol_m = 1e-10, 1e-6
    *_, info = fs.moments(X, X, w, A, want_q=True, tol=tol, tol_moments=tol_m, log_form=True, degree_rule="adaptive")
    d = info.block_degrees
    C = fs.kappa_max(X, A)
    deg_z, _ = fs.degree_table(float(C.max()), tol)
    # the a-priori degree of each block: the table at the block's largest kappa
    kap = np.stack([np.linalg.norm(X @ A[h], axis=1) for h in range(A.shape[0])], axis=1)
    nb = d.shape[0]
    kb = np.array([kap[i * fs._P:(i + 1) * fs._P].max(axis=0) for i in range(nb)])
    top = deg_z[np.minimum(np.ceil(kb * 64.0).astype(int), len(deg_z) - 1)]
    assert np.all(d[..., 0] <= top) and np.all(d[..., 1] <= d[..., 0])
    assert d[..., 0].mean() < top.mean() - 0.5  # the point of the rule
    assert info.n_rechecked == 0


def test_adaptive_and_a_priori_agree_to_the_tolerance():
    X, w, rng = _mesh_case("vmf", seed=4)
    A = _rand_A(rng, 3, [2.0, 4.0, 6.0])
    a = fs.moments(X, X, w, A, want_q=True, tol=1e-10, tol_moments=1e-6, log_form=True, degree_rule="adaptive")
    b = fs.moments(X, X, w, A, want_q=True, tol=1e-10, tol_moments=1e-6, log_form=True, degree_rule="a-priori")
    assert b[4].block_degrees is None
    np.testing.assert_array_equal(a[0], b[0])  # kappa
    assert np.max(np.abs(a[1] - b[1])) <= 1e-10
    assert np.max(np.abs(a[2] - b[2])) <= 2e-6 and np.max(np.abs(a[3] - b[3])) <= 2e-6


def test_too_small_tails_would_break_the_tolerance(monkeypatch):
    """The stop is load-bearing: with tails 1e8 times too small the blocks stop too early and the error
    exceeds tol (so the agreement tests above would catch a wrong bound)."""
    X, w, rng = _mesh_case("vmf", seed=5)
    A = _rand_A(rng, 2, [4.0, 6.0])
    tol = 1e-8
    Zd, _, _ = attention_moments(X, X, w, A, summation="direct")
    good = attention_moments(X, X, w, A, summation="fast", tol=tol, degree_rule="adaptive")[0]
    real = ad.tail_table
    monkeypatch.setattr(ad, "tail_table", lambda nq, l_max: real(nq, l_max) * 1e-8)
    bad = attention_moments(X, X, w, A, summation="fast", tol=tol, degree_rule="adaptive")[0]
    assert np.max(np.abs(good / Zd - 1)) <= tol < np.max(np.abs(bad / Zd - 1))


def test_adaptive_concentrated_mass_is_rechecked():
    """Mass at one point, targets at its antipode: those targets fail at every degree and are summed directly."""
    X, w, rng = _mesh_case("point", seed=6)
    A = 8.0 * np.eye(3)[None]
    Zd, Md, _ = attention_moments(X, X, w, A, summation="direct")
    *_, info = fs.moments(X, X, w, A, tol=1e-10, degree_rule="adaptive")
    Zf, Mf, _ = attention_moments(X, X, w, A, summation="fast", tol=1e-10, degree_rule="adaptive")
    assert info.n_rechecked > 0
    assert np.max(np.abs(Zf / Zd - 1)) <= 1e-10


def test_adaptive_thread_count_does_not_change_the_result():
    X, w, rng = _mesh_case("vmf", seed=7)
    A = _rand_A(rng, 2, 4.0)
    n0 = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        a = fs.moments(X, X, w, A, want_q=True, degree_rule="adaptive")
        numba.set_num_threads(n0)
        b = fs.moments(X, X, w, A, want_q=True, degree_rule="adaptive")
    finally:
        numba.set_num_threads(n0)
    for u, v in zip(a[:4], b[:4]):
        np.testing.assert_array_equal(u, v)


def test_unknown_degree_rule():
    X, w, _ = _mesh_case("uniform", level=4)
    with pytest.raises(ValueError, match="degree_rule"):
        fs.moments(X, X, w, np.eye(3)[None], degree_rule="sometimes")


def test_moment_tolerances_by_mass():
    """tol_m,i = min(cap, tol_m max(1, mbar / m_i)): tol_m at heavy targets, the cap where there is no mass, and the
    mass-weighted mean at most 2 tol_m."""
    m = np.array([0.0, 1e-30, 1e-3, 1.0, 5.0, 10.0])
    t = fs._moment_tolerances(1e-6, len(m), m)
    mbar = m.mean()
    assert t[0] == fs.MOMENTS_TOL_CAP and t[1] == fs.MOMENTS_TOL_CAP
    assert t[3] == pytest.approx(1e-6 * mbar / 1.0) and t[5] == 1e-6
    assert np.all(t >= 1e-6) and np.sum(m * t) <= 2e-6 * m.sum()
    np.testing.assert_array_equal(fs._moment_tolerances(1e-6, 3, None), np.full(3, 1e-6))
    with pytest.raises(ValueError, match="target_masses"):
        fs._moment_tolerances(1e-6, 3, np.array([1.0, -1.0, 0.0]))


def test_moments_by_mass_keep_z_and_the_mass_weighted_moments():
    """With target masses: Z as without (its tolerance is untouched), the moments within their per-target
    tolerance of the direct sums, and fewer moment degrees where the mass is small."""
    X, w, rng = _mesh_case("vmf", seed=8)
    A = _rand_A(rng, 3, [2.0, 4.0, 6.0])
    tol, tol_m = 1e-10, 1e-6
    Zd, Md, Qd = attention_moments(X, X, w, A, want_q=True, summation="direct")
    plain = fs.moments(X, X, w, A, want_q=True, tol=tol, tol_moments=tol_m, log_form=True)
    mass = fs.moments(X, X, w, A, want_q=True, tol=tol, tol_moments=tol_m, log_form=True, target_masses=w)
    np.testing.assert_array_equal(mass[4].block_degrees[..., 0], plain[4].block_degrees[..., 0])
    assert np.max(np.abs(mass[1] - np.log(Zd))) <= tol
    assert mass[4].block_degrees[..., 1].mean() < plain[4].block_degrees[..., 1].mean()
    tm = fs._moment_tolerances(tol_m, len(w), w)[:, None]
    assert np.all(np.linalg.norm(mass[2] - Md / Zd[..., None], axis=-1) <= tm)
    assert np.all(np.abs(mass[3] - Qd / Zd) <= tm)
    err = np.linalg.norm(mass[2] - Md / Zd[..., None], axis=-1).max(axis=1)
    assert np.sum(w * err) <= 2 * tol_m * w.sum()
