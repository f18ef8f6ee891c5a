"""The skip of the cells' sums at the cells (spherepde.solvers.atoms: skip_deltas, skip_bound; docs/model.md §4.10)
checked adversarially: the step bound for any potential error within delta (orders 1 and 2), delta against the sums
for non-symmetric heads, both attention kinds and the circle, one solver step with a forced partial skip, and the
checkpoints (tampered kept-sum cells ignored, old checkpoints, bit-for-bit resumes at many times)."""

import math
import warnings

import numpy as np
import pytest

import spherepde as sp
from spherepde import densities
from spherepde.geometry import circle_densities as cd
from spherepde.geometry.circle import uniform_circle
from spherepde.geometry.protocol import geometry_of
from spherepde.solvers import atoms as atoms_mod
from spherepde.solvers.atoms import _direct_few, skip_bound, skip_deltas
from spherepde.solvers.fv import face_values, fv_geometry, potential_edge_velocity
from spherepde.solvers.implicit import face_weights, implicit_upwind_step
from spherepde.solvers.mesh import MeshSolver


@pytest.fixture(scope="module")
def geom5():
    return fv_geometry(sp.icosphere(5))


@pytest.mark.parametrize("order", [1, 2])
def test_skip_bound_holds_for_any_potential_error_within_delta(geom5, order):
    """Potentials off by at most delta (random and adversarial signs, either sign s): one implicit step differs from
    the exact one by at most skip_bound in C-weighted L1 (rho the END state of the perturbed step; order 2: the frozen
    face weights, some below 1), and the bound is nearly reached (it is not loose by design)."""
    g = geom5
    rng = np.random.default_rng(7)
    worst = 0.0
    for trial in range(40):
        phi = rng.uniform(0.1, 5.0) * (g.nodes @ rng.standard_normal(3)) + rng.uniform(0, 2) * np.sin(4 * rng.uniform(0.5, 2) * g.nodes[:, 0])
        rho = np.exp(rng.uniform(0, 6) * g.nodes @ rng.standard_normal(3) / 1.7) * (rng.random(g.n_cells) < rng.uniform(0.3, 1))
        w = face_weights(g, rho, face_values(g, rho, 2)) if order == 2 else None
        if w is not None:
            assert np.min(np.concatenate(w)) < 1.0 < np.max(np.concatenate(w))
        delta = rng.uniform(0, 1, g.n_cells) * (rng.random(g.n_cells) < 0.5) * rng.uniform(1e-4, 1)
        signs = rng.choice([-1.0, 1.0], g.n_cells) if trial % 3 else np.sign(phi - phi.mean())
        s = float(rng.choice([-1.0, 1.0]))
        h = 10 ** rng.uniform(-3, 1)
        a = implicit_upwind_step(g, rho, potential_edge_velocity(g, phi + signs * delta, s), h, weights=w)
        b = implicit_upwind_step(g, rho, potential_edge_velocity(g, phi, s), h, weights=w)
        diff = float(np.sum(np.abs(a - b) * g.areas))
        bound = skip_bound(g, (delta, float(rho @ g.areas)), a, h, w)
        assert diff <= bound * (1 + 1e-12) + 1e-15
        worst = max(worst, diff / bound)
    assert worst > 0.5  # measured 0.96 (order 1 and 2 together)


@pytest.mark.parametrize("normalised", [True, False])
@pytest.mark.parametrize("d", [2, 3])
def test_skip_deltas_bound_the_potential_for_non_symmetric_heads(normalised, d):
    """delta bounds the change of the flux potential when the cells' sum is left out, for three non-symmetric heads
    (x^T A_h y: |A_h^T x|, not |A_h x|, is the right bound), random cells and point masses, on the sphere and the circle."""
    rng = np.random.default_rng(3 + d)
    X = rng.standard_normal((300, d))
    X /= np.linalg.norm(X, axis=1)[:, None]
    P = rng.standard_normal((3, d))
    P /= np.linalg.norm(P, axis=1)[:, None]
    A = 2.0 * rng.standard_normal((3, d, d)) + np.diag(rng.uniform(0, 4, d))
    masses = rng.random(300) * (rng.random(300) < 0.7) * 0.3 / 300
    pts = _direct_few(X, P, np.array([0.4, 0.2, 0.1]), A, False)[0]
    cells = _direct_few(X, X[masses > 0], masses[masses > 0], A, False)[0]
    full = np.logaddexp(pts, cells)
    delta = skip_deltas(X, A, pts, float(masses.sum()), normalised)
    if normalised:
        change = full.mean(axis=1) - pts.mean(axis=1)
    else:
        change = np.exp(full).mean(axis=1) - np.exp(pts).mean(axis=1)
    assert np.all(change >= 0.0) and np.all(change <= delta * (1 + 1e-12))
    assert np.max(change / delta) > 0.05


def _solver(mesh, attn, order, cell_mass, seed, **kw):
    """Cells holding ``cell_mass`` (two vMF bumps) and three point masses, three gaussian (symmetric) heads."""
    geo = geometry_of(mesh)
    rng = np.random.default_rng(seed)
    d = geo.d
    path = sp.generate_weight_path(sp.FrozenProcess(), H=3, d=d, T=1.0, dt=0.25, init="gaussian", seed=seed, sign=float(rng.choice([-1, 1])))
    if d == 3:
        c = rng.standard_normal((2, 3))
        rho = densities.vmf_mixture(mesh, c / np.linalg.norm(c, axis=1)[:, None], [20.0, 5.0], [0.5, 0.5])
    else:
        rho = cd.vmf_mixture(mesh, list(rng.uniform(0, 2 * math.pi, 2)), [20.0, 5.0])
    rho = rho + 0.05 * rng.random(geo.n_cells)
    rho = rho * cell_mass / float(rho @ geo.areas)
    x = rng.standard_normal((3, d))
    m = rng.dirichlet([1.0, 1.0, 1.0]) * (1.0 - float(rho @ geo.areas))
    return MeshSolver(mesh, rho, path, order=order, integrator="implicit", atoms=True, point_masses=(x / np.linalg.norm(x, axis=1)[:, None], m),
                      attention=attn, summation="direct", **kw)


@pytest.mark.parametrize("circle", [False, True])
@pytest.mark.parametrize("order", [1, 2])
@pytest.mark.parametrize("attn", ["softmax", "unnormalised"])
def test_forced_partial_skip_keeps_one_step_within_skip_bound(monkeypatch, attn, order, circle):
    """The solver's own evaluation with the cells' sums skipped at a random half of the cells (whatever _skipped would
    choose): one implicit step (order 2: with its frozen face weights) differs from the step with every sum by at most
    skip_bound of that evaluation, for both attention kinds, three heads, on the sphere and on the circle."""
    mesh = uniform_circle(256) if circle else sp.icosphere(5)
    for seed in range(2):
        for cell_mass in (0.05, 0.4):
            rng = np.random.default_rng(100 + seed)
            monkeypatch.setattr(atoms_mod.PointMasses, "_skipped", lambda self, ms, masses, delta: rng.random(masses.size) < 0.5)
            ms = _solver(mesh, attn, order, cell_mass, seed)
            ev = ms._current()
            monkeypatch.undo()
            delta, m_cells = ev.rates["skip"]
            assert 0 < np.count_nonzero(delta) < ms.geom.n_cells
            monkeypatch.setattr(atoms_mod, "SKIP_SHARE", 0.0)
            evf = _solver(mesh, attn, order, cell_mass, seed)._current()
            monkeypatch.undo()
            assert evf.rates["skip"] is None
            g = ms.geom
            w = face_weights(g, ms.rho, face_values(g, ms.rho, 2)) if order == 2 else None
            flux_bound = False
            for h in (1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 0.1):
                a = implicit_upwind_step(g, ms.rho, ev.u, h, weights=w)
                b = implicit_upwind_step(g, ms.rho, evf.u, h, weights=w)
                diff = float(np.sum(np.abs(a - b) * g.areas))
                bound = skip_bound(g, ev.rates["skip"], a, h, w)
                assert 0.0 < diff <= bound
                flux_bound |= bound < 2.0 * m_cells
            assert flux_bound  # the small steps test the flux bound, not only 2 m_c


def _tamper_run(mesh, value):
    a = _solver(mesh, "unnormalised", 1, 0.05, 0)
    a.advance(0.1)
    assert 0 < a.points._kept_sums[4].size < a.geom.n_cells
    st = a.get_state()
    if isinstance(value, str) and value == "missing":
        del st["cell_sums_targets"]
    else:
        st["cell_sums_targets"] = value
    a.advance(0.2)
    b = _solver(mesh, "unnormalised", 1, 0.05, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        b.set_state(st)
        b.advance(0.2)
    return a, b


@pytest.mark.parametrize("name", ["unsorted", "out of range", "negative", "repeated", "fractional", "nan", "inf", "huge", "text", "none",
                                  "object", "empty", "bool"])
def test_a_tampered_kept_sums_cells_entry_is_ignored(name):
    """A checkpoint whose cell_sums_targets is not a sorted set of cell indices (unsorted, out of range, repeated, not
    integers, NaN, text, None) resumes without an error or a warning: the kept sums are summed anew; the run stays
    within the skip's tolerance share of the uninterrupted one."""
    mesh = sp.icosphere(5)
    nc = fv_geometry(mesh).n_cells
    t = np.arange(0, nc, 3)
    value = {"unsorted": t[::-1].copy(), "out of range": np.append(t, nc + 5), "negative": np.insert(t, 0, -1), "repeated": np.repeat(t, 2),
             "fractional": t + 0.5, "nan": np.full(t.size, np.nan), "inf": np.full(3, np.inf), "huge": np.array([1e30]),
             "text": np.array(["a", "b"]), "none": None, "object": np.array([object()], dtype=object), "empty": np.zeros(0, dtype=np.int64),
             "bool": np.ones(nc, dtype=bool)}[name]
    a, b = _tamper_run(mesh, value)
    assert b.t == a.t and np.all(np.isfinite(b.rho))
    assert float(np.sum(np.abs(a.rho - b.rho) * a.geom.areas)) <= 10 * a.tol


def test_an_old_checkpoint_without_kept_sums_cells_resumes():
    """Checkpoints written before the kept sums had cells kept them at every cell: such a state resumes (the kept sums
    at every cell) and stays close to the uninterrupted run."""
    a, b = _tamper_run(sp.icosphere(5), "missing")
    assert b.t == a.t and float(np.sum(np.abs(a.rho - b.rho) * a.geom.areas)) <= 10 * a.tol


@pytest.mark.parametrize("attn,order,cell_mass", [("softmax", 2, 0.05), ("unnormalised", 1, 0.05), ("unnormalised", 2, 0.1), ("softmax", 1, 0.02)])
def test_resumes_with_partly_skipped_cell_sums_are_bit_for_bit_at_many_times(attn, order, cell_mass):
    """Cut at several times, a run whose cells' sums are skipped at some cells resumes bit for bit: the restored solver
    must choose the skipped cells as the uninterrupted one did, which reuses its kept sums' cells (before the fix the
    restored solver chose them before it had summed its kept sums again, and chose others)."""
    mesh = sp.icosphere(6)
    for t_cut in (0.01, 0.1, 0.16, 0.25):
        a = _solver(mesh, attn, order, cell_mass, 3)
        a.advance(t_cut)
        st = a.get_state()
        a.advance(0.3)
        b = _solver(mesh, attn, order, cell_mass, 3)
        b.set_state(st)
        b.advance(0.3)
        assert a.step_count == b.step_count and np.array_equal(a.rho, b.rho) and np.array_equal(a.points.x, b.points.x), (t_cut, a.step_count, b.step_count)
        assert a.record() == b.record()
