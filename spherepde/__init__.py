"""spherepde: the Transformer PDE (mean-field multi-head self-attention) on the sphere.

The curated public API; see README.md and ``../shared/design/MODEL.md`` for the model.
"""

__version__ = "0.1.0"

from spherepde.config import Config, ConfigError, default_config, load_config  # noqa: E402
from spherepde.mesh import SphereMesh, icosphere, read_mesh  # noqa: E402
from spherepde.particles import ParticleSolver, initial_tokens  # noqa: E402
from spherepde.weights import (  # noqa: E402
    FrozenProcess,
    OscillatingProcess,
    OUProcess,
    WeightPath,
    generate_weight_path,
)


def __getattr__(name):
    # the mesh solver and the run driver are imported on first use
    if name == "MeshSolver":
        from spherepde.meshsolver import MeshSolver

        return MeshSolver
    if name in ("run", "resume", "monte_carlo"):
        from spherepde import runner

        return getattr(runner, name)
    if name in ("plot_density", "plot_particles", "plot_run", "render_animation"):
        from spherepde import viz

        return getattr(viz, name)
    if name == "write_figures":
        from spherepde.plots import write_figures

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
    "WeightPath",
    "generate_weight_path",
    "OUProcess",
    "OscillatingProcess",
    "FrozenProcess",
    "ParticleSolver",
    "initial_tokens",
    "MeshSolver",
    "run",
    "resume",
    "monte_carlo",
    "plot_density",
    "plot_particles",
    "plot_run",
    "render_animation",
    "write_figures",
]
