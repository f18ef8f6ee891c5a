"""The implicit step that costs what it moves (issue 36): the upwind sweep against the sparse LU, the point
masses' sums by source against one sum over the whole measure, the kept cell sums, the skip bound of the
cells' sums, and one full cell sum per accepted step -- each against the previous route (``legacy``)."""

import math

import numpy as np
import pytest

import spherepde as sp
from spherepde import densities
from spherepde.attention import attention_moments
from spherepde.solvers import atoms as atoms_mod
from spherepde.solvers.atoms import _direct_few, skip_bound, skip_deltas
from spherepde.solvers.fv import face_values, fv_geometry, potential_edge_velocity, rigid_rotation_edge_velocity
from spherepde.solvers.implicit import _upwind_sweep, face_weights, implicit_upwind_step
from spherepde.solvers.integrators import ImplicitUpwind
from spherepde.solvers.mesh import MeshSolver

LEGACY = ImplicitUpwind("implicit", 1, ("mesh",), legacy=True)


@pytest.fixture(scope="module")
def geom8():
    return fv_geometry(sp.icosphere(8))


def _state(geom, seed=0):
    rng = np.random.default_rng(seed)
    phi = np.sin(3.0 * geom.nodes[:, 0]) + geom.nodes[:, 2] ** 2
    return potential_edge_velocity(geom, phi, 1.0), 1.0 + rng.random(geom.n_cells)


@pytest.mark.parametrize("h", [1e-3, 0.1, 10.0])
@pytest.mark.parametrize("order", [1, 2])
def test_upwind_sweep_is_the_lu_solution(geom8, h, order):
    """A potential velocity makes the matrix triangular: the sweep solves it exactly (round-off from the LU), positive, mass kept."""
    u, rho = _state(geom8)
    w = face_weights(geom8, rho, face_values(geom8, rho, 2)) if order == 2 else None
    lu = implicit_upwind_step(geom8, rho, u, h, weights=w, solve="lu")
    sweep = implicit_upwind_step(geom8, rho, u, h, weights=w)
    assert np.max(np.abs(sweep - lu)) <= 1e-13 * np.max(lu)
    assert np.all(sweep >= 0.0)
    assert abs(geom8.areas @ sweep - geom8.areas @ rho) <= 1e-13
    out = np.empty_like(rho)
    ones = np.ones(geom8.n_edges)
    assert _upwind_sweep(geom8.areas, rho, geom8.edge_cells.astype(np.int64), geom8.edge_lengths, u,
                         ones if w is None else w[0], ones if w is None else w[1], h, out)


def test_a_cycle_or_noise_falls_back_to_the_lu(geom8):
    """A rigid rotation's flow graph has cycles: the sweep says so and the step is the LU's, bit for bit; so with noise."""
    u = rigid_rotation_edge_velocity(geom8, [0.0, 0.0, 1.0])
    rho = _state(geom8)[1]
    out = np.empty_like(rho)
    ones = np.ones(geom8.n_edges)
    assert not _upwind_sweep(geom8.areas, rho, geom8.edge_cells.astype(np.int64), geom8.edge_lengths, u, ones, ones, 0.1, out)
    assert np.array_equal(implicit_upwind_step(geom8, rho, u, 0.1), implicit_upwind_step(geom8, rho, u, 0.1, solve="lu"))
    u2 = _state(geom8)[0]
    assert np.array_equal(implicit_upwind_step(geom8, rho, u2, 0.1, 0.05), implicit_upwind_step(geom8, rho, u2, 0.1, 0.05, solve="lu"))
    with pytest.raises(ValueError, match="solve"):
        implicit_upwind_step(geom8, rho, u2, 0.1, solve="cholesky")


# ----------------------------------------------------------------- point masses: sums by source
def frozen(beta, T, H=1):
    return sp.generate_weight_path(sp.FrozenProcess(), H=H, d=3, T=T, dt=T / 4, init="beta", beta=beta, sign=1.0)


def _with_points(mesh, cell_mass, *, beta=6.0, T=1.0, H=2, **kw):
    """Cells holding ``cell_mass`` (a vMF bump) and two point masses holding the rest."""
    rho = densities.vmf_mixture(mesh, [[0.0, 0.6, 0.8]], [20.0], [1.0])
    rho = rho * cell_mass / float(rho @ fv_geometry(mesh).areas)
    x = np.array([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    m = np.array([0.6, 0.4]) * (1.0 - cell_mass)
    return MeshSolver(mesh, rho, frozen(beta, T, H), order=1, integrator="implicit", atoms=True, point_masses=(x, m),
                      summation="direct", **kw)


def test_sums_by_source_equal_one_sum_over_the_measure():
    """Point masses summed directly, cells at the point masses directly, cells at the cells: the evaluation of
    one sum over cells and point masses together (the legacy route), to round-off."""
    mesh = sp.icosphere(6)
    new = _with_points(mesh, 0.3)
    old = _with_points(mesh, 0.3)
    old.stepper = LEGACY
    a, b = new._evaluate(new.rho, 0.0), old._evaluate(old.rho, 0.0)
    assert a.rates["skip"] is None
    assert np.max(np.abs(a.u - b.u)) <= 1e-12 * np.max(np.abs(b.u))
    assert np.max(np.abs(a.atom_v - b.atom_v)) <= 1e-12 * np.max(np.abs(b.atom_v))
    for key in ("energy", "G2", "transport", "G2_scheme"):
        assert a.rates[key] == pytest.approx(b.rates[key], rel=1e-12), key


def test_kept_cell_sums_updated_by_the_cells_that_change():
    """A few cells changed (emptied, grown): the kept sums updated by them equal the full sum; a change that removes
    most of Z_h is summed in full."""
    mesh = sp.icosphere(6)
    ms = _with_points(mesh, 0.5)
    pts, g = ms.points, ms.geom
    A = ms.path.matrices(0.0)[0]
    masses = ms.rho * g.areas
    full0 = pts.n_cell_sums
    pts._cell_sums(ms, masses, A, False)
    changed = masses.copy()
    big = np.argsort(-masses)[:3]
    changed[big] = 0.0
    changed[:4] += 1e-3
    upd = pts._cell_sums(ms, changed, A, False)
    assert pts.n_cell_sums == full0 + 1  # the update summed no cells in full
    src = np.flatnonzero(changed > 0)
    ref = attention_moments(g.nodes, g.nodes[src], changed[src], A, log=True, summation="direct")
    assert np.max(np.abs(upd[0] - ref[0])) <= 1e-12
    assert np.max(np.abs(upd[1] - ref[1])) <= 1e-12
    most = masses.copy()
    most[np.argsort(-masses)[:40]] = 0.0  # most of the bump: more than half of Z_h near it
    pts._cell_sums(ms, most, A, False)
    assert pts.n_cell_sums == full0 + 2


@pytest.mark.parametrize("cell_mass", [1e-7, 1e-5])
def test_skipped_cell_sums_stay_within_their_bound(monkeypatch, cell_mass):
    """Cells' mass m_c with 2 m_c <= SKIP_SHARE tol: their sums at the cells are skipped, the step's error estimate
    adds 2 m_c, and one step differs from the step with them by at most 2 m_c in the cells' mass, by at most
    (1/2H) sum_h m_c^2 e^{|A_h|} in energy, and the point masses only by the mass they absorbed."""
    mesh = sp.icosphere(6)
    skip = _with_points(mesh, cell_mass, dt=0.05)
    ev = skip._current()
    monkeypatch.setattr(atoms_mod, "SKIP_SHARE", 0.0)
    full = _with_points(mesh, cell_mass, dt=0.05)
    cell_mass = float(skip.rho @ skip.geom.areas)  # what absorption at the start left
    assert ev.rates["skip"][0] is None and ev.rates["skip"][1] == pytest.approx(cell_mass, rel=1e-12)
    assert skip_bound(skip.geom, ev.rates["skip"], skip.rho, 0.05) == pytest.approx(2 * cell_mass, rel=1e-12)
    assert full._current().rates["skip"] is None
    monkeypatch.undo()
    A = skip.path.matrices(0.0)[0]
    e_bound = np.mean([cell_mass**2 * math.exp(np.linalg.norm(a, 2)) for a in A]) / 2
    assert abs(ev.rates["energy"] - full._current().rates["energy"]) <= e_bound
    assert abs(ev.rates["energy"] - full._current().rates["energy"]) > 0.0  # the skipped sums were skipped
    skip.step(1.0)
    monkeypatch.setattr(atoms_mod, "SKIP_SHARE", 0.0)
    full.step(1.0)
    areas = skip.geom.areas
    assert float(np.sum(np.abs((skip.rho - full.rho) * areas))) <= 2 * cell_mass
    # the point masses move alike: only the cells' mass they absorbed can differ (by at most 2 m_c)
    assert np.max(np.abs(skip.points.x - full.points.x)) <= 1e-12 + 2 * cell_mass / np.min(full.points.m) * skip.points.spread
    assert np.max(np.abs(skip.points.m - full.points.m)) <= 2 * cell_mass


@pytest.mark.parametrize("normalised", [True, False])
def test_skip_deltas_bound_the_potential_change(normalised):
    """Leaving the cells' own sum out at a node moves the flux potential (softmax: Phi = mean log Z_h; unnormalised:
    xi = mean Z_h) by at most skip_deltas there, and the bound is not loose by orders of magnitude near the mass."""
    mesh = sp.icosphere(6)
    ms = _with_points(mesh, 0.2)
    g = ms.geom
    A = ms.path.matrices(0.0)[0]
    masses = ms.rho * g.areas
    X = np.concatenate([g.nodes, ms.points.x])
    Y = np.concatenate([g.nodes, ms.points.x])
    w = np.concatenate([masses, ms.points.m])
    full = attention_moments(g.nodes, Y[w > 0], w[w > 0], A, log=True, summation="direct")[0]
    pts = _direct_few(X, ms.points.x, ms.points.m, A, False)[0][: g.n_cells]
    delta = skip_deltas(g.nodes, A, pts, float(masses.sum()), normalised)
    if normalised:
        change = np.abs(full.mean(axis=1) - pts.mean(axis=1))
    else:
        change = np.abs(np.exp(full).mean(axis=1) - np.exp(pts).mean(axis=1))
    assert np.all(change <= delta * (1 + 1e-12))
    heavy = masses > np.quantile(masses, 0.9)
    assert np.max(change[heavy] / delta[heavy]) > 1e-3


def test_partial_skip_keeps_the_step_within_its_bound(monkeypatch):
    """Cells holding 5 % of the mass (2 m_c > SKIP_SHARE tol): the cells' sums are skipped at some cells only; one
    implicit step with those velocities differs from the step with the full sums by at most skip_bound (in mass),
    which the bound's own terms reach within a few orders of magnitude."""
    mesh = sp.icosphere(8)
    ms = _with_points(mesh, 0.05)
    ms.h_next = 0.02  # a proposed step (the skip is sized for it)
    ms.points._kept_sums, ms._cache = None, None  # the start's full sum (no step proposed then) would be reused
    ev = ms._current()
    delta, m_cells = ev.rates["skip"]
    skipped = int(np.count_nonzero(delta))
    assert 0 < skipped < ms.geom.n_cells
    monkeypatch.setattr(atoms_mod, "SKIP_SHARE", 0.0)
    full = _with_points(mesh, 0.05)
    evf = full._current()
    assert evf.rates["skip"] is None
    g = ms.geom
    m_skipped = float(np.sum((ms.rho * g.areas)[delta > 0]))
    A = ms.path.matrices(0.0)[0]
    e_bound = np.mean([m_cells * m_skipped * math.exp(np.linalg.norm(a, 2)) for a in A]) / 2
    assert 0.0 < abs(ev.rates["energy"] - evf.rates["energy"]) <= e_bound
    for h in (0.005, 0.02):
        a = implicit_upwind_step(g, ms.rho, ev.u, h)
        b = implicit_upwind_step(g, ms.rho, evf.u, h)
        diff = float(np.sum(np.abs(a - b) * g.areas))
        bound = skip_bound(g, ev.rates["skip"], a, h)
        assert 0.0 < diff <= bound
        assert bound < 2 * m_cells  # the flux bound, not the trivial one
        assert bound <= atoms_mod.SKIP_FILL * 0.1 * ms.tol * 10 * h / 0.02


def test_a_resume_with_partly_skipped_cell_sums_continues_bit_for_bit():
    """The kept cell sums cover only the cells they were summed at; the state stores those cells, so a solver restored
    from it sums the same cells again and continues like the uninterrupted one, bit for bit."""
    mesh = sp.icosphere(8)
    a = _with_points(mesh, 0.05)
    a.advance(0.1)
    assert 0 < a.points._kept_sums[4].size < a.geom.n_cells
    st = a.get_state()
    assert np.array_equal(st["cell_sums_targets"], a.points._kept_sums[4])
    a.advance(0.3)
    b = _with_points(mesh, 0.05)
    b.set_state(st)
    b.advance(0.3)
    assert a.step_count == b.step_count and np.array_equal(a.rho, b.rho) and np.array_equal(a.points.x, b.points.x)
    assert a.record() == b.record()


@pytest.mark.parametrize("share,rel", [(0.0, 1e-9), (atoms_mod.SKIP_SHARE, 1e-4)])
def test_one_full_cell_sum_per_implicit_solve(monkeypatch, share, rel):
    """Two bumps that collapse and merge: the default route sums the cells in full at most once per implicit solve
    (plus one per collapse), the legacy route at every evaluation. Their records and merge times agree to 1e-9
    while the cells' sums are not skipped (SKIP_SHARE = 0), and within the skip's effect otherwise: the remnant
    mass m_c <= SKIP_SHARE tol / 2 that the cells then move differently is absorbed elsewhere, moving a point mass
    by at most 2 m_c / m_k times the absorption radius."""
    from spherepde.solvers import integrators

    solves = {"n": 0}
    step = integrators.implicit_upwind_step

    def counted(*args, **kw):
        solves["n"] += 1
        return step(*args, **kw)

    monkeypatch.setattr(integrators, "implicit_upwind_step", counted)
    monkeypatch.setattr(atoms_mod, "SKIP_SHARE", share)
    mesh = sp.icosphere(8)
    b = [math.sin(1.2), 0.0, math.cos(1.2)]
    rho = densities.vmf_mixture(mesh, [[0.0, 0.0, 1.0], b], [200.0, 200.0], [0.5, 0.5])
    runs = {}
    for name in ("new", "legacy"):
        ms = MeshSolver(mesh, rho, frozen(8.0, 3.0), order=1, integrator="implicit", atoms=True)
        if name == "legacy":
            ms.stepper = LEGACY
        solves["n"] = 0
        n0 = ms.points.n_cell_sums
        evals = {"n": 0}
        ev = ms._evaluate

        def counted_ev(*a, _ev=ev, _c=evals, **k):
            _c["n"] += 1
            return _ev(*a, **k)

        ms._evaluate = counted_ev
        rows = []
        for t in (0.5, 1.0, 2.0, 3.0):
            ms.advance(t)
            rows.append(ms.record())
        runs[name] = (ms.points.n_cell_sums - n0, solves["n"], evals["n"], rows, ms.points.merges)
    sums, n_solves, _, rows, merges = runs["new"]
    assert len(merges) == 1 and len(runs["legacy"][4]) == 1
    assert merges[0][0] == pytest.approx(runs["legacy"][4][0][0], rel=rel)
    assert sums <= n_solves + 3
    assert runs["legacy"][0] >= 1.8 * sums
    for r, q in zip(rows, runs["legacy"][3]):
        assert r["energy"] == pytest.approx(q["energy"], rel=rel)
        assert r["n_clusters"] == q["n_clusters"]


@pytest.mark.parametrize("d", [3, 2])
@pytest.mark.parametrize("m,k", [(500, 2), (2, 500), (3, 3), (400, 8), (7, 1)])
def test_few_point_sums_are_the_direct_sums(m, k, d):
    """The sums over few sources (the compiled kernel, k <= 8) or at few targets of the point masses equal the direct
    kernels, on the sphere and on the circle, with and without Q."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(m, d))
    X /= np.linalg.norm(X, axis=1)[:, None]
    Y = rng.normal(size=(k, d))
    Y /= np.linalg.norm(Y, axis=1)[:, None]
    w = rng.random(k) + 1e-3
    A = rng.normal(size=(3, d, d)) * 4.0
    for want_q in (True, False):
        few = atoms_mod._direct_few(X, Y, w, A, want_q)
        ref = attention_moments(X, Y, w, A, want_q=want_q, log=True, summation="direct")
        assert (few[2] is None) == (not want_q)
        for a, b in zip(few, ref):
            if a is not None:
                assert a.shape == b.shape
                assert np.max(np.abs(a - b)) <= 1e-12 * max(1.0, np.max(np.abs(b)))


# ----------------------------------------------------------------- first same as last, one evaluation per step
@pytest.mark.parametrize("atoms", [False, True])
def test_implicit_step_starts_from_the_last_steps_evaluation(atoms):
    """Before any point mass exists (a uniform-ish start, no collapse), a fixed-dt implicit step evaluates its state
    once: the end state's evaluation (the error estimate's) is the next step's start (first same as last), so n steps
    cost n + 1 evaluations, and the cells are summed in full once per evaluation, no more."""
    from spherepde.solvers import fv

    mesh = sp.icosphere(6)
    rng = np.random.default_rng(3)
    rho = 1.0 + 0.05 * rng.standard_normal(mesh.n_cells)
    ms = MeshSolver(mesh, rho, frozen(1.0, 1.0, H=2), order=1, integrator="implicit", atoms=atoms, dt=0.05, summation="fast")
    calls = {"ev": 0, "cells": 0}
    ev, cf = ms._evaluate, fv.cell_fields

    def counted_ev(*a, **k):
        calls["ev"] += 1
        return ev(*a, **k)

    def counted_cf(*a, **k):
        calls["cells"] += 1
        return cf(*a, **k)

    import spherepde.solvers.head_rates as mesh_mod  # the mesh solver's per-cell route calls cell_fields from there

    ms._evaluate = counted_ev
    orig = mesh_mod.cell_fields
    mesh_mod.cell_fields = counted_cf
    try:
        ms._cache = None
        ms.advance(0.5)
    finally:
        mesh_mod.cell_fields = orig
    assert len(ms.points.m) == 0
    assert ms.step_count == 10
    assert calls["ev"] == ms.step_count + 1  # the first state's evaluation, then one per step
    assert calls["cells"] == calls["ev"]


@pytest.mark.parametrize("atoms", [False, True])
def test_scheme_g2_read_later_is_the_same_bits(atoms):
    """An evaluation's G2_scheme, computed when first read (fv.with_scheme_g2), equals the scheme_g2 computed at once
    (the legacy route's) bit for bit, through [] and get alike; a missing key still raises."""
    from spherepde.solvers.fv import fv_rhs, scheme_g2

    mesh = sp.icosphere(6)
    if atoms:
        lazy, now = _with_points(mesh, 0.3), _with_points(mesh, 0.3)
    else:
        rho = densities.vmf_mixture(mesh, [[0.0, 0.6, 0.8]], [5.0], [1.0])
        lazy = MeshSolver(mesh, rho, frozen(4.0, 1.0, H=2), order=2, integrator="implicit")
        now = MeshSolver(mesh, rho, frozen(4.0, 1.0, H=2), order=2, integrator="implicit")
    now.stepper = LEGACY
    a, b = lazy._evaluate(lazy.rho, 0.0), now._evaluate(now.rho, 0.0)
    assert "G2_scheme" in b.rates and "G2_scheme" not in a.rates  # not computed until read
    g = lazy.geom
    flux = np.empty(g.n_edges)
    fv_rhs(g, face_values(g, lazy.rho, 1 if atoms else 2), a.u, flux=flux)
    ref = scheme_g2(g, a.rates["logZ"], a.u, flux) + (a.rates["G2_atoms"] if atoms else 0.0)
    assert a.rates.get("G2_scheme") == ref == a.rates["G2_scheme"]
    if not atoms:  # the same evaluation on the legacy route, which computes it at once
        assert b.rates["G2_scheme"] == ref
    with pytest.raises(KeyError):
        a.rates["no such rate"]
    assert a.rates.get("no such rate", 7) == 7
