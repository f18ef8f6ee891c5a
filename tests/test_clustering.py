"""Clustering at the density level (issue 24): the implicit upwind step, the scheme's G^2,
point masses for collapsed clusters and the cluster diagnostics.

References are independent of the code under test: the explicit upwind right-hand side,
a NumPy version of the scheme's G^2, the two-point merge ODE solved with SciPy, and the
energy change of the run itself."""

import math

import numpy as np
import pytest

import spherepde as sp
from spherepde import densities
from spherepde.cli.common import example_path
from spherepde.model.clusters import weighted_clusters
from spherepde.solvers._reference import scheme_g2_reference
from spherepde.solvers.fv import face_values, fv_geometry, fv_rhs, scheme_g2
from spherepde.solvers.implicit import implicit_upwind_step, upwind_matrix
from spherepde.solvers.mesh import MeshSolver
from spherepde.studies.metastability import merge_time_ode, time_to_resultant

NORTH, EAST = [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]


def frozen(beta, T, sign=1.0, dt=None, H=1):
    return sp.generate_weight_path(sp.FrozenProcess(), H=H, d=3, T=T, dt=dt or T / 4, init="beta", beta=beta, sign=sign)


def two_bumps(mesh, m1=0.5, theta=math.pi / 2, kappa=200.0):
    b = [math.sin(theta), 0.0, math.cos(theta)]
    return densities.vmf_mixture(mesh, [NORTH, b], [kappa, kappa], [m1, 1.0 - m1])


def t_resultant(solver, T, every=0.25):
    """First time the mean resultant reaches 0.95 (the metastability study's rule)."""
    return time_to_resultant(solver, T, every)[0]


# ----------------------------------------------------------------- the implicit step
@pytest.fixture(scope="module")
def geom8():
    return fv_geometry(sp.icosphere(8))


def test_upwind_matrix_is_the_explicit_upwind_operator(geom8):
    rng = np.random.default_rng(0)
    u = rng.normal(size=geom8.n_edges)
    rho = rng.random(geom8.n_cells)
    K = upwind_matrix(geom8, u)
    assert np.allclose(-(K @ rho) / geom8.areas, fv_rhs(geom8, face_values(geom8, rho, 1), u), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("h", [1e-3, 1.0, 1e4])
def test_implicit_step_is_positive_and_conservative_for_any_step(geom8, h):
    rng = np.random.default_rng(1)
    u = 50.0 * rng.normal(size=geom8.n_edges)  # explicit CFL bound ~1e-4: h = 1e4 is 1e8 times it
    rho = rng.random(geom8.n_cells) ** 4
    M = (np.diag(geom8.areas) + h * upwind_matrix(geom8, u).toarray())
    off = M - np.diag(np.diag(M))
    assert off.max() <= 0.0 and np.all(np.diag(M) > 0)  # an M-matrix ...
    assert np.allclose(M.sum(axis=0), geom8.areas, rtol=1e-9)  # ... with column sums |C_c|
    new = implicit_upwind_step(geom8, rho, u, h)
    assert new.min() >= 0.0
    assert np.sum(new * geom8.areas) == pytest.approx(np.sum(rho * geom8.areas), rel=1e-12)


def test_implicit_step_agrees_with_explicit_euler_to_second_order(geom8):
    rng = np.random.default_rng(2)
    u = rng.normal(size=geom8.n_edges)
    rho = 1.0 + 0.5 * rng.random(geom8.n_cells)
    r = fv_rhs(geom8, face_values(geom8, rho, 1), u)
    diff = [np.abs(implicit_upwind_step(geom8, rho, u, h) - (rho + h * r)).max() for h in (1e-3, 5e-4)]
    assert diff[0] / diff[1] == pytest.approx(4.0, rel=0.05)  # O(h^2) per step: consistent


# ----------------------------------------------------------------- the scheme's G^2
def test_scheme_g2_matches_numpy_reference(geom8):
    rng = np.random.default_rng(3)
    logZ = rng.normal(size=(geom8.n_cells, 3))
    logZ[:10] = logZ[10:20]  # some equal pairs exercise the small-difference branch
    u = rng.normal(size=geom8.n_edges)
    flux = rng.normal(size=geom8.n_edges)
    assert scheme_g2(geom8, logZ, u, flux) == pytest.approx(scheme_g2_reference(geom8, logZ, u, flux), rel=1e-12)


@pytest.mark.parametrize("sign", [1.0, -1.0])
@pytest.mark.parametrize("order", [1, 2])
def test_scheme_g2_is_the_transport_rate_for_one_head(sign, order):
    mesh = sp.icosphere(8)
    ms = MeshSolver(mesh, densities.vmf_mixture(mesh, [NORTH, EAST], [8.0, 3.0], [0.6, 0.4]), frozen(4.0, 1.0, sign), order=order)
    row = ms.record()
    assert row["G2_scheme"] == pytest.approx(sign * row["transport"], rel=1e-11)
    assert row["G2"] == pytest.approx(row["G2_scheme"], rel=0.2)  # the same quantity, another quadrature
    assert row["G2"] != pytest.approx(sign * row["transport"], rel=1e-6)


def test_clustering_balance_closes_with_the_scheme_g2():
    """The shipped clustering-mesh set-up at level 8 (there the nodal G^2 overstated the energy change by ~47 %)."""
    cfg = sp.load_config(example_path("clustering-mesh"))
    mesh = sp.icosphere(8)
    ini = cfg.initial
    rho0 = densities.vmf_mixture(mesh, ini.means, ini.kappas, ini.weights)
    ms = MeshSolver(mesh, rho0, frozen(cfg.weights.beta, 1.0, 1.0, dt=0.05), order=2, integrator="ssprk3")
    E0 = ms.record()["energy"]
    ms.advance(1.0)
    row = ms.record()
    dE = row["energy"] - E0
    assert dE > 0.5  # the energy does change (s = +1: it rises)
    assert abs(row["edi_paper"]) <= 0.02 * abs(dE)
    assert abs(row["int_G2_scheme"] - dE) <= 0.02 * abs(dE)
    assert abs(row["int_G2"] - dE) > 0.02 * abs(dE)  # the nodal G^2 misses that bar (3 % here, 47 % by T = 3)


def test_edi_paper_vanishes_with_the_step_on_a_fixed_mesh():
    mesh = sp.icosphere(8)
    rho0 = densities.vmf_mixture(mesh, [NORTH, EAST], [20.0, 20.0], [0.5, 0.5])
    res = []
    for dt in (0.005, 0.0025):
        ms = MeshSolver(mesh, rho0, frozen(4.0, 0.5, 1.0, dt=0.05), order=1, integrator="euler", dt=dt, cfl=1.0)
        ms.advance(0.5)
        res.append(abs(ms.record()["edi_paper"]))
    assert res[1] < 0.6 * res[0]  # first order in dt: about halves


# ----------------------------------------------------------------- long, slow dynamics
def test_implicit_steps_follow_the_dynamics_not_empty_space():
    mesh = sp.icosphere(8)
    ms = MeshSolver(mesh, two_bumps(mesh), frozen(10.0, 20.0, 1.0), order=1, integrator="implicit")
    explicit_steps = 20.0 / (0.5 * ms._current().bound)
    ms.advance(20.0)
    row = ms.record()
    assert ms.step_count < explicit_steps / 20  # the issue asks for 10x; measured ~46x
    assert row["rho_min"] >= 0.0 and row["mass"] == pytest.approx(1.0, abs=1e-12)
    assert abs(row["edi_exact"]) < 1e-9 * row["energy"]  # frozen quadratic energy: the discrete chain rule is exact


def test_implicit_fixed_step_is_not_cfl_limited():
    mesh = sp.icosphere(8)
    ms = MeshSolver(mesh, two_bumps(mesh), frozen(10.0, 2.0, 1.0), order=1, integrator="implicit", dt=0.5)
    ms.advance(2.0)
    assert ms.step_count == 4 and ms.record()["rho_min"] >= 0.0


def test_implicit_needs_order_one():
    mesh = sp.icosphere(4)
    with pytest.raises(ValueError, match="order = 1"):
        MeshSolver(mesh, densities.uniform(mesh), frozen(2.0, 1.0), order=2, integrator="implicit")
    with pytest.raises(ValueError, match="implicit"):
        MeshSolver(mesh, densities.uniform(mesh), frozen(2.0, 1.0), atoms=True)


# ----------------------------------------------------------------- point masses
@pytest.mark.parametrize("m1,theta_deg", [(0.5, 90.0), (0.7, 80.0)])
def test_merge_time_of_two_clusters_matches_the_two_point_ode(m1, theta_deg):
    beta = 8.0
    theta = math.radians(theta_deg)
    t_ode = merge_time_ode(beta, m1, 1.0 - m1, theta)
    mesh = sp.icosphere(8)
    ms = MeshSolver(mesh, two_bumps(mesh, m1, theta), frozen(beta, 2 * t_ode, 1.0), order=1, integrator="implicit", atoms=True)
    t95 = t_resultant(ms, 2 * t_ode)
    assert t95 == pytest.approx(t_ode, rel=0.05)
    ms.advance(2 * t_ode)
    assert len(ms.points.merges) == 1 and sorted(ms.points.merges[0][1:3]) == pytest.approx(sorted([m1, 1 - m1]), abs=1e-6)
    assert t95 == pytest.approx(t_ode, rel=0.05)
    row = ms.record()
    assert row["atom_mass"] == pytest.approx(1.0, abs=1e-12) and row["mass"] == pytest.approx(1.0, abs=1e-12)
    assert row["n_clusters"] == 1


def test_without_point_masses_the_mesh_pins_the_clusters():
    """The broken alternative: on the mesh alone collapsed clusters sit on cell nodes and do not merge in time."""
    beta = 8.0
    t_ode = merge_time_ode(beta, 0.5, 0.5, math.pi / 2)
    mesh = sp.icosphere(8)
    ms = MeshSolver(mesh, two_bumps(mesh), frozen(beta, 2 * t_ode, 1.0), order=1, integrator="implicit")
    assert abs(t_resultant(ms, 2 * t_ode, every=2.0) - t_ode) > 0.05 * t_ode


def test_point_masses_resume_bit_for_bit():
    mesh = sp.icosphere(8)
    path = frozen(8.0, 30.0, 1.0)
    a = MeshSolver(mesh, two_bumps(mesh), path, order=1, integrator="implicit", atoms=True)
    a.advance(10.0)
    st = a.get_state()
    a.advance(30.0)
    b = MeshSolver(mesh, two_bumps(mesh), path, order=1, integrator="implicit", atoms=True)
    b.set_state(st)
    b.advance(30.0)
    assert a.step_count == b.step_count and np.array_equal(a.points.x, b.points.x) and np.array_equal(a.rho, b.rho)
    assert a.points.merges == b.points.merges and a.record() == b.record()


def test_snapshot_density_keeps_the_point_masses():
    mesh = sp.icosphere(8)
    ms = MeshSolver(mesh, two_bumps(mesh), frozen(8.0, 1.0, 1.0), order=1, integrator="implicit", atoms=True)
    ms.advance(1.0)
    assert len(ms.points.m) == 2
    rho = ms.snapshot()["rho"]
    assert np.sum(rho * ms.geom.areas) == pytest.approx(1.0, abs=1e-12)


# ----------------------------------------------------------------- cluster diagnostics
def test_weighted_clusters_one_definition():
    rng = np.random.default_rng(4)
    centres = np.array([NORTH, EAST, [0.0, 1.0, 0.0]])
    X = np.concatenate([c + 0.01 * rng.normal(size=(20, 3)) for c in centres] + [rng.normal(size=(5, 3))])
    X /= np.linalg.norm(X, axis=1)[:, None]
    w = np.concatenate([np.full(20, 0.03), np.full(20, 0.015), np.full(20, 0.001), np.full(5, 0.0016)])
    labels, masses, cent = weighted_clusters(X, w, radius=0.1, min_mass=0.01)
    assert masses == pytest.approx([0.6, 0.3, 0.02])  # ordered by mass; the scattered points are in none
    assert np.allclose(cent[0], NORTH, atol=0.01) and np.allclose(cent[1], EAST, atol=0.01)
    assert np.sum(labels == -1) >= 5


# ----------------------------------------------------------------- the same start for both levels
def test_density_can_start_from_the_token_sample():
    from spherepde.runs.runner import build_initial_density, build_initial_tokens

    cfg = sp.load_config(example_path("clustering-mesh")).with_overrides({"mesh.level": 4, "initial.sample": True})
    tokens_cfg = sp.load_config(example_path("clustering-particles"))
    mesh = sp.icosphere(4)
    X = build_initial_tokens(tokens_cfg)  # the token twin's own start
    assert np.array_equal(build_initial_density(cfg, mesh), densities.from_particles(mesh, X))


def test_uniform_plus_noise_is_seeded_positive_and_normalised():
    from spherepde.runs.runner import build_initial_density

    mesh = sp.icosphere(8)
    base = sp.default_config().with_overrides({"initial.kind": "uniform", "initial.noise": 0.1, "initial.seed": 3})
    a, b = build_initial_density(base, mesh), build_initial_density(base, mesh)
    c = build_initial_density(base.with_overrides({"initial.seed": 4}), mesh)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert np.sum(a * mesh.areas) == pytest.approx(1.0, abs=1e-12) and a.min() > 0
    assert a.max() / a.min() == pytest.approx(1.1 / 0.9, rel=0.05)  # amplitude 0.1 of max |f| = 1


def test_sample_and_noise_are_refused_for_particles():
    with pytest.raises(sp.ConfigError, match="initial.sample"):
        sp.default_config().with_overrides({"run.solver": "particles", "initial.sample": True})


def test_cluster_tables_in_snapshots_one_definition_for_both_solvers(tmp_path):
    """Masses and centres of the clusters at every snapshot, tokens and mesh alike (snapshots.npz key ``clusters``)."""
    from spherepde.runs.runner import run

    over = {"initial.kind": "vmf", "initial.means": [NORTH, EAST], "initial.kappas": [200.0, 200.0], "initial.weights": [0.7, 0.3],
            "model.sign": 1, "weights.process": "frozen", "weights.init": "beta", "weights.beta": 8.0, "solver.T": 0.5,
            "output.record_dt": 0.25, "output.snapshot_dt": 0.25, "output.vtk": False, "mesh.level": 8, "initial.n": 400}
    tables = {}
    for solver, extra in (("particles", {}), ("mesh", {"solver.integrator": "implicit", "solver.atoms": True})):
        cfg = sp.default_config().with_overrides({**over, "run.solver": solver, **extra})
        folder = tmp_path / solver
        run(cfg, out=folder, progress=False)
        with np.load(folder / "snapshots.npz") as z:
            tables[solver] = np.array(z["clusters"])
    for solver, tab in tables.items():
        assert tab.shape == (3, 16, 4), solver
        last = tab[-1]
        k = int(np.sum(np.isfinite(last[:, 0])))
        assert k == 2, solver
        assert last[0, 0] == pytest.approx(0.7, abs=0.06) and last[1, 0] == pytest.approx(0.3, abs=0.06)
        assert np.allclose(last[0, 1:], NORTH, atol=0.05) and np.allclose(last[1, 1:], EAST, atol=0.05)


def test_scheme_g2_agrees_with_the_nodal_g2_in_the_paper_regime(tmp_path):
    """paper-ou-mesh (H = 10, OU weights, s = -1, order 2, level 32) to T = 0.2: the scheme's G^2 and
    the nodal value (G2, what the reports hold) agree to 1 % at every record
    (at level 16 they differ by up to 5 %: the difference is O(h) where the density is sharp)."""
    from spherepde.runs.runfolder import read_diagnostics
    from spherepde.runs.runner import run

    cfg = sp.load_config(example_path("paper-ou-mesh")).with_overrides({"solver.T": 0.2, "output.vtk": False})
    run(cfg, out=tmp_path / "r", progress=False)
    d = read_diagnostics(tmp_path / "r" / "diagnostics.csv")
    rel = np.abs(d["G2_scheme"] / d["G2"] - 1.0)
    assert rel.max() < 0.01 and rel.max() > 0  # two quadratures of one quantity: close, not identical


def test_both_run_with_point_masses_samples_and_measures_them(tmp_path):
    """run.solver = 'both' with point masses: the tokens are drawn from the density with the point
    masses in it, and the distances see them (not only the cells' remainder)."""
    from spherepde.runs.runner import read_diagnostics, run

    over = {"run.solver": "both", "initial.kind": "vmf", "initial.means": [NORTH, EAST], "initial.kappas": [200.0, 200.0],
            "initial.weights": [0.7, 0.3], "model.sign": 1, "weights.process": "frozen", "weights.init": "beta", "weights.beta": 8.0,
            "solver.T": 0.2, "output.record_dt": 0.1, "output.vtk": False, "mesh.level": 8, "initial.n": 400,
            "solver.integrator": "implicit", "solver.atoms": True}
    run(sp.default_config().with_overrides(over), out=tmp_path / "b", progress=False)
    d = read_diagnostics(tmp_path / "b" / "diagnostics.csv")
    assert d["atom_mass"][0] > 0.99  # level 8: the kappa = 200 bumps are point masses from the start
    assert abs(d["p_mean_resultant"][0] - d["mean_resultant"][0]) < 0.05  # the tokens were drawn from them
    assert d["w1_sliced"][-1] < 0.3  # and the distance sees them (about h at level 8; the cells alone hold almost no mass)
