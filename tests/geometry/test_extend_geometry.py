"""A new geometry is one class and one registration: a toy geometry defined here alone (an
icosphere wrapped anew behind the geometry protocol), registered as ``mesh.kind = "toy"``
and run through the entry point ``spherepde run`` uses; no package file knows it."""

from __future__ import annotations

import numpy as np
import pytest

from spherepde.cli.main import main
from spherepde.geometry.mesh import SphereMesh
from spherepde.geometry.meshfiles import icosphere
from spherepde.geometry.protocol import GEOMETRIES, Geometry, local_maxima
from spherepde.geometry.reconstruction import limited_linear
from spherepde.geometry.surface import fv_geometry
from spherepde.solvers import fv

USED = {"built": 0, "geometry": 0, "reconstruct": 0}


class ToyGeometry:
    """The protocol's members, copied from an icosphere's geometry; ``reversed_slots`` lists each
    cell's faces in the opposite order and presents face values flat (n_slots,)."""

    d = 3

    def __init__(self, inner, *, reversed_slots: bool = False):
        self.nodes, self.areas = inner.nodes, inner.areas
        self.edge_cells, self.edge_lengths, self.edge_normals = inner.edge_cells, inner.edge_lengths, inner.edge_normals
        self.edge_midpoints, self.node_distances = inner.edge_midpoints, inner.node_distances
        nc = inner.n_cells
        self.face_offsets = inner.face_offsets
        perm = np.arange(3 * nc).reshape(nc, 3)[:, ::-1].ravel() if reversed_slots else np.arange(3 * nc)  # new slot -> old slot
        where = np.argsort(perm)  # old slot -> new slot
        self.cell_faces, self.cell_face_signs = inner.cell_faces[perm], inner.cell_face_signs[perm]
        self.face_slots = where[inner.face_slots]
        self._nbr = inner.neighbors.reshape(-1)[perm]
        k = np.arange(3)[::-1] if reversed_slots else np.arange(3)
        self._weights = np.ascontiguousarray(inner.recon[:, k][:, :, k]).reshape(-1)
        self._reversed = reversed_slots

    n_cells = property(lambda self: self.areas.shape[0])
    n_edges = property(lambda self: self.edge_lengths.shape[0])
    slot_shape = property(lambda self: (3 * self.n_cells,) if self._reversed else (self.n_cells, 3))

    def reconstruct(self, rho):
        USED["reconstruct"] += 1
        faces = limited_linear(rho, self.face_offsets, self._nbr, self._weights, 9 * np.arange(self.n_cells))
        return faces.reshape(self.slot_shape)

    def geometry(self):
        return self


class ToyMesh(SphereMesh):
    """An icosphere built anew; the solver sees it only through :class:`ToyGeometry`."""

    def geometry(self):
        USED["geometry"] += 1
        return ToyGeometry(fv_geometry(self))


def build_toy(section) -> ToyMesh:
    USED["built"] += 1
    ico = icosphere(section.level)
    return ToyMesh(ico.points, ico.cells, name="toy")


@pytest.fixture
def toy_kind():
    GEOMETRIES.register("toy", build_toy, d=3, about="an icosphere wrapped anew (test only)")
    try:
        yield "toy"
    finally:
        GEOMETRIES.unregister("toy")
    assert "toy" not in GEOMETRIES


CONFIG = """
[run]
solver = "mesh"
[model]
H = 1
[mesh]
kind = "{kind}"
level = 3
[solver]
T = 0.05
order = 2
[output]
vtk = false
"""


def test_a_registered_toy_geometry_runs_through_the_entry_point(tmp_path, toy_kind):
    folders = {}
    for kind in ("icosphere", toy_kind):
        cfg = tmp_path / f"{kind}.toml"
        cfg.write_text(CONFIG.format(kind=kind))
        folders[kind] = tmp_path / f"run-{kind}"
        assert main(["run", str(cfg), "--out", str(folders[kind]), "-q"]) == 0
    assert USED["built"] == 1 and USED["geometry"] >= 1 and USED["reconstruct"] > 0
    assert "toy" in (folders["toy"] / "config.toml").read_text()
    # the same cells behind the protocol give the same numbers, bit for bit
    assert (folders["toy"] / "diagnostics.csv").read_text() == (folders["icosphere"] / "diagnostics.csv").read_text()


def test_the_toy_geometry_satisfies_the_protocol_and_needs_d_3(tmp_path, toy_kind, capsys):
    assert isinstance(ToyGeometry(fv_geometry(icosphere(2))), Geometry)
    cfg = tmp_path / "d4.toml"
    cfg.write_text(CONFIG.format(kind=toy_kind).replace("H = 1", "H = 1\nd = 4"))
    assert main(["run", str(cfg), "--out", str(tmp_path / "r"), "-q"]) != 0
    assert "model.d: the mesh solver works on S^2 (d = 3), got d = 4" in capsys.readouterr().err


def test_kernels_follow_the_csr_order_of_any_geometry():
    """Each cell's faces listed in reverse (flat face values): the same update up to the order of the sums."""
    inner = fv_geometry(icosphere(4))
    toy = ToyGeometry(inner, reversed_slots=True)
    rng = np.random.default_rng(0)
    rho = rng.random(inner.n_cells) ** 2
    u = rng.standard_normal(inner.n_edges)
    for order in (1, 2):
        fi, ft = fv.face_values(inner, rho, order), fv.face_values(toy, rho, order)
        assert ft.shape == (3 * inner.n_cells,)
        np.testing.assert_allclose(ft.reshape(-1, 3)[:, ::-1], fi, rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(fv.fv_rhs(toy, ft, u), fv.fv_rhs(inner, fi, u), rtol=1e-12, atol=1e-12)
        assert fv.cfl_bound(toy, u, order, rho, ft) == pytest.approx(fv.cfl_bound(inner, u, order, rho, fi), rel=1e-13)


def test_local_maxima_from_the_faces_alone():
    inner = fv_geometry(icosphere(4))
    rng = np.random.default_rng(1)
    for values in (rng.random(inner.n_cells), np.round(rng.random(inner.n_cells), 1)):  # ties included
        expected = np.all(values[:, None] >= values[inner.neighbors], axis=1)
        np.testing.assert_array_equal(local_maxima(inner, values), expected)
        np.testing.assert_array_equal(local_maxima(ToyGeometry(inner, reversed_slots=True), values), expected)


def test_the_references_serve_any_geometry():
    from spherepde.solvers import _reference as ref

    inner = fv_geometry(icosphere(3))
    toy = ToyGeometry(inner, reversed_slots=True)
    rng = np.random.default_rng(2)
    rho, u = rng.random(inner.n_cells), rng.standard_normal(inner.n_edges)
    for order in (1, 2):
        f = fv.face_values(toy, rho, order)
        np.testing.assert_allclose(fv.fv_rhs(toy, f, u), ref.fv_rhs_reference(toy, f, u), rtol=1e-12, atol=1e-12)
        assert fv.cfl_bound(toy, u, order, rho, f) == pytest.approx(ref.cfl_bound_reference(toy, u, order, rho, f), rel=1e-14)


def test_the_config_asks_the_registry_for_mesh_kind(tmp_path, toy_kind):
    from spherepde.runs.config import ConfigError, load_config

    cfg = tmp_path / "toy.toml"
    cfg.write_text(CONFIG.format(kind=toy_kind))
    assert load_config(cfg).mesh.kind == "toy"
    GEOMETRIES.unregister(toy_kind)
    try:
        with pytest.raises(ConfigError, match="mesh.kind"):
            load_config(cfg)
    finally:
        GEOMETRIES.register(toy_kind, build_toy, d=3)
