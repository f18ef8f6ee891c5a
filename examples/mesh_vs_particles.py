"""The density level against tokens on one weight path.

    python examples/mesh_vs_particles.py          # icosphere 16, 2,000 tokens, H = 10, T = 2
    python examples/mesh_vs_particles.py --tiny   # seconds (what the test suite runs)

One OU weight path Θ_t drives both the finite-volume density solver and the particle
solver from the paper's octahedral start; at each record time we print the energy and
the dissipation G² of both and the 1-Wasserstein distance between the density and the
tokens (``spherepde.solvers.distances.wasserstein_sphere``). The density is the
mean-field limit; tokens scatter around it with O(n^-1/2) sampling error.
"""

from __future__ import annotations

import argparse

import numpy as np

import spherepde as sp
from spherepde import densities
from spherepde.solvers.distances import wasserstein_sphere


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tiny", action="store_true", help="a tiny mesh, few tokens, a short run (seconds)")
    args = p.parse_args(argv)
    level, n, H, T = (4, 200, 2, 0.2) if args.tiny else (16, 2000, 10, 2.0)

    path = sp.generate_weight_path(sp.OUProcess(), H=H, d=3, T=T, dt=0.01, seed=0)   # one Θ_t for both
    mesh = sp.icosphere(level)
    density = sp.MeshSolver(mesh, densities.octahedral(mesh), path)
    tokens = sp.ParticleSolver(sp.initial_tokens("octahedral", n, seed=0), path)
    times = np.linspace(0.0, T, 5)[1:]
    dens = sp.integrate(density, times, snapshots=True)   # rows and snapshots at the record times
    toks = sp.integrate(tokens, times, snapshots=True)
    rows = []
    for t, m, q, sm, sq in zip(times, dens.rows, toks.rows, dens.snapshots, toks.snapshots):
        w1 = wasserstein_sphere(mesh, sm["rho"], sq["X"], method="sliced")
        rows.append({"t": float(t), "G2_mesh": m["G2"], "G2_tokens": q["G2"], "W1": w1})
        print(f"t={t:5.2f}  E mesh={m['energy']:.4f} tokens={q['energy']:.4f}   "
              f"G2 mesh={m['G2']:.4f} tokens={q['G2']:.4f}   W1(density, tokens)={w1:.4f}")
    return rows


if __name__ == "__main__":
    main()
