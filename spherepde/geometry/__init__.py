"""The sphere and densities on it: the geometry protocol the finite-volume solver is written
against and the registry of meshes a run can use (:mod:`.protocol`), triangulated unit spheres
with exact spherical geometry (:mod:`.mesh`) and their finite-volume geometry (:mod:`.surface`,
:mod:`.reconstruction`), icosphere levels and mesh files (:mod:`.meshfiles`, which registers
``mesh.kind = "icosphere"``), cell-averaged densities (:mod:`.densities`) and their VTK output
(:mod:`.vtk`)."""

from spherepde.geometry.mesh import MeshError, SphereMesh, spherical_triangle_areas
from spherepde.geometry.meshfiles import icosphere, load_mesh, mesh_level_for_cells, read_mesh, write_mesh
from spherepde.geometry.protocol import GEOMETRIES, Geometry

__all__ = ["GEOMETRIES", "Geometry", "MeshError", "SphereMesh", "spherical_triangle_areas", "icosphere", "load_mesh", "mesh_level_for_cells", "read_mesh", "write_mesh"]
