"""spherepde: the Transformer PDE (mean-field multi-head self-attention) on the sphere.

The curated public API; the model, its conventions and the discrete schemes are in
``docs/model.md``. The package is layered in the order data flows, lowest first:
:mod:`spherepde._base` (version, ConfigError, memory) -> :mod:`spherepde.attention`
(attention sums) and :mod:`spherepde.geometry` (mesh, densities) -> :mod:`spherepde.model`
(weight paths, velocity, energy) -> :mod:`spherepde.solvers` -> :mod:`spherepde.runs`
(configuration, run folders, sweeps) -> :mod:`spherepde.viz` -> :mod:`spherepde.studies`
-> :mod:`spherepde.cli`; each imports only from the layers before it (tests/test_layout.py),
and no module of the package imports this namespace.
"""

from spherepde.runs import interrupt as _interrupt  # noqa: F401, I001  (first: Ctrl-C while the command line starts exits 130, one line)
from spherepde._base import __version__  # noqa: E402
from spherepde.geometry import densities  # noqa: E402
from spherepde.geometry.mesh import SphereMesh  # noqa: E402
from spherepde.geometry.meshfiles import icosphere, read_mesh  # noqa: E402
from spherepde.model.weights import (  # noqa: E402
    FrozenProcess,
    OscillatingProcess,
    OUProcess,
    WeightPath,
    generate_weight_path,
)
from spherepde.runs.config import Config, ConfigError, default_config, load_config  # noqa: E402
from spherepde.solvers.particles import ParticleSolver, initial_tokens  # noqa: E402
from spherepde.solvers.protocol import Solver, Trajectory, integrate  # noqa: E402


def __getattr__(name):
    # the mesh solver, the run driver and the pictures are imported on first use
    if name == "MeshSolver":
        from spherepde.solvers.mesh import MeshSolver

        return MeshSolver
    if name == "run":
        from spherepde.runs.runner import run

        return run
    if name in ("resume", "monte_carlo"):  # either kind of folder; Monte-Carlo sits above the single run
        from spherepde.runs import montecarlo

        return getattr(montecarlo, name)
    if name in ("plot_density", "plot_particles", "plot_run", "render_animation"):
        from spherepde.viz import render

        return getattr(render, name)
    if name in ("open_run", "open_sweep", "export_netcdf", "diagnostics_frame"):
        from spherepde.runs import dataset

        return getattr(dataset, name)
    if name == "write_figures":
        from spherepde.viz.plots import write_figures

        return write_figures
    raise AttributeError(f"module 'spherepde' has no attribute {name!r}")


__all__ = [
    "__version__",
    "Config",
    "ConfigError",
    "default_config",
    "load_config",
    "SphereMesh",
    "icosphere",
    "read_mesh",
    "densities",
    "WeightPath",
    "generate_weight_path",
    "OUProcess",
    "OscillatingProcess",
    "FrozenProcess",
    "ParticleSolver",
    "initial_tokens",
    "Solver",
    "Trajectory",
    "integrate",
    "MeshSolver",
    "run",
    "resume",
    "monte_carlo",
    "plot_density",
    "plot_particles",
    "plot_run",
    "render_animation",
    "write_figures",
    "open_run",
    "open_sweep",
    "export_netcdf",
    "diagnostics_frame",
]
