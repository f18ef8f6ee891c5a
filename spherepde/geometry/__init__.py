"""The sphere and densities on it: the geometry protocol the finite-volume solver is written
against and the registry of meshes a run can use (:mod:`.protocol`), triangulated unit spheres
with exact spherical geometry (:mod:`.mesh`) and their finite-volume geometry (:mod:`.surface`,
:mod:`.reconstruction`), icosphere levels and mesh files (:mod:`.meshfiles`, which registers
``mesh.kind = "icosphere"``), the circle S^1 (:mod:`.circle`, ``mesh.kind = "circle"``, and its
densities :mod:`.circle_densities`), cell-averaged densities (:mod:`.densities`) and their VTK
output (:mod:`.vtk`)."""

# the order registers mesh.kind = "icosphere" (meshfiles) before "circle": the default comes first in every list of kinds
from spherepde.geometry.mesh import MeshError, SphereMesh, spherical_triangle_areas  # noqa: I001
from spherepde.geometry.meshfiles import icosphere, load_mesh, mesh_level_for_cells, read_mesh, write_mesh
from spherepde.geometry.protocol import GEOMETRIES, Geometry
from spherepde.geometry.circle import CircleMesh

__all__ = ["CircleMesh", "GEOMETRIES", "Geometry", "MeshError", "SphereMesh", "spherical_triangle_areas", "icosphere", "load_mesh", "mesh_level_for_cells", "read_mesh", "write_mesh"]
