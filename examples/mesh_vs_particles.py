"""
The density level against tokens on one weight path
===================================================

One OU weight path Θ_t drives both the finite-volume density solver and the particle
solver from the paper's octahedral start; at each record time we print the energy and
the dissipation G² of both and the 1-Wasserstein distance between the density and the
tokens (``spherepde.solvers.distances.wasserstein_sphere``). The density is the
mean-field limit; tokens scatter around it with O(n^-1/2) sampling error.
"""

from __future__ import annotations

import argparse

import matplotlib.pyplot as plt
import numpy as np

import spherepde as sp
from spherepde import densities
from spherepde.solvers.distances import wasserstein_sphere

#: (icosphere level, tokens, heads, end time, records) of each size.
SIZES = {"tiny": (4, 200, 2, 0.2, 4), "gallery": (8, 1000, 10, 2.0, 20), "full": (16, 2000, 10, 2.0, 20)}


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description="The density level against tokens on one weight path.")
    p.add_argument("--size", choices=SIZES, default="full", help="problem size (default: full)")
    p.add_argument("--tiny", action="store_const", dest="size", const="tiny", help="the same as --size tiny (seconds)")
    args = p.parse_args(argv)
    level, n, H, T, records = SIZES[args.size]

    path = sp.generate_weight_path(sp.OUProcess(), H=H, d=3, T=T, dt=0.01, seed=0)   # one Θ_t for both
    mesh = sp.icosphere(level)
    density = sp.MeshSolver(mesh, densities.octahedral(mesh), path)
    tokens = sp.ParticleSolver(sp.initial_tokens("octahedral", n, seed=0), path)
    times = np.linspace(0.0, T, records + 1)[1:]
    dens = sp.integrate(density, times, snapshots=True)   # rows and snapshots at the record times
    toks = sp.integrate(tokens, times, snapshots=True)
    rows = []
    for t, m, q, sm, sq in zip(times, dens.rows, toks.rows, dens.snapshots, toks.snapshots):
        w1 = wasserstein_sphere(mesh, sm["rho"], sq["X"], method="sliced")
        rows.append({"t": float(t), "G2_mesh": m["G2"], "G2_tokens": q["G2"], "W1": w1})
        print(f"t={t:5.2f}  E mesh={m['energy']:.4f} tokens={q['energy']:.4f}   "
              f"G2 mesh={m['G2']:.4f} tokens={q['G2']:.4f}   W1(density, tokens)={w1:.4f}")
    plot(rows, f"icosphere {level} ({mesh.n_cells:,} cells) against {n:,} tokens, H = {H}")
    return rows


def plot(rows: list[dict], title: str):
    """G² of both levels and the distance between them against time."""
    t = [r["t"] for r in rows]
    fig, (a, b) = plt.subplots(2, 1, sharex=True, figsize=(6.4, 5.2), layout="constrained")
    a.plot(t, [r["G2_mesh"] for r in rows], "o-", label="density (mesh)")
    a.plot(t, [r["G2_tokens"] for r in rows], "s--", label="tokens")
    a.set_ylabel("G²")
    a.legend()
    a.set_title(title, fontsize=10)
    b.plot(t, [r["W1"] for r in rows], "k.-")
    b.set_ylabel("sliced W₁ (rad)")
    b.set_xlabel("t")
    return fig


if __name__ == "__main__":
    main()
    plt.show()
