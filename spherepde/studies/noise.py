"""Token noise nu > 0 (docs/model.md §10, §11): diffusion rates, noisy linear stability, stationary states, the free-energy EDI.

With Brownian tokens of diffusivity nu the density solves d_t rho + div_S(rho v) = nu Delta_S rho; the density level
carries it by Scharfetter--Gummel fluxes (:mod:`spherepde.solvers.diffusion`), the tokens by a projected Brownian step
(:mod:`spherepde.solvers.token_noise`, weak order 1). Parts (solver checks unless said otherwise):

* **Pure diffusion** (beta = 0, no velocity). The eigenvalues of the Laplace--Beltrami operator are -l(l+1) on S^2 and
  -k^2 on S^1, so a degree-l harmonic decays at nu l(l+1) (l = 1, 2) and a mode k at nu k^2 (k = 1, 2). Density level:
  rho_0 = (1 + eps Y)/|S| (Y = P_l(z) at the nodes, cos(k theta) on the circle), order 2, SSP-RK3, T = 1/rate;
  measured rate log(a(T)/a(0))/T of a = sum_c |C_c| rho_c Y_c; check: relative error <= ``diff_tol``, and the mass
  conserved to 1e-12. Tokens: ``diff_tokens`` tokens at one point e_1, Brownian steps dt = T/``diff_token_steps``; the
  mean of the zonal harmonic (x_1, (d x_1^2 - 1)/(d - 1)) decays like e^{-nu l(l+d-2) t}; check: relative error of
  -log(mean)/T within ``diff_tol_tokens`` (room for the weak-order-1 bias of the Brownian step, O(nu dt)) plus three standard errors.
* **Linear stability with noise.** One gradient head D = beta I, s = +1 (softmax and unnormalised attention, "USA"):
  the degree-1 perturbation of the uniform state grows at gamma_1(beta) - nu l(l+1) (gamma_1 - nu on S^1;
  :func:`spherepde.model.linear.linear_rate`), zero at nu_c (:func:`~spherepde.model.linear.critical_noise`). Density
  level at nu = 0.9 nu_c and 1.1 nu_c (order 2, SSP-RK3, eps = 1e-3): checks that the measured rate is within
  ``stab_tol`` gamma_1 of the closed form, that the sign flips, and that the zero crossing nu* (linear interpolation
  in nu; the rate is linear in nu) lies within ``stab_nu_tol`` of nu_c, on S^2 and S^1. Tokens (S^1, softmax and USA):
  ``stab_tokens`` tokens at the quantiles of 1/(2 pi) + (a/pi) cos theta, ``stab_draws`` noise seeds, nu = 0.5 and
  1.5 nu_c, Heun steps; the draw mean of Re mu_hat_1 gives the rate; check: within ``stab_tol_tokens`` gamma_1 plus
  three standard errors (the sampling fluctuation of mu_hat_1 is about n^{-1/2} per draw).
* **Stationary states.** Frozen USA head beta = ``stat_beta`` on the circle, nu = ``stat_frac`` nu_c (below nu_c: a
  clustered state; beta below the tricritical beta_* so the branch is continuous). (a) The time-stepped density (order
  1, implicit SG step, ``stat_cells`` arcs, to ``stat_T``) against the self-consistency solution rho ∝ exp(s xi[rho]/nu)
  on the same mesh (:func:`spherepde.model.stationary.solve_fixed_point`, :class:`~spherepde.model.stationary.MeshGrid`;
  the SG flux vanishes exactly on it): largest difference / max rho <= ``stat_tol_mesh``; the same on S^2 (icosphere
  ``stat_level``). (b) ``stat_tokens`` tokens to ``stat_T_tokens`` (Heun, dt ``stat_token_dt``), rotated so that their mean
  angle is 0: W1 on the circle (closed form, :func:`spherepde.studies.circle.w1_circle`) between their histogram on
  ``stat_cells`` arcs and the self-consistency density <= ``stat_w1_tol``, and their mean resultant within
  ``stat_order_tol`` of the state's.
* **Free-energy EDI** (USA gradient head beta = 3, s = +1, frozen, nu = 0.3, icosphere ``edi_level``, two von Mises
  bumps, T = 0.2): edi_free = F(T) - F(0) + int D_F (docs/model.md §10) is zero up to the time integration. Heun at the
  fixed steps ``edi_dts``; check: the observed order of |edi_free| between successive steps >= ``edi_min_order``
  (expected 2).
* **Bifurcation from uniform** (paper claims, not solver checks). Mun & Rosenzweig (noisy unnormalised attention on
  S^{d-1}): the transition at nu_c is continuous for beta <= beta_* (I_{d/2+1}/I_{d/2} = 1/d) and discontinuous (a fold
  of the branch above nu_c) above. The branch from the uniform state is traced by pseudo-arclength continuation
  (:func:`spherepde.model.continuation.trace_branch`) at beta = 0.75 beta_* and 1.5 beta_* on S^2 and S^1; a claim is
  reproduced when the fold is found exactly where predicted (the computation is deterministic: its interval is the
  point). Their threshold nu_c = beta / (2 K_#) (:func:`~spherepde.model.stationary.published_threshold`, mapped to this
  package's normalisation) against the zero crossing nu* the density level measures for the USA head on S^2 (interval:
  nu* on the coarse and the fine mesh).
"""

from __future__ import annotations

import math
import time

import numpy as np

from spherepde.model.linear import critical_noise, linear_rate
from spherepde.studies import common as _v
from spherepde.studies.common import checks_line, paper_claim, require_finite, save_figure, solver_check, study_params

NAME = "noise"
TITLE = "Token noise: diffusion rates, noisy linear stability, stationary states, the free-energy EDI, the bifurcation"

USA = "unnormalised"
ATTENTIONS = ("softmax", USA)

SIZES = _v.sizes_table({
    "diff_nu": 0.5,
    "diff_level": _v.per_size(4, 8, 16),
    "diff_cells": _v.per_size(64, 256, 512),
    "diff_tol": _v.per_size(0.02, 0.01, 0.01),
    "diff_tokens": _v.per_size(20000, 200000, 500000),
    "diff_token_steps": _v.per_size(100, 200, 400),
    "diff_tol_tokens": 0.03,
    "stab_beta": 2.0,
    "stab_level": _v.per_size(4, 8, 16),
    "stab_cells": _v.per_size(64, 256, 512),
    "stab_T": 0.5,
    "stab_tol": 0.01,
    "stab_nu_tol": 0.02,
    "stab_tokens": _v.per_size(20000, 50000, 200000),
    "stab_draws": _v.per_size(4, 6, 16),
    "stab_amp": 0.05,
    "stab_token_steps": _v.per_size(100, 200, 400),
    "stab_tol_tokens": 0.05,
    "stat_beta": 2.0,
    "stat_frac": 0.7,
    "stat_cells": _v.per_size(128, 256, 512),
    "stat_level": _v.per_size(4, 4, 8),
    "stat_T": _v.per_size(20.0, 30.0, 40.0),
    "stat_tol_mesh": 1e-3,
    "stat_tokens": _v.per_size(5000, 20000, 100000),
    "stat_T_tokens": _v.per_size(8.0, 12.0, 20.0),
    "stat_token_dt": _v.per_size(0.02, 0.01, 0.005),
    "stat_w1_tol": _v.per_size(0.05, 0.03, 0.02),
    "stat_order_tol": _v.per_size(0.03, 0.02, 0.015),
    "edi_level": 4,
    "edi_dts": _v.per_size([0.004, 0.002], [0.004, 0.002, 0.001], [0.004, 0.002, 0.001, 0.0005]),
    "edi_min_order": 1.7,
    "bif_nodes": _v.per_size(32, 48, 64),
    "parts": ["diffusion", "stability", "stability_tokens", "stationary", "edi", "bifurcation"],
})

#: The parts of the study (``parts``: run a subset, e.g. the tests that break the diffusion run the density-level parts).
PARTS = ("diffusion", "stability", "stability_tokens", "stationary", "edi", "bifurcation")

RANGES = {
    "diff_nu": _v.Range(float, 0.0, 100.0, open_lo=True, what="a diffusivity nu"),
    "diff_level": _v.LEVEL,
    "diff_cells": _v.Range(int, 16, 10**6, what="a number of arcs"),
    "diff_tol": _v.FRACTION,
    "diff_tokens": _v.TOKENS,
    "diff_token_steps": _v.STEPS,
    "diff_tol_tokens": _v.FRACTION,
    "stab_beta": _v.Range(float, 0.0, 20.0, open_lo=True, what="beta"),
    "stab_level": _v.LEVEL,
    "stab_cells": _v.Range(int, 16, 10**6, what="a number of arcs"),
    "stab_T": _v.TIME,
    "stab_tol": _v.FRACTION,
    "stab_nu_tol": _v.FRACTION,
    "stab_tokens": _v.TOKENS,
    "stab_draws": _v.Range(int, 2, 1000, what="a number of noise seeds"),
    "stab_amp": _v.Range(float, 0.0, 0.2, open_lo=True, what="a Fourier amplitude"),
    "stab_token_steps": _v.STEPS,
    "stab_tol_tokens": _v.FRACTION,
    "stat_beta": _v.Range(float, 0.0, 20.0, open_lo=True, what="beta"),
    "stat_frac": _v.Range(float, 0.0, 1.0, open_lo=True, what="nu / nu_c (below 1: a clustered state)"),
    "stat_cells": _v.Range(int, 16, 10**6, what="a number of arcs"),
    "stat_level": _v.LEVEL,
    "stat_T": _v.TIME,
    "stat_tol_mesh": _v.FRACTION,
    "stat_tokens": _v.TOKENS,
    "stat_T_tokens": _v.TIME,
    "stat_token_dt": _v.STEP,
    "stat_w1_tol": _v.Range(float, 0.0, 3.2, open_lo=True, what="a W1 distance (rad)"),
    "stat_order_tol": _v.FRACTION,
    "edi_level": _v.LEVEL,
    "edi_dts": _v.STEP,
    "edi_min_order": _v.Range(float, 0.0, 10.0, what="an order"),
    "bif_nodes": _v.Range(int, 8, 4096, what="a number of quadrature nodes"),
    "parts": _v.Range(None, choices=PARTS),
}


def _path(beta: float, d: int, T: float, sign: float = 1.0):
    """One frozen gradient head D = beta I, V = s beta I (beta = 0: no velocity)."""
    from spherepde.model.weights import FrozenProcess, generate_weight_path

    return generate_weight_path(FrozenProcess(), H=1, d=d, T=T, dt=T, init="beta", beta=beta, sign=sign)


def _lam(d: int, l: int) -> int:
    """The Laplacian's eigenvalue -lambda of degree l on S^{d-1}: l(l + d - 2)."""
    return l * (l + d - 2)


def _mesh(d: int, size: int):
    from spherepde.geometry.circle import uniform_circle
    from spherepde.geometry.meshfiles import icosphere

    return icosphere(int(size)) if d == 3 else uniform_circle(int(size))


def _harmonic(geom, d: int, l: int) -> np.ndarray:
    """P_l(z) (S^2) or cos(k theta) (S^1) at the cell nodes."""
    if d == 2:
        return np.cos(l * np.arctan2(geom.nodes[:, 1], geom.nodes[:, 0]))
    return np.polynomial.legendre.legval(geom.nodes[:, 2], [0.0] * l + [1.0])


def _mesh_rate(d: int, size: int, l: int, nu: float, T: float, *, beta: float = 0.0, eps: float = 0.1,
               attention: str = "softmax") -> dict:
    """log(a(T)/a(0))/T of the degree-l amplitude of the density level from (1 + eps Y)/|S| (order 2, SSP-RK3); NaN (and
    ``error``) when the solver stops with a SolverError."""
    from spherepde.solvers.errors import SolverError
    from spherepde.solvers.mesh import MeshSolver

    mesh = _mesh(d, size)
    g = mesh.geometry()
    Y = _harmonic(g, d, l)
    ms = MeshSolver(mesh, (1 + eps * Y) / np.sum(g.areas), _path(beta, d, T), noise=nu, attention=attention, order=2,
                    integrator="ssprk3", summation="fast" if d == 2 else "auto")
    a0 = float(np.sum(ms.rho * g.areas * Y))
    try:
        ms.advance(T)
    except SolverError as exc:  # a scheme that cannot finish the case (e.g. rho < 0) fails its checks: measured NaN
        return {"rate": math.nan, "mass_err": math.nan, "steps": int(ms.step_count), "error": str(exc)}
    a = float(np.sum(ms.rho * g.areas * Y))
    rate = math.log(a / a0) / T if a / a0 > 0 else math.nan
    return {"rate": rate, "mass_err": abs(float(np.sum(ms.rho * g.areas)) - 1.0), "steps": int(ms.step_count)}


# ------------------------------------------------------------------ pure diffusion
def _zonal(l: int, X: np.ndarray) -> np.ndarray:
    d = X.shape[1]
    return X[:, 0] if l == 1 else (d * X[:, 0] ** 2 - 1) / (d - 1)


def _token_diffusion(p, d: int, l: int, seed: int) -> dict:
    from spherepde.solvers.particles import ParticleSolver

    nu, n = float(p["diff_nu"]), int(p["diff_tokens"])
    T = 1.0 / (nu * _lam(d, l))
    X0 = np.zeros((n, d))
    X0[:, 0] = 1.0
    ps = ParticleSolver(X0, _path(0.0, d, T), dt=T / int(p["diff_token_steps"]), integrator="euler", noise=nu, noise_seed=seed)
    ps.advance(T)
    h = _zonal(l, ps.X)
    m, se = float(h.mean()), float(h.std() / math.sqrt(n))
    rate = -math.log(m) / T if m > 0 else math.nan
    return {"rate": rate, "sem": se / (max(m, 1e-300) * T), "T": T}


def _diffusion(p, log) -> list:
    out = []
    nu = float(p["diff_nu"])
    for d, size in ((3, p["diff_level"]), (2, p["diff_cells"])):
        for l in (1, 2):
            exact = nu * _lam(d, l)
            m = _mesh_rate(d, size, l, nu, 1.0 / exact)
            t = _token_diffusion(p, d, l, 10 * d + l)
            r = {"d": d, "l": l, "exact": exact, "mesh": -m["rate"], "mass_err": m["mass_err"], "tokens": t["rate"],
                 "tokens_sem": t["sem"], "mesh_rel_err": abs(-m["rate"] / exact - 1), "tokens_rel_err": abs(t["rate"] / exact - 1),
                 "error": m.get("error")}
            log(f"noise diffusion d = {d}, l = {l}: mesh rel. err {r['mesh_rel_err']:.2e}, tokens {r['tokens_rel_err']:.2e}")
            out.append(r)
    return out


# ------------------------------------------------------------------ linear stability
def _stability_mesh(p, log) -> list:
    out = []
    beta = float(p["stab_beta"])
    for d, size, coarse in ((3, p["stab_level"], max(2, p["stab_level"] // 2)), (2, p["stab_cells"], max(16, p["stab_cells"] // 2))):
        for att in ATTENTIONS:
            nu_c = critical_noise(beta, beta, attention=att, d=d)
            gamma = linear_rate(1, beta, beta, attention=att, d=d)
            r = {"d": d, "attention": att, "beta": beta, "nu_c": nu_c, "gamma": gamma, "fracs": [0.9, 1.1]}
            for key, sz in (("", size), ("coarse_", coarse)):
                rates = [_mesh_rate(d, sz, 1, f * nu_c, float(p["stab_T"]), beta=beta, eps=1e-3, attention=att)["rate"] for f in r["fracs"]]
                r[key + "rates"] = rates
                r[key + "nu_star"] = 0.9 * nu_c + 0.2 * nu_c * rates[0] / (rates[0] - rates[1]) if rates[0] != rates[1] else math.nan
                if key == "coarse_" and not (d == 3 and att == USA):
                    break
            r["expected"] = [linear_rate(1, beta, beta, attention=att, d=d, noise=f * nu_c) for f in r["fracs"]]
            r["err"] = [abs(a - b) / gamma for a, b in zip(r["rates"], r["expected"])]
            log(f"noise stability d = {d}, {att}: rates {r['rates']}, nu*/nu_c = {r['nu_star'] / nu_c:.5f}")
            out.append(r)
    return out


def _stability_tokens(p, log) -> list:
    from spherepde.solvers.particles import ParticleSolver
    from spherepde.studies.circle import _unit, field_tokens

    out = []
    beta, n, a = float(p["stab_beta"]), int(p["stab_tokens"]), float(p["stab_amp"])
    theta0 = field_tokens((np.arange(n) + 0.5) / n, [a], [0.0])
    a0 = float(np.mean(np.cos(theta0)))
    for att in ATTENTIONS:
        nu_c = critical_noise(beta, beta, attention=att, d=2)
        gamma = linear_rate(1, beta, beta, attention=att, d=2)
        for f in (0.5, 1.5):
            nu = f * nu_c
            expected = linear_rate(1, beta, beta, attention=att, d=2, noise=nu)
            T = 1.0 / abs(expected)
            aT = []
            for s in range(int(p["stab_draws"])):
                ps = ParticleSolver(_unit(theta0), _path(beta, 2, T), dt=T / int(p["stab_token_steps"]), integrator="heun", attention=att,
                                    noise=nu, noise_seed=500 + s)
                ps.advance(T)
                aT.append(float(np.mean(ps.X[:, 0])))
            aT = np.array(aT)
            m = float(aT.mean())
            rate = math.log(m / a0) / T if m > 0 else math.nan
            sem = float(aT.std(ddof=1) / math.sqrt(len(aT))) / (max(m, 1e-300) * T)
            out.append({"attention": att, "frac": f, "nu": nu, "gamma": gamma, "expected": expected, "rate": rate, "sem": sem,
                        "err": abs(rate - expected) / gamma, "T": T})
            log(f"noise stability tokens {att}, nu = {f:g} nu_c: rate {rate:.4g} +- {sem:.2g}, expected {expected:.4g}")
    return out


# ------------------------------------------------------------------ stationary states
def _stationary(p, log) -> dict:
    from spherepde.geometry import densities as dens
    from spherepde.geometry.circle_densities import from_particles
    from spherepde.model import stationary as st
    from spherepde.solvers.mesh import MeshSolver
    from spherepde.solvers.particles import ParticleSolver
    from spherepde.studies.circle import _edges, _unit, field_tokens, fourier_field, w1_circle

    beta = float(p["stat_beta"])
    out = {"beta": beta, "mesh": []}
    for d, size in ((2, p["stat_cells"]), (3, p["stat_level"])):
        nu = float(p["stat_frac"]) * st.critical_nu(beta, USA, d)
        mesh = _mesh(d, size)
        g = mesh.geometry()
        rho0 = fourier_field(mesh, [0.3], [0.0]) if d == 2 else dens.vmf_mixture(mesh, [[0.0, 0.0, 1.0]], [3.0])
        grid = st.MeshGrid(mesh)
        sc = st.solve_fixed_point(grid, st.SteadyProblem(d, USA, 1, beta, nu), rho0)
        ms = MeshSolver(mesh, rho0, _path(beta, d, float(p["stat_T"])), noise=nu, attention=USA, integrator="implicit", tol=1e-4,
                        summation="fast" if d == 2 else "auto")
        ms.advance(float(p["stat_T"]))
        diff = float(np.max(np.abs(ms.rho - sc.rho)) / np.max(sc.rho))
        out["mesh"].append({"d": d, "size": int(size), "nu": nu, "converged": bool(sc.converged), "order_sc": float(sc.order),
                            "order_mesh": float(np.linalg.norm(np.sum((ms.rho * g.areas)[:, None] * g.nodes, axis=0))), "diff": diff,
                            "mass_err": abs(float(np.sum(ms.rho * g.areas)) - 1.0)})
        log(f"noise stationary d = {d}: time-stepped vs self-consistent {diff:.2e}")
        if d == 2:
            circle_mesh, circle_sc, circle_nu = mesh, sc.rho, nu
    n = int(p["stat_tokens"])
    T = float(p["stat_T_tokens"])
    X0 = _unit(field_tokens((np.arange(n) + 0.5) / n, [0.3], [0.0]))
    ps = ParticleSolver(X0, _path(beta, 2, T), dt=float(p["stat_token_dt"]), integrator="heun", attention=USA, noise=circle_nu, noise_seed=7)
    ps.advance(T)
    mean = ps.X.mean(axis=0)
    phi = math.atan2(mean[1], mean[0])
    c, s = math.cos(-phi), math.sin(-phi)
    X = ps.X @ np.array([[c, s], [-s, c]])  # rotated by -phi: mean angle 0
    hist = from_particles(circle_mesh, X)
    e = _edges(circle_mesh)
    a = circle_mesh.areas
    sc_mean = np.sum((circle_sc * a)[:, None] * circle_mesh.geometry().nodes, axis=0)
    psi = math.atan2(sc_mean[1], sc_mean[0])  # the self-consistent state's centre (0 up to the mesh's symmetry)
    w1 = w1_circle(e, hist * a, e, circle_sc * a)
    out["tokens"] = {"n": n, "T": T, "nu": circle_nu, "w1": w1, "order_tokens": float(np.linalg.norm(mean)),
                     "order_sc": float(np.linalg.norm(sc_mean)), "centre_sc": psi, "hist": hist.tolist(), "rho_sc": circle_sc.tolist()}
    log(f"noise stationary tokens: W1 {w1:.3e}, order {np.linalg.norm(mean):.4f} vs {np.linalg.norm(sc_mean):.4f}")
    return out


# ------------------------------------------------------------------ free-energy EDI
def _edi(p, log) -> dict:
    from spherepde.geometry import densities as dens
    from spherepde.solvers.mesh import MeshSolver

    mesh = _mesh(3, p["edi_level"])
    rho = dens.vmf_mixture(mesh, [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]], [6.0, 4.0])
    T = 0.2
    errs, int_df = [], []
    for dt in p["edi_dts"]:
        ms = MeshSolver(mesh, rho, _path(3.0, 3, T), noise=0.3, attention=USA, integrator="heun", dt=float(dt), cfl=1.0)
        ms.advance(T)
        row = ms.record()
        errs.append(abs(float(row["edi_free"])))
        int_df.append(float(row["int_DF"]))
    orders = [math.log(a / b) / math.log(x / y) if a > 0 and b > 0 else math.nan
              for a, b, x, y in zip(errs[:-1], errs[1:], p["edi_dts"][:-1], p["edi_dts"][1:])]
    log(f"noise EDI: |edi_free| {errs}, orders {orders}")
    return {"dts": list(p["edi_dts"]), "edi_free": errs, "int_DF": int_df, "orders": orders}


# ------------------------------------------------------------------ bifurcation (paper claims)
def _bifurcation(p, log) -> list:
    from spherepde.model import continuation as cont
    from spherepde.model import stationary as st

    out = []
    for d in (3, 2):
        b_star = st.tricritical_beta(d)
        grid = st.ReducedGrid(d, int(p["bif_nodes"]))
        for f in (0.75, 1.5):
            beta = f * b_star
            nu_c = st.critical_nu(beta, USA, d)
            br = cont.trace_branch(st.SteadyProblem(d, USA, 1, beta, 1.0), "nu", 0.5 * nu_c, 1.5 * nu_c, grid=grid, r_max=0.9)
            out.append({"d": d, "beta": beta, "beta_star": b_star, "nu_c": nu_c, "published": st.published_threshold(beta, d),
                        "transition": br.transition, "folds": [[fo.value, fo.order] for fo in br.folds], "converged": bool(br.converged),
                        "predicted": "discontinuous" if beta > b_star else "continuous"})
            log(f"noise bifurcation d = {d}, beta = {beta:.4g}: {br.transition} (predicted {out[-1]['predicted']})")
    return out


# ------------------------------------------------------------------ run
def run(size: str = "quick", **overrides) -> dict:
    """Run the study at ``size`` (smoke/quick/full); keyword overrides replace parameters."""
    p, log = study_params(SIZES, size, overrides)
    t0 = time.perf_counter()
    res = {"name": NAME, "title": TITLE, "size": size, "params": p}
    bad = [x for x in p["parts"] if x not in PARTS]
    if bad or not p["parts"]:
        raise ValueError(f"parts: {bad or p['parts']!r} is not a non-empty list of {', '.join(PARTS)}")
    funcs = {"diffusion": _diffusion, "stability": _stability_mesh, "stability_tokens": _stability_tokens, "stationary": _stationary,
             "edi": _edi, "bifurcation": _bifurcation}
    res["part_wall_s"] = {}
    for part in PARTS:
        if part in p["parts"]:
            t1 = time.perf_counter()
            res[part] = funcs[part](p, log)
            res["part_wall_s"][part] = time.perf_counter() - t1
    res["wall_s"] = time.perf_counter() - t0
    if "stationary" in res:
        require_finite("noise: the stationary self-consistency solutions", [r["order_sc"] for r in res["stationary"]["mesh"]])
    require_finite("noise: the closed-form rates", [r["exact"] for r in res.get("diffusion", [])], [r["gamma"] for r in res.get("stability", [])])
    res["checks"] = _checks(res)
    res["claims"] = _claims(res)
    res["tables"] = _tables(res)
    res["summary"] = _summary(res)
    return res


def _space(d: int) -> str:
    return "S^2" if d == 3 else "S^1"


def _checks(res) -> dict:
    p = res["params"]
    ch = {}
    tol, tol_t = float(p["diff_tol"]), float(p["diff_tol_tokens"])
    for r in res.get("diffusion", []):
        where = f"icosphere {p['diff_level']}" if r["d"] == 3 else f"{p['diff_cells']} arcs"
        deg = f"degree l = {r['l']}" if r["d"] == 3 else f"mode k = {r['l']}"
        ch[f"pure diffusion on {_space(r['d'])}, {deg}: density level ({where}) decay rate vs nu {_lam(r['d'], r['l'])}, relative error"] = (
            solver_check(r["mesh_rel_err"], hi=tol, expected=0.0))
        ch[f"pure diffusion on {_space(r['d'])}, {deg}: density level ({where}) mass error"] = solver_check(r["mass_err"], hi=1e-12, expected=0.0)
        slack = 3.0 * r["tokens_sem"] / r["exact"]
        ch[f"pure diffusion on {_space(r['d'])}, {deg}: {p['diff_tokens']} tokens, decay rate of the harmonic's mean, relative error"] = (
            solver_check(r["tokens_rel_err"], hi=tol_t + slack, expected=0.0, tolerance=f"<= {tol_t:g} + 3 standard errors ({slack:.2g})"))
    for r in res.get("stability", []):
        case = f"{r['attention']} head beta = {r['beta']:g} on {_space(r['d'])}"
        ch[f"noisy linear rate, {case}, nu = 0.9 and 1.1 nu_c: density level vs gamma_1 - nu lambda_1, largest error / gamma_1"] = (
            solver_check(max(r["err"]), hi=float(p["stab_tol"]), expected=0.0))
        ch[f"noisy linear rate, {case}: sign flips between 0.9 nu_c and 1.1 nu_c (rate at 0.9 nu_c times rate at 1.1 nu_c)"] = (
            solver_check(r["rates"][0] * r["rates"][1], hi=0.0, expected="< 0", tolerance="< 0 (growth below nu_c, decay above)"))
        ch[f"noisy linear rate, {case}: zero crossing nu* vs nu_c, relative error"] = solver_check(
            abs(r["nu_star"] / r["nu_c"] - 1), hi=float(p["stab_nu_tol"]), expected=0.0)
    tt = float(p["stab_tol_tokens"])
    for r in res.get("stability_tokens", []):
        slack = 3.0 * r["sem"] / r["gamma"]
        ch[f"noisy linear rate, {r['attention']} head beta = {p['stab_beta']:g} on S^1, nu = {r['frac']:g} nu_c: {p['stab_tokens']} tokens "
           f"({p['stab_draws']} noise seeds) vs gamma_1 - nu, error / gamma_1"] = solver_check(
            r["err"], hi=tt + slack, expected=0.0, tolerance=f"<= {tt:g} + 3 standard errors ({slack:.2g})")
    if "stationary" in res:
        _stationary_checks(res, p, ch)
    if "edi" in res:
        e = res["edi"]
        ch[f"free-energy EDI (USA head, frozen, Heun, dt = {', '.join(f'{x:g}' for x in e['dts'])}): smallest observed order of |edi_free|"] = (
            solver_check(min(e["orders"]) if e["orders"] else math.nan, lo=float(p["edi_min_order"]), expected=2.0,
                         tolerance=f">= {p['edi_min_order']:g}"))
    return ch


def _stationary_checks(res, p, ch) -> None:
    s = res["stationary"]
    for r in s["mesh"]:
        where = f"icosphere {r['size']}" if r["d"] == 3 else f"{r['size']} arcs"
        ch[f"stationary state, USA head beta = {s['beta']:g} on {_space(r['d'])}, nu = {p['stat_frac']:g} nu_c: time-stepped density "
           f"({where}, implicit, T = {p['stat_T']:g}) vs the self-consistency solution, largest difference / max rho"] = solver_check(
            r["diff"] if r["converged"] else math.nan, hi=float(p["stat_tol_mesh"]), expected=0.0)
    t = s["tokens"]
    ch[f"stationary state on S^1: {t['n']} tokens at T = {t['T']:g} vs the self-consistency density, W1 (rad)"] = solver_check(
        t["w1"], hi=float(p["stat_w1_tol"]), expected=0.0)
    ch[f"stationary state on S^1: {t['n']} tokens' mean resultant vs the self-consistency state's, difference"] = solver_check(
        abs(t["order_tokens"] - t["order_sc"]), hi=float(p["stat_order_tol"]), expected=0.0)


def _claims(res) -> dict:
    out = {}
    for r in res.get("bifurcation", []):
        hit = float(r["transition"] == r["predicted"])
        out[f"Mun & Rosenzweig: {r['predicted']} transition for the USA head on {_space(r['d'])} at beta = {r['beta']:.4g} "
            f"({r['beta'] / r['beta_star']:g} beta_*)"] = paper_claim(
            hit, (hit, hit), 1.0, quantity="agreement",
            statement=(f"the branch from the uniform state (pseudo-arclength continuation) is {r['transition']}"
                       + (f", fold at nu = {r['folds'][0][0]:.5g}" if r["folds"] else ", no fold")
                       + f"; beta_* = {r['beta_star']:.5g}, nu_c = {r['nu_c']:.5g}, Mun & Rosenzweig's nu_c = {r['published']:.5g}"))
    r = next((x for x in res.get("stability", []) if x["d"] == 3 and x["attention"] == USA), None)
    if r is None:
        return out
    from spherepde.model.stationary import published_threshold

    pub = published_threshold(r["beta"], 3)
    # the fine mesh's error is bounded by its difference to the coarse mesh (second order: about a third of it)
    spread = abs(r["nu_star"] - r["coarse_nu_star"])
    lo, hi = (r["nu_star"] - spread) / pub, (r["nu_star"] + spread) / pub
    out[f"Mun & Rosenzweig's threshold nu_c = beta/(2 K_#) for the USA head on S^2 at beta = {r['beta']:g}"] = paper_claim(
        r["nu_star"] / pub, (lo, hi), 1.0, quantity="nu* / nu_c(M&R)",
        statement=(f"the density level's zero crossing nu* = {r['nu_star']:.6g} (icosphere {res['params']['stab_level']}; "
                   f"{r['coarse_nu_star']:.6g} on the coarse mesh: the interval is nu* +- their difference) against their {pub:.6g}"))
    return out


def _tables(res) -> list:
    out = []
    if "diffusion" in res:
        out.append({"title": "Pure diffusion: decay rates (1 / time)", "headers": [
            "space", "l or k", "nu lambda_l", "density level", "tokens", "tokens (s.e.)"],
            "rows": [[_space(r["d"]), r["l"], r["exact"], r["mesh"], r["tokens"], r["tokens_sem"]] for r in res["diffusion"]]})
    stab = [[_space(r["d"]), r["attention"], r["nu_c"], r["gamma"], f * r["nu_c"], e, m]
            for r in res.get("stability", []) for f, e, m in zip(r["fracs"], r["expected"], r["rates"])]
    stab += [["S^1 (tokens)", r["attention"], r["nu"] / r["frac"], r["gamma"], r["nu"], r["expected"], r["rate"]]
             for r in res.get("stability_tokens", [])]
    if stab:
        out.append({"title": "Noisy linear rates of l = 1 (k = 1)", "headers": [
            "space", "attention", "nu_c", "gamma_1", "nu", "gamma_1 - nu lambda_1", "measured"], "rows": stab})
    if "stationary" in res:
        out.append({"title": "Stationary states (USA head): time-stepped density vs self-consistency", "headers": [
            "space", "mesh", "nu", "order (self-consistent)", "order (time-stepped)", "max difference / max rho"],
            "rows": [[_space(r["d"]), r["size"], r["nu"], r["order_sc"], r["order_mesh"], r["diff"]] for r in res["stationary"]["mesh"]]})
    if "edi" in res:
        e = res["edi"]
        out.append({"title": "Free-energy EDI (Heun)", "headers": ["dt", "|edi_free|", "int D_F"],
                    "rows": [[dt, x, y] for dt, x, y in zip(e["dts"], e["edi_free"], e["int_DF"])]})
    if "bifurcation" in res:
        out.append({"title": "Bifurcation from uniform (USA head)", "headers": [
            "space", "beta", "beta_*", "nu_c", "nu_c (M&R)", "transition", "M&R"],
            "rows": [[_space(r["d"]), r["beta"], r["beta_star"], r["nu_c"], r["published"], r["transition"], r["predicted"]]
                     for r in res["bifurcation"]]})
    return out


def _summary(res) -> str:
    p = res["params"]
    lines = []
    if "diffusion" in res:
        lines.append(f"Pure diffusion (nu = {p['diff_nu']:g}): " + "; ".join(
            f"{_space(r['d'])} l = {r['l']}: density level {r['mesh_rel_err']:.2g}, tokens {r['tokens_rel_err']:.2g} relative error of the "
            f"decay rate nu l(l+d-2)" for r in res["diffusion"]) + ".")
    if "stability" in res:
        lines.append(f"Noisy linear rates of the uniform state (one gradient head, beta = {p['stab_beta']:g}, s = +1): " + "; ".join(
            f"{r['attention']} on {_space(r['d'])}: rates {r['rates'][0]:.4g} / {r['rates'][1]:.4g} at 0.9 / 1.1 nu_c (largest error "
            f"{max(r['err']):.2g} gamma_1), zero crossing nu*/nu_c = {r['nu_star'] / r['nu_c']:.5f}" for r in res["stability"]) + ".")
    if "stability_tokens" in res:
        lines.append("Tokens on S^1: " + "; ".join(
            f"{r['attention']} at {r['frac']:g} nu_c: {r['rate']:.4g} +- {r['sem']:.2g} against {r['expected']:.4g}"
            for r in res["stability_tokens"]) + ".")
    if "stationary" in res:
        s = res["stationary"]
        t = s["tokens"]
        lines.append(f"Stationary states (USA head beta = {s['beta']:g}, nu = {p['stat_frac']:g} nu_c): " + "; ".join(
            f"{_space(r['d'])}: the time-stepped density differs from the self-consistency solution by {r['diff']:.2g} of max rho "
            f"(order parameters {r['order_mesh']:.4f} and {r['order_sc']:.4f})" for r in s["mesh"])
            + f"; {t['n']} tokens at T = {t['T']:g}: W1 {t['w1']:.2g} rad to it, mean resultant {t['order_tokens']:.4f} against "
            f"{t['order_sc']:.4f}.")
    if "edi" in res:
        e = res["edi"]
        lines.append("Free-energy EDI (USA head, Heun): |edi_free| " + ", ".join(f"{x:.2g}" for x in e["edi_free"]) + " at dt = "
                     + ", ".join(f"{x:g}" for x in e["dts"]) + f" (int D_F about {e['int_DF'][-1]:.3g}); observed orders "
                     + ", ".join(f"{o:.2f}" for o in e["orders"]) + ".")
    for claim in res["claims"].values():
        lines.append(_v.claim_sentence(claim) + ": " + claim["statement"] + ".")
    lines.append(checks_line(res["checks"], res["claims"]))
    return "\n\n".join(lines)


# ------------------------------------------------------------------ figures
def plot(results, out_dir) -> list:
    """Figures: measured rates against the closed forms (diffusion and noisy linear rates); the stationary state on the
    circle, self-consistency solution and the tokens' histogram."""
    from spherepde.viz.figstyle import finish_figure, legend_outside, subplots

    paths = []
    if not all(k in results for k in ("diffusion", "stability", "stability_tokens", "stationary")):
        return paths
    fig, ax = subplots(figsize=(7.4, 4.4), layout="constrained")
    ex = [r["exact"] for r in results["diffusion"]] + [x for r in results["stability"] for x in r["expected"]]
    lo, hi = min(min(ex), 0.0), max(ex)
    ax.plot([lo, hi], [lo, hi], "k-", lw=0.8, label="measured = closed form")
    ax.plot([r["exact"] for r in results["diffusion"]], [r["mesh"] for r in results["diffusion"]], "o", mfc="none",
            label="pure diffusion, density level")
    ax.plot([r["exact"] for r in results["diffusion"]], [r["tokens"] for r in results["diffusion"]], "x", label="pure diffusion, tokens")
    ax.plot([x for r in results["stability"] for x in r["expected"]], [x for r in results["stability"] for x in r["rates"]], "s", mfc="none",
            label="noisy linear rate, density level")
    ax.plot([r["expected"] for r in results["stability_tokens"]], [r["rate"] for r in results["stability_tokens"]], "+", ms=9,
            label="noisy linear rate, tokens (S^1)")
    ax.set_xlabel("closed form (1 / time; decay rates positive)")
    ax.set_ylabel("measured (1 / time)")
    legend_outside(ax, fontsize=6)
    paths.append(save_figure(fig, out_dir, "noise_rates.png"))
    t = results["stationary"]["tokens"]
    n = len(t["rho_sc"])
    th = (np.arange(n) + 0.5) * 2 * math.pi / n
    th = np.where(th > math.pi, th - 2 * math.pi, th)
    order = np.argsort(th)
    fig, ax = subplots(figsize=(7.4, 3.6), layout="constrained")
    ax.plot(th[order], np.asarray(t["rho_sc"])[order], "-", label="self-consistency solution")
    ax.plot(th[order], np.asarray(t["hist"])[order], "-", lw=0.6, alpha=0.8, label=f"{t['n']} tokens at T = {t['T']:g} (histogram)")
    ax.set_xlabel(r"$\theta$ (rad, from the centre)")
    ax.set_ylabel(r"$\rho$")
    legend_outside(ax)
    finish_figure(fig)
    paths.append(save_figure(fig, out_dir, "noise_stationary.png"))
    return paths
