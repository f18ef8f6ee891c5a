"""The finite-volume solver on the circle S^1 (d = 2, mesh.kind = "circle"): conservation and positivity,
the linear growth rates gamma_k = (c/beta) k^2 I_k(beta)/I_0(beta) (docs/model.md, "The circle"), the
density level against tokens, the energy balance, point masses against the two-point ODE, and runs
through the command line."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest
from conftest import cli, one_line_error
from scipy.special import iv

from spherepde.geometry import circle_densities as cd
from spherepde.geometry.circle import CircleMesh, uniform_circle
from spherepde.model.weights import FrozenProcess, OUProcess, generate_weight_path
from spherepde.solvers.mesh import MeshSolver
from spherepde.solvers.particles import ParticleSolver, initial_tokens
from spherepde.studies.metastability import merge_time_ode


def frozen(beta=4.0, sign=1.0, T=1.0, dt=0.05, H=1):
    return generate_weight_path(FrozenProcess(), H=H, d=2, T=T, dt=dt, init="beta", beta=beta, sign=sign)


def two_bumps(mesh, kappa=6.0):
    return cd.vmf_mixture(mesh, [0.3, 2.5], [kappa, kappa], [0.6, 0.4])


# ------------------------------------------------------------------ invariants
@pytest.mark.parametrize(("integrator", "order", "dt"), [("euler", 1, None), ("ssprk3", 2, None), ("implicit", 1, 0.25)])
def test_mass_is_exact_and_the_density_stays_positive(integrator, order, dt):
    """Clustering (s = +1, beta = 8) of two bumps into sharp clusters: explicit steps under the CFL bound,
    implicit steps of any size (dt_max = 0.25, far above the CFL bound)."""
    rng = np.random.default_rng(0)
    w = rng.uniform(1, 3, 64)
    mesh = CircleMesh(np.concatenate([[0.0], np.cumsum(w[:-1])]) * 2 * math.pi / w.sum())
    ms = MeshSolver(mesh, two_bumps(mesh), frozen(beta=8.0, T=2.0, dt=0.25), order=order, integrator=integrator, dt_max=dt, tol=0.05)
    masses, mins = [], []
    while ms.t < 2.0:
        ms.step(2.0)
        masses.append(np.sum(ms.rho * mesh.areas))
        mins.append(ms.rho.min())
    assert ms.rho.max() > 20 / (2 * math.pi)  # it did cluster
    np.testing.assert_allclose(masses, 1.0, rtol=0, atol=1e-13)
    assert min(mins) >= 0.0
    if integrator == "implicit":
        assert len(masses) <= 40 and ms.cfl_step() > 0  # big steps: not limited by the CFL bound


# ------------------------------------------------------------------ linear growth rates
K = (1, 2, 3, 4)


def growth_rate_errors(n, heads, c, velocity, order, beta=2.0, eps=1e-4, T=0.1):
    """Relative errors of the fitted growth rates of the modes eps cos(k theta), k = 1..4, about the uniform
    state, against gamma_k = (c/beta) k^2 I_k(beta)/I_0(beta) (one head A = beta I, V = c I)."""
    mesh = uniform_circle(n)
    rho0 = cd.normalise(mesh, 1.0 + eps * sum(cd.fourier_average(mesh, k) for k in K))
    proj = np.array([cd.fourier_average(mesh, k) * mesh.areas for k in K])
    if heads == "gradient":
        path = generate_weight_path(FrozenProcess(), H=1, d=2, T=T, dt=0.025, init="beta", beta=beta, sign=np.sign(c))
        assert np.allclose(path.V[0], c * np.eye(2))
    else:
        path = generate_weight_path(FrozenProcess(), H=1, d=2, T=T, dt=0.025, init="beta", beta=beta, heads="general", value_init=c * np.eye(2))
    ms = MeshSolver(mesh, rho0, path, velocity=velocity, order=order)
    ts, amps = [0.0], [proj @ ms.rho]
    while ms.t < T:
        ms.step(T)
        ts.append(ms.t)
        amps.append(proj @ ms.rho)
    amps = np.array(amps)
    rates = np.array([np.polyfit(ts, np.log(np.abs(amps[:, i])), 1)[0] for i in range(len(K))])
    gamma = np.array([(c / beta) * k * k * iv(k, beta) / iv(0, beta) for k in K])
    return np.abs(rates - gamma) / np.abs(gamma)


@pytest.mark.parametrize("order", [1, 2])
@pytest.mark.parametrize(("heads", "c", "velocity"), [("gradient", 2.0, "potential"), ("gradient", -2.0, "potential"),
                                                      ("general", 1.0, "midpoint"), ("general", -1.0, "midpoint")])
def test_linear_growth_rates_converge_to_the_bessel_rates(heads, c, velocity, order):
    """Gradient heads (c = s beta, s = +1 grows, s = -1 decays) and a general head A = beta I, V = c I.
    Measured relative errors (k = 1..4): 64 cells 5e-4 .. 1.2e-2, 128 cells 2e-4 .. 2.6e-3 (second order)."""
    e64 = growth_rate_errors(64, heads, c, velocity, order)
    e128 = growth_rate_errors(128, heads, c, velocity, order)
    assert np.all(e128 < e64 / 2.5), (e64, e128)
    assert np.all(e128 < 3e-3), e128


def test_the_measured_rate_tells_the_models_apart():
    """The measured rate of k = 2 is gamma_2 to 2 %: far from twice it (a doubled velocity) and from the
    unnormalised attention's (c/beta) k^2 I_k(beta) (a missing 1/Z)."""
    mesh = uniform_circle(64)
    path = frozen(beta=2.0, sign=1.0, T=0.1, dt=0.025)
    ms = MeshSolver(mesh, cd.normalise(mesh, 1 + 1e-4 * cd.fourier_average(mesh, 2)), path)
    a0 = cd.fourier_average(mesh, 2) * mesh.areas @ ms.rho
    ms.advance(0.1)
    rate = math.log((cd.fourier_average(mesh, 2) * mesh.areas @ ms.rho) / a0) / 0.1
    gamma = 4 * iv(2, 2.0) / iv(0, 2.0)
    assert rate == pytest.approx(gamma, rel=0.02) and rate != pytest.approx(2 * gamma, rel=0.5)
    assert rate != pytest.approx(4 * iv(2, 2.0), rel=0.2)  # the unnormalised (no 1/Z) rate differs by the factor I_0


# ------------------------------------------------------------------ density level against tokens
def test_the_density_follows_its_tokens_on_a_frozen_head():
    """The mesh starts from the histogram of 2000 tokens (what initial.sample does) and both levels move on one
    frozen clustering head: energy and mean resultant agree far closer than two token samples do."""
    path = frozen(beta=4.0, sign=1.0, T=0.5)
    mu = np.array([[1.0, 0.0], [math.cos(2.0), math.sin(2.0)]])
    mesh = uniform_circle(256)
    rows = []
    for seed in (0, 1):
        X = initial_tokens("vmf", 2000, 2, seed=seed, means=mu, kappas=np.array([8.0, 8.0]))
        ps = ParticleSolver(X, path, integrator="heun")
        ps.advance(0.5)
        rows.append(ps.record())
        if seed == 0:
            ms = MeshSolver(mesh, cd.from_particles(mesh, X), path, order=2)
            ms.advance(0.5)
            mesh_row = ms.record()
    # measured: |dE| = 2.3e-3, |dR| = 4e-5; the two samples differ by 2e-2 in E
    assert abs(mesh_row["energy"] - rows[0]["energy"]) < 6e-3
    assert abs(mesh_row["mean_resultant"] - rows[0]["mean_resultant"]) < 1e-3
    assert abs(rows[1]["energy"] - rows[0]["energy"]) > 3 * abs(mesh_row["energy"] - rows[0]["energy"])
    assert mesh_row["energy"] > ms.balance.E0 + 0.5  # the energy did rise (s = +1)


# ------------------------------------------------------------------ energy balance
def test_energy_balance_closes_as_dt_falls_for_a_frozen_head():
    mesh = uniform_circle(128)
    res = []
    for dt in (0.01, 0.005):
        ms = MeshSolver(mesh, two_bumps(mesh), frozen(T=0.5), order=1, integrator="heun", dt=dt, cfl=1.0)
        ms.advance(0.5)
        row = ms.record()
        res.append(abs(row["edi_exact"]))
        assert row["energy"] - ms.balance.E0 > 1.0
    # measured 4.2e-6 and 5.1e-7 (s = +1, beta = 4): order >= 2
    assert res[1] < res[0] / 3.5 and res[1] < 1e-5, res


def test_energy_balance_on_an_ou_path_with_two_heads():
    """H = 2, OU weights (s = -1): the solver's part edi_transport falls at order 2 with the step; the path's
    part edi_weights (trapezoid rule on the weight grid) stays; edi_exact is their sum."""
    mesh = uniform_circle(128)
    path = generate_weight_path(OUProcess(), H=2, d=2, T=0.5, dt=0.05, init="identity", sign=-1.0, seed=3)
    rows = []
    for dt in (0.01, 0.005, 0.0025):
        ms = MeshSolver(mesh, two_bumps(mesh), path, order=1, integrator="heun", dt=dt, cfl=1.0)
        ms.advance(0.5)
        rows.append(ms.record())
    tr = [abs(r["edi_transport"]) for r in rows]
    assert tr[1] < tr[0] / 3 and tr[2] < tr[1] / 3, tr  # measured 2.0e-4, 5.0e-5, 1.2e-5
    for r in rows:
        assert r["edi_exact"] == pytest.approx(r["edi_transport"] + r["edi_weights"], abs=1e-12)
    assert rows[2]["edi_weights"] == pytest.approx(rows[1]["edi_weights"], rel=0.03)


# ------------------------------------------------------------------ point masses
@pytest.mark.parametrize("theta0", [math.pi / 2, 1.2])
def test_two_point_masses_merge_at_the_two_point_ode_time(theta0):
    """Two narrow bumps (kappa = 2000, point masses from the start) of mass 1/2 at angle theta0, beta = 8:
    the merge event lies within 0.5 % of the two-point ODE's time (the sphere's ODE, theta the arc)."""
    beta = 8.0
    t_ode = merge_time_ode(beta, 0.5, 0.5, theta0)
    mesh = uniform_circle(256)
    path = generate_weight_path(FrozenProcess(), H=1, d=2, T=float(math.ceil(1.2 * t_ode)), dt=1.0, init="beta", beta=beta, sign=1.0)
    ms = MeshSolver(mesh, cd.vmf_mixture(mesh, [0.3, 0.3 + theta0], [2000.0]), path, order=1, integrator="implicit", atoms=True, tol=1e-4)
    assert ms.points.x.shape == (2, 2) and ms.points.m.sum() > 0.99
    ms.advance(path.T)
    assert len(ms.points.merges) == 1
    t_ev, m1, m2, _ = ms.points.merges[0]
    assert t_ev == pytest.approx(t_ode, rel=5e-3)
    assert m1 + m2 == pytest.approx(1.0, abs=1e-6) and ms.record()["n_clusters"] == 1


# ------------------------------------------------------------------ the command line
SET = ["--set", "model.d=2", "--set", "mesh.kind=circle", "--set", "mesh.cells=64", "--set", "model.H=2", "--set", "solver.T=0.4",
       "--set", "weights.dt=0.05", "--set", "output.record_dt=0.1", "--set", "output.snapshot_dt=0.2", "-q"]


def _rows(folder):
    with open(folder / "diagnostics.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def test_a_circle_run_through_the_cli_writes_a_folder_and_resumes(tmp_path, capsys):
    code, _, err = cli(capsys, "run", *SET, "--out", tmp_path / "full")
    assert code == 0, err
    full = _rows(tmp_path / "full")
    assert len(full) == 5 and abs(float(full[-1]["mass"]) - 1) < 1e-12
    for name in ("mesh.npz", "snapshots.npz", "weights.npz", "vtk/density_000000.vtp"):
        assert (tmp_path / "full" / name).is_file()
    # half the time, then extended to the full time: the same rows
    code, _, err = cli(capsys, "run", *SET, "--set", "solver.T=0.2", "--out", tmp_path / "half")
    assert code == 0, err
    code, _, err = cli(capsys, "resume", tmp_path / "half", "--set", "solver.T=0.4", "-q")
    assert code == 0, err
    assert _rows(tmp_path / "half") == full
    # diagnostics figures and the circle's views (theta-t map, profiles) are drawn; render declines the circle in one line
    code, _, err = cli(capsys, "plot", tmp_path / "full", "-q")
    figs = tmp_path / "full" / "figures"
    assert code == 0 and (figs / "energy.png").is_file() and (figs / "kymograph.png").is_file(), err
    assert any(p.name.startswith("profiles_t") for p in figs.iterdir()) and not any(p.name.startswith("density_map") for p in figs.iterdir())
    code, _, err = cli(capsys, "render", tmp_path / "full", "-q")
    assert code != 0 and "circle" in one_line_error(err)


def test_a_both_run_on_the_circle_and_compare(tmp_path, capsys):
    code, _, err = cli(capsys, "run", *SET, "--set", "run.solver=both", "--set", "initial.n=100", "--out", tmp_path / "both")
    assert code == 0, err
    row = _rows(tmp_path / "both")[0]
    assert 0 < float(row["w1_sliced"]) < 0.3 and 0 < float(row["l1_hist"]) < 2.0  # tokens drawn from the density: the floor
    code, _, err = cli(capsys, "compare", tmp_path / "both", "--out", tmp_path / "cmp", "-q")
    assert code == 0 and (tmp_path / "cmp" / "differences.md").is_file(), err


def test_w1_on_the_circle_is_the_exact_transport_cost():
    """On the circle the 'sliced' W1 column is the exact W1 (closed form), against POT's network simplex with the arc cost."""
    import ot

    from spherepde.solvers.distances import SlicedW1, sample_from_density, wasserstein_sphere

    mesh = uniform_circle(40)
    rho = two_bumps(mesh)
    X = initial_tokens("vmf", 60, 2, seed=1, means=np.array([[0.0, 1.0]]), kappas=np.array([3.0]))
    a = rho * mesh.areas
    C = np.arccos(np.clip(mesh.nodes @ X.T, -1, 1))
    exact = ot.emd2(a / a.sum(), np.full(60, 1 / 60), C)
    assert SlicedW1(mesh)(rho, X) == pytest.approx(exact, rel=1e-9)
    assert wasserstein_sphere(mesh, rho, X, method="sliced") == pytest.approx(exact, rel=1e-9)
    Y = sample_from_density(mesh, rho, 20000, seed=0)
    np.testing.assert_allclose(np.linalg.norm(Y, axis=1), 1.0)
    assert np.sum(np.abs(cd.from_particles(mesh, Y) - rho) * mesh.areas) < 0.05  # drawn from the density


def test_initial_sample_is_the_histogram_of_the_particle_runs_tokens():
    from spherepde.runs.config import config_from_dict
    from spherepde.runs.runner import build_initial_density, build_initial_tokens, build_mesh

    data = {"model": {"d": 2}, "mesh": {"kind": "circle", "cells": 50},
            "initial": {"sample": True, "kind": "vmf", "means": [0.5, 2.0], "kappas": [10.0], "n": 300}}
    cfg = config_from_dict(data)
    mesh = build_mesh(cfg)
    X = build_initial_tokens(cfg)
    assert X.shape == (300, 2)
    np.testing.assert_array_equal(build_initial_density(cfg, mesh), cd.from_particles(mesh, X))


@pytest.mark.parametrize(
    ("sets", "words"),
    [
        (["mesh.cells=2"], "mesh.cells: must be >= 3"),
        (["mesh.kind=icosphere"], "for model.d = 2 use mesh.kind = 'circle'"),
        (["model.d=3"], "works on S^1 (d = 2), got d = 3"),
        (["initial.kind=vmf", "initial.means=[[0.0, 0.0, 1.0]]"], "initial.means: each mean must have d = 2 components"),
    ],
)
def test_bad_circle_input_exits_2_in_one_line(tmp_path, capsys, sets, words):
    args = [a for s in sets for a in ("--set", s)]
    code, _, err = cli(capsys, "run", *SET, *args, "--out", tmp_path / "r")
    assert code == 2 and words in one_line_error(err)
    assert not (tmp_path / "r").exists()


def test_a_mesh_file_of_vertex_angles(tmp_path, capsys):
    w = np.random.default_rng(0).uniform(1, 3, 40)
    np.save(tmp_path / "arcs.npy", np.concatenate([[0.0], np.cumsum(w[:-1])]) * 2 * math.pi / w.sum())
    np.save(tmp_path / "bad.npy", np.array([0.0, 2.0, 1.0, 3.0]))
    code, _, err = cli(capsys, "run", *SET, "--set", f"mesh.file={tmp_path / 'arcs.npy'}", "--out", tmp_path / "r")
    assert code == 0, err
    from spherepde.runs.runfolder import load_snapshots

    snaps = load_snapshots(tmp_path / "r")
    assert isinstance(snaps.mesh, CircleMesh) and snaps.rho.shape[1] == 40
    np.testing.assert_allclose(snaps.mesh.areas, w / w.sum() * 2 * math.pi, rtol=1e-12)
    code, _, err = cli(capsys, "run", *SET, "--set", f"mesh.file={tmp_path / 'bad.npy'}", "--out", tmp_path / "bad")
    assert code == 2 and "mesh.file" in one_line_error(err) and "not strictly increasing" in err
    assert not (tmp_path / "bad").exists()
    code, _, err = cli(capsys, "export", tmp_path / "r", "--netcdf", tmp_path / "r.nc")  # a 1-D UGRID mesh (tests/runs/test_circle_netcdf.py)
    assert code == 0 and (tmp_path / "r.nc").is_file(), err


def test_a_point_mass_run_resumes_bit_for_bit(tmp_path, capsys):
    """solver.atoms on the circle: point masses (k, 2) in checkpoints and snapshots; half + extension = the whole."""
    atoms = ["--set", "solver.integrator=implicit", "--set", "solver.atoms=true", "--set", "model.sign=1", "--set", "model.H=1",
             "--set", "weights.process=frozen", "--set", "weights.init=beta", "--set", "weights.beta=6",
             "--set", "initial.kind=vmf", "--set", "initial.means=[0.0, 1.2]", "--set", "initial.kappas=[800.0]", "--set", "mesh.cells=128"]
    code, _, err = cli(capsys, "run", *SET, *atoms, "--out", tmp_path / "full")
    assert code == 0, err
    code, _, err = cli(capsys, "run", *SET, *atoms, "--set", "solver.T=0.2", "--out", tmp_path / "half")
    assert code == 0, err
    code, _, err = cli(capsys, "resume", tmp_path / "half", "--set", "solver.T=0.4", "-q")
    assert code == 0, err
    full = _rows(tmp_path / "full")
    assert _rows(tmp_path / "half") == full
    assert float(full[-1]["atom_mass"]) > 0.99 and full[-1]["n_clusters"] == "2.0"
    from spherepde.runs.runfolder import load_snapshots

    snaps = load_snapshots(tmp_path / "full")
    assert snaps.atom_x.shape[1:] == (2, 2) and np.allclose(snaps.atom_m[-1].sum(), float(full[-1]["atom_mass"]))


def test_cluster_table_keeps_d_for_an_empty_cloud():
    from spherepde.model.clusters import cluster_table

    assert cluster_table(np.zeros((0, 2)), np.zeros(0)).shape == (16, 3)
    assert cluster_table(np.zeros((0, 3)), np.zeros(0)).shape == (16, 4)


def test_the_memory_estimate_names_mesh_cells(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SPHEREPDE_MAX_MEMORY", "1G")
    code, _, err = cli(capsys, "run", *SET, "--set", "mesh.cells=100000000", "--out", tmp_path / "r")
    assert code == 2 and one_line_error(err).startswith("spherepde: error: mesh.cells: mesh.cells = 100000000 (1e+08 cells)")
