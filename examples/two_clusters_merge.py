"""
Two clusters merging: the density level against the two-point ODE
==================================================================

Under attraction (``sign=+1``) with one frozen head D = βI, two concentrated clusters of
masses m₁, m₂ at angle θ₀ merge after a time that grows exponentially with β (a metastable
plateau). Reduced to two point masses, the angle obeys an ODE (``resultant_time_ode`` in
``spherepde.studies.metastability``; the derivation is in the model page, §4.10). The mesh
solver reaches this time scale with the linearly implicit step (``integrator="implicit"``,
steps sized by a local error estimate) and gets the merge time right when collapsed clusters
are carried as point masses (``atoms=True``). On cells alone a collapsed cluster is pinned to
a cell node and the merge comes at the wrong time. Run it::

    python examples/two_clusters_merge.py                 # icosphere 32, beta = 8, 90 degrees
    python examples/two_clusters_merge.py --size gallery  # icosphere 16, beta = 8, 70 degrees (the docs' gallery)
    python examples/two_clusters_merge.py --tiny          # seconds (what the test suite runs)
"""

from __future__ import annotations

import argparse
import math

import matplotlib.pyplot as plt
import numpy as np

import spherepde as sp
from spherepde import densities
from spherepde.studies.metastability import resultant_time_ode

#: (icosphere level, beta, theta0 in degrees) of each size; two kappa = 200 clusters of mass 1/2.
SIZES = {"tiny": (8, 8.0, 70.0), "gallery": (16, 8.0, 70.0), "full": (32, 8.0, 90.0)}
R_MERGED = 0.95  # the clusters count as merged when the mean resultant |∫ x dμ| reaches this


def resultant_curve(solver, times) -> np.ndarray:
    """The mean resultant R(t) = |∫ x dμ_t| at the given times."""
    return sp.integrate(solver, times)["mean_resultant"]


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description="Two clusters merging: the density level against the two-point ODE.")
    p.add_argument("--size", choices=SIZES, default="full", help="problem size (default: full)")
    p.add_argument("--tiny", action="store_const", dest="size", const="tiny", help="the same as --size tiny (seconds)")
    args = p.parse_args(argv)
    level, beta, deg = SIZES[args.size]

    theta0 = math.radians(deg)
    t_ode = resultant_time_ode(beta, 0.5, 0.5, theta0, R=R_MERGED)
    T = 1.5 * t_ode
    mesh = sp.icosphere(level)
    rho0 = densities.vmf_mixture(mesh, [[0, 0, 1], [math.sin(theta0), 0, math.cos(theta0)]], [200.0, 200.0], [0.5, 0.5])
    path = sp.generate_weight_path(sp.FrozenProcess(), H=1, d=3, T=T, dt=T / 200, init="beta", beta=beta, sign=1.0)
    times = np.linspace(0.0, T, 201)[1:]
    curves = {}
    for atoms in (True, False):
        solver = sp.MeshSolver(mesh, rho0, path, order=1, integrator="implicit", tol=1e-3, atoms=atoms)
        curves[atoms] = resultant_curve(solver, times)
    merged = {a: float(np.interp(R_MERGED, c, times)) if c.max() >= R_MERGED else math.inf for a, c in curves.items()}
    print(f"two-point ODE: merge at t = {t_ode:.3f}")
    print(f"mesh, point masses: t = {merged[True]:.3f} ({100 * (merged[True] - t_ode) / t_ode:+.1f} %)")
    print(f"mesh, cells only:   t = {merged[False]:.3f}")
    plot(times, curves, t_ode, f"icosphere {level} ({mesh.n_cells:,} cells), β = {beta:g}, θ₀ = {deg:g}°")
    return {"t_ode": t_ode, "t_atoms": merged[True], "t_cells": merged[False]}


def plot(times, curves: dict, t_ode: float, title: str):
    """The mean resultant of both mesh runs against time, with the ODE's merge time."""
    fig, ax = plt.subplots(figsize=(6.4, 4.0), layout="constrained")
    ax.plot(times, curves[True], "-", label="mesh, point masses (atoms=True)")
    ax.plot(times, curves[False], "--", label="mesh, cells only")
    ax.axvline(t_ode, color="k", lw=0.8, label="two-point ODE: merge time")
    ax.axhline(R_MERGED, color="0.6", lw=0.6, ls=":")
    ax.set(xlabel="t", ylabel="mean resultant |∫ x dμ|", title=title)
    ax.title.set_fontsize(10)
    ax.legend(loc="lower right")
    return fig


if __name__ == "__main__":
    main()
    plt.show()
