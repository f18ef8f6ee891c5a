"""Token noise on the mesh (issue 35): nu Delta_S rho by Scharfetter--Gummel fluxes (spherepde.solvers.diffusion).

References: the plain NumPy SG flux (sg_flux), the exact decay rates nu l(l+1) / nu k^2 of the harmonics (and the
discrete circle's own eigenvalue 4 nu sin^2(kh/2)/h^2), the linear rates gamma_l - nu l(l+1) and the critical noise
nu_c = coth(beta) - 1/beta (spherepde.model.linear), the M-matrix properties, the free energy's chain rule.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from spherepde.geometry import densities as dens
from spherepde.geometry.circle import uniform_circle
from spherepde.geometry.meshfiles import icosphere
from spherepde.model.columns import MESH_COLUMNS, NOISE_COLUMNS
from spherepde.model.linear import critical_noise, linear_rate
from spherepde.model.weights import FrozenProcess, generate_weight_path
from spherepde.solvers import fv
from spherepde.solvers.diffusion import MeshDiffusion, bernoulli, diffusion_coefficients, entropy, sg_flux
from spherepde.solvers.errors import OptionError
from spherepde.solvers.implicit import implicit_flux, implicit_upwind_step, upwind_matrix
from spherepde.solvers.mesh import MeshSolver


def _path(beta, d=3, T=1.0, dt=None, sign=1.0):
    return generate_weight_path(FrozenProcess(), H=1, d=d, T=T, dt=T if dt is None else dt, init="beta", beta=beta, sign=sign)


def _mode(geom, d, l):
    """A degree-l zonal harmonic at the nodes (S^2: Legendre P_l(z)) or cos(k theta) (S^1)."""
    if d == 2:
        return np.cos(l * np.arctan2(geom.nodes[:, 1], geom.nodes[:, 0]))
    z = geom.nodes[:, 2]
    return {1: z, 2: 1.5 * z**2 - 0.5, 3: 2.5 * z**3 - 1.5 * z}[l]


def _measured_rate(mesh, d, nu, l, T, *, beta=0.0, eps=0.1, attention="softmax", **kw):
    """log(a(T)/a(0))/T of the mode-l amplitude a = sum_c |C_c| rho_c Y_c of a run from (1 + eps Y)/|S|."""
    g = mesh.geometry()
    Y = _mode(g, d, l)
    ms = MeshSolver(mesh, (1 + eps * Y) / np.sum(g.areas), _path(beta, d, T), noise=nu, attention=attention, **kw)
    a0 = np.sum(ms.rho * g.areas * Y)
    ms.advance(T)
    return math.log(np.sum(ms.rho * g.areas * Y) / a0) / T, ms


# ------------------------------------------------------------------ the flux
def test_bernoulli_and_sg_flux_limits():
    x = np.array([-50.0, -1.0, -1e-9, 0.0, 1e-9, 1.0, 50.0, 800.0])
    np.testing.assert_allclose(bernoulli(x), [50.0, 1 / (1 - math.exp(-1)), 1 + 5e-10, 1.0, 1 - 5e-10, 1 / (math.e - 1), 50 / math.expm1(50), 0.0],
                               rtol=1e-12)
    np.testing.assert_allclose(bernoulli(-x) - bernoulli(x), x, atol=1e-12)  # B(-x) = B(x) + x
    g = icosphere(4).geometry()
    rng = np.random.default_rng(0)
    rho, u = rng.random(g.n_cells) + 0.1, rng.normal(size=g.n_edges)
    c, n = g.edge_cells[:, 0], g.edge_cells[:, 1]
    upwind = np.maximum(u, 0) * rho[c] + np.minimum(u, 0) * rho[n]
    np.testing.assert_allclose(sg_flux(g, rho, u, 1e-6), upwind, rtol=1e-4, atol=1e-12)  # upwind as nu -> 0
    np.testing.assert_allclose(sg_flux(g, rho, 0 * u, 0.7), 0.7 * (rho[c] - rho[n]) / g.node_distances, rtol=1e-13)  # two-point Laplacian
    # the solver's form: upwind + (nu/d) B(|P|) (rho_c - rho_n), the same flux
    np.testing.assert_allclose(implicit_flux(g, rho, u, 0.3), sg_flux(g, rho, u, 0.3), rtol=1e-12, atol=1e-14)


def test_sg_flux_exact_for_the_local_equilibrium():
    """With u = s (Phi_n - Phi_c)/d the flux vanishes for rho = exp(s Phi / nu) (any Phi): the scheme's steady state."""
    g = icosphere(4).geometry()
    Phi = np.random.default_rng(1).normal(size=g.n_cells)
    for s, nu in ((1.0, 0.5), (-1.0, 2.0)):
        u = fv.potential_edge_velocity(g, Phi, s)
        rho = np.exp(s * Phi / nu)
        F = implicit_flux(g, rho, u, nu)
        assert np.max(np.abs(F)) < 1e-12 * np.max(np.abs(u * rho.max()))


def test_explicit_rhs_is_the_sg_divergence_and_conserves_mass():
    """fv_rhs + MeshDiffusion.add at order 1 = -(1/|C|) div of the NumPy SG flux; sum |C| d rho/dt = 0."""
    g = icosphere(4).geometry()
    rng = np.random.default_rng(2)
    rho, u, nu = rng.random(g.n_cells), rng.normal(size=g.n_edges), 0.4
    flux = np.empty(g.n_edges)
    rhs = fv.fv_rhs(g, fv.face_values(g, rho, 1), u, flux=flux)
    MeshDiffusion(g, nu, 1).add(rho, u, rhs, flux)
    np.testing.assert_allclose(flux, sg_flux(g, rho, u, nu), rtol=1e-12, atol=1e-14)
    div = np.zeros(g.n_cells)
    np.add.at(div, g.edge_cells[:, 0], g.edge_lengths * flux)
    np.add.at(div, g.edge_cells[:, 1], -g.edge_lengths * flux)
    np.testing.assert_allclose(rhs, -div / g.areas, rtol=1e-10, atol=1e-12)
    assert abs(np.sum(g.areas * rhs)) < 1e-12 * np.sum(g.areas * np.abs(rhs))
    # the implicit operator is the same: |C| d rho/dt = -K rho
    np.testing.assert_allclose(-(upwind_matrix(g, u, nu) @ rho) / g.areas, rhs, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("order", [1, 2])
def test_step_bound_is_the_positivity_limit(order):
    """One Euler step at the combined bound keeps rho >= 0 from a one-cell start; 1.2x the bound does not (the bound
    includes the diffusion: the transport bound alone is infinite here)."""
    g = icosphere(8).geometry()
    u = np.zeros(g.n_edges)
    per_cell = g.areas / np.bincount(g.edge_cells.ravel(), np.repeat(g.edge_lengths * 2.0 / g.node_distances, 2), g.n_cells)
    rho = np.zeros(g.n_cells)
    rho[np.argmin(per_cell)] = 1.0  # the spike in the cell that sets the bound
    D = MeshDiffusion(g, 2.0, order)
    bound = D.bound(u, rho, fv.face_values(g, rho, order))
    assert fv.cfl_bound(g, u, 1) == math.inf and 0 < bound < math.inf
    assert bound == pytest.approx(per_cell.min(), rel=1e-12)  # u = 0: the parabolic bound |C| / sum |e| nu/d
    for fac, ok in ((1.0, True), (1.2, False)):
        rhs = fv.fv_rhs(g, fv.face_values(g, rho, order), u)
        D.add(rho, u, rhs)
        new = rho + fac * bound * rhs
        assert (new.min() >= -1e-15) == ok


def test_noise_option_errors():
    m = icosphere(2)
    rho = dens.uniform(m)
    for bad in (-1.0, float("nan"), "x"):
        with pytest.raises(OptionError, match="noise"):
            MeshSolver(m, rho, _path(1.0), noise=bad)
    with pytest.raises(OptionError, match="point masses"):
        MeshSolver(m, rho, _path(1.0), noise=0.1, atoms=True, integrator="implicit")


def test_zero_noise_is_todays_solver():
    """nu = 0: no diffusion object, the same steps bit for bit, no noise columns."""
    m = icosphere(4)
    rho = dens.vmf_mixture(m, [[0, 0, 1.0]], [4.0])
    a = MeshSolver(m, rho, _path(2.0, T=0.2))
    b = MeshSolver(m, rho, _path(2.0, T=0.2), noise=0.0)
    assert b.diffusion is None
    a.advance(0.1)
    b.advance(0.1)
    assert np.array_equal(a.rho, b.rho) and tuple(b.record()) == MESH_COLUMNS
    c = MeshSolver(m, rho, _path(2.0, T=0.2), noise=0.01)
    assert tuple(c.record()) == MESH_COLUMNS + NOISE_COLUMNS


# ------------------------------------------------------------------ pure diffusion
@pytest.mark.parametrize("l", [1, 2, 3])
def test_pure_diffusion_decay_on_the_sphere(l):
    """beta = 0 (no velocity): a degree-l harmonic decays at nu l(l+1), the error falls ~4x per mesh level (O(h^2)),
    within 1 % on level 8."""
    nu, T = 0.5, 0.03
    errs = []
    for level in (4, 8):
        r, _ = _measured_rate(icosphere(level), 3, nu, l, T, integrator="ssprk3")
        errs.append(abs(-r / (nu * l * (l + 1)) - 1))
    assert errs[1] < 0.01 and errs[0] / errs[1] > 3.0, errs


@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("order", [1, 2])
def test_pure_diffusion_decay_on_the_circle(k, order):
    """A mode k decays at the discrete circle's eigenvalue 4 nu sin^2(kh/2)/h^2 (to 1e-6) -> nu k^2 (within 1 % at n = 128),
    at both orders (order 2: the central two-point diffusion)."""
    nu, T = 0.8, 0.05
    for n in (64, 128):
        r, ms = _measured_rate(uniform_circle(n), 2, nu, k, T, integrator="ssprk3", order=order)
        h = 2 * math.pi / n
        assert -r == pytest.approx(4 * nu * math.sin(k * h / 2) ** 2 / h**2, rel=1e-6)
    assert -r == pytest.approx(nu * k * k, rel=0.01)


def test_order_2_with_transport_on_the_sphere():
    """Order 2 with a velocity (beta = 2, s = +1, nu = 0.3 > nu_c/2): positive, mass to round-off, and the l = 1 rate of
    the linearisation gamma_1 - 2 nu within 2 % on level 8."""
    beta, nu = 2.0, 0.3
    r, ms = _measured_rate(icosphere(8), 3, nu, 1, 0.2, beta=beta, eps=1e-3, integrator="ssprk3", order=2)
    assert ms.rho.min() > 0 and np.sum(ms.rho * ms.geom.areas) == pytest.approx(1.0, abs=1e-13)
    assert r == pytest.approx(linear_rate(1, beta, beta, noise=nu), rel=0.02)


def test_implicit_error_estimate_sees_the_diffusion():
    """Pure diffusion (u = 0) with the implicit stepper: the local error estimate (explicit rhs of both ends) must
    include the diffusion, or the steps would grow 5x each and the decay rate would be wrong."""
    nu, l, T = 0.5, 2, 0.2
    r, ms = _measured_rate(icosphere(4), 3, nu, l, T, integrator="implicit", tol=1e-5)
    assert ms.step_count > 10
    assert -r == pytest.approx(nu * l * (l + 1), rel=0.03)


# ------------------------------------------------------------------ linear stability with noise
def test_critical_noise_closed_forms():
    from scipy.special import iv, spherical_in

    assert critical_noise(4.0, 4.0) == pytest.approx(0.75, abs=0.001)  # the configuration guide's example (beta = 4)
    for b in (0.5, 2.0, 6.0):
        assert critical_noise(b, b) == pytest.approx(1 / math.tanh(b) - 1 / b, rel=1e-12)  # Langevin function
        assert critical_noise(b, b, attention="unnormalised") == pytest.approx(float(spherical_in(1, b)), rel=1e-12)
        assert critical_noise(b, b, d=2) == pytest.approx(float(iv(1, b) / iv(0, b)), rel=1e-12)
        assert critical_noise(b, b, d=2, attention="unnormalised") == pytest.approx(float(iv(1, b)), rel=1e-12)
        assert linear_rate(1, b, b, noise=critical_noise(b, b)) == pytest.approx(0.0, abs=1e-12)
    assert linear_rate(2, 2.0, 2.0, noise=0.3) == pytest.approx(linear_rate(2, 2.0, 2.0) - 0.3 * 6)
    assert linear_rate(3, 2.0, 2.0, d=2, noise=0.3) == pytest.approx(linear_rate(3, 2.0, 2.0, d=2) - 0.3 * 9)


@pytest.mark.parametrize("d,attention", [(3, "softmax"), (3, "unnormalised"), (2, "softmax"), (2, "unnormalised")])
def test_noise_stabilises_the_uniform_state_at_nu_c(d, attention):
    """One gradient head D = beta I, s = +1: the measured l = 1 (k = 1) rate changes sign between 0.95 nu_c and 1.05
    nu_c, and the nu where it crosses zero (linear interpolation) lies within 2 % of nu_c (measured: 2e-4)."""
    beta = 2.0
    mesh = icosphere(8) if d == 3 else uniform_circle(128)
    nu_c = critical_noise(beta, beta, attention=attention, d=d)
    lo, hi = 0.95 * nu_c, 1.05 * nu_c
    r_lo, _ = _measured_rate(mesh, d, lo, 1, 0.5, beta=beta, eps=1e-3, attention=attention, integrator="implicit", dt=0.1)
    r_hi, _ = _measured_rate(mesh, d, hi, 1, 0.5, beta=beta, eps=1e-3, attention=attention, integrator="implicit", dt=0.1)
    assert r_lo > 0 > r_hi
    nu_star = lo + (hi - lo) * r_lo / (r_lo - r_hi)
    assert nu_star == pytest.approx(nu_c, rel=0.02)
    # the rate itself: the step's growth factor (1 + h gamma)/(1 + h nu lambda) (velocity of the step's start, diffusion
    # implicit) with gamma = gamma_1, lambda = l(l+1) (k^2): log of it / h -> gamma - nu lambda as h -> 0
    h, gam = 0.1, linear_rate(1, beta, beta, attention=attention, d=d)
    lam = 2 if d == 3 else 1
    assert r_lo == pytest.approx(math.log((1 + h * gam) / (1 + h * lo * lam)) / h, rel=0.02)


def test_noisy_growth_rate_explicit_on_the_circle():
    """gamma_k - nu k^2 for k = 1, 2 (softmax, beta = 3, nu = 0.3) within 1 % with SSP-RK3 on 256 arcs."""
    beta, nu = 3.0, 0.3
    for k in (1, 2):
        r, _ = _measured_rate(uniform_circle(256), 2, nu, k, 0.3, beta=beta, eps=1e-4, integrator="ssprk3")
        assert r == pytest.approx(linear_rate(k, beta, beta, d=2, noise=nu), rel=0.01)


# ------------------------------------------------------------------ the implicit SG step
@pytest.mark.parametrize("nu", [1e-3, 0.1, 1.0, 10.0])
def test_implicit_sg_step_is_an_m_matrix_step(nu):
    """Icosphere level 32, a peaked start (vMF kappa = 200: rho spans ~1e-170..30), the potential velocity of beta = 5:
    C + h K is an M-matrix (positive diagonal, off-diagonals <= 0, column sums = areas) and the step at 100x the
    explicit (parabolic + CFL) bound keeps rho >= 0 and the mass to round-off."""
    m = icosphere(32)
    g = m.geometry()
    rho = dens.vmf_mixture(m, [[0.0, 0.0, 1.0]], [200.0])
    logZ, _, _ = fv.cell_fields(g, rho * g.areas, np.array([5.0 * np.eye(3)]))
    u = fv.potential_edge_velocity(g, logZ[:, 0], 1.0)
    h = 100.0 * MeshDiffusion(g, nu, 1).bound(u, rho, None)
    M = (h * upwind_matrix(g, u, nu)).tocsr()
    M.setdiag(M.diagonal() + g.areas)
    off = M.copy()
    off.setdiag(0.0)
    assert M.diagonal().min() > 0 and off.data.max() <= 0
    np.testing.assert_allclose(np.asarray(M.sum(axis=0)).ravel(), g.areas, rtol=1e-9)
    new = rho
    for _ in range(3):
        new = implicit_upwind_step(g, new, u, h, nu)
        assert new.min() >= 0.0
        assert np.sum(new * g.areas) == pytest.approx(1.0, abs=1e-12)


def test_implicit_solver_with_noise_far_above_the_bound():
    """The solver's implicit stepper at a fixed step 100x the explicit bound (nu = 10, level 8): positive, mass 1."""
    m = icosphere(8)
    ms = MeshSolver(m, dens.vmf_mixture(m, [[0.0, 0.0, 1.0]], [50.0]), _path(5.0, T=1.0, dt=0.5), noise=10.0,
                    integrator="implicit", dt=1.0)
    ms.dt = 100.0 * ms._current().bound
    for _ in range(3):
        ms.step(1.0)
        assert ms.rho.min() >= 0.0 and np.sum(ms.rho * m.geometry().areas) == pytest.approx(1.0, abs=1e-12)


# ------------------------------------------------------------------ entropy and free energy
def test_entropy_column():
    m = icosphere(4)
    g = m.geometry()
    rho = dens.vmf_mixture(m, [[0.0, 0.0, 1.0]], [3.0])
    assert entropy(rho, g.areas) == pytest.approx(float(np.sum(g.areas * rho * np.log(rho))), rel=1e-14)
    assert entropy(dens.uniform(m), g.areas) == pytest.approx(-math.log(np.sum(g.areas)), rel=1e-12)
    ms = MeshSolver(m, rho, _path(2.0), noise=0.2)
    assert ms.record()["entropy"] == pytest.approx(entropy(ms.rho, g.areas), rel=1e-14)


def _free_run(integrator, dt, T=0.2, level=4, **kw):
    m = icosphere(level)
    rho = dens.vmf_mixture(m, [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]], [6.0, 4.0])
    ms = MeshSolver(m, rho, _path(3.0, T=T, sign=1.0), noise=0.3, attention="unnormalised", integrator=integrator, dt=dt, cfl=1.0, **kw)
    DF = []
    while ms.t < T - 1e-12:
        ms.step(T)
        DF.append(ms.record()["DF"])
    return ms, DF


def test_free_energy_balance_converges_with_the_step():
    """USA gradient head, frozen weights: F(t) - F(0) + int D_F -> 0 at the integrator's order (Heun: 2, measured
    1.6e-4 -> 3.7e-5 of int D_F = 4.96; implicit: 1, 0.32 -> 0.17 -- backward Euler's own O(h) dissipation, large where rho
    is small since the entropy's Hessian is nu/rho); D_F >= 0 at every record (order 1: every edge term has the sign of
    mu_c - mu_n); F decreases."""
    res = {}
    for name, dts in (("heun", (0.004, 0.002)), ("implicit", (0.005, 0.0025))):
        res[name] = []
        for dt in dts:
            ms, DF = _free_run(name, dt)
            row = ms.record()
            assert min(DF) >= 0.0
            res[name].append(abs(row["edi_free"]))
            assert row["free_energy"] < ms.balance.F0 - 0.5 * row["int_DF"]  # F decreases, by about int D_F
    assert res["heun"][0] / res["heun"][1] > 3.5 and res["implicit"][0] / res["implicit"][1] > 1.8, res
    assert res["heun"][1] < 1e-3 * row["int_DF"]


def test_softmax_noise_columns_split_the_balance():
    """Softmax heads: free-energy columns NaN (declared in may_be_nan), diffusion the diffusive part of transport:
    edi_exact still closes (the chain rule includes the diffusion); diffusion's work < 0 for s = +1 clusters spreading."""
    m = icosphere(4)
    rho = dens.vmf_mixture(m, [[0.0, 0.0, 1.0]], [8.0])
    ms = MeshSolver(m, rho, _path(2.0, T=0.1, sign=1.0), noise=0.5, integrator="ssprk3")
    ms.advance(0.1)
    row = ms.record()
    assert {"free_energy", "DF", "int_DF", "edi_free"} <= ms.may_be_nan and math.isnan(row["edi_free"])
    assert abs(row["edi_exact"]) < 1e-6 * abs(row["int_transport"])
    assert row["diffusion"] < 0 and row["int_diffusion"] < 0
    # the diffusion's work is the chain rule of the diffusive flux alone: sum xi |C| drhs
    st = ms._current()
    drhs = ms._rhs(ms.rho, fv.face_values(ms.geom, ms.rho, 1), st.u)[2]
    assert row["diffusion"] == pytest.approx(float(np.sum(st.rates["xi"] * ms.geom.areas * drhs)), rel=1e-12)


def test_noise_state_round_trip():
    m = icosphere(4)
    rho = dens.vmf_mixture(m, [[0.0, 0.0, 1.0]], [5.0])
    a = MeshSolver(m, rho, _path(2.0, T=0.2), noise=0.2, attention="unnormalised")
    a.advance(0.05)
    b = MeshSolver(m, rho, _path(2.0, T=0.2), noise=0.2, attention="unnormalised")
    b.set_state(a.get_state())
    a.advance(0.1)
    b.advance(0.1)
    ra, rb = a.record(), b.record()
    assert ra.keys() == rb.keys() and all(ra[k] == rb[k] for k in ra)  # unnormalised attention: no NaN columns
    assert not any(k.startswith("balance_int_DF") for k in MeshSolver(m, rho, _path(2.0)).get_state())


def test_diffusion_coefficients_order_2_are_central():
    g = icosphere(4).geometry()
    u = np.ones(g.n_edges)
    np.testing.assert_allclose(diffusion_coefficients(g, u, 0.5, 2), 0.5 / g.node_distances)
    assert np.all(diffusion_coefficients(g, u, 0.5, 1) < 0.5 / g.node_distances)


# ------------------------------------------------------------------ the config
def test_config_accepts_noise_for_every_solver_but_not_point_masses():
    from spherepde.runs.config import ConfigError, default_config

    cfg = default_config().with_overrides({"run.solver": "mesh", "model.noise": 0.2})
    assert cfg.model.noise == 0.2
    for solver in ("particles", "both"):
        assert default_config().with_overrides({"run.solver": solver, "model.noise": 0.2}).model.noise == 0.2
    with pytest.raises(ConfigError, match="point masses and token noise"):
        default_config().with_overrides({"run.solver": "mesh", "model.noise": 0.2, "solver.integrator": "implicit", "solver.atoms": True})
    with pytest.raises(ConfigError, match="model.noise"):
        default_config().with_overrides({"run.solver": "mesh", "model.noise": -0.1})


def test_a_run_the_diffusion_makes_uncomputable_names_the_implicit_step(tmp_path):
    from spherepde.runs.config import ConfigError, default_config
    from spherepde.runs.runner import run

    cfg = default_config().with_overrides({"run.solver": "mesh", "mesh.level": 2, "model.noise": 1e9, "solver.T": 1.0, "output.vtk": False})
    with pytest.raises(ConfigError, match=r"model.noise > 0 .*smaller model.noise.*solver.integrator = 'implicit'"):
        run(cfg, out=tmp_path / "r", progress=False)


@pytest.mark.parametrize("attention,nu", [("softmax", 0.3), ("unnormalised", 0.5)])
def test_steady_state_is_self_consistent(attention, nu):
    """Frozen head beta = 2, s = +1, nu below nu_c: the implicit run from a bump settles into a clustered state with
    rho proportional to exp(s Phi[rho]/nu) (softmax: Z^{s/nu}; unnormalised: exp(s xi/nu)), the stationary
    self-consistency of docs/model.md, exact for the SG flux (zero flux on every edge): log rho - s Phi/nu is constant
    to 1e-5 of the spread of log rho (~10; the rest is the relaxation left at T = 30)."""
    m = icosphere(4)
    ms = MeshSolver(m, dens.vmf_mixture(m, [[0.0, 0.0, 1.0]], [3.0]), _path(2.0, T=30.0), noise=nu, integrator="implicit",
                    attention=attention, tol=1e-4)
    ms.advance(30.0)
    rates = ms._current().rates
    log_rho = np.log(ms.rho)
    resid = log_rho - rates["Phi" if attention == "softmax" else "xi"] / nu
    assert np.ptp(log_rho) > 5.0 and np.ptp(resid) < 1e-5 * np.ptp(log_rho)
