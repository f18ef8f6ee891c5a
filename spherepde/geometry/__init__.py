"""The sphere and densities on it: triangulated unit spheres with exact spherical geometry
(:mod:`.mesh`), icosphere levels and mesh files (:mod:`.meshfiles`), cell-averaged densities
(:mod:`.densities`) and their VTK output (:mod:`.vtk`)."""

from spherepde.geometry.mesh import MeshError, SphereMesh, spherical_triangle_areas
from spherepde.geometry.meshfiles import icosphere, load_mesh, mesh_level_for_cells, read_mesh, write_mesh

__all__ = ["MeshError", "SphereMesh", "spherical_triangle_areas", "icosphere", "load_mesh", "mesh_level_for_cells", "read_mesh", "write_mesh"]
