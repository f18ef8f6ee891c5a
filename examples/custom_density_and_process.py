"""
Your own initial density and weight process
===========================================

A density-level run with your own initial density and your own weight process.

* The initial density is a plain function of points on the sphere, f(X) for X of shape
  (m, 3), turned into normalised cell averages by ``densities.cell_average`` (sub-cell
  quadrature) and ``densities.normalise``.
* The weight process is a frozen dataclass with a ``name``, a noise level ``sigma`` and a
  ``drift(D, t)`` returning f_h(D_h, t) for all heads at once (shape (H, 3, 3)): the
  weight SDE is dD_h = f_h dt + sigma dW^sym (docs/model.md §2). Here the heads relax
  towards a target that rotates about the z axis, with a little noise.
* ``--out FOLDER`` makes it a run folder like any other: the path is saved (``path.save``)
  and driven with ``weights.process = "file"``, the density saved as a ``.npy`` and read with
  ``initial.kind = "file"``; the inputs go to ``FOLDER-inputs`` next to it.

Run it::

    python examples/custom_density_and_process.py                  # icosphere 16, H = 4, T = 2
    python examples/custom_density_and_process.py --size gallery   # icosphere 8 (the docs' gallery)
    python examples/custom_density_and_process.py --tiny           # seconds (what the test suite runs)
    python examples/custom_density_and_process.py --out runs/custom   # the same as a run folder:
    spherepde plot runs/custom; spherepde render runs/custom           # ... figures, pictures, open_run
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np

import spherepde as sp
from spherepde import densities


@dataclass(frozen=True)
class RotatingTarget:
    """dD_h = (beta R(omega t) diag(1, 0.5, 0) R(omega t)^T - D_h) dt + sigma dW^sym."""

    beta: float = 3.0
    omega: float = 1.0
    sigma: float = 0.2
    name = "rotating-target"

    def drift(self, D: np.ndarray, t: float) -> np.ndarray:
        c, s = math.cos(self.omega * t), math.sin(self.omega * t)
        R = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
        target = self.beta * R @ np.diag([1.0, 0.5, 0.0]) @ R.T
        return target[None] - D


def two_caps(X: np.ndarray) -> np.ndarray:
    """Two smooth caps, around +z and around +x (any non-negative function of the points)."""
    return np.exp(8.0 * X[:, 2]) + 0.5 * np.exp(8.0 * X[:, 0])


#: (icosphere level, heads, end time) of each size.
SIZES = {"tiny": (4, 2, 0.2), "gallery": (8, 4, 2.0), "full": (16, 4, 2.0)}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description="Your own initial density and weight process.")
    p.add_argument("--size", choices=SIZES, default="full", help="problem size (default: full)")
    p.add_argument("--tiny", action="store_const", dest="size", const="tiny", help="the same as --size tiny (seconds)")
    p.add_argument("--out", help="write a run folder there (for spherepde plot / render / open_run)")
    args = p.parse_args(argv)
    level, H, T = SIZES[args.size]

    mesh = sp.icosphere(level)
    rho0 = densities.normalise(mesh, densities.cell_average(mesh, two_caps))
    path = sp.generate_weight_path(RotatingTarget(), H=H, d=3, T=T, dt=0.01, seed=1, init="identity", sign=+1.0)
    if args.out:
        return run_folder(args.out, mesh, level, rho0, path, T)
    solver = sp.MeshSolver(mesh, rho0, path, order=2)
    traj = sp.integrate(solver, np.linspace(0.0, T, 5)[1:], snapshots=True)
    for t, row in zip(traj.t, traj.rows):
        print(f"t={t:5.2f}  E={row['energy']:.5f}  G2={row['G2']:.4f}  mass={row['mass']:.15f}  rho_max={row['rho_max']:.3f}")
    plot(mesh, rho0, traj.snapshots[-1]["rho"], T)
    return row


def plot(mesh, rho0: np.ndarray, rho: np.ndarray, T: float):
    """The density at t = 0 and at T, longitude against latitude, one flat colour per cell,
    on one logarithmic colour scale (three decades below the common peak)."""
    from matplotlib.colors import LogNorm

    from spherepde.viz.plots import draw_cells

    peak = max(rho0.max(), rho.max())
    norm = LogNorm(peak * 1e-3, peak)
    fig, axes = plt.subplots(1, 2, figsize=(9.0, 3.4), layout="constrained", sharey=True)
    for ax, values, t in zip(axes, (rho0, rho), (0.0, T)):
        pc = draw_cells(ax, mesh, np.maximum(values, norm.vmin), norm=norm)
        ax.set(xlim=(-180, 180), ylim=(-90, 90), title=f"t = {t:g}", xlabel="longitude (°)")
    axes[0].set_ylabel("latitude (°)")
    fig.colorbar(pc, ax=axes, shrink=0.8, extend="min", label="ρ (per steradian, log scale)")
    return fig


def run_folder(out: str, mesh, level: int, rho0: np.ndarray, path, T: float) -> dict:
    """The same inputs as a run folder: the saved path and density drive an ordinary run (run defaults for the integrator)."""
    from pathlib import Path

    from spherepde.runs.runner import run

    inputs = Path(f"{out}-inputs")
    inputs.mkdir(parents=True, exist_ok=True)
    path.save(inputs / "weights.npz")
    np.save(inputs / "rho0.npy", rho0)
    cfg = sp.default_config().with_overrides({
        "run.solver": "mesh", "model.H": path.H, "model.sign": 1, "mesh.level": level,
        "weights.process": "file", "weights.path_file": str(inputs / "weights.npz"), "weights.dt": path.dt,
        "initial.kind": "file", "initial.file": str(inputs / "rho0.npy"),
        "solver.T": T, "solver.order": 2, "output.record_dt": T / 4, "output.snapshot_dt": T / 4,
    })
    res = run(cfg, out=out, progress=False)
    row = {k: float(v[-1]) for k, v in res.diagnostics.items()}
    print(f"run folder {res.folder}: E={row['energy']:.5f}  G2={row['G2']:.4f}; draw it with: spherepde plot {res.folder}")
    return row


if __name__ == "__main__":
    main()
    plt.show()
