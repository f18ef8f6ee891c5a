"""Metastability: merge times of clusters and nucleation at the density level (s = +1).

One frozen head D = V = beta I (gradient heads, s = +1, the self-attention convention):
mass gathers into clusters that sit on a plateau for a time exponential in beta and then
merge (Geshkovski, Letrouit, Polyanskiy, Rigollet; Bruno, Pasqualotto, Agazzi). The mesh
solver runs with the linearly implicit upwind step and collapsed clusters carried as point
masses (``integrator="implicit"``, ``atoms=True``; docs/model.md §4.5-4.6).

Parts
-----
* **Two-cluster merge times.** Two von Mises--Fisher bumps (kappa = 200) of masses m1, m2
  at angle theta0. Reference: two point masses obey the ODE

      d theta/dt = -beta sin theta [ m2 q / (m1 + m2 q) + m1 q / (m2 + m1 q) ],  q = e^{beta (cos theta - 1)},

  solved with SciPy. The **merge time** is the one definition of a merge
  (:data:`spherepde.model.clusters.MERGE_ANGLE`): the time the angle falls below it -- for the
  mesh the solver's merge event of its point masses (located inside the step), for the ODE
  :func:`merge_time_ode`. Check: the mesh's merge time within 5 % of the ODE's, for every case.
  The **time to mean resultant 0.95** (|m1 y1 + m2 y2| >= 0.95, linear interpolation between
  records every min(``record_every``, ODE time / 100); :func:`resultant_time_ode`) is a second,
  earlier time that needs no point masses (token clouds have one too): the clusters are still
  about 36 degrees apart there. Check: the mesh's within 5 % of the ODE's, for every case. The
  particle solver's two-token run (a consistency check of the token solver, to 1e-3, on the time to resultant) and
  ``n_tokens`` tokens drawn from the bumps (reported: a finite sample's merge time scatters,
  because it is exponentially sensitive to the initial angle) are run on the same problem.
* **Mesh size.** The first case on every level of ``levels``: the spread of the times to
  resultant (max - min) / ODE must stay below 5 %.
* **Cost** (the ``cost_case``, measured in this process): steps and wall time to the merge
  of the mesh solver against the explicit SSP-RK3 / order-2 step count (T / (cfl * CFL bound
  at t = 0), the explicit scheme's estimate on the same mesh) and against ``n_tokens`` tokens
  with Heun steps of 0.01. Checks: at least 10x fewer steps than the explicit scheme; wall
  time at most 3x that of the tokens.
* **Nucleation.** A near-uniform density (uniform + noise of amplitude ``noise_amp``:
  random real spherical harmonics of degree 1..``noise_lmax``, seeded) under beta =
  ``nuc_beta``. Linear theory (docs/model.md): the degree-l part grows like e^{gamma_l t},
  gamma_l = l (l+1) i_l(beta) / i_0(beta). Check: the degree whose power grows fastest over
  [0, ``nuc_t_lin``] on the mesh is the argmax of gamma_l. The number of clusters (groups
  with >= 1 % of the mass) at ``nuc_T`` is reported for the mesh and for ``nuc_n`` tokens
  drawn uniformly (different noise: reported, not checked).

A broken scheme fails it: without point masses (``atoms=False``) collapsed clusters are
pinned to cell nodes and the merge times miss by far more than 5 %; a flux of the wrong
sign never forms the clusters (tests/studies/test_validation_wrong_scheme.py).
"""

from __future__ import annotations

import math
import time

import numpy as np

from spherepde.model.clusters import MERGE_ANGLE
from spherepde.model.linear import linear_rate, two_point_rate
from spherepde.model.velocity import DEFAULT_ATTENTION
from spherepde.solvers.protocol import advance_through
from spherepde.studies import common as _v
from spherepde.studies.common import checks_line, frozen_beta_path, require_finite, save_figure, solver_check, study_params

NAME = "metastability"
TITLE = "Metastability: merge times and nucleation of clusters (s = +1)"

#: (beta, m1, theta0 in degrees) of the two-cluster cases
SIZES = _v.sizes_table({
    "cases": _v.per_size(
        [[8.0, 0.5, 90.0]],
        [[10.0, 0.5, 90.0], [8.0, 0.5, 90.0], [8.0, 0.7, 80.0], [8.0, 0.5, 70.0]],
        [[10.0, 0.5, 90.0], [8.0, 0.5, 90.0], [12.0, 0.5, 90.0], [8.0, 0.7, 80.0], [8.0, 0.9, 90.0], [8.0, 0.5, 70.0], [10.0, 0.6, 60.0]],
    ),
    "level": _v.per_size(8, 16, 16),
    "levels": _v.per_size([8], [8, 16], [8, 16, 32]),
    "kappa": 200.0,
    "n_tokens": 400,
    "token_seed": 0,
    "token_dt": 0.01,
    "cost_case": 0,
    "tol": 1e-3,
    "atoms": True,
    "record_every": 0.25,
    "nuc_beta": 10.0,
    "nuc_level": _v.per_size(8, 16, 32),
    "nuc_noise_amp": 0.05,
    "noise_lmax": 8,
    "noise_seed": 0,
    "nuc_t_lin": 0.4,
    "nuc_T": _v.per_size(0.0, 6.0, 10.0),
    "nuc_n": _v.per_size(0, 2000, 5000),
})

#: What each size parameter may be (``spherepde validate --set`` checks overrides against it before anything runs).
RANGES = {
    "cases": _v.Range(float, 1e-3, 180.0, what="a case [beta, m1, theta0 (degrees)]"),
    "level": _v.LEVEL,
    "levels": _v.LEVEL,
    "kappa": _v.Range(float, 0.0, 1e4, open_lo=True, what="a vMF concentration"),
    "n_tokens": _v.Range(int, 2, 20_000, what="a number of tokens"),
    "token_seed": _v.Range(int, 0, 2**32 - 1, what="a seed"),
    "token_dt": _v.Range(float, 0.0, 1.0, open_lo=True, what="a token step"),
    "cost_case": _v.Range(int, 0, 100, what="an index into cases"),
    "tol": _v.Range(float, 1e-10, 0.5, what="a local error tolerance"),
    "atoms": _v.Range(None, choices=(True, False)),
    "record_every": _v.Range(float, 0.0, 100.0, open_lo=True, what="a time between records"),
    "nuc_beta": _v.Range(float, 0.0, 64.0, open_lo=True, what="beta"),
    "nuc_level": _v.LEVEL,
    "nuc_noise_amp": _v.Range(float, 0.0, 0.5, open_lo=True, what="a noise amplitude (relative)"),
    "noise_lmax": _v.Range(int, 1, 30, what="a degree"),
    "noise_seed": _v.Range(int, 0, 2**32 - 1, what="a seed"),
    "nuc_t_lin": _v.Range(float, 0.0, 10.0, open_lo=True, what="a time"),
    "nuc_T": _v.Range(float, 0.0, 1000.0, what="a time (0: no cluster count)"),
    "nuc_n": _v.Range(int, 0, 20_000, what="a number of tokens"),
}

#: the mean resultant of the "time to resultant" (not a merge: the merge is MERGE_ANGLE)
RESULTANT_R = 0.95
REL_TOL = 0.05
NORTH = np.array([0.0, 0.0, 1.0])

#: Largest beta of a two-cluster case (the merge time grows like e^beta: beyond it no run ends).
CASE_BETA_MAX = 64.0


def _case_problem(i: int, case) -> str | None:
    """Why case ``i`` is not a [beta, m1, theta0] the study can run (None when it is)."""
    if not isinstance(case, (list, tuple)) or len(case) != 3:
        return f"case {i} = {case!r} is not a [beta, m1, theta0 (degrees)] triple"
    beta, m1, theta = (float(x) for x in case)
    if not 0.0 < beta <= CASE_BETA_MAX:
        return f"case {i}: beta = {beta:g} must be in (0, {CASE_BETA_MAX:g}]"
    if not 0.0 < m1 < 1.0:
        return f"case {i}: m1 = {m1:g} must be in (0, 1) (the masses are m1 and 1 - m1)"
    if not 0.0 < theta < 180.0:
        return f"case {i}: theta0 = {theta:g} degrees must be in (0, 180) (at 180 the clusters never move)"
    resultant = math.sqrt(m1 * m1 + (1 - m1) ** 2 + 2 * m1 * (1 - m1) * math.cos(math.radians(theta)))
    if resultant >= RESULTANT_R:
        return f"case {i}: the clusters start merged by the resultant measure (mean resultant {resultant:.3g} >= {RESULTANT_R}); use a larger theta0"
    return None


def check_params(p: dict) -> str | None:
    """The rules across the size parameters (``validate --set`` checks them before anything is
    written): ``cases`` a non-empty list of [beta, m1, theta0] triples the study can run, and
    ``cost_case`` an index into it. Returns ``"param: problem; fix"`` or None."""
    cases = p.get("cases")
    fix = "give a list of [beta, m1, theta0 (degrees)] triples, e.g. [[8.0, 0.5, 90.0]]"
    if not isinstance(cases, (list, tuple)) or not cases:
        return f"cases: {cases!r} is not a non-empty list of cases; {fix}"
    for i, case in enumerate(cases):
        problem = _case_problem(i, case)
        if problem:
            return f"cases: {problem}; {fix}"
    k = p.get("cost_case", 0)
    if not 0 <= k < len(cases):
        return f"cost_case: {k} is not an index into the {len(cases)} cases; use 0 to {len(cases) - 1}"
    return None


def _ode_time(beta: float, m1: float, m2: float, theta0: float, hit, attention: str = DEFAULT_ATTENTION, c: float | None = None) -> float:
    """The two-point ODE (module docstring; :func:`spherepde.model.linear.two_point_rate`, V = c I with c = beta
    by default, the study's gradient head) from theta0 (radians) to the first zero of hit(theta) (0 if hit(theta0) >= 0)."""
    from scipy.integrate import solve_ivp

    c = beta if c is None else c

    def rhs(t, y):
        return [two_point_rate(y[0], beta, m1, m2, c, attention=attention)]

    def event(t, y):
        return hit(y[0])

    event.terminal = True
    if hit(theta0) >= 0:
        return 0.0
    sol = solve_ivp(rhs, [0.0, 1e7], [theta0], events=event, rtol=1e-11, atol=1e-13)
    return float(sol.t_events[0][0]) if len(sol.t_events[0]) else math.inf


def merge_time_ode(beta: float, m1: float, m2: float, theta0: float, angle: float = MERGE_ANGLE, *, attention: str = DEFAULT_ATTENTION,
                   c: float | None = None) -> float:
    """The two-point ODE's merge time: the angle falls below ``angle`` (the one definition, MERGE_ANGLE), theta0 in radians.

    ``attention``: ``"softmax"`` (the module docstring's ODE) or ``"unnormalised"``
    (d theta/dt = -c (m1 + m2) e^{beta cos theta} sin theta, docs/model.md "Unnormalised attention");
    ``c``: the value scale V = c I (default beta: the gradient head D = V = beta I of this study)."""
    return _ode_time(beta, m1, m2, theta0, lambda th: angle - th, attention, c)


def resultant_time_ode(beta: float, m1: float, m2: float, theta0: float, R: float = RESULTANT_R, *, attention: str = DEFAULT_ATTENTION,
                       c: float | None = None) -> float:
    """The two-point ODE's time to mean resultant |m1 y1 + m2 y2| = R (not a merge: module docstring), theta0 in radians
    (``attention``, ``c``: as in :func:`merge_time_ode`)."""
    return _ode_time(beta, m1, m2, theta0, lambda th: math.sqrt(m1**2 + m2**2 + 2 * m1 * m2 * math.cos(th)) - R, attention, c)


def _means(theta: float) -> list:
    return [list(NORTH), [math.sin(theta), 0.0, math.cos(theta)]]


def _path(beta: float, T: float, dt: float):
    K = max(1, int(math.ceil(T / dt - 1e-9)))
    return frozen_beta_path(beta, 1.0, K * dt, dt)


def _every(t: float, T: float, every: float):
    """The times t + every, t + 2 every, ... up to T (the last one T)."""
    while t < T - 1e-12:
        t = min(T, t + every)
        yield t


def time_to_resultant(solver, T: float, every: float, R: float = RESULTANT_R) -> tuple[float, int]:
    """First time the mean resultant reaches R (linear interpolation between records every ``every``) and the steps taken."""
    t_prev, r_prev = solver.t, solver.record()["mean_resultant"]
    if r_prev >= R:
        return solver.t, solver.step_count
    for _, t, row in advance_through(solver, _every(solver.t, T, every)):
        r = row["mean_resultant"]
        if r >= R:
            return t_prev + (R - r_prev) * (t - t_prev) / (r - r_prev), solver.step_count
        t_prev, r_prev = t, r
    return math.inf, solver.step_count


def time_to_merge(ms, T: float, every: float) -> float:
    """The mesh solver's first merge event (its time, located inside the step), advancing ``ms`` by ``every`` up to T; inf if none."""
    for _ in advance_through(ms, _every(ms.t, T, every)):
        if ms.points.merges:
            break
    return ms.points.merges[0][0] if ms.points.merges else math.inf


def _mesh_merge(p, case, level: int, *, explicit_estimate: bool = False) -> dict:
    from spherepde.geometry import densities
    from spherepde.geometry.meshfiles import icosphere
    from spherepde.solvers.mesh import MeshSolver

    beta, m1, deg = case
    theta = math.radians(deg)
    t_ode = resultant_time_ode(beta, m1, 1.0 - m1, theta)
    t_merge_ode = merge_time_ode(beta, m1, 1.0 - m1, theta)
    T = 1.5 * t_merge_ode + 5.0
    mesh = icosphere(level)
    rho0 = densities.vmf_mixture(mesh, _means(theta), [p["kappa"]] * 2, [m1, 1.0 - m1])
    every = min(p["record_every"], t_ode / 100) if t_ode > 0 else p["record_every"]
    path = _path(beta, T, every)
    out = {"beta": beta, "m1": m1, "theta0_deg": deg, "level": level, "t_ode": t_ode, "t_merge_ode": t_merge_ode}
    if explicit_estimate:
        ex = MeshSolver(mesh, rho0, path, order=2, integrator="ssprk3", cfl=0.5)
        out["explicit_dt0"] = float(ex.cfl_step())
    t0 = time.perf_counter()
    ms = MeshSolver(mesh, rho0, path, order=1, integrator="implicit", tol=p["tol"], atoms=p["atoms"])
    t95, steps = time_to_resultant(ms, T, every)
    out.update(t_mesh=t95, steps=int(steps), wall_s=time.perf_counter() - t0, rel_err=abs(t95 - t_ode) / t_ode,
               atom_mass=float(np.sum(ms.points.m)))
    out["t_merge"] = time_to_merge(ms, T, every) if math.isfinite(t95) else math.inf
    out["rel_err_merge"] = abs(out["t_merge"] - t_merge_ode) / t_merge_ode
    if explicit_estimate:
        out["explicit_steps"] = float(t95 / out["explicit_dt0"]) if math.isfinite(t95) else float(T / out["explicit_dt0"])
    return out


def _token_merge(p, case, n: int, seed: int) -> dict:
    from spherepde.solvers.particles import ParticleSolver, initial_tokens

    beta, m1, deg = case
    theta = math.radians(deg)
    t_ode = resultant_time_ode(beta, m1, 1.0 - m1, theta)
    T = 2.0 * t_ode + 10.0
    dt = p["token_dt"]
    path = _path(beta, T, dt)
    if n == 2:
        X, w = np.array(_means(theta)), np.array([m1, 1.0 - m1])
    else:
        X, w = initial_tokens("vmf", n, seed=seed, means=_means(theta), kappas=[p["kappa"]] * 2, weights=[m1, 1.0 - m1]), None
    t0 = time.perf_counter()
    ps = ParticleSolver(X, path, integrator="heun", weights=w)
    every = min(p["record_every"], t_ode / 100) if t_ode > 0 else p["record_every"]
    t95, steps = time_to_resultant(ps, T, dt * max(1, round(every / dt)))
    return {"n": n, "t_tokens": t95, "steps": int(steps), "wall_s": time.perf_counter() - t0}


def _gamma(beta: float, lmax: int, attention: str = DEFAULT_ATTENTION) -> np.ndarray:
    """gamma_l, l = 0..lmax, of the gradient head D = V = beta I (:func:`spherepde.model.linear.linear_rate`)."""
    return np.array([linear_rate(l, beta, beta, attention=attention) for l in range(lmax + 1)])


def _degree_power(mesh, geom, rho, lmax: int) -> np.ndarray:
    from spherepde.geometry.densities import real_sph_harm

    X = geom.nodes
    w = rho * geom.areas
    return np.array([sum(float(w @ real_sph_harm(l, m, X)) ** 2 for m in range(-l, l + 1)) for l in range(lmax + 1)])


def _nucleation(p) -> dict:
    from spherepde.geometry.densities import real_sph_harm
    from spherepde.geometry.meshfiles import icosphere
    from spherepde.solvers.fv import fv_geometry
    from spherepde.solvers.mesh import MeshSolver

    beta, lmax = p["nuc_beta"], p["noise_lmax"]
    mesh = icosphere(p["nuc_level"])
    geom = fv_geometry(mesh)
    rng = np.random.default_rng(p["noise_seed"])
    X = geom.nodes
    noise = np.zeros(mesh.n_cells)
    for l in range(1, lmax + 1):
        for m in range(-l, l + 1):
            noise += rng.normal() * real_sph_harm(l, m, X) / math.sqrt(2 * l + 1)
    noise /= np.max(np.abs(noise))
    rho0 = (1.0 + p["nuc_noise_amp"] * noise) / (4 * math.pi)
    rho0 /= np.sum(rho0 * geom.areas)
    gamma = _gamma(beta, lmax)
    t_lin = p["nuc_t_lin"]
    T = max(t_lin, p["nuc_T"])
    path = _path(beta, T, t_lin / 4)
    ms = MeshSolver(mesh, rho0, path, order=2, integrator="ssprk3")  # the linear phase: the accurate explicit scheme
    P0 = _degree_power(mesh, geom, ms.rho, lmax)
    ms.advance(t_lin)
    P1 = _degree_power(mesh, geom, ms.rho, lmax)
    rates = 0.5 * np.log(P1[1:] / P0[1:]) / t_lin  # amplitude growth rate per degree >= 1
    out = {"beta": beta, "level": p["nuc_level"], "gamma": gamma[1:].tolist(), "measured_rates": rates.tolist(),
           "l_fastest_theory": int(np.argmax(gamma[1:]) + 1), "l_fastest_mesh": int(np.argmax(rates) + 1)}
    if p["nuc_T"] > 0:
        from spherepde.solvers.particles import ParticleSolver, initial_tokens

        mi = MeshSolver(mesh, rho0, path, order=1, integrator="implicit", tol=p["tol"], atoms=p["atoms"])
        mi.advance(p["nuc_T"])
        out["clusters_mesh"] = int(mi.record()["n_clusters"])
        if p["nuc_n"]:
            tp = _path(beta, p["nuc_T"], 0.01)
            ps = ParticleSolver(initial_tokens("uniform", p["nuc_n"], seed=p["noise_seed"]), tp, integrator="heun")
            ps.advance(p["nuc_T"])
            out["clusters_tokens"] = int(ps.record()["n_clusters"])
    return out


def _warm_up(p) -> None:
    """Compile (or load) every kernel both solvers use before anything is timed."""
    _mesh_merge({**p, "record_every": 0.5}, [8.0, 0.5, 60.0], 4)
    _token_merge({**p, "record_every": 0.5}, [8.0, 0.5, 60.0], 20, 0)


def run(size: str = "quick", **overrides) -> dict:
    """Run the study at ``size`` (smoke/quick/full); keyword overrides replace parameters."""
    p, log = study_params(SIZES, size, overrides)
    t0 = time.perf_counter()
    res = {"name": NAME, "title": TITLE, "size": size, "params": p}
    cases = [list(map(float, c)) for c in p["cases"]]
    ci = int(p["cost_case"])
    if not 0 <= ci < len(cases):
        raise ValueError(f"cost_case = {ci} is not an index into the {len(cases)} cases")
    _warm_up(p)
    res["cases"] = []
    for i, case in enumerate(cases):
        log(f"metastability: case beta = {case[0]:g}, m1 = {case[1]:g}, theta0 = {case[2]:g} deg, level {p['level']}")
        r = _mesh_merge(p, case, int(p["level"]), explicit_estimate=(i == ci))
        r["two_tokens"] = _token_merge(p, case, 2, 0)
        if i == ci:
            r["tokens"] = _token_merge(p, case, int(p["n_tokens"]), int(p["token_seed"]))
        res["cases"].append(r)
    log("metastability: mesh-size study")
    res["levels"] = [_mesh_merge(p, cases[0], int(lv)) for lv in p["levels"]]
    log("metastability: nucleation")
    res["nucleation"] = _nucleation(p)
    res["wall_s"] = time.perf_counter() - t0
    _preconditions(res)
    res["checks"] = _checks(res, ci)
    res["summary"] = _summary(res, ci)
    return res


def _preconditions(res) -> None:
    for r in res["cases"]:
        require_finite(f"metastability [beta = {r['beta']:g}, m1 = {r['m1']:g}, theta0 = {r['theta0_deg']:g}]: the ODE merge time", r["t_ode"])
    require_finite("metastability [nucleation]: growth rates", res["nucleation"]["measured_rates"])


def _case_name(r) -> str:
    return f"beta = {r['beta']:g}, m1 = {r['m1']:g}, theta0 = {r['theta0_deg']:g} deg"


def _checks(res, ci: int) -> dict:
    ch = {}
    for r in res["cases"]:
        ch[f"merge time (angle < {MERGE_ANGLE:g} rad), {_case_name(r)}, level {r['level']}: mesh vs two-point ODE, relative error"] = solver_check(
            r["rel_err_merge"], hi=REL_TOL, expected=0.0, tolerance=f"<= {REL_TOL:g}")
        ch[f"time to mean resultant {RESULTANT_R}, {_case_name(r)}, level {r['level']}: mesh vs two-point ODE, relative error"] = solver_check(
            r["rel_err"], hi=REL_TOL, expected=0.0, tolerance=f"<= {REL_TOL:g}")
        tt = r["two_tokens"]["t_tokens"]
        ch[f"time to mean resultant {RESULTANT_R}, {_case_name(r)}: two tokens vs two-point ODE, relative error"] = solver_check(
            abs(tt - r["t_ode"]) / r["t_ode"], hi=1e-3, expected=0.0)
    lv = res["levels"]
    if len(lv) > 1:
        ts = [r["t_mesh"] for r in lv]
        spread = (max(ts) - min(ts)) / lv[0]["t_ode"]
        ch[f"time to mean resultant over mesh levels {', '.join(str(r['level']) for r in lv)} ({_case_name(lv[0])}): spread / ODE time"] = solver_check(
            spread, hi=REL_TOL, expected=0.0)
    c = res["cases"][ci]
    ch[f"steps to the merge ({_case_name(c)}, level {c['level']}): explicit SSP-RK3 estimate / implicit"] = solver_check(
        c["explicit_steps"] / max(c["steps"], 1), lo=10.0, expected=">= 10")
    ch[f"wall time to the merge ({_case_name(c)}): mesh / {c['tokens']['n']} tokens (Heun, dt = {res['params']['token_dt']:g}), one process"] = solver_check(
        c["wall_s"] / c["tokens"]["wall_s"], hi=3.0, expected="<= 3")
    nu = res["nucleation"]
    ch[f"nucleation (beta = {nu['beta']:g}, level {nu['level']}): fastest-growing degree, mesh minus argmax gamma_l"] = solver_check(
        nu["l_fastest_mesh"] - nu["l_fastest_theory"], lo=0, hi=0, expected=0)
    return ch


def _summary(res, ci: int) -> str:
    c = res["cases"][ci]
    lines = [
        f"Merge times (angle < {MERGE_ANGLE:g} rad) and times to mean resultant {RESULTANT_R} of two kappa = {res['params']['kappa']:g} "
        f"clusters under one frozen head D = beta I, mesh solver with implicit steps and point masses: "
        + "; ".join(f"{_case_name(r)}: merge mesh {r['t_merge']:.5g}, ODE {r['t_merge_ode']:.5g} ({100 * r['rel_err_merge']:.2g} %), "
                    f"resultant mesh {r['t_mesh']:.4g}, ODE {r['t_ode']:.4g} ({100 * r['rel_err']:.2g} %)" for r in res["cases"]) + ".",
        f"Cost ({_case_name(c)}, level {c['level']}): {c['steps']} implicit steps against about {c['explicit_steps']:.3g} explicit "
        f"SSP-RK3 steps; {c['wall_s']:.3g} s against {c['tokens']['wall_s']:.3g} s for {c['tokens']['n']} tokens, whose merge time is "
        f"{c['tokens']['t_tokens']:.4g} (time to resultant; a finite sample: exponentially sensitive to the initial angle).",
        "Time to resultant on mesh levels " + ", ".join(f"{r['level']}: {r['t_mesh']:.4g}" for r in res["levels"]) + f" (ODE {res['levels'][0]['t_ode']:.4g}).",
    ]
    nu = res["nucleation"]
    s = f"Nucleation at beta = {nu['beta']:g}: fastest-growing degree {nu['l_fastest_mesh']} on the mesh, {nu['l_fastest_theory']} from gamma_l"
    if "clusters_mesh" in nu:
        s += f"; clusters (>= 1 % of the mass) at t = {res['params']['nuc_T']:g}: mesh {nu['clusters_mesh']}"
        if "clusters_tokens" in nu:
            s += f", {res['params']['nuc_n']} tokens {nu['clusters_tokens']} (other noise: reported, not checked)"
    lines.append(s + ".")
    lines.append(checks_line(res["checks"]))
    return " ".join(lines)


def plot(results, out_dir) -> list:
    """Figures: the mesh's time to mean resultant against the two-point ODE's per case (and per mesh
    level), and the nucleation growth rates against gamma_l."""
    from spherepde.viz.figstyle import legend_outside, readable_log_ticks, subplots

    paths = []
    fig, ax = subplots(figsize=(7.4, 4.4), layout="constrained")
    cs = results["cases"]
    lv = results["levels"]
    ts = [r["t_ode"] for r in cs + lv]
    lo, hi = 0.5 * min(ts), 2.0 * max(ts)
    ax.plot([lo, hi], [lo, hi], "k-", lw=0.8, label="mesh = ODE")
    ax.fill_between([lo, hi], [0.95 * lo, 0.95 * hi], [1.05 * lo, 1.05 * hi], color="0.85", label="within 5 %")
    for r in cs:
        ax.plot(r["t_ode"], r["t_mesh"], "o", label=f"β = {r['beta']:g}, m1 = {r['m1']:g}, θ0 = {r['theta0_deg']:g}° (level {r['level']})")
    for r in lv:
        ax.plot(r["t_ode"], r["t_mesh"], "x", ms=9, label=f"β = {r['beta']:g}, m1 = {r['m1']:g}, θ0 = {r['theta0_deg']:g}°, level {r['level']}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    readable_log_ticks(ax)
    ax.set_xlabel(f"time to mean resultant {RESULTANT_R}, two-point ODE")
    ax.set_ylabel(f"time to mean resultant {RESULTANT_R}, mesh (implicit, point masses)")
    legend_outside(ax)
    paths.append(save_figure(fig, out_dir, "metastability_merge_times.png"))
    nu = results["nucleation"]
    fig, ax = subplots(figsize=(7.4, 4.0), layout="constrained")
    ls = np.arange(1, len(nu["gamma"]) + 1)
    ax.plot(ls, nu["gamma"], "o-", label=r"linear theory $\gamma_l$")
    ax.plot(ls, nu["measured_rates"], "s--", label=f"mesh, level {nu['level']}")
    ax.set_xlabel("degree l")
    ax.set_ylabel("growth rate (1 / time)")
    ax.set_xticks(ls)
    legend_outside(ax)
    paths.append(save_figure(fig, out_dir, "metastability_nucleation.png"))
    return paths
