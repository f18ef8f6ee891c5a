"""The circle S^1 as a finite-volume geometry (spherepde.geometry.circle) and its densities
(spherepde.geometry.circle_densities), against plain NumPy / SciPy references."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.integrate import quad
from scipy.special import iv

from spherepde.geometry import circle_densities as cd
from spherepde.geometry.circle import CircleMesh, read_circle, uniform_circle
from spherepde.geometry.meshfiles import load_saved_mesh
from spherepde.geometry.protocol import GEOMETRIES, Geometry, geometry_dimension, local_maxima, mesh_spacing
from spherepde.solvers import fv


def random_circle(n, seed=0) -> CircleMesh:
    """A non-uniform partition: arcs of widths in a ratio up to 4, starting at a random angle."""
    rng = np.random.default_rng(seed)
    w = rng.uniform(1.0, 4.0, n)
    phi = rng.uniform(-math.pi, math.pi) + np.concatenate([[0.0], np.cumsum(w[:-1])]) * (2 * math.pi / w.sum())
    return CircleMesh(phi, name="random")


MESHES = [uniform_circle(16), random_circle(37)]


@pytest.mark.parametrize("mesh", MESHES, ids=["uniform", "random"])
def test_cells_faces_and_normals(mesh):
    nc = mesh.n_cells
    assert isinstance(mesh, Geometry) and mesh.geometry() is mesh and mesh.d == 2 == geometry_dimension("circle")
    assert mesh.areas.sum() == pytest.approx(2 * math.pi, rel=1e-14) and np.all(mesh.areas > 0)
    np.testing.assert_allclose(np.linalg.norm(mesh.nodes, axis=1), 1.0, rtol=1e-15)
    # a node is the midpoint of its arc: equally far from both end points
    a0, a1 = mesh.points[mesh.cells[:, 0]], mesh.points[mesh.cells[:, 1]]
    np.testing.assert_allclose(np.einsum("ij,ij->i", mesh.nodes, a0), np.cos(mesh.areas / 2), atol=1e-14)
    np.testing.assert_allclose(np.einsum("ij,ij->i", mesh.nodes, a1), np.cos(mesh.areas / 2), atol=1e-14)
    c, n = mesh.edge_cells.T
    assert np.all(mesh.edge_lengths == 1.0)  # faces are points: measure 1
    x_e, n_e = mesh.edge_midpoints, mesh.edge_normals
    np.testing.assert_allclose(np.linalg.norm(n_e, axis=1), 1.0, rtol=1e-15)
    np.testing.assert_allclose(np.einsum("ij,ij->i", n_e, x_e), 0.0, atol=1e-15)  # tangent at the face
    assert np.all(np.einsum("ij,ij->i", n_e, mesh.nodes[n] - mesh.nodes[c]) > 0)  # from c into n
    # the face is the shared end point: the right end of c, the left end of n
    np.testing.assert_allclose(x_e, a1[c], atol=1e-15)
    np.testing.assert_allclose(x_e, a0[n], atol=1e-15)
    # node distance = the arc between the two nodes
    arc = np.arccos(np.clip(np.einsum("ij,ij->i", mesh.nodes[c], mesh.nodes[n]), -1, 1))
    np.testing.assert_allclose(mesh.node_distances, arc, rtol=1e-7)
    assert mesh_spacing(mesh) == pytest.approx(2 * math.pi / nc)
    assert mesh.slot_shape == (nc, 2) and mesh.n_edges == nc


@pytest.mark.parametrize("mesh", MESHES, ids=["uniform", "random"])
def test_csr_connectivity_is_consistent(mesh):
    nc = mesh.n_cells
    assert np.array_equal(mesh.face_offsets, 2 * np.arange(nc + 1))
    for side in (0, 1):
        slots = mesh.face_slots[:, side]
        assert np.array_equal(mesh.cell_faces[slots], np.arange(nc))  # slot of face e lists e
        assert np.array_equal(slots // 2, mesh.edge_cells[:, side])  # in the list of the right cell
        assert np.all(mesh.cell_face_signs[slots] == (1.0 if side == 0 else -1.0))  # +1 where the normal leaves it
    # every cell has its left face (sign -1) then its right face (sign +1)
    assert np.array_equal(mesh.cell_face_signs.reshape(nc, 2), np.tile([-1.0, 1.0], (nc, 1)))
    # the divergence of a constant flux vanishes, and of F_e = 1 on one face is -1/h, +1/h on its two cells
    u = np.zeros(nc)
    u[3] = 1.0
    rhs = fv.fv_rhs(mesh, fv.face_values(mesh, np.ones(nc), 1), u)
    expect = np.zeros(nc)
    expect[3], expect[4] = -1.0 / mesh.areas[3], 1.0 / mesh.areas[4]
    np.testing.assert_allclose(rhs, expect, rtol=1e-14)


def _reconstruct_reference(mesh, rho):
    """A plain loop: central slope over the two node distances, Barth--Jespersen limited to [min, max] of the
    cell and its neighbours (the sphere's limiter), values at the two end points of the arc."""
    nc = mesh.n_cells
    out = np.empty((nc, 2))
    for c in range(nc):
        lft, rgt = (c - 1) % nc, (c + 1) % nc
        dl, dr = rho[lft] - rho[c], rho[rgt] - rho[c]
        g = (dr - dl) / (mesh.node_distances[lft] + mesh.node_distances[c])
        off = np.array([-g, g]) * mesh.areas[c] / 2
        mx, mn = max(0.0, dl, dr), min(0.0, dl, dr)
        phi = 1.0
        for o in off:
            if o > 0:
                phi = min(phi, mx / o)
            elif o < 0:
                phi = min(phi, mn / o)
        out[c] = np.minimum(rho[c] + np.clip(phi * off, mn, mx), 2 * rho[c])
    return out


@pytest.mark.parametrize("mesh", MESHES, ids=["uniform", "random"])
def test_reconstruction_is_limited_and_mean_preserving(mesh):
    rng = np.random.default_rng(3)
    for rho in (rng.random(mesh.n_cells), rng.random(mesh.n_cells) ** 8, np.cos(mesh.theta) + 1.5):
        faces = mesh.reconstruct(rho)
        np.testing.assert_allclose(faces, _reconstruct_reference(mesh, rho), rtol=1e-13, atol=1e-15)
        lo = np.minimum(rho, np.minimum(rho[mesh.neighbors[:, 0]], rho[mesh.neighbors[:, 1]]))
        hi = np.maximum(rho, np.maximum(rho[mesh.neighbors[:, 0]], rho[mesh.neighbors[:, 1]]))
        assert np.all(faces >= lo[:, None] - 1e-15) and np.all(faces <= hi[:, None] + 1e-15)
        np.testing.assert_allclose(faces.mean(axis=1), rho, rtol=1e-13)


def test_reconstruction_is_second_order_for_smooth_data():
    """Face values of the cell averages of 2 + sin(theta) against the exact point values: error O(h^2) away
    from the extrema (where the limiter acts), on non-uniform meshes."""
    errs = []
    for n in (50, 100, 200):
        mesh = random_circle(n, seed=1)
        rho = 2.0 + cd.fourier_average(mesh, 1, "sin")
        ends = np.stack([mesh.phi, mesh.phi + mesh.areas], axis=1)
        away = np.abs(np.cos(mesh.theta)) > 0.3
        errs.append(np.max(np.abs(mesh.reconstruct(rho) - (2.0 + np.sin(ends)))[away]))
    assert errs[1] < errs[0] / 3 and errs[2] < errs[1] / 3, errs


def test_local_maxima_on_the_circle():
    mesh = uniform_circle(12)
    v = np.array([0, 1, 0, 0, 2, 2, 1, 0, 0, 3, 0, 1.0])
    assert np.flatnonzero(local_maxima(mesh, v)).tolist() == [1, 4, 5, 9, 11]


# ------------------------------------------------------------------ files
def test_mesh_files_angles_points_and_text(tmp_path):
    mesh = random_circle(20, seed=5)
    np.save(tmp_path / "a.npy", mesh.phi)
    np.save(tmp_path / "p.npy", mesh.points)
    np.savetxt(tmp_path / "a.txt", mesh.phi)
    for name in ("a.npy", "p.npy", "a.txt"):
        m = read_circle(tmp_path / name)
        np.testing.assert_allclose(m.areas, mesh.areas, rtol=1e-12)
        np.testing.assert_allclose(m.nodes, mesh.nodes, atol=1e-14)
    mesh.save(tmp_path / "mesh.npz")
    back = load_saved_mesh(tmp_path / "mesh.npz")
    assert isinstance(back, CircleMesh) and np.array_equal(back.phi, mesh.phi)


@pytest.mark.parametrize(
    ("values", "words"),
    [
        (np.array([0.0, 2.0, 1.0, 3.0]), "not strictly increasing"),
        (np.array([0.0, 1.0]), "at least 3"),
        (np.array([0.0, 2.0, 4.0, 6.5]), "2 pi"),
        (np.array([0.0, np.nan, 1.0]), "NaN"),
        (np.array([[1.0, 0.0], [0.0, 2.0], [-1.0, 0.0]]), "unit circle"),
        (np.zeros((3, 3)), "1-D array"),
    ],
)
def test_malformed_mesh_files_are_refused_in_one_line(tmp_path, values, words):
    np.save(tmp_path / "bad.npy", values)
    with pytest.raises(ValueError, match=words) as info:
        read_circle(tmp_path / "bad.npy")
    assert "\n" not in str(info.value)


def test_registered_as_mesh_kind_circle():
    entry = GEOMETRIES.entry("circle")
    assert entry.info["d"] == 2

    class Section:
        file, cells = "", 40

    assert entry.info["cells"](Section) == 40
    assert GEOMETRIES.get("circle")(Section).n_cells == 40


# ------------------------------------------------------------------ densities
def test_von_mises_cell_averages_match_quadrature_for_a_peaked_bump():
    """kappa = 400 on 32 cells (the bump is narrower than a cell): each cell's mass against scipy's quad."""
    mesh = random_circle(32, seed=2)
    mu, kappa = 1.0, 400.0
    rho = cd.vmf_mixture(mesh, [mu], [kappa])
    f = lambda t: math.exp(kappa * (math.cos(t - mu) - 1)) / (2 * math.pi * iv(0, kappa) * math.exp(-kappa))
    ref = np.array([quad(f, a, a + h, points=[mu, mu + 2 * math.pi], limit=200)[0] for a, h in zip(mesh.phi, mesh.areas)])
    assert ref.sum() == pytest.approx(1.0, rel=1e-9)
    np.testing.assert_allclose(rho * mesh.areas, ref, atol=1e-9)
    # means as angles or as 2-vectors are the same density
    np.testing.assert_array_equal(cd.vmf_mixture(mesh, [[math.cos(mu), math.sin(mu)]], [kappa]), rho)


def test_mode_noise_octahedral_and_histogram_densities():
    mesh = random_circle(64, seed=4)
    k = 3
    rho = cd.spherical_harmonic(mesh, k, 0, 0.5)
    ref = [quad(lambda t: (1 + 0.5 * math.cos(k * t)) / (2 * math.pi), a, a + h)[0] for a, h in zip(mesh.phi, mesh.areas)]
    np.testing.assert_allclose(rho * mesh.areas, ref, atol=1e-15)
    noisy = cd.with_noise(mesh, cd.uniform(mesh), 0.5, seed=7)
    assert np.array_equal(noisy, cd.with_noise(mesh, cd.uniform(mesh), 0.5, seed=7))
    assert np.sum(noisy * mesh.areas) == pytest.approx(1.0) and noisy.min() > 0
    assert np.max(np.abs(2 * math.pi * noisy - 1)) == pytest.approx(0.5, rel=1e-12)  # 1 + 0.5 f, max |f| = 1, mean f = 0
    # the octahedral density is the law of the tokens the particle solver draws in d = 2
    from spherepde.solvers.particles import initial_tokens

    sigma = 0.3
    X = initial_tokens("octahedral", 200_000, 2, seed=0, sigma=sigma)
    hist = cd.from_particles(mesh, X)
    dens = cd.octahedral(mesh, sigma)
    assert np.sum(np.abs(hist - dens) * mesh.areas) < 0.03
    assert np.sum(dens * mesh.areas) == pytest.approx(1.0)


def test_histogram_counts_points_in_their_arcs():
    mesh = random_circle(10, seed=6)
    theta = mesh.phi + 0.3 * mesh.areas  # one point inside each arc, and one more in arc 4
    theta = np.append(theta, mesh.phi[4] + 0.9 * mesh.areas[4])
    rho = cd.from_particles(mesh, np.stack([np.cos(theta), np.sin(theta)], axis=1))
    counts = np.ones(10)
    counts[4] = 2
    np.testing.assert_allclose(rho * mesh.areas, counts / 11, rtol=1e-14)
