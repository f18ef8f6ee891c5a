"""Benchmark: the implicit clustering probe of issue 36, today's implicit step against the previous one in one process.

The probe (an OU weight path, mean 5, beta = 5 start, H = 4, s = +1, a uniform start with 5 % noise on
icosphere level 16, the implicit integrator with point masses, records every 0.05)::

    spherepde run --set model.sign=1 --set model.H=4 --set weights.process=ou --set weights.mean=5
      --set weights.init=beta --set weights.beta=5 --set initial.kind=uniform --set initial.noise=0.05
      --set mesh.level=16 --set solver.integrator=implicit --set solver.atoms=true --set solver.T=3

is run twice from the same configuration, weight path and mesh, stepped record by record as
``spherepde run`` does (:func:`~spherepde.solvers.protocol.advance_through`):

* ``old``: :class:`~spherepde.solvers.integrators.ImplicitUpwind` with ``legacy=True`` -- the sparse LU
  solve, and one attention sum over cells and point masses together at every evaluation;
* ``new``: the default -- the upwind sweep (:func:`~spherepde.solvers.implicit.implicit_upwind_step`),
  point masses summed directly, the cells' sums kept while the cells do not change and updated by the
  cells that do, and skipped under the bound of docs/model.md §4.10.

The two are stepped record by record in turn, each segment timed on its own (a change of the machine's
load hits both alike). Returned (JSON-able): wall times, steps, evaluations of the state and full cell sums, the ratio per unit of
simulated time (old wall / new wall; both cover the same T) and over the records after the collapse
(point masses holding more than half of the mass), the largest relative differences of
``energy``, ``G2`` and ``n_clusters`` over the records, and ``target_met`` (ratio >= 5 and every
difference <= 1e-3, the issue's criterion), what the records before the collapse cost (``before_collapse``, with the ratio the whole probe
cannot exceed however little the steps after it cost), and what sets the steps before the collapse (:func:`step_sequence`).
``quick``: T = 1.5 (the collapse at t = 1.24 and a little after).
"""

from __future__ import annotations

import contextlib
import time

import numpy as np

__all__ = ["PROBE", "bench_example", "bench_implicit", "step_sequence"]

#: The probe's settings (issue 36).
PROBE = {"model.sign": 1, "model.H": 4, "weights.process": "ou", "weights.mean": 5.0, "weights.init": "beta", "weights.beta": 5.0,
         "initial.kind": "uniform", "initial.noise": 0.05, "mesh.level": 16, "solver.integrator": "implicit", "solver.atoms": True}

#: The columns compared record by record, and the relative difference allowed (issue 36).
COLUMNS = ("energy", "G2", "n_clusters")
TOLERANCE = 1e-3
TARGET_RATIO = 5.0


def _config(T: float, overrides: dict | None = None):
    """The default configuration with the probe's settings, T and ``overrides`` (keys "section.name")."""
    from spherepde.runs.config import config_from_dict

    data: dict = {}
    for key, value in {**PROBE, "solver.T": T, "output.record_dt": 0.05, **(overrides or {})}.items():
        sec, _, name = key.partition(".")
        data.setdefault(sec, {})[name] = value
    return config_from_dict(data)


@contextlib.contextmanager
def _counting(solver):
    """Count the solver's evaluations of a state (``n``) while inside."""
    counts = {"n": 0}
    evaluate = solver._evaluate

    def counted(*args, **kwargs):
        counts["n"] += 1
        return evaluate(*args, **kwargs)

    solver._evaluate = counted
    try:
        yield counts
    finally:
        del solver._evaluate


def _solver(cfg, path, mesh, legacy: bool):
    from spherepde.runs.runner import build_solver
    from spherepde.solvers.integrators import ImplicitUpwind

    solver = build_solver(cfg, path, mesh=mesh)
    solver.stepper = ImplicitUpwind("implicit", 1, ("mesh",), legacy=legacy)
    return solver


def _run_both(cfg, path, mesh) -> dict:
    """Old and new stepped record by record in turn (so that a change of the machine's load hits both alike);
    per route: the wall time summed over its own segments, steps, evaluations, full cell sums, records."""
    from spherepde.solvers.protocol import advance_through

    solvers = {"old": _solver(cfg, path, mesh, True), "new": _solver(cfg, path, mesh, False)}
    T, rdt = cfg.solver.T, cfg.output.record_dt
    times = [k * rdt for k in range(1, int(round(T / rdt)) + 1)]
    out = {}
    with contextlib.ExitStack() as stack:
        for name, s in solvers.items():
            out[name] = {"wall_s": 0.0, "segments": [], "seg_evaluations": [], "counts": stack.enter_context(_counting(s)), "sums0": s.points.n_cell_sums,
                         "rows": [s.record()]}
        for t in times:
            for name, s in solvers.items():
                wall = time.perf_counter()
                _i, _t, row = next(advance_through(s, [t]))
                out[name]["segments"].append(time.perf_counter() - wall)
                out[name]["seg_evaluations"].append(out[name]["counts"]["n"])
                out[name]["wall_s"] += out[name]["segments"][-1]
                out[name]["rows"].append(row)
    for name, s in solvers.items():
        o = out[name]
        o.update(steps=int(s.step_count), evaluations=o.pop("counts")["n"], full_cell_sums=int(s.points.n_cell_sums - o.pop("sums0")),
                 merges=len(s.points.merges), merge_list=list(s.points.merges))
    return out


def _max_rel(a: list, b: list, col: str) -> float:
    x = np.array([float(r[col]) for r in a])
    y = np.array([float(r[col]) for r in b])
    return float(np.max(np.abs(x - y) / np.maximum(np.abs(x), 1e-300)))


#: The window (from t = 0, before the collapse) over which :func:`step_sequence` looks at what sets the steps.
WINDOW_T = 0.5


def step_sequence(T: float = WINDOW_T, overrides: dict | None = None) -> dict:
    """What sets the probe's steps before its collapse, over t <= T (today's route, records every 0.05): the steps
    taken; the steps of the same probe without the weights' noise (``weights.sigma = 0``); and the largest relative
    difference of the energy at the records between the probe's ``solver.tol`` and a ten times tighter one -- the
    time-stepping error of the implicit step itself. If that exceeds the benchmark's tolerance, no other step
    sequence can keep the records within it of today's."""
    from spherepde.runs.runner import build_mesh, build_weight_path
    from spherepde.solvers.protocol import advance_through

    def run(extra):
        cfg = _config(T, {**(overrides or {}), **extra})
        s = _solver(cfg, build_weight_path(cfg), build_mesh(cfg), False)
        times = [k * cfg.output.record_dt for k in range(1, int(round(T / cfg.output.record_dt)) + 1)]
        rows = [row for _i, _t, row in advance_through(s, times)]
        return s, rows

    base, rows = run({})
    calm, _ = run({"weights.sigma": 0.0})
    tight, rows_tight = run({"solver.tol": base.tol / 10.0})
    return {"T": T, "tol": base.tol, "steps": int(base.step_count), "steps_without_weight_noise": int(calm.step_count),
            "steps_tol_over_10": int(tight.step_count), "energy_max_rel_diff_tol_over_10": _max_rel(rows_tight, rows, "energy")}


def bench_implicit(quick: bool, *, T: float | None = None, overrides: dict | None = None) -> dict:
    """The probe old and new in one process (module docstring); a warm-up step of each compiles first."""
    from spherepde.runs.runner import build_mesh, build_weight_path

    T = (1.5 if quick else 3.0) if T is None else float(T)
    cfg = _config(T, overrides)
    path = build_weight_path(cfg)
    mesh = build_mesh(cfg)
    warm = _config(0.05, overrides)
    _run_both(warm, build_weight_path(warm), mesh)  # compile everything both routes use
    both = _run_both(cfg, path, mesh)
    old, new = both["old"], both["new"]
    for o in (old, new):
        o.pop("merge_list")
    diffs = {col: _max_rel(old["rows"], new["rows"], col) for col in COLUMNS}
    ratio = old["wall_s"] / new["wall_s"]
    # the records after the collapse (the point masses hold more than half of the mass)
    after = [i for i, r in enumerate(old["rows"][1:]) if float(r["atom_mass"]) > 0.5]
    t_after = float(old["rows"][after[0] + 1]["t"]) if after else None
    ratio_after = sum(old["segments"][i] for i in after) / sum(new["segments"][i] for i in after) if after else None
    before = _before_collapse(cfg, mesh, old, new, after[0] if after else len(new["segments"]))
    strip = ("rows", "segments", "seg_evaluations")
    return {
        "probe": {**PROBE, "solver.T": T},
        "T": T,
        "records": len(old["rows"]),
        "old": {k: v for k, v in old.items() if k not in strip},
        "new": {k: v for k, v in new.items() if k not in strip},
        "ratio_per_unit_time": ratio,
        "collapsed_from_t": t_after,
        "ratio_after_collapse": ratio_after,
        "before_collapse": before,
        "max_rel_diff": diffs,
        "tolerance": TOLERANCE,
        "target_ratio": TARGET_RATIO,
        "target_met": bool(ratio >= TARGET_RATIO and all(d <= TOLERANCE for d in diffs.values())),
        "step_sequence": step_sequence(overrides=overrides),
    }


def _before_collapse(cfg, mesh, old: dict, new: dict, n: int) -> dict:
    """What the records before the collapse (the first ``n`` segments) cost: each route's wall time there, the new
    route's evaluations there (each sums all cells: no point mass yet), the time of one such evaluation's cell sums
    (:func:`~spherepde.solvers.head_rates.cell_rates` at the start, median of 5) and their product; and
    ``ceiling_ratio`` = old wall time (whole probe) / new wall time before the collapse, the most the whole
    probe's ratio can reach with these steps however little the steps after the collapse cost."""
    from spherepde.runs.runner import build_weight_path
    from spherepde.solvers.head_rates import cell_rates

    s = _solver(cfg, build_weight_path(cfg), mesh, False)
    masses = s.rho * s.geom.areas
    A, V = s.path.matrices(0.0)
    walls = []
    for _ in range(6):
        wall = time.perf_counter()
        cell_rates(s, masses, A, V, 0.0, s.path.sigma)
        walls.append(time.perf_counter() - wall)
    per_sum = float(np.median(walls[1:]))
    evals = new["seg_evaluations"][n - 1] if n else 0
    new_s = sum(new["segments"][:n])
    return {"records": n, "old_s": sum(old["segments"][:n]), "new_s": new_s, "new_evaluations": int(evals),
            "s_per_cell_sum": per_sum, "cell_sums_s": evals * per_sum, "ceiling_ratio": old["wall_s"] / new_s if new_s > 0 else None}


def bench_example(name: str = "metastable-mesh", *, T: float | None = None, overrides: dict | None = None) -> dict:
    """A shipped example with the implicit integrator (default ``metastable-mesh``, in full), old and new in one
    process as :func:`bench_implicit` does, with both routes' merge times and their largest relative difference."""
    from pathlib import Path

    from spherepde.runs.config import load_config
    from spherepde.runs.configs import __file__ as examples_file
    from spherepde.runs.runner import build_mesh, build_weight_path

    extra = {**({} if T is None else {"solver.T": float(T)}), **(overrides or {})}
    cfg = load_config(Path(examples_file).parent / f"{name}.toml", extra)
    mesh = build_mesh(cfg)
    warm = load_config(Path(examples_file).parent / f"{name}.toml", {**extra, "solver.T": cfg.output.record_dt})
    _run_both(warm, build_weight_path(warm), mesh)
    both = _run_both(cfg, build_weight_path(cfg), mesh)
    merges = {k: [m[0] for m in both[k].pop("merge_list")] for k in both}
    diffs = {col: _max_rel(both["old"]["rows"], both["new"]["rows"], col) for col in COLUMNS}
    n = min(len(merges["old"]), len(merges["new"]))
    return {
        "example": name, "T": cfg.solver.T, "overrides": extra, "records": len(both["old"]["rows"]),
        "old": {k: v for k, v in both["old"].items() if k not in ("rows", "segments", "seg_evaluations")},
        "new": {k: v for k, v in both["new"].items() if k not in ("rows", "segments", "seg_evaluations")},
        "ratio_per_unit_time": both["old"]["wall_s"] / both["new"]["wall_s"],
        "merge_times": merges,
        "merge_rel_diff": max((abs(a - b) / abs(a) for a, b in zip(merges["old"][:n], merges["new"][:n])), default=0.0),
        "max_rel_diff": diffs,
    }


if __name__ == "__main__":  # pragma: no cover - manual use
    import json
    import sys

    if "--example" in sys.argv:
        print(json.dumps(bench_example(sys.argv[sys.argv.index("--example") + 1]), indent=1))
    else:
        print(json.dumps(bench_implicit("--quick" in sys.argv), indent=1))
