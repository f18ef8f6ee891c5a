"""Density-level accuracy where the density concentrates: the paper's OU regime at H = 1 (issue 15, part 1).

Setting (``spherepde/runs/configs/paper-ou-mesh.toml`` and ``paper-ou-particles.toml`` at
H = 1): OU weights dD = (I - D) dt + sqrt(2) dW^sym (sigma^2 = 2), D(0) = G + G^T, s = -1,
generated once per path with the exact OU transition on a ``weights_dt`` = 0.01 grid. The
mesh solver starts from the octahedral density (projected normal bumps, sigma = 0.05,
:func:`spherepde.geometry.densities.octahedral`); the particle solver from octahedral tokens
(the same law); both are driven by the SAME weight path (piecewise linear between grid
points), so they approximate the same mean-field solution.

For each of ``paths`` weight paths:

* the mesh solver on icosphere levels ``levels`` (20 l^2 cells) at orders 1 (upwind) and 2
  (limited linear reconstruction), time integrator per order from ``integrators`` (full:
  forward Euler for both, the paper examples' integrator; smoke and quick: SSP-RK2 at order 2),
  adaptive steps at CFL ``cfl``; each run's wall time (solver only) is its cost;
* the particle solver for n in ``n_list`` with ``samples`` independent token draws each
  (Heun at the weight grid step: Euler's first-order time error in <G^2> would be mistaken
  for a finite-n effect);
* the time average <G^2> over t >= ``t_avg`` (the paper's 2.5 at T = 20, scaled with T in
  the smaller sizes).

Per path the converged value is the finest level at order 2; where the order-2 sequence is
clean over the three finest levels (successive differences of one sign, shrinking, observed
order in [0.5, 4]) a Richardson estimate G_f + (G_f - G_m) / (r^p - 1) is also given. Every
discretisation's relative error is reported against both (its "error" for the 5 % bar is the
larger of the two), with its cost. The **recommended discretisation** is the cheapest (mean
wall time over paths) whose error is within ``bar`` (5 %) on every path -- among the candidates
within ``cost_tie`` (25 %) of that cost, the most accurate (wall times are noisy).

Particles: mean and standard deviation over the samples and the 95 % t-interval of the
mean, per path and n. The density level is the mean-field limit: the offset of the particle
mean from the converged mesh value is the finite-n effect (bias plus the sampling error the
interval shows); the mesh-to-converged difference is the discretisation error. The spread
over samples should shrink like n^{-1/2} (pooled over paths, a fitted slope is reported).

Solver checks (bands per size in SIZES; each fails for a wrong scheme):

* order 2, the relative change of <G^2> between the two finest levels, max over paths <=
  ``change_max`` (the sequence has settled; the slower order-1 sequence changes more);
* order 2, observed order in h from the path-averaged successive differences
  |G(l_2) - G(l_1)|, |G(l_3) - G(l_2)| within ``p2_band`` (a first-order scheme claimed as
  second lands near 1);
* order 1, the same observed order within ``p1_band`` (expected 1);
* order 1 and order 2 converge to the same limit: the order-1 Richardson value
  2 G_1(l_3) - G_1(l_2) (nominal order 1) within ``same_limit_tol`` of the converged value,
  max over paths;
* mesh against tokens: the finest order-2 value within ``particle_tol`` of the particle mean
  at the largest n, max over paths (the tolerance covers the finite-n offset at that n; a
  flux of the wrong sign misses it -- self-convergence alone cannot see a consistently wrong
  scheme).

Whether the finest mesh lies inside the particles' 95 % sampling interval at the largest n
is reported as a **finding**, not a check: the interval covers the sampling error of a few
draws but not the O(1/n) finite-n bias, which on spiky paths can exceed the interval, so
it would fail for a correct solver (the full report measures both).

Paper claims (``b_H``): the density-level OU exponent b (path mean of <G^2> ~ H^b) with the
``b_level``/``b_order`` mesh, next to the n = ``b_n`` particle exponent on the same paths
(per path the mean over ``samples`` draws), each with a 95 % bootstrap interval over paths;
reproduced only if the interval contains the paper's b = -1.

Sizes (``SIZES``): smoke (levels 4 / 8 / 16, T = 0.25, one path, n = 100 / 1000 x 3,
exponent over H = 1, 4 at level 4); quick (levels 8 / 16 / 32, T = 5, two paths,
n = 200 / 20000 x 3; exponent over H = 1, 10 at level 16, order 2); full (levels 16 / 32 /
64, T = 20, three paths, n = 200 / 2000 / 20000 x 3, order 2 with Euler; exponent over
H = 1, 10, 100 at level 32 with level 16 beside it, three paths per H; report in
validation/report-full/mesh_convergence, whose findings the README summarises).
"""

from __future__ import annotations

import math
import time

import numpy as np

from spherepde.model.statistics import exponent_fit, fit_rate, time_average
from spherepde.studies import common as _v
from spherepde.studies.common import (
    checks_line,
    claim_sentence,
    format_number,
    paper_claim,
    require,
    require_finite,
    save_figure,
    solver_check,
    study_params,
)

NAME = "mesh_convergence"
TITLE = "Density-level accuracy at H = 1 (paper's OU regime): mesh convergence against particles on the same weight paths"

SIZES = _v.sizes_table({
    "T": _v.per_size(0.25, 5.0, 20.0),
    "t_avg": _v.per_size(0.03125, 0.625, 2.5),
    "weights_dt": 0.01,
    "record_dt": 0.01,
    "paths": _v.per_size(1, 2, 3),
    "levels": _v.per_size((4, 8, 16), (8, 16, 32), (16, 32, 64)),
    "orders": (1, 2),
    # full is sized to about two hours on 2 cores; its order 2 uses forward Euler, the time integrator of the paper
    # examples: the OU path is only Hoelder-1/2 in time and the step is mostly capped by the path grid
    "integrators": _v.per_size({"1": "euler", "2": "ssprk2"}, {"1": "euler", "2": "ssprk2"}, {"1": "euler", "2": "euler"}),
    "cfl": 0.5,
    "sigma0": 0.05,
    "n_list": _v.per_size((100, 1000), (200, 20000), (200, 2000, 20000)),
    "samples": 3,
    "particle_integrator": "heun",
    "bar": 0.05,
    "cost_tie": 0.25,
    "b_H": _v.per_size((1, 4), (1, 10), (1, 10, 100)),
    "b_paths": _v.per_size(2, 2, 3),
    "b_level": _v.per_size(4, 16, 32),
    "b_coarse_level": _v.per_size(2, 8, 16),
    "b_order": 2,
    "b_n": _v.per_size(100, 200, 200),
    "bootstrap": _v.per_size(200, 2000, 5000),
    # check bands. Measured at smoke (correct scheme / flux of the wrong sign): change 0.040 / 0.099,
    # order 2 2.49 / 2.32, order 1 2.61 / 2.18 (at T = 0.25 the O(h^2) error of the initial cell
    # averages of the narrow bumps dominates both orders, hence the wide order-1 band), same limit
    # 0.028 / 0.078, mesh against 1000 tokens 0.098 / 0.28 (the finite-n offset at n = 1000 is ~+10%)
    "change_max": _v.per_size(0.05, 0.03, 0.03),
    "p2_band": _v.per_size((1.2, 4.0), (1.2, 4.0), (1.0, 4.0)),
    "p1_band": _v.per_size((0.6, 3.0), (0.6, 1.6), (0.6, 1.6)),
    "same_limit_tol": _v.per_size(0.05, 0.03, 0.03),
    "particle_tol": _v.per_size(0.15, 0.05, 0.05),
})

#: What each size parameter may be (``spherepde validate --set`` checks overrides against it before anything runs).
RANGES = {
    "T": _v.TIME,
    "t_avg": _v.TIME0,
    "weights_dt": _v.STEP,
    "record_dt": _v.STEP,
    "paths": _v.SEEDS,
    "levels": _v.LEVEL,
    "orders": _v.ORDER,
    "integrators": _v.MESH_INTEGRATOR,
    "cfl": _v.FRACTION,
    "sigma0": _v.POSITIVE,
    "n_list": _v.TOKENS,
    "samples": _v.SEEDS,
    "particle_integrator": _v.PARTICLE_INTEGRATOR,
    "bar": _v.POSITIVE,
    "cost_tie": _v.POSITIVE,
    "b_H": _v.HEADS,
    "b_paths": _v.SEEDS,
    "b_level": _v.LEVEL,
    "b_coarse_level": _v.LEVEL,
    "b_order": _v.ORDER,
    "b_n": _v.TOKENS,
    "bootstrap": _v.COUNT,
    "change_max": _v.POSITIVE,
    "p2_band": _v.ANY,
    "p1_band": _v.ANY,
    "same_limit_tol": _v.POSITIVE,
    "particle_tol": _v.POSITIVE,
}

#: The paper's OU exponent: time-averaged G^2 ~ H^b with b = -1.
PAPER_B_OU = -1.0


# ------------------------------------------------------------------ shared helpers
def record_times(T: float, record_dt: float, weights_dt: float) -> list[float]:
    """Record times 0, record_dt, ..., T, each snapped to the weight grid."""
    return [float(x) for x in np.round(np.arange(0.0, T + 0.5 * record_dt, record_dt) / weights_dt) * weights_dt]


def ou_path(H: int, T: float, dt: float, seed: int):
    """The paper's OU weight path (sigma^2 = 2, D(0) = G + G^T, s = -1), exact transition on a dt grid."""
    from spherepde.model.weights import OUProcess, generate_weight_path

    return generate_weight_path(OUProcess(), H=H, d=3, T=T, dt=dt, seed=seed, init="gaussian", sign=-1.0, scheme="exact")


def path_seed(H: int, j: int) -> int:
    """The seed of OU weight path j with H heads (H = 1: the convergence paths, shared with the exponent part)."""
    return 8_100_000 + j if H == 1 else 8_100_000 + 1000 * H + j


def token_seed(*key: int) -> int:
    """An independent, reproducible token seed for (path, n, sample, ...)."""
    return int(np.random.SeedSequence([int(k) for k in key]).generate_state(1)[0])


def run_mesh(mesh, rho0, path, times, *, order: int, integrator: str, cfl: float) -> dict:
    """Mesh solver along ``times``; returns G2(t), E(t), solver wall time, steps and max rho."""
    from spherepde.solvers.mesh import MeshSolver
    from spherepde.solvers.protocol import integrate

    t0 = time.perf_counter()
    ms = MeshSolver(mesh, rho0, path, order=order, integrator=integrator, cfl=cfl)
    tr = integrate(ms, times)
    return {"G2": tr["G2"].tolist(), "energy": tr["energy"].tolist(), "wall_s": time.perf_counter() - t0, "steps": int(ms.step_count),
            "rho_max": float(max(tr["rho_max"].max(), 0.0))}


def run_particles(X0, path, times, *, integrator: str) -> dict:
    """Particle solver along ``times`` (at the weight grid step); returns G2(t), E(t) and the wall time."""
    from spherepde.solvers.particles import ParticleSolver
    from spherepde.solvers.protocol import integrate

    t0 = time.perf_counter()
    ps = ParticleSolver(X0, path, integrator=integrator, cluster_radius=1e-12)  # no cluster count: O(n^2) pairs for tight clusters
    tr = integrate(ps, times)
    return {"G2": tr["G2"].tolist(), "energy": tr["energy"].tolist(), "wall_s": time.perf_counter() - t0}


def warm_up() -> None:
    """Compile the Numba kernels (mesh orders 1 and 2, tokens) so that no timed run pays for it."""
    from spherepde.attention import attention_moments
    from spherepde.geometry import densities
    from spherepde.geometry.meshfiles import icosphere
    from spherepde.solvers.particles import initial_tokens

    path = ou_path(1, 0.02, 0.01, 0)
    for level in (2, 10, 16):  # serial and parallel direct kernels; level 16 (5,120 cells) takes the fast sums
        mesh = icosphere(level)
        rho0 = densities.octahedral(mesh, 0.3)
        for order, integ in ((1, "euler"), (2, "euler"), (2, "ssprk2")):
            run_mesh(mesh, rho0, path, [0.0, 0.01], order=order, integrator=integ, cfl=0.5)
    for n in (20, 1500):
        for integ in ("euler", "heun"):
            run_particles(initial_tokens("octahedral", n, seed=0), path, [0.0, 0.01], integrator=integ)
    X = initial_tokens("uniform", 300, seed=0)  # the spherical-harmonic fast sums
    for q in (False, True):
        attention_moments(X, X, np.full(300, 1 / 300), path.matrices(0.0)[0], want_q=q, log=True, summation="fast")


def t_interval(values, level: float = 0.95) -> tuple[float, float, float, float]:
    """Mean, sample standard deviation and the two-sided t-interval of the mean."""
    from scipy import stats

    v = np.asarray(values, float)
    m = float(v.mean())
    if v.size < 2:
        return m, float("nan"), float("nan"), float("nan")
    sd = float(v.std(ddof=1))
    half = float(stats.t.ppf(0.5 + level / 2, v.size - 1)) * sd / math.sqrt(v.size)
    return m, sd, m - half, m + half


def observed_order(d_coarse: float, d_fine: float, ratio: float) -> float:
    """p = log(|d_coarse| / |d_fine|) / log(ratio) from two successive differences (nan if a difference is 0)."""
    if not (d_coarse and d_fine) or not (math.isfinite(d_coarse) and math.isfinite(d_fine)):
        return float("nan")
    return math.log(abs(d_coarse) / abs(d_fine)) / math.log(ratio)


def richardson(values, ratio: float) -> dict:
    """Richardson estimate from the last three of a sequence on levels refined by ``ratio``.

    Clean when the two successive differences have one sign, shrink, and give an order in
    [0.5, 4]; then value = G_f + (G_f - G_m) / (ratio^p - 1), else value is nan.
    """
    out = {"p": float("nan"), "clean": False, "value": float("nan")}
    if len(values) < 3:
        return out
    g1, g2, g3 = (float(x) for x in values[-3:])
    d1, d2 = g2 - g1, g3 - g2
    p = observed_order(d1, d2, ratio)
    out["p"] = p
    if d1 * d2 > 0 and abs(d2) < abs(d1) and 0.5 <= p <= 4.0:
        out["clean"] = True
        out["value"] = g3 + d2 / (ratio**p - 1.0)
    return out


def _key(level: int, order: int) -> str:
    return f"L{level}-o{order}"


def _levels_ratio(levels) -> float:
    r = [levels[i + 1] / levels[i] for i in range(len(levels) - 1)]
    require(len(r) >= 1, f"{NAME}: need at least two mesh levels, got {list(levels)}")
    require(max(r) - min(r) < 1e-9, f"{NAME}: mesh levels must grow by one constant factor (observed orders), got {list(levels)}")
    return float(r[0])


# ------------------------------------------------------------------------ the study
def _convergence(p, log) -> list:
    from spherepde.geometry import densities
    from spherepde.geometry.meshfiles import icosphere
    from spherepde.solvers.particles import initial_tokens

    T, wdt = float(p["T"]), float(p["weights_dt"])
    times = record_times(T, float(p["record_dt"]), wdt)
    ta = float(p["t_avg"])
    levels = sorted(int(x) for x in p["levels"])
    out = []
    for j in range(int(p["paths"])):
        seed = path_seed(1, j)
        path = ou_path(1, T, wdt, seed)
        rec = {"path": j, "seed": seed, "t": times, "mesh": {}, "particles": {}}
        for level in levels:
            mesh = icosphere(level)
            rho0 = densities.octahedral(mesh, float(p["sigma0"]))
            for order in p["orders"]:
                integ = p["integrators"][str(order)]
                r = run_mesh(mesh, rho0, path, times, order=int(order), integrator=integ, cfl=float(p["cfl"]))
                r.update(level=level, order=int(order), integrator=integ, cells=int(mesh.n_cells), tavg=time_average(times, r["G2"], ta))
                del r["energy"]
                rec["mesh"][_key(level, order)] = r
                log(f"[{NAME}] path {j} level {level} order {order}: {r['steps']} steps, {r['wall_s']:.1f} s, <G2> = {r['tavg']:.5g}")
        for n in p["n_list"]:
            runs = []
            for s in range(int(p["samples"])):
                X0 = initial_tokens("octahedral", int(n), seed=token_seed(j, n, s), sigma=float(p["sigma0"]))
                runs.append(run_particles(X0, path, times, integrator=p["particle_integrator"]))
            vals = [time_average(times, r["G2"], ta) for r in runs]
            m, sd, lo, hi = t_interval(vals)
            rec["particles"][str(n)] = {
                "n": int(n), "tavg": vals, "mean": m, "sd": sd, "ci95": [lo, hi],
                "wall_s": [r["wall_s"] for r in runs], "G2_mean": np.mean([r["G2"] for r in runs], axis=0).tolist(),
            }
            log(f"[{NAME}] path {j} n = {n}: <G2> = {m:.5g} +- {sd:.2g} over {len(vals)} samples, {sum(r['wall_s'] for r in runs):.1f} s")
        out.append(rec)
    return out


def _analyse(res, p) -> None:
    levels = sorted(int(x) for x in p["levels"])
    ratio = _levels_ratio(levels) if len(levels) >= 2 else 2.0
    orders = [int(o) for o in p["orders"]]
    require(2 in orders, f"{NAME}: order 2 must be among the orders (it defines the converged value), got {orders}")
    fin = levels[-1]
    nmax = str(max(int(n) for n in p["n_list"]))
    bar = float(p["bar"])
    for rec in res["paths"]:
        seq2 = [rec["mesh"][_key(lv, 2)]["tavg"] for lv in levels]
        ref = seq2[-1]
        rich = richardson(seq2, ratio)
        conv = {"ref": ref, "richardson": rich["value"], "p2": rich["p"], "clean": rich["clean"]}
        if 1 in orders:
            seq1 = [rec["mesh"][_key(lv, 1)]["tavg"] for lv in levels]
            conv["p1"] = observed_order(seq1[-2] - seq1[-3], seq1[-1] - seq1[-2], ratio) if len(seq1) >= 3 else float("nan")
            # Richardson with the nominal order 1: G_f + (G_f - G_m) / (ratio - 1)
            conv["order1_limit"] = seq1[-1] + (seq1[-1] - seq1[-2]) / (ratio - 1.0) if len(seq1) >= 2 else float("nan")
        rec["conv"] = conv
        for k, r in rec["mesh"].items():
            r["err_ref"] = (r["tavg"] - ref) / ref
            r["err_richardson"] = (r["tavg"] - rich["value"]) / rich["value"] if rich["clean"] else float("nan")
            r["err"] = max(abs(r["err_ref"]), abs(r["err_richardson"]) if rich["clean"] else 0.0)
        best = rich["value"] if rich["clean"] else ref
        for key, pr in rec["particles"].items():
            pr["offset"] = (pr["mean"] - ref) / ref  # finite-n offset of the particle mean from the converged mesh
            pr["offset_lo"], pr["offset_hi"] = ((pr["ci95"][0] - ref) / ref, (pr["ci95"][1] - ref) / ref)
            pr["mesh_in_interval"] = bool(pr["ci95"][0] <= ref <= pr["ci95"][1]) if np.isfinite(pr["ci95"][0]) else False
            pr["best_in_interval"] = bool(pr["ci95"][0] <= best <= pr["ci95"][1]) if np.isfinite(pr["ci95"][0]) else False
        rec["finest_vs_particles"] = (ref - rec["particles"][nmax]["mean"]) / rec["particles"][nmax]["mean"]
    # discretisations: worst error over paths and mean cost
    disc = []
    for lv in levels:
        for o in orders:
            k = _key(lv, o)
            rs = [rec["mesh"][k] for rec in res["paths"]]
            disc.append({
                "key": k, "level": lv, "order": o, "integrator": p["integrators"][str(o)], "cells": rs[0]["cells"],
                "max_err": float(max(r["err"] for r in rs)), "max_err_ref": float(max(abs(r["err_ref"]) for r in rs)),
                "cost_s": float(np.mean([r["wall_s"] for r in rs])), "steps": float(np.mean([r["steps"] for r in rs])),
                "within_bar": bool(all(r["err"] <= bar for r in rs)),
                "is_reference": lv == fin and o == 2,
            })
    res["discretisations"] = disc
    ok = [d for d in disc if d["within_bar"]]
    rec_d = None
    if ok:  # the cheapest; wall times on a shared machine are good to ~25 %: among those that close, the most accurate
        cmin = min(d["cost_s"] for d in ok)
        rec_d = min((d for d in ok if d["cost_s"] <= (1.0 + float(p["cost_tie"])) * cmin), key=lambda d: d["max_err"])
    res["recommended"] = None if rec_d is None else {
        **{k: rec_d[k] for k in ("key", "level", "order", "integrator", "cells", "max_err", "cost_s")},
        "is_reference": rec_d["is_reference"],
        "richardson_on_every_path": all(rec["conv"]["clean"] for rec in res["paths"]),
    }
    # convergence orders from the path-averaged successive differences
    res["orders"] = {}
    for o in orders:
        seqs = np.asarray([[rec["mesh"][_key(lv, o)]["tavg"] for lv in levels] for rec in res["paths"]])
        if len(levels) >= 3:
            d = np.abs(np.diff(seqs, axis=1)).mean(axis=0)
            res["orders"][str(o)] = observed_order(float(d[-2]), float(d[-1]), ratio)
        else:
            res["orders"][str(o)] = float("nan")
    # finite n: pooled spread over paths and its slope in n
    ns = sorted(int(n) for n in p["n_list"])
    pooled = [float(np.sqrt(np.nanmean([rec["particles"][str(n)]["sd"] ** 2 for rec in res["paths"]]))) for n in ns]
    offs = [float(np.mean([rec["particles"][str(n)]["offset"] for rec in res["paths"]])) for n in ns]
    res["finite_n"] = {"n": ns, "pooled_sd": pooled, "mean_offset": offs,
                       "max_abs_offset": [float(max(abs(rec["particles"][str(n)]["offset"]) for rec in res["paths"])) for n in ns],
                       "sd_slope": fit_rate(ns, pooled) if len(ns) >= 2 else float("nan")}


def _exponent(res, p, log) -> dict:
    """The density-level OU exponent b (mesh b_level/b_order) and the b_n-particle one on the same paths."""
    from spherepde.geometry import densities
    from spherepde.geometry.meshfiles import icosphere
    from spherepde.solvers.particles import initial_tokens

    Hs = [int(h) for h in p["b_H"]]
    T, wdt = float(p["T"]), float(p["weights_dt"])
    times = record_times(T, float(p["record_dt"]), wdt)
    ta = float(p["t_avg"])
    lv, o = int(p["b_level"]), int(p["b_order"])
    integ = p["integrators"][str(o)]
    n = int(p["b_n"])
    mesh = icosphere(lv)
    rho0 = densities.octahedral(mesh, float(p["sigma0"]))
    lc = int(p.get("b_coarse_level") or 0)
    coarse = None
    if lc:
        cmesh = icosphere(lc)
        coarse = (cmesh, densities.octahedral(cmesh, float(p["sigma0"])))
    out = {"H": Hs, "level": lv, "order": o, "integrator": integ, "cells": int(mesh.n_cells), "n": n, "paths": int(p["b_paths"]),
           "mesh_tavg": [], "particles_tavg": [], "mesh_wall_s": [], "coarse_level": lc, "coarse_tavg": [], "coarse_wall_s": []}
    for H in Hs:
        mv, pv, wall, cv, cwall = [], [], [], [], []
        for j in range(int(p["b_paths"])):
            reuse = H == 1 and j < len(res["paths"]) and _key(lv, o) in res["paths"][j]["mesh"]
            if reuse:
                rec = res["paths"][j]
                mv.append(rec["mesh"][_key(lv, o)]["tavg"])
                wall.append(rec["mesh"][_key(lv, o)]["wall_s"])
                path = ou_path(1, T, wdt, rec["seed"])
                seed = rec["seed"]
            else:
                seed = path_seed(H, j)
                path = ou_path(H, T, wdt, seed)
                r = run_mesh(mesh, rho0, path, times, order=o, integrator=integ, cfl=float(p["cfl"]))
                mv.append(time_average(times, r["G2"], ta))
                wall.append(r["wall_s"])
            if coarse:  # the same head count one level coarser: the change bounds the b_level error at this H
                prev = res["paths"][j]["mesh"].get(_key(lc, o)) if H == 1 and j < len(res["paths"]) else None
                if prev is not None:
                    cv.append(prev["tavg"])
                    cwall.append(prev["wall_s"])
                else:
                    r = run_mesh(coarse[0], coarse[1], path, times, order=o, integrator=integ, cfl=float(p["cfl"]))
                    cv.append(time_average(times, r["G2"], ta))
                    cwall.append(r["wall_s"])
            if H == 1 and reuse and str(n) in res["paths"][j]["particles"]:
                pv.append(res["paths"][j]["particles"][str(n)]["mean"])
            else:
                vals = []
                for s in range(int(p["samples"])):
                    X0 = initial_tokens("octahedral", n, seed=token_seed(j, n, s, H), sigma=float(p["sigma0"]))
                    vals.append(time_average(times, run_particles(X0, path, times, integrator=p["particle_integrator"])["G2"], ta))
                pv.append(float(np.mean(vals)))
            log(f"[{NAME}] exponent: H = {H} path {j} (seed {seed}): mesh <G2> = {mv[-1]:.4g} ({wall[-1]:.1f} s)"
                + (f", level {lc}: {cv[-1]:.4g} ({cwall[-1]:.1f} s)" if coarse else "") + f", particles n = {n}: {pv[-1]:.4g}")
        out["mesh_tavg"].append(mv)
        out["particles_tavg"].append(pv)
        out["mesh_wall_s"].append(wall)
        out["coarse_tavg"].append(cv)
        out["coarse_wall_s"].append(cwall)
    if coarse:
        # relative change from the coarse level to b_level, per H (max over paths). For a scheme of order
        # p >= 1 in h and a level ratio r >= 2, the b_level error is ~ change / (r^p - 1) <= change.
        out["coarse_change"] = [[(m - c) / m for m, c in zip(mv, cv)] for mv, cv in zip(out["mesh_tavg"], out["coarse_tavg"])]
        out["coarse_change_max"] = [float(max(abs(x) for x in ch)) for ch in out["coarse_change"]]
    for w in ("mesh", "particles"):
        per_H = out[f"{w}_tavg"]
        means = [float(np.mean(v)) for v in per_H]
        out[f"{w}_mean"] = means
        out[f"{w}_fit"] = exponent_fit(Hs, per_H, resamples=int(p["bootstrap"]), min_runs=2)
    return out


def run(size: str = "quick", **overrides) -> dict:
    """Run the study at ``size`` (smoke/quick/full); keyword overrides replace parameters."""
    p, log = study_params(SIZES, size, overrides)
    t0 = time.perf_counter()
    require(len(p["levels"]) >= 3, f"{NAME}: need at least 3 mesh levels for an observed order, got {list(p['levels'])}")
    _levels_ratio(sorted(int(x) for x in p["levels"]))
    require(int(p["paths"]) >= 1 and int(p["samples"]) >= 2, f"{NAME}: need >= 1 path and >= 2 token samples per n (a spread), got {p['paths']} / {p['samples']}")
    require(not p.get("b_coarse_level") or 2 * int(p["b_coarse_level"]) <= int(p["b_level"]),
            f"{NAME}: b_coarse_level must be at most half of b_level ({p['b_level']}), got {p.get('b_coarse_level')}")
    warm_up()
    res = {"name": NAME, "title": TITLE, "size": size, "params": p}
    res["paths"] = _convergence(p, log)
    require_finite(f"{NAME}: mesh and particle <G^2>", [[r["tavg"] for r in rec["mesh"].values()] for rec in res["paths"]],
                   [[v for pr in rec["particles"].values() for v in pr["tavg"]] for rec in res["paths"]])
    require(all(r["tavg"] > 0 for rec in res["paths"] for r in rec["mesh"].values()), f"{NAME}: a mesh <G^2> is not positive")
    _analyse(res, p)
    if p["b_H"] and int(p["b_paths"]) >= 1:
        res["exponent"] = _exponent(res, p, log)
        require_finite(f"{NAME}: exponent data", res["exponent"]["mesh_tavg"], res["exponent"]["particles_tavg"])
    res["wall_s"] = time.perf_counter() - t0
    res["checks"] = _checks(res, p)
    res["claims"] = _claims(res, p)
    res["tables"] = _tables(res, p)
    res["summary"] = _summary(res, p)
    return res


def _checks(res, p) -> dict:
    levels = sorted(int(x) for x in p["levels"])
    lf, lm = levels[-1], levels[-2]
    nmax = max(int(n) for n in p["n_list"])
    ch = {}
    change = max(abs(rec["mesh"][_key(lf, 2)]["tavg"] - rec["mesh"][_key(lm, 2)]["tavg"]) / rec["mesh"][_key(lf, 2)]["tavg"] for rec in res["paths"])
    ch[f"order 2: relative change of <G2> from level {lm} to {lf} (max over paths)"] = solver_check(
        change, hi=float(p["change_max"]), expected=0.0, tolerance=f"<= {float(p['change_max']):g} (settled; order 1 changes ~4x more)")
    lo, hi = p["p2_band"]
    ch[f"order 2: observed order in h of <G2> (levels {', '.join(map(str, levels[-3:]))}, path-averaged differences)"] = solver_check(
        res["orders"]["2"], lo=float(lo), hi=float(hi), expected=2.0, tolerance=f"in [{lo:g}, {hi:g}] (limited reconstruction on a concentrating density)")
    if "1" in res["orders"]:
        lo, hi = p["p1_band"]
        ch["order 1: observed order in h of <G2> (path-averaged differences)"] = solver_check(
            res["orders"]["1"], lo=float(lo), hi=float(hi), expected=1.0, tolerance=f"in [{lo:g}, {hi:g}]")
        same = max(abs(rec["conv"]["order1_limit"] - rec["conv"]["ref"]) / rec["conv"]["ref"] for rec in res["paths"])
        ch["order 1 and order 2 converge to the same limit: |order-1 Richardson (p = 1) - finest order 2| / finest order 2 (max over paths)"] = solver_check(
            same, hi=float(p["same_limit_tol"]), expected=0.0, tolerance=f"<= {float(p['same_limit_tol']):g}")
    dev = max(abs(rec["finest_vs_particles"]) for rec in res["paths"])
    ch[f"finest mesh (level {lf}, order 2) against the particle mean at n = {nmax}: relative difference (max over paths)"] = solver_check(
        dev, hi=float(p["particle_tol"]), expected=0.0, tolerance=f"<= {float(p['particle_tol']):g} (covers the finite-n offset at n = {nmax})")
    return ch


def _claims(res, p) -> dict:
    cl = {}
    e = res.get("exponent")
    if not e or len(e["H"]) < 2:
        return cl
    Hs = ", ".join(map(str, e["H"]))
    cl["ou: b = -1 (density level, mesh)"] = paper_claim(
        e["mesh_fit"]["b"], e["mesh_fit"]["ci95"], PAPER_B_OU,
        statement=f"OU, density level (level {e['level']}, order {e['order']}): path mean of <G^2> ~ H^b over H = {Hs}")
    cl[f"ou: b = -1 (particles, n = {e['n']}, same paths)"] = paper_claim(
        e["particles_fit"]["b"], e["particles_fit"]["ci95"], PAPER_B_OU,
        statement=f"OU, {e['n']} tokens on the same weight paths: path mean of <G^2> ~ H^b over H = {Hs}")
    return cl


def _f(x, f="{:.4g}"):
    return format_number(x, f)


def _pct(x):
    """A signed percentage."""
    return format_number(x, "{:+.1%}")


def _apct(x):
    """An unsigned percentage (errors that are absolute values)."""
    return format_number(x, "{:.1%}")


def _tables(res, p) -> list:
    levels = sorted(int(x) for x in p["levels"])
    orders = [int(o) for o in p["orders"]]
    ns = sorted(int(n) for n in p["n_list"])
    tables = []
    rows = []
    for rec in res["paths"]:
        for lv in levels:
            for o in orders:
                r = rec["mesh"][_key(lv, o)]
                rows.append([rec["path"], f"level {lv} ({r['cells']} cells)", f"{o} ({r['integrator']})", r["tavg"], _pct(r["err_ref"]),
                             _pct(r["err_richardson"]), r["wall_s"], r["steps"], r["rho_max"]])
        c = rec["conv"]
        rows.append([rec["path"], "Richardson (order 2, 3 finest)", "-", c["richardson"] if c["clean"] else float("nan"),
                     "" if not c["clean"] else _pct((c["richardson"] - c["ref"]) / c["ref"]), f"p = {_f(c['p2'], '{:.2f}')}" + ("" if c["clean"] else " (not clean)"), "", "", ""])
    tables.append({"title": f"Mesh: time-averaged G^2 (t >= {p['t_avg']:g}), relative error against the finest order-2 value and the Richardson estimate, and cost",
                   "headers": ["path", "mesh", "order (integrator)", "<G2>", "err vs finest o2", "err vs Richardson", "wall s", "steps", "max rho"],
                   "rows": rows})
    rows = []
    for rec in res["paths"]:
        for n in ns:
            pr = rec["particles"][str(n)]
            rows.append([rec["path"], n, len(pr["tavg"]), pr["mean"], pr["sd"], f"[{_f(pr['ci95'][0])}, {_f(pr['ci95'][1])}]", _pct(pr["offset"]),
                         "yes" if pr["mesh_in_interval"] else "no", float(np.mean(pr["wall_s"]))])
    tables.append({"title": f"Particles on the same weight paths ({p['particle_integrator']}, dt = {p['weights_dt']:g}): <G^2> over independent token samples, "
                            "the offset of their mean from the finest order-2 mesh (finite n), and whether that mesh value lies in the 95% t-interval",
                   "headers": ["path", "n", "samples", "mean <G2>", "sd", "95% interval of the mean", "offset from mesh", "mesh in interval", "wall s per run"],
                   "rows": rows})
    fn = res["finite_n"]
    tables.append({"title": "Finite n, pooled over paths: spread over samples and offset of the particle mean from the converged mesh",
                   "headers": ["n", "pooled sd", "mean offset", "max |offset|"],
                   "rows": [[n, s, _pct(o), _pct(m)] for n, s, o, m in zip(fn["n"], fn["pooled_sd"], fn["mean_offset"], fn["max_abs_offset"])]})
    tables.append({"title": f"Discretisations: worst relative error over paths (the larger of the two estimates) and mean cost; bar {100 * p['bar']:g}%",
                   "headers": ["mesh", "order", "cells", "max error", "mean wall s", f"within {100 * p['bar']:g}% on every path"],
                   "rows": [[f"level {d['level']}", f"{d['order']} ({d['integrator']})", d["cells"], _apct(d["max_err"]), d["cost_s"],
                             ("yes" if d["within_bar"] else "no") + (" (reference)" if d["is_reference"] else "")] for d in res["discretisations"]]})
    e = res.get("exponent")
    if e:
        rows = []
        lc = e.get("coarse_level") or 0
        for i, H in enumerate(e["H"]):
            row = [H, len(e["mesh_tavg"][i]), e["mesh_mean"][i], e["particles_mean"][i], _pct(e["particles_mean"][i] / e["mesh_mean"][i] - 1.0),
                   float(np.mean(e["mesh_wall_s"][i]))]
            if lc:
                row += [float(np.mean(e["coarse_tavg"][i])), _apct(e["coarse_change_max"][i])]
            rows.append(row)
        headers = ["H", "paths", f"mesh L{e['level']} <G2>", f"particles n = {e['n']}", "particles vs mesh", "mesh wall s"]
        if lc:
            headers += [f"mesh L{lc} <G2>", f"max |change| L{lc} -> L{e['level']}"]
        tables.append({"title": f"OU exponent: path means of <G^2> per H, mesh level {e['level']} order {e['order']} ({e['integrator']}) and n = {e['n']} "
                                "tokens on the same paths" + (f"; the change from level {lc} bounds the level-{e['level']} error at each H" if lc else ""),
                       "headers": headers, "rows": rows})
    return tables


def _summary(res, p) -> str:
    levels = sorted(int(x) for x in p["levels"])
    ns = sorted(int(n) for n in p["n_list"])
    lf = levels[-1]
    nmax = ns[-1]
    L = []
    paper_like = p["T"] == 20.0 and p["t_avg"] == 2.5
    L.append(
        f"The paper's OU regime at H = 1 (sigma^2 = 2, D(0) = G + G^T, s = -1, exact OU on a {p['weights_dt']:g} grid), "
        f"{len(res['paths'])} weight path(s), T = {p['T']:g}, <G^2> = time average of G^2 over t >= {p['t_avg']:g}"
        + ("." if paper_like else " (NOT the paper's T = 20 and t >= 2.5: this size is shrunk to fit its time budget, so the numbers are indicative).")
        + f" Mesh: icosphere levels {', '.join(map(str, levels))} at order 1 (upwind, {p['integrators'].get('1', '-')}) and order 2 "
        f"(limited linear, {p['integrators']['2']}), CFL {p['cfl']:g}, "
        f"from the octahedral density; particles: n = {', '.join(map(str, ns))} with {p['samples']} independent token samples each, "
        f"{p['particle_integrator']} on the same weight path. The converged value of a path is its level-{lf} order-2 <G^2>."
    )
    # discretisation error
    parts = []
    for d in res["discretisations"]:
        parts.append(f"level {d['level']} order {d['order']}: {_apct(d['max_err'])} worst, {d['cost_s']:.1f} s")
    L.append("\nDiscretisation error (finding; worst over paths of the larger of the errors against the finest order-2 value and the "
             "Richardson estimate): " + "; ".join(parts) + ".")
    clean = [rec["conv"]["clean"] for rec in res["paths"]]
    L.append(f"The order-2 sequence gives a clean Richardson estimate on {sum(clean)} of {len(clean)} path(s) (observed orders "
             + ", ".join(_f(rec["conv"]["p2"], "{:.2f}") for rec in res["paths"]) + f"); path-averaged observed orders: order 2 {_f(res['orders']['2'], '{:.2f}')}"
             + (f", order 1 {_f(res['orders']['1'], '{:.2f}')}" if "1" in res["orders"] else "") + ".")
    rec_d = res["recommended"]
    if rec_d is None:
        L.append(f"\n**Recommended discretisation:** none of the candidates is within {100 * p['bar']:g}% on every path (the Richardson "
                 "estimate disagrees with the finest order-2 value by more than that): refine further.")
    else:
        note = ""
        if rec_d["is_reference"]:
            note = (" -- it is the reference itself, so its own error is only bounded by the Richardson estimate"
                    + ("" if rec_d["richardson_on_every_path"] else " where one exists; a finer level is needed to confirm it"))
        L.append(f"\n**Recommended discretisation (result):** icosphere level {rec_d['level']} ({rec_d['cells']} cells), order {rec_d['order']} "
                 f"({rec_d['integrator']}): the cheapest candidate within {100 * p['bar']:g}% of the converged <G^2> on every path "
                 f"(worst {_apct(rec_d['max_err'])}, {rec_d['cost_s']:.1f} s per run at T = {p['T']:g}){note}. The "
                 "discretisation of the paper examples " + _paper_example_sentence(res, p) + ". The bar is assessed at H = 1, where the density "
                 "concentrates most; at larger H the heads average the weights' excursions out and the density stays spread "
                 "(see the exponent table for H > 1: mesh and tokens on the same paths).")
    # finite n
    fn = res["finite_n"]
    L.append("\nFinite n (finding): the particle mean's offset from the converged mesh, mean over paths "
             + ", ".join(f"{_pct(o)} at n = {n}" for n, o in zip(fn["n"], fn["mean_offset"]))
             + " (largest |offset| " + ", ".join(f"{_pct(o)}" for o in fn["max_abs_offset"]) + "); the spread over samples, pooled, "
             + ", ".join(f"{_f(s, '{:.3g}')}" for s in fn["pooled_sd"]) + f" -- slope in n {_f(fn['sd_slope'], '{:.2f}')} (Monte-Carlo: -0.5).")
    inside = [rec["particles"][str(nmax)]["mesh_in_interval"] for rec in res["paths"]]
    best_in = [rec["particles"][str(nmax)]["best_in_interval"] for rec in res["paths"]]
    L.append(f"At n = {nmax} the converged mesh value lies inside the particles' 95% sampling interval on {sum(inside)} of {len(inside)} path(s), "
             f"the best estimate (Richardson where clean) on {sum(best_in)} of {len(best_in)} "
             "(a finding, not a check: the interval of a few samples covers their sampling error, not the finite-n bias). "
             + _split_sentence(res, p))
    e = res.get("exponent")
    if e:
        claims = res["claims"]
        cm = claims["ou: b = -1 (density level, mesh)"]
        cp = claims[f"ou: b = -1 (particles, n = {e['n']}, same paths)"]
        err_b = next((d["max_err"] for d in res["discretisations"] if d["level"] == e["level"] and d["order"] == e["order"]), float("nan"))
        L.append(f"\nOU exponent over H = {', '.join(map(str, e['H']))} ({e['paths']} paths per H, T = {p['T']:g}): density level (level {e['level']}, "
                 f"order {e['order']}, whose H = 1 error above is up to {_apct(err_b)}): {claim_sentence(cm)}. Particles, n = {e['n']} on the same paths: "
                 f"{claim_sentence(cp)}." + ("" if len(e["H"]) >= 3 else " (Two values of H only: this size cannot afford H = 100.)"))
        off = ", ".join(f"{_pct(pm / mm - 1.0)} at H = {H}" for H, pm, mm in zip(e["H"], e["particles_mean"], e["mesh_mean"]))
        L.append(f"Finite n against the density level on the same paths (path means, n = {e['n']} tokens vs level {e['level']}): {off}.")
        if e.get("coarse_level"):
            lc = e["coarse_level"]
            ch = ", ".join(f"{_apct(c)} at H = {H}" for H, c in zip(e["H"], e["coarse_change_max"]))
            ok = all(c <= float(p["bar"]) for c in e["coarse_change_max"])
            L.append(f"Discretisation error at every H (finding): the largest change of <G^2> from level {lc} to level {e['level']} over the paths is {ch}; "
                     f"for a scheme of order >= 1 with the level doubled this bounds the level-{e['level']} error, so level {e['level']} order {e['order']} is "
                     + (f"within the {100 * p['bar']:g}% bar at every H." if ok else f"NOT shown to be within the {100 * p['bar']:g}% bar at every H."))
    L.append(checks_line(res["checks"], res["claims"]))
    return "\n".join(L)


def paper_example_discretisation(name: str = "paper-ou-mesh") -> dict:
    """Mesh level, order and time integrator of a packaged example (what the study's bar is about)."""
    from pathlib import Path

    from spherepde.runs.config import load_config
    from spherepde.runs.configs import __file__ as examples_file

    cfg = load_config(Path(examples_file).parent / f"{name}.toml")  # the validated config, as a run reads it
    return {"level": int(cfg.mesh.level), "order": int(cfg.solver.order), "integrator": str(cfg.solver.integrator)}


def _paper_example_sentence(res, p) -> str:
    ex = paper_example_discretisation()
    d = next((d for d in res["discretisations"] if d["level"] == ex["level"] and d["order"] == ex["order"]), None)
    what = f"(level {ex['level']}, order {ex['order']}, {ex['integrator']})"
    if d is None:
        return f"{what} was not among the candidates of this size"
    if d["integrator"] != ex["integrator"]:
        what += f" was run here with {d['integrator']}; it"
    return (f"{what} is off by up to {_apct(d['max_err'])}" + (" -- within the bar" if d["within_bar"] else f" -- outside the {100 * p['bar']:g}% bar"))


def _split_sentence(res, p) -> str:
    """Which differences are discretisation and which are finite n, per path: the paper examples' mesh
    (level 16, order 1; else the coarsest level) against the smallest n."""
    levels = sorted(int(x) for x in p["levels"])
    ns = sorted(int(n) for n in p["n_list"])
    lc = 16 if 16 in levels else levels[0]
    out = []
    for rec in res["paths"]:
        o1 = rec["mesh"].get(_key(lc, 1), rec["mesh"][_key(lc, 2)])
        pr = rec["particles"][str(ns[0])]
        out.append(f"path {rec['path']}: level-{lc} order-{o1['order']} mesh {_pct(o1['err_ref'])} (discretisation), "
                   f"n = {ns[0]} tokens {_pct(pr['offset'])} [{_pct(pr['offset_lo'])}, {_pct(pr['offset_hi'])}] (finite n)")
    return "Against the converged value: " + "; ".join(out) + "."


# ------------------------------------------------------------------------------ plot
def plot(results, out_dir) -> list:
    from spherepde.viz.figstyle import finish_figure, legend_outside, subplots

    p = results["params"]
    levels = sorted(int(x) for x in p["levels"])
    orders = [int(o) for o in p["orders"]]
    ns = sorted(int(n) for n in p["n_list"])
    paths = []
    recs = results["paths"]
    fig, axes = subplots(1, len(recs) + 1, figsize=(4.3 * (len(recs) + 1), 3.8), squeeze=False, layout="constrained")
    for ax, rec in zip(axes[0], recs):
        for o in orders:
            cells = [rec["mesh"][_key(lv, o)]["cells"] for lv in levels]
            ax.semilogx(cells, [rec["mesh"][_key(lv, o)]["tavg"] for lv in levels], "o-" if o == 2 else "s--",
                        color="C0" if o == 2 else "C1", label=f"mesh order {o}")  # the same colours as the cost panel
        c = rec["conv"]
        if c["clean"]:
            ax.axhline(c["richardson"], color="k", lw=0.8, ls=":", label="Richardson")
        xmax = rec["mesh"][_key(levels[-1], 2)]["cells"]
        for i, n in enumerate(ns):
            pr = rec["particles"][str(n)]
            x = xmax * 1.6 * (1.35**i)
            lo, hi = pr["ci95"]
            ax.errorbar([x], [pr["mean"]], yerr=[[pr["mean"] - lo], [hi - pr["mean"]]] if np.isfinite(lo) else None, fmt="D", color=f"C{2 + i}", label=f"tokens n={n}")
            ax.plot([x] * len(pr["tavg"]), pr["tavg"], ".", color=f"C{2 + i}", alpha=0.5)
        ax.set_xlabel("cells")
        ax.set_ylabel(f"<G^2>, t >= {p['t_avg']:g}")
        ax.set_title(f"path {rec['path']}", fontsize=9)
        legend_outside(ax)
    ax = axes[0][-1]
    for d in results["discretisations"]:
        ax.loglog([d["cost_s"]], [max(d["max_err"], 1e-5)], "o" if d["order"] == 2 else "s", color="C0" if d["order"] == 2 else "C1")
        ax.annotate(f"L{d['level']} o{d['order']}", (d["cost_s"], max(d["max_err"], 1e-5)), fontsize=7)
    ax.axhline(float(p["bar"]), color="r", ls="--", lw=0.8, label=f"{100 * p['bar']:g}% bar")
    ax.set_xlabel("mean wall time per run (s)")
    ax.set_ylabel("worst relative error over paths")
    ax.set_title("cost vs error (orders 1 squares, 2 circles)", fontsize=9)
    legend_outside(ax)
    finish_figure(fig)
    paths.append(save_figure(fig, out_dir, "mesh_convergence.png", dpi=110))
    e = results.get("exponent")
    if e and len(e["H"]) >= 2:
        fig, ax = subplots(figsize=(8.5, 4.5), layout="constrained")  # room for the axes beside the legend
        Hs = np.asarray(e["H"], float)
        for w, c, mk in (("mesh", "C0", "s"), ("particles", "C1", "o")):
            for i, H in enumerate(e["H"]):
                ax.loglog([H] * len(e[f"{w}_tavg"][i]), e[f"{w}_tavg"][i], ".", color=c, alpha=0.4)
            ax.loglog(Hs, e[f"{w}_mean"], mk, color=c)
            f = e[f"{w}_fit"]
            if np.isfinite(f["b"]):
                lab = f"mesh L{e['level']} o{e['order']}" if w == "mesh" else f"tokens n={e['n']}"
                ax.loglog(Hs, f["a"] * Hs ** f["b"], "-", color=c, label=f"{lab}: b={f['b']:.2f} [{_f(f['ci95'][0], '{:.2f}')}, {_f(f['ci95'][1], '{:.2f}')}]")
        ax.loglog(Hs, e["mesh_mean"][0] * Hs**PAPER_B_OU, "k:", lw=0.8, label="paper b = -1")
        ax.set_xlabel("number of heads H")
        ax.set_ylabel(f"<G^2>, t >= {p['t_avg']:g} (dots: single paths)")
        legend_outside(ax)  # never over the data (tests/viz/test_pictures.py)
        finish_figure(fig)
        paths.append(save_figure(fig, out_dir, "mesh_convergence_exponent.png", dpi=110))
    return paths


if __name__ == "__main__":  # pragma: no cover
    import sys

    from spherepde.studies.common import print_study

    print_study(run(sys.argv[1] if len(sys.argv) > 1 else "smoke", verbose=True))
