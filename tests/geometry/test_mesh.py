"""Tests for spherepde.geometry.mesh: spherical geometry, orientation, connectivity and I/O."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from spherepde.geometry.mesh import MeshError, SphereMesh, spherical_triangle_areas
from spherepde.geometry.meshfiles import icosphere, load_mesh, mesh_level_for_cells, read_mesh, write_mesh

MESH_DIR = Path(__file__).resolve().parents[2] / "meshes"
FOUR_PI = 4.0 * np.pi


# ------------------------------------------------------------------------------ helpers


def _rowdot(a, b):
    return np.einsum("ij,ij->i", a, b)


def _unit(a):
    return a / np.linalg.norm(a, axis=-1, keepdims=True)


def random_hull_mesh(n_points=200, seed=0) -> SphereMesh:
    """Irregular mesh: convex hull of random points on the sphere (random order)."""
    from scipy.spatial import ConvexHull

    pts = _unit(np.random.default_rng(seed).normal(size=(n_points, 3)))
    return SphereMesh(pts, ConvexHull(pts).simplices, name="hull")


def octahedron():
    pts = np.array(
        [[1, 0, 0], [0, 1, 0], [-1, 0, 0], [0, -1, 0], [0, 0, 1], [0, 0, -1]], float
    )
    cells = [
        [0, 1, 4],
        [1, 2, 4],
        [2, 3, 4],
        [3, 0, 4],
        [1, 0, 5],
        [2, 1, 5],
        [3, 2, 5],
        [0, 3, 5],
    ]
    return pts, np.array(cells)


def uv_sphere() -> SphereMesh:
    return read_mesh(MESH_DIR / "uv-sphere.vtp")


SAMPLE_MESHES = {
    "icosphere-1": lambda: icosphere(1),
    "icosphere-3": lambda: icosphere(3),
    "icosphere-8": lambda: icosphere(8),
    "uv-sphere.vtp": uv_sphere,
    "random-hull": random_hull_mesh,
}


@pytest.fixture(params=list(SAMPLE_MESHES))
def m(request) -> SphereMesh:
    """Each sample mesh: icospheres, the shipped UV sphere file, an irregular hull."""
    return SAMPLE_MESHES[request.param]()


def girard_areas(a, b, c):
    """Spherical excess from Girard's theorem: sum of the interior angles minus pi."""

    def angle(x, y, z):  # angle at x between the great circles towards y and z
        # tangent directions x x ((y - x) x x): no cancellation for nearby points
        ty = np.cross(x, np.cross(y - x, x))
        tz = np.cross(x, np.cross(z - x, x))
        return np.arctan2(np.linalg.norm(np.cross(ty, tz), axis=1), _rowdot(ty, tz))

    pi = 4 * np.arctan(np.ones((), dtype=a.dtype))  # pi in the working precision
    return angle(a, b, c) + angle(b, c, a) + angle(c, a, b) - pi


def lhuilier_areas(a, b, c):
    """Spherical excess from l'Huilier's theorem (side lengths only)."""
    la = np.arccos(np.clip(_rowdot(b, c), -1, 1))
    lb = np.arccos(np.clip(_rowdot(c, a), -1, 1))
    lc = np.arccos(np.clip(_rowdot(a, b), -1, 1))
    s = 0.5 * (la + lb + lc)
    t = (
        np.tan(s / 2)
        * np.tan((s - la) / 2)
        * np.tan((s - lb) / 2)
        * np.tan((s - lc) / 2)
    )
    return 4.0 * np.arctan(np.sqrt(np.maximum(t, 0.0)))


def rotation_flux_exact(mesh, omega):
    """Exact flux integral_e v . n ds of v = omega x x through every edge (along n_e).

    On the great-circle arc from p to q (length L) the normal n is constant (the pole),
    so integral (omega x x) . n ds = omega . ((integral x ds) x n), and with
    x(s) = p cos s + t sin s, integral_0^L x ds = p sin L + t (1 - cos L)
    = 2 sin(L/2) m (m the arc midpoint), i.e. the chord length times the midpoint.
    """
    p, q = mesh.points[mesh.edges[:, 0]], mesh.points[mesh.edges[:, 1]]
    L = mesh.edge_lengths
    t = _unit(q - _rowdot(p, q)[:, None] * p)  # unit tangent at p towards q
    integral_x = p * np.sin(L)[:, None] + t * (1.0 - np.cos(L))[:, None]
    return np.cross(integral_x, mesh.edge_normals) @ omega


# -------------------------------------------------------------------------------- areas


@pytest.mark.parametrize("n", [1, 2, 4, 8, 16, 33])
def test_icosphere_area_sum_is_4pi(n):
    m = icosphere(n)
    assert m.n_cells == 20 * n * n
    assert m.n_vertices == 10 * n * n + 2
    assert m.n_edges == 30 * n * n
    assert abs(m.areas.sum() - FOUR_PI) <= 1e-12 * FOUR_PI
    assert (m.areas > 0).all()


@pytest.mark.parametrize(
    "make", [uv_sphere, random_hull_mesh], ids=["uv-sphere.vtp", "random-hull"]
)
def test_file_and_irregular_mesh_area_sum_is_4pi(make):
    m = make()
    assert abs(m.areas.sum() - FOUR_PI) <= 1e-12 * FOUR_PI


def test_octahedron_areas_exact():
    m = SphereMesh(*octahedron())
    np.testing.assert_allclose(m.areas, np.pi / 2, rtol=0, atol=1e-15)
    np.testing.assert_allclose(m.edge_lengths, np.pi / 2, rtol=0, atol=1e-15)
    np.testing.assert_allclose(m.center_distances, np.arccos(1 / 3), rtol=0, atol=1e-15)


def test_areas_match_girard_on_random_triangles():
    rng = np.random.default_rng(1)
    a, b, c = (_unit(rng.normal(size=(5000, 3))) for _ in range(3))
    ours = spherical_triangle_areas(a, b, c)
    np.testing.assert_allclose(ours, np.abs(girard_areas(a, b, c)), rtol=0, atol=2e-13)
    # small triangles, where the formulas are hardest: compare relatively with Girard's
    # formula in extended precision (its absolute error ~ 1e-19)
    scale = 10.0 ** rng.uniform(-4, -1, size=(5000, 1))
    b2, c2 = (
        _unit(a + scale * rng.normal(size=(5000, 3))),
        _unit(a + scale * rng.normal(size=(5000, 3))),
    )
    ld = [x.astype(np.longdouble) for x in (a, b2, c2)]
    ref = np.abs(
        girard_areas(*[x / np.linalg.norm(x, axis=1, keepdims=True) for x in ld])
    ).astype(np.float64)
    np.testing.assert_allclose(spherical_triangle_areas(a, b2, c2), ref, rtol=1e-8)


def test_mesh_areas_match_lhuilier_and_girard():
    m = random_hull_mesh(300, seed=2)
    a, b, c = (m.points[m.cells[:, k]] for k in range(3))
    np.testing.assert_allclose(m.areas, lhuilier_areas(a, b, c), rtol=1e-10)
    np.testing.assert_allclose(m.areas, girard_areas(a, b, c), rtol=1e-11)


# ---------------------------------------------------------------------- edges & normals


def test_edge_normals_unit_tangent_outward(m):
    n, mid = m.edge_normals, m.edge_midpoints
    np.testing.assert_allclose(np.linalg.norm(n, axis=1), 1.0, rtol=0, atol=1e-14)
    np.testing.assert_allclose(np.linalg.norm(mid, axis=1), 1.0, rtol=0, atol=1e-14)
    assert np.abs(_rowdot(n, mid)).max() < 1e-13  # tangent at the midpoint
    # orthogonal to the edge's great circle: parallel to p_i x p_j
    pi, pj = m.points[m.edges[:, 0]], m.points[m.edges[:, 1]]
    pole = _unit(np.cross(pi, pj))
    np.testing.assert_allclose(np.abs(_rowdot(n, pole)), 1.0, rtol=0, atol=1e-12)
    # points from edge_cells[:, 0] into edge_cells[:, 1]
    c, nb = m.edge_cells.T
    assert (_rowdot(n, m.centers[nb] - m.centers[c]) > 0).all()
    # per cell: sign * normal is outward
    for k in range(3):
        e = m.cell_edges[:, k]
        outward = m.cell_edge_signs[:, k, None] * n[e]
        assert (_rowdot(outward, mid[e] - m.centers) > 0).all()
        # the cell lies behind the edge's great circle: its ends on it, the third
        # vertex behind it
        for j in range(3):
            side = _rowdot(outward, m.points[m.cells[:, j]])
            assert (
                (side < 0).all() if j == (k + 2) % 3 else (np.abs(side) < 1e-14).all()
            )


def test_lengths_midpoints_distances_match_naive_formulas(m):
    pi, pj = m.points[m.edges[:, 0]], m.points[m.edges[:, 1]]
    np.testing.assert_allclose(
        m.edge_lengths, np.arccos(np.clip(_rowdot(pi, pj), -1, 1)), rtol=1e-9
    )
    np.testing.assert_allclose(m.edge_midpoints, _unit(pi + pj), rtol=0, atol=1e-15)
    a, b = m.centers[m.edge_cells[:, 0]], m.centers[m.edge_cells[:, 1]]
    naive = np.arctan2(np.linalg.norm(np.cross(a, b), axis=1), _rowdot(a, b))
    np.testing.assert_allclose(m.center_distances, naive, rtol=1e-9)
    p = m.points[m.cells]
    np.testing.assert_allclose(m.centers, _unit(p.sum(axis=1)), rtol=0, atol=1e-15)
    assert m.h == m.edge_lengths.max()


# ------------------------------------------------------------------------- connectivity


def test_connectivity_consistent(m):
    nc = m.n_cells
    assert m.cells.dtype == np.int64 and m.edges.dtype == np.int64
    assert m.n_edges * 2 == 3 * nc and m.n_vertices - m.n_edges + nc == 2
    # edges sorted i < j and unique
    assert (m.edges[:, 0] < m.edges[:, 1]).all()
    assert np.unique(m.edges, axis=0).shape[0] == m.n_edges
    # cell_edges[c, k] joins cells[c, k] and cells[c, k+1]
    ends = np.sort(np.stack([m.cells, np.roll(m.cells, -1, axis=1)], axis=-1), axis=-1)
    np.testing.assert_array_equal(m.edges[m.cell_edges], ends)
    # every edge used by exactly two cells, the ones in edge_cells
    ec = m.edge_cells[m.cell_edges]
    cidx = np.arange(nc)[:, None]
    assert ((ec[..., 0] == cidx) ^ (ec[..., 1] == cidx)).all()
    np.testing.assert_array_equal(
        m.cell_edge_signs, np.where(ec[..., 0] == cidx, 1.0, -1.0)
    )
    np.testing.assert_array_equal(np.bincount(m.cell_edges.ravel()), 2)
    # neighbour symmetry: c neighbours each of its neighbours, across the same edge
    nb = m.neighbors
    assert (nb != cidx).all()
    back = nb[nb]  # (nc, 3, 3)
    assert (back == cidx[:, :, None]).any(axis=2).all()
    k_back = np.argmax(back == cidx[:, :, None], axis=2)
    np.testing.assert_array_equal(m.cell_edges[nb, k_back], m.cell_edges)
    np.testing.assert_array_equal(m.cell_edge_signs[nb, k_back], -m.cell_edge_signs)


def test_orientation_made_outward_when_half_the_triangles_are_flipped():
    ref = icosphere(8)
    cells = np.array(ref.cells)
    flip = np.random.default_rng(3).permutation(ref.n_cells)[: ref.n_cells // 2]
    cells[flip] = cells[flip][:, [0, 2, 1]]
    p = ref.points
    det_before = _rowdot(p[cells[:, 0]], np.cross(p[cells[:, 1]], p[cells[:, 2]]))
    assert (det_before < 0).sum() == ref.n_cells // 2
    m = SphereMesh(p, cells)
    det = _rowdot(p[m.cells[:, 0]], np.cross(p[m.cells[:, 1]], p[m.cells[:, 2]]))
    assert (det > 0).all()
    np.testing.assert_array_equal(np.sort(m.cells, axis=1), np.sort(ref.cells, axis=1))
    np.testing.assert_allclose(m.areas, ref.areas, rtol=0, atol=1e-16)


def test_points_projected_and_arrays_read_only():
    pts, cells = octahedron()
    m = SphereMesh(3.0 * pts + 0.0, cells)
    np.testing.assert_allclose(np.linalg.norm(m.points, axis=1), 1.0)
    for name in [
        "points",
        "cells",
        "centers",
        "areas",
        "edges",
        "edge_cells",
        "edge_lengths",
        "edge_midpoints",
        "edge_normals",
        "center_distances",
        "cell_edges",
        "cell_edge_signs",
        "neighbors",
    ]:
        arr = getattr(m, name)
        assert not arr.flags.writeable, name
        with pytest.raises(ValueError):
            arr.flat[0] = 0
    with pytest.raises(AttributeError):
        m.points = pts
    assert pts.flags.writeable  # the caller's arrays are not frozen


# --------------------------------------------------------------------------- divergence


OMEGA = np.array([0.3, -0.5, 0.8])


def test_divergence_of_rotation_with_exact_edge_fluxes_is_zero(m):
    flux = rotation_flux_exact(m, OMEGA)  # integral over the edge
    per_cell = (m.cell_edge_signs * flux[m.cell_edges]).sum(axis=1)
    assert np.abs(per_cell).max() < 1e-14
    div = m.divergence(flux / m.edge_lengths)
    assert np.abs(div * m.areas).max() < 1e-14
    # sanity: the flux itself is not small
    assert np.abs(flux).max() > 1e-3 * m.h


def test_divergence_of_rotation_with_midpoint_fluxes_converges():
    # u_e = v(m_e) . n_e: the exact edge integral is chord * v(m) . n, so the midpoint
    # rule errs by (|e| - chord) u_e = O(h^3) per edge, i.e. O(h) in the divergence
    # (the errors of a cell's three edges do not cancel on the non-equilateral cells).
    # Measured slopes over levels 4, 8, 16, 32: max |div| 1.03, area-weighted L1 1.08
    # (1.01 / 1.01 between levels 32 and 64), i.e. first order.
    expected_order = 0.95
    hs, err_max, err_l1 = [], [], []
    for n in (4, 8, 16, 32):
        m = icosphere(n)
        u = _rowdot(np.cross(OMEGA, m.edge_midpoints), m.edge_normals)
        div = m.divergence(u)
        hs.append(m.h)
        err_max.append(np.abs(div).max())
        err_l1.append((np.abs(div) * m.areas).sum())
    slope_max = np.polyfit(np.log(hs), np.log(err_max), 1)[0]
    slope_l1 = np.polyfit(np.log(hs), np.log(err_l1), 1)[0]
    assert slope_max >= expected_order, slope_max
    assert slope_l1 >= expected_order, slope_l1
    assert err_max[-1] < 2e-3


def test_divergence_conserves_and_matches_loop():
    m = random_hull_mesh(100, seed=4)
    u = np.random.default_rng(5).normal(size=(m.n_edges, 2))
    div = m.divergence(u)
    assert div.shape == (m.n_cells, 2)
    # sum_c |C_c| div_c = 0 for any edge field (each edge enters twice, opposite signs)
    np.testing.assert_allclose((div * m.areas[:, None]).sum(axis=0), 0.0, atol=1e-12)
    ref = np.zeros((m.n_cells, 2))
    for e, (c, nb) in enumerate(m.edge_cells):
        ref[c] += m.edge_lengths[e] * u[e] / m.areas[c]
        ref[nb] -= m.edge_lengths[e] * u[e] / m.areas[nb]
    np.testing.assert_allclose(div, ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(m.divergence(u[:, 0]), ref[:, 0], rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError):
        m.divergence(np.zeros(m.n_edges + 1))


# ---------------------------------------------------------------------------------- I/O


def _assert_same_geometry(m, ref, atol):
    assert (m.n_cells, m.n_edges, m.n_vertices) == (
        ref.n_cells,
        ref.n_edges,
        ref.n_vertices,
    )
    np.testing.assert_allclose(np.sort(m.areas), np.sort(ref.areas), rtol=0, atol=atol)
    # match cells by centre (file formats may reorder points and cells)
    from scipy.spatial import cKDTree

    dist, idx = cKDTree(ref.centers).query(m.centers)
    assert dist.max() < 1e-6
    assert np.unique(idx).size == m.n_cells
    np.testing.assert_allclose(m.areas, ref.areas[idx], rtol=0, atol=atol)


def test_npz_round_trip_exact(tmp_path):
    ref = icosphere(8)
    write_mesh(ref, tmp_path / "m.npz")
    m = read_mesh(tmp_path / "m.npz")
    assert m.name == "icosphere-8"
    np.testing.assert_array_equal(m.points, ref.points)
    np.testing.assert_array_equal(m.cells, ref.cells)
    np.testing.assert_array_equal(m.areas, ref.areas)
    np.testing.assert_array_equal(SphereMesh.load(tmp_path / "m.npz").edges, ref.edges)


@pytest.mark.parametrize(
    "ext,atol",
    [("vtp", 1e-14), ("vtk", 1e-14), ("obj", 1e-14), ("ply", 1e-7), ("stl", 1e-7)],
)
def test_pyvista_round_trip(tmp_path, ext, atol):
    # .ply and .stl store single-precision coordinates, hence the looser tolerance there
    ref = icosphere(8)
    path = tmp_path / f"m.{ext}"
    write_mesh(ref, path)
    m = read_mesh(path)
    _assert_same_geometry(m, ref, atol)
    assert abs(m.areas.sum() - FOUR_PI) <= 1e-12 * FOUR_PI


@pytest.mark.parametrize("n", [4, 8, 16])
def test_shipped_icosphere_files_equal_generated(n):
    m = load_mesh(MESH_DIR / f"icosphere-{n}.npz")
    ref = icosphere(n)
    np.testing.assert_array_equal(m.points, ref.points)
    np.testing.assert_array_equal(m.cells, ref.cells)
    assert m.name == ref.name


def test_shipped_uv_sphere():
    m = uv_sphere()
    assert m.n_cells == 1056 and m.n_vertices == 530
    assert 0.1 < m.quality()["area_ratio"] < 0.2


def test_quad_surface_file_is_triangulated(tmp_path):
    import pyvista as pv

    pv.Cube(center=(0.0, 0.0, 0.0)).save(
        tmp_path / "cube.vtp"
    )  # 6 quads, 24 duplicated points
    m = read_mesh(tmp_path / "cube.vtp")
    assert (m.n_cells, m.n_vertices) == (12, 8)
    assert abs(m.areas.sum() - FOUR_PI) <= 1e-12 * FOUR_PI


def test_load_mesh_specs(tmp_path):
    m8 = icosphere(8)
    assert icosphere(8) is m8  # cached
    assert load_mesh(8) is m8
    assert load_mesh(np.int64(8)) is m8
    assert load_mesh("icosphere:8") is m8
    assert load_mesh(m8) is m8
    write_mesh(m8, tmp_path / "x.vtp")
    assert load_mesh(tmp_path / "x.vtp").n_cells == m8.n_cells
    assert load_mesh(str(tmp_path / "x.vtp")).n_cells == m8.n_cells
    for bad in (0, -3, "icosphere:zero", "icosphere:0"):
        with pytest.raises(MeshError):
            load_mesh(bad)
    with pytest.raises(MeshError):
        icosphere(2.5)
    with pytest.raises(TypeError):
        load_mesh(3.0)


def test_mesh_level_for_cells():
    assert [mesh_level_for_cells(k) for k in (1, 20, 21, 80, 81, 320, 321, 5120)] == [
        1,
        1,
        2,
        2,
        3,
        4,
        5,
        16,
    ]
    for k in range(1, 3000, 7):
        n = mesh_level_for_cells(k)
        assert 20 * n * n >= k and (n == 1 or 20 * (n - 1) ** 2 < k)


def test_quality_keys_and_values():
    q = icosphere(4).quality()
    assert set(q) == {
        "name",
        "n_cells",
        "n_edges",
        "n_vertices",
        "area_total",
        "area_min",
        "area_max",
        "area_ratio",
        "h",
        "h_min",
        "h_mean",
    }
    assert q["n_cells"] == 320 and q["name"] == "icosphere-4"
    assert abs(q["area_total"] - FOUR_PI) < 1e-12
    assert 0 < q["area_ratio"] <= 1 and q["h_min"] <= q["h_mean"] <= q["h"]


# --------------------------------------------------------------------------- bad meshes


def _error(match, points, cells):
    with pytest.raises(MeshError, match=match):
        SphereMesh(points, cells)


def test_missing_file_is_clear(tmp_path):
    for path in (tmp_path / "nope.vtp", tmp_path / "nope.npz"):
        with pytest.raises(FileNotFoundError, match="not found"):
            read_mesh(path)
        with pytest.raises(FileNotFoundError, match="nope"):
            load_mesh(str(path))


def test_open_surface_rejected(tmp_path):
    ref = icosphere(4)
    _error("open", ref.points, ref.cells[1:])
    write_mesh(SphereMesh(ref.points, ref.cells), tmp_path / "ok.vtp")
    import pyvista as pv

    poly = pv.read(tmp_path / "ok.vtp")
    poly.remove_cells([0], inplace=True)
    poly.save(tmp_path / "open.vtp")
    with pytest.raises(MeshError, match="open"):
        read_mesh(tmp_path / "open.vtp")


def test_non_manifold_rejected(tmp_path):
    ref = icosphere(4)
    # duplicated triangle: its edges are shared by three triangles
    _error("2-manifold", ref.points, np.vstack([ref.cells, ref.cells[:1]]))
    # a fin: a third triangle on an existing edge
    i, j = ref.edges[0]
    apex = _unit(ref.points[i] + ref.points[j] + 0.3 * ref.edge_normals[0])
    _error(
        "2-manifold",
        np.vstack([ref.points, apex]),
        np.vstack([ref.cells, [[i, j, ref.n_vertices]]]),
    )
    # same through a file
    import pyvista as pv

    faces = np.hstack(
        [np.full((ref.n_cells + 1, 1), 3), np.vstack([ref.cells, ref.cells[:1]])]
    ).ravel()
    pv.PolyData(np.array(ref.points), faces=faces).save(tmp_path / "dup.vtp")
    with pytest.raises(MeshError, match="2-manifold"):
        read_mesh(tmp_path / "dup.vtp")


def test_pinched_disconnected_and_overlapping_rejected():
    pts, cells = octahedron()
    # two octahedra sharing both poles (the second rotated by 45 degrees): chi = 2,
    # every edge shared by two triangles, but the pieces touch only at the poles
    rot = np.array([[1, -1, 0], [1, 1, 0], [0, 0, np.sqrt(2)]]) / np.sqrt(2)
    pts2 = np.vstack([pts, (pts[:4] @ rot.T)])
    remap = np.array([6, 7, 8, 9, 4, 5])
    _error("not connected", pts2, np.vstack([cells, remap[cells]]))
    # an icosphere with one vertex glued to its antipode (pinched): edge-connected,
    # closed, but chi = 1
    ico = icosphere(2)
    far = np.argmin(ico.points @ ico.points[0])
    cells_p = np.where(ico.cells == far, 0, ico.cells)
    keep = np.ones(ico.n_vertices, bool)
    keep[far] = False
    newidx = np.cumsum(keep) - 1
    _error("pinched", ico.points[keep], newidx[cells_p])
    # two disjoint octahedra
    _error("not connected", np.vstack([pts, 0.5 * pts]), np.vstack([cells, cells + 6]))
    # double cover: 8 equator vertices at longitudes 0, 90, ..., 630 degrees
    lon = np.deg2rad(90.0 * np.arange(8))
    ring = np.stack([np.cos(lon), np.sin(lon), np.zeros(8)], axis=1)
    pts3 = np.vstack([ring, [[0, 0, 1], [0, 0, -1]]])
    k = np.arange(8)
    cells3 = np.vstack(
        [
            np.stack([np.full(8, 8), k, (k + 1) % 8], 1),
            np.stack([np.full(8, 9), (k + 1) % 8, k], 1),
        ]
    )
    _error("cover the sphere 2 times", pts3, cells3)


def test_torus_rejected_by_euler_characteristic():
    # a 6 x 6 torus grid (R=2, r=1) around the z axis, radially projected to the sphere
    nu, nv_ = 6, 6
    u, v = np.meshgrid(
        2 * np.pi * np.arange(nu) / nu,
        2 * np.pi * (np.arange(nv_) + 0.3) / nv_,
        indexing="ij",
    )
    pts = np.stack(
        [(2 + np.cos(v)) * np.cos(u), (2 + np.cos(v)) * np.sin(u), np.sin(v)], -1
    ).reshape(-1, 3)
    idx = np.arange(nu * nv_).reshape(nu, nv_)
    a, b = idx, np.roll(idx, -1, 0)
    c, d = np.roll(idx, -1, 1), np.roll(np.roll(idx, -1, 0), -1, 1)
    cells = np.vstack(
        [np.stack([a, b, d], -1).reshape(-1, 3), np.stack([a, d, c], -1).reshape(-1, 3)]
    )
    _error("Euler characteristic", pts, cells)


def test_bad_points_and_cells_rejected(tmp_path):
    pts, cells = octahedron()
    bad = pts.copy()
    bad[2] = np.nan
    _error("not finite", bad, cells)
    bad = pts.copy()
    bad[3] = 0.0
    _error("zero length", bad, cells)
    _error("outside", pts, np.vstack([cells[:-1], [[0, 3, 6]]]))
    _error("outside", pts, np.vstack([cells[:-1], [[0, 3, -1]]]))
    _error("repeat a vertex", pts, np.vstack([cells[:-1], [[0, 3, 3]]]))
    _error("used by no triangle", np.vstack([pts, [[1.0, 1.0, 1.0]]]), cells)
    _error("shape", pts[:, :2], cells)
    _error("triangles only", pts, np.hstack([cells, cells[:, :1]]))
    _error("integer", pts, cells + 0.5)
    # coincident points / three vertices on one great circle
    dup = np.vstack([pts, pts[:1]])
    _error("degenerate", dup, np.vstack([cells, [[0, 6, 1]]]))
    _error("degenerate", pts, np.vstack([cells, [[0, 1, 2]]]))
    # bad points through an .npz file
    np.savez(
        tmp_path / "nan.npz",
        points=np.where(np.arange(6)[:, None] == 1, np.nan, pts),
        cells=cells,
    )
    with pytest.raises(MeshError, match="not finite"):
        read_mesh(tmp_path / "nan.npz")
    np.savez(tmp_path / "junk.npz", x=np.zeros(3))
    with pytest.raises(MeshError, match="missing"):
        read_mesh(tmp_path / "junk.npz")


def test_non_triangulable_file_rejected(tmp_path):
    import pyvista as pv

    pv.Line().save(tmp_path / "line.vtp")
    with pytest.raises(MeshError, match="line"):
        read_mesh(tmp_path / "line.vtp")
    (tmp_path / "garbage.vtk").write_text("this is not a vtk file\n")
    with pytest.raises(MeshError):
        read_mesh(tmp_path / "garbage.vtk")
