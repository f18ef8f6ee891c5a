"""The finite-volume mesh solver (spherepde.solvers.mesh) and the explicit steppers.

Measured values quoted in comments come from the same set-ups (2-core machine).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import spherical_in

from spherepde.geometry import densities as dens
from spherepde.geometry.meshfiles import icosphere
from spherepde.model.columns import ENERGY_COLUMNS, MESH_COLUMNS, PARTICLE_COLUMNS
from spherepde.model.weights import FrozenProcess, OUProcess, generate_weight_path
from spherepde.solvers import fv
from spherepde.solvers.integrators import STEPPERS, ExplicitScheme, OptionError, get_stepper
from spherepde.solvers.mesh import CFLViolation, MeshSolver, PositivityError, SolverError

MEANS = [[0.0, 0.0, 1.0], [1.0, 0.0, 0.2]]


def frozen_path(beta=2.0, sign=-1.0, T=1.0, dt=0.05, H=1):
    return generate_weight_path(FrozenProcess(), H=H, d=3, T=T, dt=dt, init="beta", beta=beta, sign=sign)


# ------------------------------------------------------------------ integrators
EXPLICIT = STEPPERS.names(where=lambda e: isinstance(e.obj, ExplicitScheme))


def _shu_osher_solve(scheme: ExplicitScheme, f, y0, T, n):
    h = T / n
    y, t = y0, 0.0
    for _ in range(n):
        U, L = [y], [f(t, y)]
        for i in range(1, scheme.stages + 1):
            new = sum(a * U[j] + b * h * L[j] for j, (a, b) in enumerate(zip(scheme.alpha[i - 1], scheme.beta[i - 1])))
            if i < scheme.stages:
                U.append(new)
                L.append(f(t + scheme.c[i] * h, new))
        y, t = new, t + h
    return y


@pytest.mark.parametrize("name", EXPLICIT)
def test_integrator_data_consistent_and_of_its_order(name):
    sch = get_stepper(name, "mesh")
    _A, b, c = sch.butcher()
    np.testing.assert_allclose(b, sch.b, atol=1e-15)
    np.testing.assert_allclose(c, sch.c, atol=1e-15)
    assert sum(sch.b) == pytest.approx(1.0)
    for row in sch.alpha:
        assert sum(row) == pytest.approx(1.0)  # Shu--Osher rows are convex combinations
    assert all(x >= 0 for row in sch.alpha + sch.beta for x in row)  # SSP
    # order on a non-autonomous problem y' = cos(t) y, y = exp(sin t)
    f = lambda t, y: math.cos(t) * y
    errs = [abs(_shu_osher_solve(sch, f, 1.0, 2.0, n) - math.exp(math.sin(2.0))) for n in (20, 40, 80)]
    order = np.log2(errs[1] / errs[2])
    assert abs(order - sch.order) < 0.2, (name, errs)


def test_get_stepper_error_lists_names():
    with pytest.raises(OptionError, match="'euler', 'heun', 'ssprk2', 'ssprk3', 'implicit'"):
        get_stepper("rk4", "mesh")
    assert get_stepper(STEPPERS.get("ssprk3"), "mesh") is STEPPERS.get("ssprk3")


@pytest.mark.parametrize("name", EXPLICIT)
@pytest.mark.parametrize("order", [1, 2])
def test_solver_step_equals_butcher_form(name, order):
    """One solver step with a time-dependent prescribed velocity equals the Butcher form u + dt sum b_j L(U_j, t + c_j dt)."""
    mesh = icosphere(4)
    g = fv.fv_geometry(mesh)
    u0 = fv.rigid_rotation_edge_velocity(mesh, [0.3, 0.5, 1.0])
    u1 = np.random.default_rng(0).standard_normal(mesh.n_edges) * 0.3
    field = lambda t: (1 + 3 * t) * u0 + math.sin(5 * t) * u1
    rho0 = dens.vmf_mixture(mesh, MEANS, [3.0, 8.0])
    path = frozen_path(T=1.0, dt=1.0)
    dt = 0.02
    s = MeshSolver(mesh, rho0, path, order=order, integrator=name, dt=dt, velocity_field=field)
    s.step(1.0)
    A, b, c = s.stepper.butcher()
    L = []
    for i in range(s.stepper.stages):
        Ui = rho0 + dt * sum(A[i, j] * L[j] for j in range(i))
        L.append(fv.fv_rhs(g, fv.face_values(g, Ui, order), field(c[i] * dt)))
    expected = rho0 + dt * sum(bj * Lj for bj, Lj in zip(b, L))
    np.testing.assert_allclose(s.rho, expected, rtol=1e-12, atol=1e-14)
    assert s.t == dt and s.dt_last == dt


# ------------------------------------------------------------ invariants
@pytest.mark.parametrize("order", [1, 2])
def test_mass_and_positivity_over_1000_steps_clustering_flow(order):
    """s = +1, D = 10 I (clustering), CFL number 1: rho >= 0 every step, mass drift <= 1e-12."""
    mesh = icosphere(3)
    rho0 = dens.vmf_mixture(mesh, MEANS, [4.0, 4.0], [0.6, 0.4])
    path = frozen_path(beta=10.0, sign=1.0, T=100.0, dt=1.0)
    s = MeshSolver(mesh, rho0, path, order=order, cfl=1.0)
    for _ in range(1000):
        s.step(path.T)
        assert s.rho.min() >= -1e-14 * s.rho.max()
    assert abs(np.sum(s.rho * mesh.areas) - 1.0) <= 1e-12
    assert s.rho.max() > 20 * rho0.max()  # it did cluster
    assert s.record()["mean_resultant"] > 0.5


def test_steps_land_on_grid_points_and_t_stop():
    mesh = icosphere(3)
    path = frozen_path(beta=4.0, sign=1.0, T=1.0, dt=0.1)
    s = MeshSolver(mesh, dens.vmf_mixture(mesh, MEANS, [2.0, 3.0]), path, cfl=1.0)
    times = []
    while s.t < 0.55:
        s.step(0.55)
        times.append(s.t)
    assert times[-1] == 0.55
    for k in range(1, 6):
        assert any(t == k * 0.1 for t in times), k  # exact grid points
    grid = np.arange(11) * 0.1
    for t0, t1 in zip([0.0] + times[:-1], times):
        assert not np.any((grid > t0 + 1e-12) & (grid < t1 - 1e-12))  # never crosses a grid point
    s.advance(0.8)
    assert s.t == 0.8


# ------------------------------------------------------------------- accuracy
def test_uniform_energy_converges():
    """E(uniform) -> sinh(beta) / (2 beta); measured errors ~ 5.9e-7, 3.7e-8, 2.3e-9 (order 4, by symmetry)."""
    beta = 2.0
    exact = math.sinh(beta) / (2 * beta)
    hs, errs = [], []
    for n in (4, 8, 16):
        mesh = icosphere(n)
        s = MeshSolver(mesh, dens.uniform(mesh), frozen_path(beta=beta))
        hs.append(mesh.h)
        errs.append(abs(s.record()["energy"] - exact))
    slope = np.polyfit(np.log(hs), np.log(errs), 1)[0]
    assert slope >= 1.8, (slope, errs)
    assert errs[-1] < 1e-7


def test_vmf_energy_second_order():
    """E of a vMF(kappa = 4) density with D = 2 I vs the Funk--Hecke series; measured order 2.0."""
    beta, kappa = 2.0, 4.0
    L = np.arange(60)
    exact = 0.5 * np.sum((2 * L + 1) * (spherical_in(L, kappa) / spherical_in(0, kappa)) ** 2 * spherical_in(L, beta))
    mu = [0.3, -0.5, 0.8]
    hs, errs = [], []
    for n in (4, 8, 16):
        mesh = icosphere(n)
        s = MeshSolver(mesh, dens.vmf_mixture(mesh, [mu], [kappa]), frozen_path(beta=beta))
        hs.append(mesh.h)
        errs.append(abs(s.record()["energy"] - exact))
    slope = np.polyfit(np.log(hs), np.log(errs), 1)[0]
    assert 1.7 <= slope <= 2.5, (slope, errs)


MODES = [(1, 0), (2, 1), (3, -2), (4, 3)]


def _growth_rate_errors(level, heads, c, velocity, beta=2.0, eps=1e-4, T=0.1, pdt=0.025):
    """Relative errors of the fitted growth rates of eps Y_lm about the uniform state.

    Linearising about rho = 1/(4 pi) with one head A = beta I, V = c I gives
    d_t a_lm = gamma_l a_lm with gamma_l = (c / beta) l (l+1) i_l(beta) / i_0(beta)
    (v = (c/beta) grad_S log Z since grad_S Z = beta P_x Y; Funk--Hecke gives
    Z = i_0 + eps i_l Y_lm). docs/model.md §3 writes c l(l+1) i_l/i_0, which drops the
    1/beta (equal only for beta = 1); the measured rates agree with the formula here.
    """
    mesh = icosphere(level)
    f = lambda X: (1 + eps * sum(dens.real_sph_harm(l, m, X) for l, m in MODES)) / (4 * np.pi)
    rho0 = dens.normalise(mesh, dens.cell_average(mesh, f, subdivisions=2))
    proj = np.array([dens.cell_average(mesh, lambda X, l=l, m=m: dens.real_sph_harm(l, m, X), subdivisions=2) * mesh.areas for l, m in MODES])
    if heads == "gradient":
        path = generate_weight_path(FrozenProcess(), H=1, d=3, T=T, dt=pdt, init="beta", beta=beta, sign=np.sign(c))
        assert np.allclose(path.V[0], c * np.eye(3))
    else:
        path = generate_weight_path(FrozenProcess(), H=1, d=3, T=T, dt=pdt, init="beta", beta=beta, heads="general", value_init=c * np.eye(3))
    s = MeshSolver(mesh, rho0, path, velocity=velocity)
    ts, amps = [0.0], [proj @ s.rho]
    while s.t < T:
        s.step(T)
        ts.append(s.t)
        amps.append(proj @ s.rho)
    amps = np.array(amps)
    rates = np.array([np.polyfit(ts, np.log(np.abs(amps[:, i])), 1)[0] for i in range(len(MODES))])
    gamma = np.array([(c / beta) * l * (l + 1) * spherical_in(l, beta) / spherical_in(0, beta) for l, _ in MODES])
    return np.abs(rates - gamma) / np.abs(gamma)


def test_linear_growth_rates_gradient_heads_potential_form():
    # measured relative errors (l = 1..4): level 6: 2.3e-3 8.1e-3 1.0e-2 2.6e-3;
    # level 12: 5.8e-4 2.0e-3 2.6e-3 8.9e-4 (second order in h); level 16: 3.3e-4 1.1e-3 1.5e-3 5.1e-4
    e6 = _growth_rate_errors(6, "gradient", 2.0, "potential")
    e12 = _growth_rate_errors(12, "gradient", 2.0, "potential")
    assert np.all(e12 < e6 / 2.5), (e6, e12)
    assert np.all(e12 < 4e-3), e12


def test_linear_decay_rates_general_heads_midpoint_form():
    # A = 2 I, V = -I (decay); measured relative errors level 6: 1.7e-3 6.6e-3 1.4e-3 2.1e-2;
    # level 12: 4.3e-4 1.7e-3 3.4e-4 5.3e-3
    e6 = _growth_rate_errors(6, "general", -1.0, "midpoint")
    e12 = _growth_rate_errors(12, "general", -1.0, "midpoint")
    assert np.all(e12 < e6 / 2.5), (e6, e12)
    assert np.all(e12 < 1e-2), e12


# --------------------------------------------------------------- energy balance
@pytest.mark.parametrize("sign", [-1.0, 1.0])
@pytest.mark.parametrize("order", [1, 2])
def test_energy_monotone_for_one_gradient_head(sign, order):
    mesh = icosphere(6)
    s = MeshSolver(mesh, dens.vmf_mixture(mesh, MEANS, [6.0, 10.0]), frozen_path(beta=2.0, sign=sign, T=0.5), order=order)
    E = [s.record()["energy"]]
    while s.t < 0.15:
        s.step(0.15)
        E.append(s.record()["energy"])
    dE = np.diff(E)
    assert len(dE) >= 6
    assert np.all(sign * dE > 0), dE


@pytest.mark.parametrize("name,min_ratio", [("euler", 1.9), ("ssprk2", 3.8), ("ssprk3", 7.0)])
def test_exact_balance_residual_vanishes_with_dt(name, min_ratio):
    """edi_exact at fixed h is O(dt^p); measured |edi_exact| for dt = 0.01, 0.005, 0.0025:
    euler 6.7e-4 3.3e-4 1.7e-4 (ratio 2.0), ssprk2 3.6e-8 4.5e-9 5.6e-10 (8.0), ssprk3 1.7e-8 2.0e-9 2.4e-10 (8.3)."""
    mesh = icosphere(4)
    rho0 = dens.vmf_mixture(mesh, MEANS, [6.0, 10.0])
    res = []
    for dt in (0.01, 0.005, 0.0025):
        s = MeshSolver(mesh, rho0, frozen_path(T=0.1, dt=0.05), dt=dt, integrator=name, order=2, cfl=1.0)
        s.advance(0.1)
        r = s.record()
        res.append(abs(r["edi_exact"]))
        assert r["energy"] - s.balance.E0 < -0.05  # a real energy change is being balanced
    assert res[0] / res[1] > min_ratio and res[1] / res[2] > min_ratio, res


def test_paper_balance_residual_shrinks_with_h():
    """edi_paper (exact for H = 1 in the continuum) -> 0 under mesh refinement.

    Measured at T = 0.05 on icosphere(3, 6, 12): order 1: -1.80e-2, -9.12e-3, -4.55e-3 (slope 1.0,
    the numerical diffusion of upwinding); order 2: -9.8e-4, 1.9e-4, 7.9e-5.
    """
    out, hs = [], []
    for n in (3, 6, 12):
        mesh = icosphere(n)
        s = MeshSolver(mesh, dens.vmf_mixture(mesh, MEANS, [6.0, 10.0]), frozen_path(T=0.05), order=1)
        s.advance(0.05)
        r = s.record()
        assert abs(r["edi_exact"]) < 1e-4 * abs(r["energy"] - s.balance.E0)
        out.append(abs(r["edi_paper"]))
        hs.append(mesh.h)
    slope = np.polyfit(np.log(hs), np.log(out), 1)[0]
    assert out[0] > out[1] > out[2] and slope > 0.7, (out, slope)


def test_record_columns_and_general_heads_are_nan():
    mesh = icosphere(3)
    rho = dens.vmf_mixture(mesh, MEANS, [2.0, 3.0])
    s = MeshSolver(mesh, rho, frozen_path())
    row = s.record()
    assert tuple(row) == MESH_COLUMNS and set(PARTICLE_COLUMNS) - {"speed_rms"} <= set(row)
    assert row["mass"] == pytest.approx(1.0) and row["rho_min"] == rho.min() and row["dt_last"] == 0.0
    assert row["edi_exact"] == 0.0 and np.isfinite(row["G2"])
    path = generate_weight_path(FrozenProcess(), H=2, d=3, T=1.0, dt=0.1, heads="general", seed=1)
    g = MeshSolver(mesh, rho, path, velocity="midpoint")
    g.step(1.0)
    row = g.record()
    for k in ENERGY_COLUMNS + ("G2_scheme", "int_G2_scheme"):
        assert math.isnan(row[k])
    assert 0 <= row["mean_resultant"] <= 1 and row["dt_last"] > 0


# ------------------------------------------------------------------- resume
def test_resume_is_bit_identical_with_ou_noise(tmp_path):
    mesh = icosphere(4)
    path = generate_weight_path(OUProcess(), H=2, d=3, T=1.0, dt=0.02, seed=5, init="gaussian", sign=-1.0)
    assert path.sigma > 0
    rho0 = dens.vmf_mixture(mesh, MEANS, [6.0, 10.0])
    kw = {"order": 2, "cfl": 0.8}
    a = MeshSolver(mesh, rho0, path, **kw)
    a.advance(0.06)
    a.advance(0.12)
    ra = a.record()

    b = MeshSolver(mesh, rho0, path, **kw)
    b.advance(0.06)
    np.savez(tmp_path / "ck.npz", **{k: np.asarray(v) for k, v in b.get_state().items()})
    assert all(isinstance(v, (np.ndarray, float, int)) for v in b.get_state().values())
    with np.load(tmp_path / "ck.npz") as z:
        st = {k: (z[k].item() if z[k].ndim == 0 else np.array(z[k])) for k in z.files}
    c = MeshSolver(mesh, dens.uniform(mesh), path, **kw)
    c.set_state(st)
    c.advance(0.12)
    rc = c.record()
    assert a.step_count == c.step_count and a.t == c.t
    assert np.array_equal(a.rho, c.rho)
    for k in MESH_COLUMNS:
        assert ra[k] == rc[k] or (math.isnan(ra[k]) and math.isnan(rc[k])), k
    assert ra["martingale"] != 0.0
    with pytest.raises(ValueError, match="shape"):
        c.set_state({**st, "rho": st["rho"][:-1]})


# ------------------------------------------------------------------- errors
def test_bad_input_errors():
    mesh = icosphere(3)
    rho = dens.uniform(mesh)
    path = frozen_path()
    bad = rho.copy()
    bad[0] = -1e-3
    with pytest.raises(ValueError, match="non-negative"):
        MeshSolver(mesh, bad, path)
    bad[0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        MeshSolver(mesh, bad, path)
    with pytest.raises(ValueError, match="cells"):
        MeshSolver(mesh, rho[:-1], path)
    with pytest.raises(ValueError, match="zero mass"):
        MeshSolver(mesh, 0 * rho, path)
    general = generate_weight_path(FrozenProcess(), H=1, d=3, T=1.0, dt=0.1, heads="general")
    with pytest.raises(ValueError, match="velocity = 'midpoint'"):
        MeshSolver(mesh, rho, general)
    with pytest.raises(ValueError, match="unknown velocity"):
        MeshSolver(mesh, rho, path, velocity="centre")
    with pytest.raises(ValueError, match="order"):
        MeshSolver(mesh, rho, path, order=3)
    with pytest.raises(ValueError, match="cfl"):
        MeshSolver(mesh, rho, path, cfl=1.5)
    with pytest.raises(ValueError, match="integrator"):
        MeshSolver(mesh, rho, path, integrator="rk4")
    with pytest.raises(ValueError, match="d = 3"):
        MeshSolver(mesh, rho, generate_weight_path(FrozenProcess(), H=1, d=4, T=1.0, dt=0.1))
    s = MeshSolver(mesh, dens.vmf_mixture(mesh, MEANS, [4.0, 4.0]), path)
    with pytest.raises(ValueError, match="beyond the end"):
        s.step(2.0)
    # unnormalised but valid input is normalised
    assert np.sum(MeshSolver(mesh, 3 * rho, path).rho * mesh.areas) == pytest.approx(1.0)


def test_fixed_dt_above_the_cfl_bound_raises():
    mesh = icosphere(4)
    rho = dens.vmf_mixture(mesh, MEANS, [6.0, 10.0])
    s = MeshSolver(mesh, rho, frozen_path(beta=4.0, sign=1.0), dt=0.04, cfl=0.5)
    with pytest.raises(CFLViolation, match=r"fixed dt = 0\.04 exceeds cfl \* bound = 0\.5 \* [0-9.e-]+ = [0-9.e-]+ \(order 1\)"):
        s.step(1.0)
    assert s.t == 0.0 and s.step_count == 0  # nothing changed
    ok = MeshSolver(mesh, rho, frozen_path(beta=4.0, sign=1.0), dt=0.002, cfl=0.5)
    ok.advance(0.01)
    assert ok.step_count == 5


def test_positivity_error_and_adaptive_rejection():
    """A velocity that is small at t but huge at later stage times: a fixed dt goes negative
    (PositivityError, with advice); adaptive steps reject and retry and stay positive."""
    mesh = icosphere(4)
    rho = dens.vmf_mixture(mesh, MEANS, [6.0, 10.0])
    rng = np.random.default_rng(1)
    u0 = rng.standard_normal(mesh.n_edges)
    field = lambda t: u0 * (1e-3 + 1e3 * t)
    path = frozen_path(T=1.0, dt=1.0)
    g = fv.fv_geometry(mesh)
    dt = 0.5 * fv.cfl_bound(g, field(0.0), 1)
    fixed = MeshSolver(mesh, rho, path, dt=dt, velocity_field=field)
    with pytest.raises(PositivityError, match="became negative at t = .*reduce cfl.*order = 1"):
        fixed.step(1.0)
    assert issubclass(PositivityError, SolverError) and issubclass(CFLViolation, SolverError)
    adaptive = MeshSolver(mesh, rho, path, velocity_field=field)
    for _ in range(3):
        adaptive.step(1.0)
        assert adaptive.rho.min() >= 0
    assert adaptive.dt_last < 0.1 * dt
    nan_field = lambda t: np.full(mesh.n_edges, np.nan)
    with pytest.raises(SolverError, match="non-finite"):
        MeshSolver(mesh, rho, path, dt=1e-3, velocity_field=nan_field, check=True).step(1.0)
