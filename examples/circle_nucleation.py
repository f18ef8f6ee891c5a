"""
Clusters nucleating on the circle: the fastest mode and its phase
=================================================================

Bruno, Pasqualotto and Agazzi's model on the circle: one frozen general head A = βI, V = I with
unnormalised attention (no division by Z). A near-uniform start breaks into
k* = argmax_k k² I_k(β) clusters (3 at β = 5), the mode whose linear growth rate
γ_k = k² I_k(β)/β is largest, and the clusters sit where that mode of the start peaks,
θ_j = (2πj − arg μ̂_{k*}(0))/k*. The start here is (1 + ε f)/(2π) with f the seeded random Fourier
field of ``initial.noise``; the density level (cells of the circle, FFT sums) runs it, and the
θ–t map shows the predicted angles (dashed) and the clusters at T (crosses). The guide page
"The circle" explains the prediction and when it misses. Run it::

    python examples/circle_nucleation.py                 # 512 cells, beta = 5, T = 0.5 (the example circle-metastable-mesh)
    python examples/circle_nucleation.py --size gallery  # 256 cells (the docs' gallery)
    python examples/circle_nucleation.py --tiny          # 128 cells, seconds (what the test suite runs)
"""

from __future__ import annotations

import argparse

import matplotlib.pyplot as plt
import numpy as np

import spherepde as sp
from spherepde.geometry import circle_densities
from spherepde.geometry.circle import uniform_circle
from spherepde.runs.nucleation import final_clusters, predicted_clusters
from spherepde.viz.circle import plot_kymograph

#: cells of each size; beta = 5, T = 0.5 and the start of the shipped example circle-metastable-mesh.
SIZES = {"tiny": 128, "gallery": 256, "full": 512}
BETA, T, NOISE, SEED = 5.0, 0.5, 0.003, 5


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description="Clusters nucleating on the circle: the fastest mode and its phase.")
    p.add_argument("--size", choices=SIZES, default="full", help="problem size (default: full)")
    p.add_argument("--tiny", action="store_const", dest="size", const="tiny", help="the same as --size tiny (seconds)")
    args = p.parse_args(argv)

    mesh = uniform_circle(SIZES[args.size])
    rho0 = circle_densities.with_noise(mesh, circle_densities.uniform(mesh), NOISE, seed=SEED)
    path = sp.generate_weight_path(sp.FrozenProcess(), H=1, d=2, T=T, dt=0.005, init="beta", beta=BETA, heads="general", value_init="identity")
    solver = sp.MeshSolver(mesh, rho0, path, order=2, integrator="ssprk3", velocity="midpoint", attention="unnormalised")
    times = np.linspace(0.0, T, 51)
    traj = sp.integrate(solver, times, snapshots=True)
    rho = np.stack([s["rho"] for s in traj.snapshots])

    pred = predicted_clusters(mesh.theta, rho0 * mesh.areas, BETA, attention="unnormalised")
    found = final_clusters(mesh.theta, rho[-1] * mesh.areas, mesh.areas)
    print(f"predicted: k* = {pred['k_star']} clusters at θ = {np.round(pred['angles'], 3).tolist()}")
    print(f"at t = {T:g}: {found['n']} clusters at θ = {np.round(found['angles'], 3).tolist()} (masses {np.round(found['masses'], 2).tolist()})")
    plot(times, mesh.theta, rho, pred, found, f"{mesh.n_cells} cells, β = {BETA:g}, ε = {NOISE:g} (seed {SEED})")
    return {"predicted": pred, "final": found}


def plot(times, theta, rho, pred: dict, found: dict, title: str):
    """The θ–t density map (log colour: the growing mode shows long before the clusters) with the predicted
    angles (dashed) and the clusters at T (crosses)."""
    fig = plot_kymograph(times, theta=theta, rho=rho, log=True, title=f"nucleation on the circle: {title}")
    ax = fig.axes[0]
    for j, a in enumerate(pred["angles"]):
        ax.axvline(a, color="white", ls="--", lw=0.9, label=f"predicted (k* = {pred['k_star']})" if j == 0 else None)
    ax.scatter(found["angles"], np.full(found["n"], times[-1]), marker="x", s=60, color="tab:red", label="clusters at T", zorder=3)
    ax.legend(loc="lower right", fontsize=8)
    ax.title.set_fontsize(10)
    return fig


if __name__ == "__main__":
    main()
    plt.show()
