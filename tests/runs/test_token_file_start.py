"""initial.kind = "file" with a token file (n, d) as the start of a mesh run (issue 34 item 1): the
density is the tokens' histogram on the cells (mass 1/n per token in the cell containing it), on S^2
and on the circle; a ``both`` run starts its tokens at the file's and its mesh from their histogram;
bad token files are refused in one line (exit 2, nothing written)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import cli, one_line_error

import spherepde as sp
from spherepde.runs.runner import build_initial_density, build_mesh

SHORT = {"model.H": 1, "solver.T": 0.05, "weights.dt": 0.05, "output.record_dt": 0.05, "output.snapshot_dt": 0.05, "output.vtk": False}
CIRCLE = {"model.d": 2, "mesh.kind": "circle", "mesh.cells": 40}


def _circle_tokens(n, seed=1):
    th = np.random.default_rng(seed).uniform(0.0, 2 * math.pi, n)
    return np.stack([np.cos(th), np.sin(th)], axis=1)


def _sphere_tokens(n, seed=2):
    X = np.random.default_rng(seed).standard_normal((n, 3))
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def _arc_counts(phi, X):
    """Plain NumPy: tokens per arc [phi_c, phi_{c+1}) by comparing every angle with every arc."""
    a = np.mod(np.arctan2(X[:, 1], X[:, 0]) - phi[0], 2 * math.pi)[:, None]
    lo = (phi - phi[0])[None, :]
    hi = np.append(phi[1:] - phi[0], 2 * math.pi)[None, :]
    inside = (a >= lo) & (a < hi)
    assert np.all(inside.sum(axis=1) == 1)
    return inside.sum(axis=0)


def _triangle_counts(points, cells, X):
    """Plain NumPy: tokens per spherical triangle by the sign of det[a, b, x] on its three edges, over every cell."""
    tri = points[cells]  # (nc, 3, 3)
    inside = np.einsum("nd,cd->nc", X, tri.sum(axis=1)) > 0
    for k in range(3):
        normal = np.cross(tri[:, k], tri[:, (k + 1) % 3])  # (nc, 3)
        inside &= X @ normal.T >= -1e-12
    first = np.argmax(inside, axis=1)
    assert np.all(inside.any(axis=1))
    return np.bincount(first, minlength=len(cells))


def _cfg(path, **over):
    return sp.default_config().with_overrides({**SHORT, "initial.kind": "file", "initial.file": str(path), **over})


@pytest.mark.parametrize("mesh_file", [False, True])
def test_circle_density_is_the_token_histogram(tmp_path, mesh_file):
    X = _circle_tokens(501)
    np.save(tmp_path / "X.npy", X)
    over = dict(CIRCLE)
    if mesh_file:  # uneven arcs, starting off 0
        w = 1.0 + 0.8 * np.sin(np.arange(40)) ** 2
        np.save(tmp_path / "arcs.npy", 0.3 + np.concatenate([[0.0], np.cumsum(w[:-1])]) * 2 * math.pi / w.sum())
        over["mesh.file"] = str(tmp_path / "arcs.npy")
    cfg = _cfg(tmp_path / "X.npy", **over)
    mesh = build_mesh(cfg)
    rho = build_initial_density(cfg, mesh)
    mass = rho * mesh.areas
    assert math.isclose(mass.sum(), 1.0, rel_tol=1e-13)
    np.testing.assert_allclose(mass * 501, _arc_counts(np.asarray(mesh.phi), X), atol=1e-9)


def test_sphere_density_is_the_token_histogram(tmp_path):
    X = _sphere_tokens(400)
    np.save(tmp_path / "X.npy", X)
    cfg = _cfg(tmp_path / "X.npy", **{"mesh.level": 3})
    mesh = build_mesh(cfg)
    rho = build_initial_density(cfg, mesh)
    mass = rho * np.asarray(mesh.areas)
    assert math.isclose(mass.sum(), 1.0, rel_tol=1e-13)
    np.testing.assert_allclose(mass * 400, _triangle_counts(np.asarray(mesh.points), np.asarray(mesh.cells), X), atol=1e-9)
    # tokens near the cell centres: the nearest centre is the cell
    c = np.asarray(mesh.centers, float)
    idx = np.random.default_rng(3).integers(0, len(c), 300)
    Y = c[idx] + 1e-3 * np.random.default_rng(4).standard_normal((300, 3))
    np.save(tmp_path / "Y.npy", Y / np.linalg.norm(Y, axis=1, keepdims=True))
    rho = build_initial_density(_cfg(tmp_path / "Y.npy", **{"mesh.level": 3}), mesh)
    np.testing.assert_allclose(rho * np.asarray(mesh.areas) * 300, np.bincount(idx, minlength=len(c)), atol=1e-9)


@pytest.mark.parametrize("geometry", ["circle", "sphere"])
def test_both_run_starts_tokens_and_mesh_from_the_same_measure(tmp_path, geometry):
    X = _circle_tokens(60) if geometry == "circle" else _sphere_tokens(60)
    np.save(tmp_path / "X.npy", X)
    over = dict(CIRCLE) if geometry == "circle" else {"mesh.level": 2}
    cfg = _cfg(tmp_path / "X.npy", **over, **{"run.solver": "both", "initial.n": 7})  # n is the file's
    run = sp.run(cfg, out=tmp_path / "both", progress=False).folder
    with np.load(run / "snapshots.npz") as z:
        X0, rho0 = z["X"][0], z["rho"][0]
    np.testing.assert_allclose(X0, X, atol=1e-15)  # the file's tokens, not a sample of the density
    mesh = build_mesh(cfg)
    counts = _arc_counts(np.asarray(mesh.phi), X0) if geometry == "circle" else _triangle_counts(np.asarray(mesh.points), np.asarray(mesh.cells), X0)
    np.testing.assert_allclose(rho0 * np.asarray(mesh.areas) * 60, counts, atol=1e-9)
    # and a mesh run from the same file starts from the same density
    mesh_run = sp.run(cfg.with_overrides({"run.solver": "mesh"}), out=tmp_path / "mesh", progress=False).folder
    with np.load(mesh_run / "snapshots.npz") as z:
        np.testing.assert_array_equal(z["rho"][0], rho0)


def test_a_circle_particle_run_reads_the_token_file(tmp_path):
    X = _circle_tokens(25)
    np.save(tmp_path / "X.npy", X)
    run = sp.run(_cfg(tmp_path / "X.npy", **{"model.d": 2, "run.solver": "particles"}), out=tmp_path / "p", progress=False).folder
    with np.load(run / "snapshots.npz") as z:
        np.testing.assert_allclose(z["X"][0], X, atol=1e-15)


def test_cell_densities_still_start_a_circle_run(tmp_path):
    rho = np.arange(1.0, 41.0)
    np.save(tmp_path / "rho.npy", rho)
    cfg = _cfg(tmp_path / "rho.npy", **CIRCLE)
    mesh = build_mesh(cfg)
    got = build_initial_density(cfg, mesh)
    np.testing.assert_allclose(got, rho / np.sum(rho * mesh.areas), rtol=1e-14)


BAD = [
    ("off", lambda: _circle_tokens(10) * (1 + 2e-6), "off the unit sphere"),
    ("d3", lambda: _sphere_tokens(10), "model.d = 2"),
    ("nan", lambda: np.where(np.arange(20).reshape(10, 2) == 7, np.nan, _circle_tokens(10)), "NaN"),
    ("empty", lambda: np.zeros((0, 2)), "no token"),
    ("cells", lambda: np.ones(39), "39"),
    ("cube", lambda: np.ones((2, 2, 2)), "(2, 2, 2)"),
]


@pytest.mark.parametrize("solver", ["mesh", "both"])
@pytest.mark.parametrize(("name", "make", "phrase"), BAD, ids=[b[0] for b in BAD])
def test_bad_token_files_are_refused_in_one_line(tmp_path, capsys, solver, name, make, phrase):
    np.save(tmp_path / f"{name}.npy", make())
    over = {**CIRCLE, **SHORT, "output.vtk": "false", "run.solver": solver, "initial.kind": "file", "initial.file": tmp_path / f"{name}.npy"}
    args = [f"{k}={v}" for k, v in over.items()]
    code, _, err = cli(capsys, "run", *[x for a in args for x in ("--set", a)], "--out", tmp_path / "r", "-q")
    line = one_line_error(err)
    assert code == 2 and "initial.file" in line and phrase in line and f"{name}.npy" in line, line
    assert not (tmp_path / "r").exists()


def test_tokens_barely_off_the_sphere_are_accepted(tmp_path):
    np.save(tmp_path / "X.npy", _circle_tokens(10) * (1 + 5e-7))
    cfg = _cfg(tmp_path / "X.npy", **CIRCLE)
    assert math.isclose(float(np.sum(build_initial_density(cfg, build_mesh(cfg)) * build_mesh(cfg).areas)), 1.0, rel_tol=1e-13)
