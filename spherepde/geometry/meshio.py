"""Temporary alias of :mod:`spherepde.geometry.meshfiles` (the module's old name, issue 25).

Kept only until ``spherepde/runs/runner.py``, ``spherepde/cli/mesh.py`` and
``tests/test_run_safety.py`` import ``spherepde.geometry.meshfiles``; then delete this file.
"""

from spherepde.geometry.meshfiles import icosphere, icosphere_bytes, load_mesh, mesh_level_for_cells, read_mesh, write_mesh

__all__ = ["icosphere", "icosphere_bytes", "load_mesh", "mesh_level_for_cells", "read_mesh", "write_mesh"]
