"""
G² against the number of heads at the density level
====================================================

The paper's G²-versus-H study at the density level, as a Dask sweep. Each (H, seed) is one
mesh run; Dask runs them in parallel (one single-threaded worker process per core by
default), and the sweep's analysis fits ⟨G²⟩ ∝ H^b with a bootstrap interval. Rerunning
the same command skips finished runs. The results table, analysis.json and analysis.png
land in the output folder. Run it::

    python examples/g2_vs_H_density.py                                # H = 1, 10, 100 x 3 OU paths, T = 5, 5,120 cells
    python examples/g2_vs_H_density.py --size gallery --workers 1     # 1,280 cells, T = 1 (the docs' gallery)
    python examples/g2_vs_H_density.py --tiny --workers 1             # seconds (what the test suite runs)
"""

from __future__ import annotations

import argparse
import tempfile

import matplotlib.pyplot as plt
import numpy as np

from spherepde.runs.sweep import run_sweep

#: The sweep's fixed overrides, H values, seeds and t_min of each size.
SIZES = {
    "tiny": ({"solver.T": 0.2, "mesh.level": 4, "output.record_dt": 0.05, "output.snapshot_dt": 0.2}, [1, 4], [0, 1], 0.0),
    "gallery": ({"solver.T": 1.0, "mesh.level": 8, "solver.order": 1, "output.record_dt": 0.05, "output.snapshot_dt": 1.0, "output.vtk": False},
                [1, 10, 100], [0, 1, 2], 0.25),
    "full": ({"solver.T": 5.0}, [1, 10, 100], [0, 1, 2], 1.0),
}


def sweep(size: str) -> dict:
    """The sweep file of one size, as a dictionary (the same keys a SWEEP.toml holds)."""
    fixed, Hs, seeds, t_min = SIZES[size]
    return {
        "base_example": "paper-ou-mesh",
        "description": "G2 vs H at the density level (OU weights)",
        "set": fixed,
        "grid": {"model.H": Hs, "weights.seed": seeds},
        "analysis": {"x": "model.H", "y": "G2", "t_min": t_min, "bootstrap": 200},
    }


def main(argv=None):
    p = argparse.ArgumentParser(description="G² against the number of heads at the density level.")
    p.add_argument("--size", choices=SIZES, default="full", help="problem size (default: full)")
    p.add_argument("--tiny", action="store_const", dest="size", const="tiny", help="the same as --size tiny (seconds)")
    p.add_argument("--workers", type=int, default=None, help="Dask worker processes (default: one per core)")
    p.add_argument("--out", default=None, help="the sweep folder (default: sweeps/g2-vs-H-density; a temporary folder for --size gallery)")
    args = p.parse_args(argv)
    out = args.out or (tempfile.mkdtemp(prefix="g2-vs-H-") if args.size == "gallery" else "sweeps/g2-vs-H-density")
    res = run_sweep(sweep(args.size), out, workers=args.workers, progress=False)
    a = res.analysis
    print(f"{len(res.table)} runs, status {res.status}; results in {res.results_csv}")
    if a:
        lo, hi = a["b_ci95"] or (float("nan"), float("nan"))
        print(f"<G2> ~ H^b with b = {a['b']:.3f} (95% bootstrap interval {lo:.3f} .. {hi:.3f}, {a['runs_used']} runs)")
        plot(res.table, a)
    return res


def plot(table: list[dict], a: dict):
    """Each run's time-averaged G² against H on log-log axes, with the fitted power law."""
    H = np.array([float(r["model.H"]) for r in table if r["status"] == "completed"])
    G2 = np.array([float(r[a["column"]]) for r in table if r["status"] == "completed"])
    fig, ax = plt.subplots(figsize=(5.6, 4.0), layout="constrained")
    ax.loglog(H, G2, "o", alpha=0.6, label="one weight path")
    x = np.geomspace(H.min(), H.max(), 50)
    ax.loglog(x, a["a"] * x ** a["b"], "k-", label=f"fit: b = {a['b']:.2f}")
    ax.set_xlabel("H (heads)")
    ax.set_ylabel(f"⟨G²⟩ over t ≥ {a['t_min']:g}")
    ax.legend()
    return fig


if __name__ == "__main__":
    main()
    plt.show()
