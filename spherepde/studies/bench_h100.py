"""The paper's H = 100 density path (issue 36, part 1): the fast sums' routes side by side.

The workload is ``spherepde run --example paper-ou-mesh --set model.H=100 --set mesh.level=32
--set solver.order=2`` (T = 20: 2,000 Euler steps on the OU weight grid dt = 0.01, 20,480 cells),
measured on windows along the path (t = 0, 2.5, ..., 17.5) and projected to the whole path. Routes, stepped
alternately from the same state in one process (so a loaded machine slows them alike):

* ``old``: the a-priori degree of the block's largest kappa (``degree_rule="a-priori"``, the kernel
  before issue 36), ``summation_tol`` = 1e-10, ``diagnostics_tol`` = 1e-6 (the example's settings then);
* ``new``: the degree stopped a posteriori (:mod:`spherepde.attention.adaptive`) at the
  same tolerances -- the same error statement, less work;
* ``new_mass``: ``new`` with the moments' tolerance kept on average over the cell masses
  (``moments_by_mass``: Ybar, Qbar feed only mass-weighted sums; the density's log Z is untouched);
* ``new_tol``: ``new_mass`` with ``summation_tol`` = 1e-8 and ``diagnostics_tol`` = 1e-4, the rule
  "summation error far below the discretisation error": log Z_h to 1e-8 (the level-32 order-2
  density is ~2 % from level 64) and the diagnostics' softmax moments to 1e-4 (absolute, |Ybar| <= 1);
* ``synthesis``: the same tolerances (the example's now) by the mesh solver's synthesis route
  (:func:`spherepde.attention.synthesis.cell_rates`: log Z_h at every cell from a Gauss grid and one matrix
  product, the moments only at the grid).

Reported: per route the median wall time per step in each window, the T = 20 path projected from them, the
ratios to ``old``, and the accuracy: the largest relative differences of the energy and G^2 between each
route and ``old`` at the records (every 10 steps, as record_dt = 0.1) of the windows, each window started
from one state. ``target_met``: the best route is >= 3x faster than ``old`` with energy and G^2 within
0.1 % of it at every record. No method change (same cells, same order), so no level-64 reference is needed.
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
#: the route that carries the path from one window to the next (the example's: paper-ou-mesh sets these tolerances)
LEAD = "synthesis"


def bench_h100(quick: bool, *, level: int | None = None, steps: int | None = None, H: int = 100,
               record_every: int = 10, start_steps: int = 0, windows: int | None = None) -> dict:
    """The routes side by side on windows of the H = 100 path (module docstring); ``quick``: level 16, one window of 10
    steps, else level 32 and ``windows`` = 8 windows of 10 steps, at t = 0, 2.5, ..., 17.5 (the lead route -- ``synthesis``,
    the example's -- carries the path between them; every route starts each window from its state). ``start_steps`` > 0
    with one window: that window starts after that many lead steps. The whole T = 20 path of each route is projected as
    sum over windows of (its median step there) x (the steps of that window's share of the path). Returns a JSON-able
    dict."""
    from spherepde.runs.config import load_config
    from spherepde.runs.configs import __file__ as examples_file
    from spherepde.runs.runner import build_mesh, build_solver, build_weight_path
    from spherepde.solvers.mesh import MeshSolver

    level = level or (16 if quick else 32)
    steps = steps or 10
    windows = windows or (1 if quick else 8)
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
    lead_name = LEAD if LEAD in solvers else next(n for n in solvers if n != "old")
    lead = solvers[lead_name]
    t_stop = float(solvers["old"].path.T)
    starts = [start_steps] if windows == 1 else [k * PATH_STEPS // windows for k in range(windows)]
    times = {name: [[] for _ in starts] for name in solvers}
    records = {name: [] for name in solvers}
    window_t = []
    for wi, start in enumerate(starts):
        while lead.step_count < start:  # the lead route carries the path to the window
            lead.step(t_stop)
        for s in solvers.values():
            if s is not lead:
                s.rho, s.t, s.step_count, s._cache = lead.rho.copy(), lead.t, lead.step_count, None
        window_t.append(float(lead.t))
        for k in range(steps + 1):
            for name, s in solvers.items():
                if k % record_every == 0:
                    r = s.record()
                    records[name].append((r["t"], r["energy"], r["G2"]))
                if k == steps:
                    continue
                t0 = time.perf_counter()
                s.step(t_stop)
                if k > 0 or wi > 0:  # the first step compiles
                    times[name][wi].append(time.perf_counter() - t0)
    share = [PATH_STEPS / len(starts)] * len(starts)
    med = {name: [float(np.median(t)) for t in ts] for name, ts in times.items()}
    projected = {name: float(sum(m * n for m, n in zip(ms, share))) for name, ms in med.items()}
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
            "s_per_step": projected[name] / PATH_STEPS, "s_per_step_by_window": med[name],
            "speedup_vs_old": projected["old"] / projected[name], "projected_T20_s": projected[name],
            "energy_max_rel_diff_vs_old": de, "G2_max_rel_diff_vs_old": dg, "same_record_times": same_t,
            "accuracy_held": bool(same_t and de <= ACCURACY and dg <= ACCURACY),
        }
    best = max((n for n in routes if n != "old"), key=lambda n: routes[n]["speedup_vs_old"] if routes[n]["accuracy_held"] else 0.0)
    return {
        "workload": f"paper-ou-mesh, H = {H}, level {level} ({len(solvers['old'].rho)} cells), "
                    f"order 2, Euler on the weight grid dt = {solvers['old'].path.dt}",
        "window_steps": steps, "window_start_t": window_t[0], "window_starts_t": window_t, "lead_route": lead_name,
        "record_every": record_every, "records": len(ref),
        "cpus": os.cpu_count(), "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "routes": routes, "best": best, "best_speedup": routes[best]["speedup_vs_old"],
        "target_speedup": 3.0, "accuracy": ACCURACY,
        "target_met": bool(routes[best]["accuracy_held"] and routes[best]["speedup_vs_old"] >= 3.0),
    }
