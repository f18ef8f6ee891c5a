"""The paper's H = 100 density path (issue 36, part 1): the fast sums' degree rules side by side.

The workload is ``spherepde run --example paper-ou-mesh --set model.H=100 --set mesh.level=32
--set solver.order=2`` (T = 20: 2,000 Euler steps on the OU weight grid dt = 0.01, 20,480 cells),
measured on a window of its first steps and projected to the whole path. Routes, stepped
alternately from the same state in one process (so a loaded machine slows them alike):

* ``old``: the a-priori degree of the block's largest kappa (``degree_rule="a-priori"``, the kernel
  before issue 36), ``summation_tol`` = 1e-10, ``diagnostics_tol`` = 1e-6 (the example's settings);
* ``new``: the degree stopped a posteriori (:mod:`spherepde.attention.adaptive`) at the
  same tolerances -- the same error statement, less work;
* ``new_mass``: ``new`` with the moments' tolerance kept on average over the cell masses
  (``moments_by_mass``, the default with ``new``: Ybar, Qbar feed only mass-weighted sums; the density's
  log Z is untouched);
* ``new_tol``: ``new`` with ``summation_tol`` = 1e-8 and ``diagnostics_tol`` = 1e-4, the rule
  "summation error far below the discretisation error": log Z_h to 1e-8 (the level-32 order-2
  density is ~2 % from level 64) and the diagnostics' softmax moments to 1e-4 (absolute, |Ybar| <= 1),
  both measured here against ``old``.

Reported: the median wall time per step of each route, the ratios to ``old``, the projected
T = 20 path (2,000 x the step), and the accuracy: the largest relative differences of the
energy and G^2 between each route and ``old`` at the records (every 10 steps, as record_dt
= 0.1) of the window. ``target_met``: the best route is >= 3x faster than ``old`` with energy
and G^2 within 0.1 % of it at every record. No method change (same cells, same order), so no
level-64 reference is needed.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

__all__ = ["bench_h100"]

#: (summation_tol, diagnostics_tol, degree_rule, moments_by_mass) of the routes
ROUTES = {
    "old": (1e-10, 1e-6, "a-priori", False),
    "new": (1e-10, 1e-6, "adaptive", False),
    "new_mass": (1e-10, 1e-6, "adaptive", True),
    "new_tol": (1e-8, 1e-4, "adaptive", True),
    "synthesis": (1e-8, 1e-4, "synthesis", True),
}
#: the accuracy the speed-up must keep: energy and G^2 within this relative difference of ``old`` at every record
ACCURACY = 1e-3
#: steps of the whole path (T = 20 on the weight grid dt = 0.01)
PATH_STEPS = 2000


def bench_h100(quick: bool, *, level: int | None = None, steps: int | None = None, H: int = 100,
               record_every: int = 10, start_steps: int = 0) -> dict:
    """Old vs new degree rules of the fast sums on a window of the H = 100 path (module docstring);
    ``quick``: level 16 and 10 steps, else level 32 and 50 steps; ``start_steps`` > 0: the window starts
    after that many steps of the default route (the state copied into every route). Returns a JSON-able dict."""
    from spherepde.runs.config import load_config
    from spherepde.runs.configs import __file__ as examples_file
    from spherepde.runs.runner import build_mesh, build_solver, build_weight_path

    level = level or (16 if quick else 32)
    steps = steps or (10 if quick else 50)
    from spherepde.solvers.mesh import MeshSolver

    base = {"model.H": H, "mesh.level": level, "solver.order": 2, "solver.integrator": "euler", "solver.T": 20.0,
            "solver.summation": "fast"}  # fast as at the paper's size, also when a test runs this small
    solvers = {}
    for name, (tol, dtol, rule, by_mass) in ROUTES.items():
        cfg = load_config(Path(examples_file).parent / "paper-ou-mesh.toml",
                          {**base, "solver.summation_tol": tol, "solver.diagnostics_tol": dtol})
        path = build_weight_path(cfg)
        mesh = build_mesh(cfg)
        saved = MeshSolver._degree_rule, MeshSolver._moments_by_mass
        MeshSolver._degree_rule, MeshSolver._moments_by_mass = rule, by_mass  # also for the initial evaluation
        try:
            s = build_solver(cfg, path, mesh=mesh)
        finally:
            MeshSolver._degree_rule, MeshSolver._moments_by_mass = saved
        s._degree_rule, s._moments_by_mass = rule, by_mass
        solvers[name] = s
    if start_steps > 0:  # a later window: every route from the default route's state there
        lead = solvers["new_mass"]
        for _ in range(start_steps):
            lead.step(float(lead.path.T))
        for s in solvers.values():
            if s is not lead:
                s.rho, s.t, s.step_count, s._cache = lead.rho.copy(), lead.t, lead.step_count, None
    times = {name: [] for name in solvers}
    records = {name: [] for name in solvers}
    t_stop = float(solvers["old"].path.T)
    for k in range(steps + 1):
        for name, s in solvers.items():
            if k % record_every == 0:
                r = s.record()
                records[name].append((r["t"], r["energy"], r["G2"]))
            if k == steps:
                continue
            t0 = time.perf_counter()
            s.step(t_stop)
            if k > 0:  # the first step compiles
                times[name].append(time.perf_counter() - t0)
    med = {name: float(np.median(t)) for name, t in times.items()}
    ref = np.array(records["old"])
    routes = {}
    for name in solvers:
        rec = np.array(records[name])
        same_t = bool(np.array_equal(rec[:, 0], ref[:, 0]))
        de = float(np.max(np.abs(rec[:, 1] - ref[:, 1]) / np.abs(ref[:, 1])))
        dg = float(np.max(np.abs(rec[:, 2] - ref[:, 2]) / np.maximum(np.abs(ref[:, 2]), 1e-300)))
        routes[name] = {
            "summation_tol": ROUTES[name][0], "diagnostics_tol": ROUTES[name][1], "degree_rule": ROUTES[name][2],
            "moments_by_mass": ROUTES[name][3],
            "s_per_step": med[name], "speedup_vs_old": med["old"] / med[name],
            "projected_T20_s": PATH_STEPS * med[name],
            "energy_max_rel_diff_vs_old": de, "G2_max_rel_diff_vs_old": dg, "same_record_times": same_t,
            "accuracy_held": bool(same_t and de <= ACCURACY and dg <= ACCURACY),
        }
    best = max((n for n in routes if n != "old"), key=lambda n: routes[n]["speedup_vs_old"] if routes[n]["accuracy_held"] else 0.0)
    return {
        "workload": f"paper-ou-mesh, H = {H}, level {level} ({len(solvers['old'].rho)} cells), "
                    f"order 2, Euler on the weight grid dt = {solvers['old'].path.dt}",
        "window_steps": steps, "window_start_t": float(ref[0, 0]), "record_every": record_every, "records": len(ref),
        "cpus": os.cpu_count(), "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "routes": routes, "best": best, "best_speedup": routes[best]["speedup_vs_old"],
        "target_speedup": 3.0, "accuracy": ACCURACY,
        "target_met": bool(routes[best]["accuracy_held"] and routes[best]["speedup_vs_old"] >= 3.0),
    }
