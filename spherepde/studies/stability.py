"""Stability of the flow, measured: perturbed initial data and perturbed weights.

(a) Initial data. Tokens: the paper's setting (octahedral start, D_h(0) = G + G^T,
OU weights, s = -1, explicit Euler) from X_0 and from X_0 with every token moved by a
geodesic distance delta in a random tangent direction, on the SAME weight path. We follow

* W1(t): the exact Wasserstein-1 distance (POT, geodesic cost) of the two token clouds;
* c(t): the natural coupling distance max_i |x_i(t) - y_i(t)| (chordal), the quantity a
  Gronwall argument controls directly,

and report r(t) = d(t)/d(0), the fitted growth exponent L_eff (least-squares slope of
log r against t), the smallest exponent with r(t) <= e^{L t} on the run, and whether
d(T)/d(0) is independent of delta (the flow map is Lipschitz, the linear regime).

An a-priori Gronwall bound: for two token configurations at coupling distance
delta = max_i |x_i - y_i|, |v(x_i) - v(y_i)| <= ell(t) delta with

    ell(t) = (1/H) sum_h ||D_h(t)|| (3 + 2 ||D_h(t)||)

(|P_x - P_y| <= 2|x - y|, |a_h| <= 1; the softmax average moves by at most
|y_j - y_j'| + max|d logits| <= (1 + 2||A_h||) delta), so c(t) <= exp(int_0^t ell) c(0).
We report int_0^T ell next to the measured exponent.

Density level: two mesh solutions (first-order upwind) from rho_0 and
rho_0 (1 + eps Y_21) (renormalised), L1 and W1 (exact, cell centres) between them.

(b) Weights. The same initial data driven by D_h(t) and by D_h(t) + eps S (S a fixed
random symmetric matrix with ||S||_2 = 1, added to every head on the whole grid): the
distance at time T against eps, with the fitted order (expected 1: the flow depends
Lipschitz-continuously on the weights).

Checks: the orders of d(T) in d(0) and in eps (expected 1, band [0.9, 1.1]; measured 0.97..1.04
at every size), for the particles and the mesh. The a-priori Gronwall exponent int ell is
reported next to the measured growth exponents but is not a check: it lies ~50-100x above
anything measured (exponents ~100 against L_eff T < 1), so no scheme could violate it.
Finite distances and ratios are preconditions
(:class:`spherepde.studies.common.StudyPreconditionError`).
"""

from __future__ import annotations

import math
import time

import numpy as np

from spherepde.model.statistics import fit_rate, growth_rate
from spherepde.studies import common as _v
from spherepde.studies.common import checks_line, markdown_table, require_finite, save_figure, solver_check, study_params, weight_process
from spherepde.studies.common import format_number as _f

#: Order of a distance at T in the size of the perturbation (expected 1: Lipschitz, differentiable flow map).
ORDER_BAND = (0.9, 1.1, 1.0)

NAME = "stability"
TITLE = "Stability: Gronwall growth of perturbations of the initial data and of the weights"

SIZES = _v.sizes_table({
    "n": _v.per_size(100, 200, 200),
    "T": _v.per_size(1.0, 5.0, 20.0),
    "dt": _v.per_size(1e-2, 1e-2, 5e-3),
    "record_dt": 0.1,
    "H": _v.per_size((1, 4), (1, 10), (1, 10, 100)),
    "regime": "ou",
    "deltas": _v.per_size((1e-2, 1e-3), (1e-2, 1e-3, 1e-4), (1e-2, 1e-3, 1e-4, 1e-5)),
    "eps": _v.per_size((1e-1, 1e-2, 1e-3), (1e-1, 1e-2, 1e-3), (1e-1, 3e-2, 1e-2, 3e-3, 1e-3, 1e-4)),
    "mesh": True,
    "mesh_level": _v.per_size(3, 8, 16),
    "mesh_T": _v.per_size(0.4, 2.0, 5.0),
    "mesh_H": _v.per_size(2, 2, 10),
    "mesh_weights_dt": 0.02,
    "mesh_eps0": _v.per_size((1e-1, 1e-2), (1e-1, 1e-2), (1e-1, 1e-2, 1e-3)),
    "mesh_eps": _v.per_size((1e-1, 1e-2), (1e-1, 1e-2, 1e-3), (1e-1, 1e-2, 1e-3)),
})

#: What each size parameter may be (``spherepde validate --set`` checks overrides against it before anything runs).
RANGES = {
    "n": _v.Range(int, 1, 10**6, memory=lambda n: 24.0 * n * n, what="a number of tokens (the exact W1 between clouds costs n^2)"),
    "T": _v.TIME,
    "dt": _v.STEP,
    "record_dt": _v.STEP,
    "H": _v.HEADS,
    "regime": _v.Range(None, choices=("ou", "frozen", "osc-in-phase", "osc-shift")),
    "deltas": _v.FRACTION,
    "eps": _v.FRACTION,
    "mesh": _v.BOOL,
    "mesh_level": _v.Range(int, 1, 256, memory=lambda L: 24.0 * (20.0 * L * L) ** 2, what="an icosphere level (the exact W1 between densities costs cells^2)"),
    "mesh_T": _v.TIME,
    "mesh_H": _v.HEADS,
    "mesh_weights_dt": _v.STEP,
    "mesh_eps0": _v.FRACTION,
    "mesh_eps": _v.FRACTION,
}


# ----------------------------------------------------------------------------- helpers
def _w1_clouds(X, Y) -> float:
    """Exact W1 (geodesic cost) between two equally weighted clouds."""
    import ot

    C = np.arccos(np.clip(X @ Y.T, -1.0, 1.0))
    return float(ot.emd2(np.full(len(X), 1.0 / len(X)), np.full(len(Y), 1.0 / len(Y)), C, numItermax=10_000_000))


def _w1_meshes(mesh, rho_a, rho_b) -> float:
    import ot

    a = rho_a * mesh.areas
    b = rho_b * mesh.areas
    C = np.arccos(np.clip(mesh.centers @ mesh.centers.T, -1.0, 1.0))
    return float(ot.emd2(a / a.sum(), b / b.sum(), C, numItermax=10_000_000))


def _perturb_tokens(X, delta, seed):
    """Move every token by geodesic distance delta in a random tangent direction."""
    rng = np.random.default_rng(seed)
    U = rng.standard_normal(X.shape)
    U -= np.sum(U * X, axis=1, keepdims=True) * X
    U /= np.linalg.norm(U, axis=1, keepdims=True)
    return np.cos(delta) * X + np.sin(delta) * U


def _process(regime):
    """'ou', 'frozen' or 'osc-<phase>' (the oscillating process with that phase convention)."""
    if regime.startswith("osc-"):
        return weight_process("oscillating", phase=regime[4:])
    return weight_process(regime)


def _ell(path) -> np.ndarray:
    """The a-priori Lipschitz rate ell(t_k) = (1/H) sum_h ||D_h|| (3 + 2 ||D_h||) on the grid."""
    nrm = np.linalg.norm(path.D, ord=2, axis=(2, 3))  # (K+1, H)
    return np.mean(nrm * (3.0 + 2.0 * nrm), axis=1)


def _growth(t, r):
    """Fitted exponent (slope of log r vs t), the sup exponent and the bounded-ratio constant."""
    t = np.asarray(t, float)
    r = np.asarray(r, float)
    ok = (t > 0) & (r > 0) & np.isfinite(r)
    if ok.sum() < 2:
        return float("nan"), float("nan"), float("nan")
    lr = np.log(r[ok])
    L_fit = growth_rate(t[ok], r[ok])
    L_sup = float(np.max(lr / t[ok]))
    C = float(np.max(r[ok] * np.exp(-max(L_fit, 0.0) * t[ok])))
    return L_fit, L_sup, C


def _trajectory(path, X0, dt, times):
    """Token positions at the record times (explicit Euler, the paper's scheme)."""
    from spherepde.solvers.particles import ParticleSolver
    from spherepde.solvers.protocol import integrate

    a = ParticleSolver(X0, path, dt=dt, integrator="euler")
    return [snap["X"] for snap in integrate(a, times, snapshots=True).snapshots]


def _distances(A, B):
    """W1 and the coupling distance max_i |x_i - y_i| along two trajectories."""
    w = np.asarray([_w1_clouds(X, Y) for X, Y in zip(A, B)])
    c = np.asarray([float(np.max(np.linalg.norm(X - Y, axis=1))) for X, Y in zip(A, B)])
    return w, c


def _times(T, rdt, dt):
    k = max(1, round(rdt / dt))
    K = round(T / dt)
    ks = list(range(0, K + 1, k))
    if ks[-1] != K:
        ks.append(K)
    return [kk * dt for kk in ks]


# --------------------------------------------------------------------------- (a) initial
def _initial_particles(p, log) -> dict:
    from spherepde.model.weights import generate_weight_path
    from spherepde.solvers.particles import initial_tokens

    T, dt = float(p["T"]), float(p["dt"])
    times = _times(T, float(p["record_dt"]), dt)
    out = {}
    for H in p["H"]:
        t0 = time.perf_counter()
        path = generate_weight_path(_process(p["regime"]), H=H, d=3, T=T, dt=dt, seed=500 + H, init="gaussian", sign=-1.0)
        X0 = initial_tokens("octahedral", int(p["n"]), seed=500 + H)
        ell = _ell(path)
        cum_ell = np.concatenate([[0.0], np.cumsum(0.5 * (ell[1:] + ell[:-1]) * path.dt)])
        bound_exp = [float(np.interp(t, path.times, cum_ell)) for t in times]
        res = {"t": times, "deltas": list(p["deltas"]), "w1": [], "coupling": [], "r_w1": [], "r_coupling": [],
               "L_fit_w1": [], "L_sup_w1": [], "C_w1": [], "L_fit_coupling": [], "L_sup_coupling": [], "C_coupling": [],
               "gronwall_exponent": bound_exp, "ell_mean": float(np.mean(ell))}
        base = _trajectory(path, X0, dt, times)
        for i, delta in enumerate(p["deltas"]):
            Y0 = _perturb_tokens(X0, float(delta), seed=900 + i)
            w, c = _distances(base, _trajectory(path, Y0, dt, times))
            rw, rc = w / w[0], c / c[0]
            res["w1"].append(w.tolist())
            res["coupling"].append(c.tolist())
            res["r_w1"].append(rw.tolist())
            res["r_coupling"].append(rc.tolist())
            for key, r in (("w1", rw), ("coupling", rc)):
                L_fit, L_sup, C = _growth(times, r)
                res[f"L_fit_{key}"].append(L_fit)
                res[f"L_sup_{key}"].append(L_sup)
                res[f"C_{key}"].append(C)
        # Lipschitz order of the flow map in the initial distance: d(T) ~ d(0)^order
        res["order_T_w1"] = fit_rate([w[0] for w in res["w1"]], [w[-1] for w in res["w1"]])
        res["order_T_coupling"] = fit_rate([c[0] for c in res["coupling"]], [c[-1] for c in res["coupling"]])
        # measured coupling ratio against the a-priori Gronwall bound
        res["bound_respected"] = bool(all(np.all(np.log(np.maximum(np.asarray(rc), 1e-300)) <= np.asarray(bound_exp) + 1e-9)
                                          for rc in res["r_coupling"]))
        res["wall_s"] = time.perf_counter() - t0
        out[str(H)] = res
        log(f"[stability a] H = {H}: L_fit(W1) = {res['L_fit_w1']}, r_T = {[r[-1] for r in res['r_w1']]}, "
            f"int ell = {bound_exp[-1]:.3g}, {res['wall_s']:.1f} s")
    return out


# ---------------------------------------------------------------------------- (b) weights
def _weights_particles(p, log) -> dict:
    from spherepde.model.weights import generate_weight_path, weight_path_from_arrays
    from spherepde.solvers.particles import initial_tokens

    T, dt = float(p["T"]), float(p["dt"])
    times = _times(T, float(p["record_dt"]), dt)
    rng = np.random.default_rng(77)
    G = rng.standard_normal((3, 3))
    S = 0.5 * (G + G.T)
    S /= np.linalg.norm(S, 2)
    out = {"S": S.tolist()}
    for H in p["H"]:
        t0 = time.perf_counter()
        path = generate_weight_path(_process(p["regime"]), H=H, d=3, T=T, dt=dt, seed=600 + H, init="gaussian", sign=-1.0)
        D = np.array(path.D)
        base = weight_path_from_arrays(D, dt, sign=-1.0)
        X0 = initial_tokens("octahedral", int(p["n"]), seed=600 + H)
        res = {"t": times, "eps": list(p["eps"]), "w1": [], "coupling": []}
        refX = _trajectory(base, X0, dt, times)
        for eps in p["eps"]:
            pert = weight_path_from_arrays(D + float(eps) * S[None, None], dt, sign=-1.0)
            w, c = _distances(refX, _trajectory(pert, X0, dt, times))
            res["w1"].append(w.tolist())
            res["coupling"].append(c.tolist())
        eps = np.asarray(p["eps"], float)
        res["order_w1"] = fit_rate(eps, [w[-1] for w in res["w1"]])
        res["order_coupling"] = fit_rate(eps, [c[-1] for c in res["coupling"]])
        # order from the small-eps end only (the linear regime)
        res["order_w1_small"] = fit_rate(eps[-3:], [w[-1] for w in res["w1"]][-3:]) if len(eps) > 3 else res["order_w1"]
        res["wall_s"] = time.perf_counter() - t0
        out[str(H)] = res
        log(f"[stability b] H = {H}: W1(T) = {[w[-1] for w in res['w1']]}, order {res['order_w1']:.3f}, {res['wall_s']:.1f} s")
    return out


# ------------------------------------------------------------------------------- mesh
def _mesh(p, log) -> dict:
    from spherepde.geometry import densities
    from spherepde.geometry.meshfiles import icosphere
    from spherepde.model.weights import generate_weight_path, weight_path_from_arrays
    from spherepde.solvers.mesh import MeshSolver
    from spherepde.solvers.protocol import integrate

    t0 = time.perf_counter()
    mesh = icosphere(int(p["mesh_level"]))
    T = float(p["mesh_T"])
    wdt = float(p["mesh_weights_dt"])
    H = int(p["mesh_H"])
    path = generate_weight_path(_process(p["regime"]), H=H, d=3, T=T, dt=wdt, seed=700 + H, init="gaussian", sign=-1.0, scheme="exact")
    D = np.array(path.D)
    base = weight_path_from_arrays(D, wdt, sign=-1.0)
    rho0 = densities.octahedral(mesh, 0.15)
    Y = densities.real_sph_harm(2, 1, mesh.centers)
    times = [float(x) for x in np.linspace(0.0, T, 6)]
    times = [round(t / wdt) * wdt for t in times]

    def solve(rho, pth):
        ms = MeshSolver(mesh, rho, pth, order=1, integrator="euler", cfl=0.5)
        return [snap["rho"] for snap in integrate(ms, times, snapshots=True).snapshots]

    ref = solve(rho0, base)
    res = {"level": int(p["mesh_level"]), "cells": mesh.n_cells, "H": H, "t": times}
    # (a) initial perturbation rho0 (1 + eps Y_21)
    a = {"eps": list(p["mesh_eps0"]), "l1": [], "w1": []}
    for eps in p["mesh_eps0"]:
        rp = rho0 * (1.0 + float(eps) * Y / np.max(np.abs(Y)))
        rp = rp / np.sum(rp * mesh.areas)
        sol = solve(rp, base)
        a["l1"].append([float(np.sum(np.abs(x - y) * mesh.areas)) for x, y in zip(ref, sol)])
        a["w1"].append([_w1_meshes(mesh, x, y) for x, y in zip(ref, sol)])
    for key in ("l1", "w1"):
        a[f"L_fit_{key}"] = [_growth(times, np.asarray(v) / v[0])[0] for v in a[key]]
        a[f"ratio_T_{key}"] = [v[-1] / v[0] for v in a[key]]
        a[f"order_T_{key}"] = fit_rate([v[0] for v in a[key]], [v[-1] for v in a[key]])
    res["initial"] = a
    # (b) weight perturbation
    rng = np.random.default_rng(77)
    G = rng.standard_normal((3, 3))
    S = 0.5 * (G + G.T)
    S /= np.linalg.norm(S, 2)
    b = {"eps": list(p["mesh_eps"]), "l1": [], "w1": []}
    for eps in p["mesh_eps"]:
        sol = solve(rho0, weight_path_from_arrays(D + float(eps) * S[None, None], wdt, sign=-1.0))
        b["l1"].append([float(np.sum(np.abs(x - y) * mesh.areas)) for x, y in zip(ref, sol)])
        b["w1"].append([_w1_meshes(mesh, x, y) for x, y in zip(ref, sol)])
    b["order_l1"] = fit_rate(b["eps"], [v[-1] for v in b["l1"]])
    b["order_w1"] = fit_rate(b["eps"], [v[-1] for v in b["w1"]])
    res["weights"] = b
    res["wall_s"] = time.perf_counter() - t0
    log(f"[stability mesh] level {res['level']}: L1 ratio(T) {a['ratio_T_l1']}, W1 ratio(T) {a['ratio_T_w1']}, "
        f"eps-order L1 {b['order_l1']:.3f} W1 {b['order_w1']:.3f}, {res['wall_s']:.1f} s")
    return res


# -------------------------------------------------------------------------------- run
def run(size: str = "quick", **overrides) -> dict:
    """Run the study at ``size`` (smoke/quick/full); keyword overrides replace parameters."""
    p, log = study_params(SIZES, size, overrides)
    t0 = time.perf_counter()
    res = {"name": NAME, "title": TITLE, "size": size, "params": p}
    res["initial"] = _initial_particles(p, log)
    res["weights"] = _weights_particles(p, log)
    if p.get("mesh", True):
        res["mesh"] = _mesh(p, log)
    res["wall_s"] = time.perf_counter() - t0
    _preconditions(res)
    res["checks"] = _checks(res)
    res["summary"] = _summary(res)
    return res


def _preconditions(res) -> None:
    for H, r in res["initial"].items():
        require_finite(f"stability [initial, H = {H}]: distances and growth exponents", r["w1"], r["coupling"], r["L_fit_w1"], r["C_w1"])
    for H, r in res["weights"].items():
        if H != "S":
            require_finite(f"stability [weights, H = {H}]: distances at T", [w[-1] for w in r["w1"]], [c[-1] for c in r["coupling"]])
    if "mesh" in res:
        m = res["mesh"]
        require_finite("stability [mesh]: distance ratios", m["initial"]["ratio_T_l1"], m["initial"]["ratio_T_w1"], [v[-1] for v in m["weights"]["l1"]])


def _worst(values, target=1.0):
    return max(values, key=lambda v: abs(v - target))


def _checks(res) -> dict:
    lo, hi, ex = ORDER_BAND
    ini = res["initial"]
    Hs = ", ".join(ini)
    ch = {
        f"particles, perturbed initial data: order of the coupling distance d(T) in d(0) (H = {Hs}; H farthest from 1)": solver_check(
            _worst([r["order_T_coupling"] for r in ini.values()]), lo=lo, hi=hi, expected=ex
        ),
        f"particles, perturbed weights D + eps S: order of W1(T) in eps (H = {Hs}; H farthest from 1)": solver_check(
            _worst([r["order_w1"] for k, r in res["weights"].items() if k != "S"]), lo=lo, hi=hi, expected=ex
        ),
    }
    if "mesh" in res:
        m = res["mesh"]
        ch["mesh, perturbed initial data: order of L1(T) in L1(0)"] = solver_check(m["initial"]["order_T_l1"], lo=lo, hi=hi, expected=ex)
        ch["mesh, perturbed weights D + eps S: order of L1(T) in eps"] = solver_check(m["weights"]["order_l1"], lo=lo, hi=hi, expected=ex)
    return ch


def _summary(res) -> str:
    p = res["params"]
    L = [
        (
            f"Tokens: n = {p['n']}, octahedral start, D_h(0) = G + G^T, {p['regime']} weights (paper), s = -1, Euler "
            f"dt = {p['dt']:g}, T = {p['T']:g}."
        )
    ]
    L.append("\n(a) Perturbed initial data (every token moved by delta along a random tangent direction, same weight path):\n")
    rows = []
    for H, r in res["initial"].items():
        for i, d in enumerate(r["deltas"]):
            rows.append([H, d, r["w1"][i][0], r["w1"][i][-1], r["r_w1"][i][-1], float(np.max(r["r_w1"][i])), r["L_fit_w1"][i],
                         r["L_sup_w1"][i], r["r_coupling"][i][-1], r["L_fit_coupling"][i], r["gronwall_exponent"][-1]])
    L.append(markdown_table(["H", "delta", "W1(0)", "W1(T)", "W1(T)/W1(0)", "max ratio", "L_eff (fit)", "L_sup", "coupling ratio(T)", "L_eff coupling", "int ell (a-priori)"], rows))
    for H, r in res["initial"].items():
        L.append(
            f"\nH = {H}: d(T) against d(0) across delta has order {_f(r['order_T_w1'])} (W1) and {_f(r['order_T_coupling'])} "
            f"(coupling) -- 1 means a Lipschitz flow map (ratios independent of delta). For reference (not a check), the "
            f"a-priori Gronwall bound exp(int ell) has exponent {r['gronwall_exponent'][-1]:.3g} at T (mean ell = {r['ell_mean']:.3g}), "
            f"against measured log-ratios at T of at most {max(math.log(max(x[-1], 1e-300)) for x in r['r_coupling']):.3g} (coupling): valid "
            f"({'respected' if r['bound_respected'] else 'EXCEEDED'}) but so far from sharp that no scheme could violate it."
        )
    L.append("\n(b) Weight perturbation D_h(t) + eps S (||S||_2 = 1, same tokens):\n")
    rows = []
    for H, r in res["weights"].items():
        if H == "S":
            continue
        for i, e in enumerate(r["eps"]):
            rows.append([H, e, r["w1"][i][-1], r["coupling"][i][-1]])
    L.append(markdown_table(["H", "eps", "W1 at T", "coupling at T"], rows))
    L.append("\n" + "; ".join(
        f"H = {H}: order in eps {_f(r['order_w1'])} (W1), {_f(r['order_coupling'])} (coupling), {_f(r['order_w1_small'])} (W1, three smallest eps)"
        for H, r in res["weights"].items() if H != "S") + " (expected: 1).")
    if "mesh" in res:
        m = res["mesh"]
        a, b = m["initial"], m["weights"]
        L.append(
            f"\nMesh (level {m['level']}, {m['cells']} cells, H = {m['H']}, first-order upwind, T = {m['t'][-1]:g}, weights grid 0.02): "
            f"rho_0 (1 + eps Y_21) for eps = {a['eps']}: L1 ratio at T {', '.join(_f(x) for x in a['ratio_T_l1'])}, W1 ratio at T "
            f"{', '.join(_f(x) for x in a['ratio_T_w1'])}, fitted L_eff (L1) {', '.join(_f(x) for x in a['L_fit_l1'])}; "
            f"order of d(T) in d(0): L1 {_f(a['order_T_l1'])}, W1 {_f(a['order_T_w1'])}. Weight perturbation: order in eps "
            f"L1 {_f(b['order_l1'])}, W1 {_f(b['order_w1'])}."
        )
    L.append(checks_line(res["checks"]))
    return "\n".join(L)


# ------------------------------------------------------------------------------- plot
def plot(results, out_dir) -> list:
    """Figures: growth of initial perturbations over time, distance at T against the
    weight perturbation, and the mesh's perturbed-rho_0 growth. Axes labelled with units,
    legends beside the data."""
    from spherepde.viz.figstyle import data_ticks, finish_figure, legend_outside, subplots

    T_LABEL = "time t (dimensionless)"
    RATIO_LABEL = "distance ratio d(t) / d(0)"
    paths = []
    ini = results["initial"]
    fig, axes = subplots(len(ini), 1, figsize=(8.2, 3.6 * len(ini)), squeeze=False, layout="constrained")
    for ax, (H, r) in zip(axes[:, 0], ini.items()):
        t = np.asarray(r["t"])
        for i, d in enumerate(r["deltas"]):
            ax.semilogy(t, r["r_w1"][i], label=rf"$W_1$, $\delta$ = {d:g} ($L_{{eff}}$ = {r['L_fit_w1'][i]:.2f})")
            ax.semilogy(t, r["r_coupling"][i], "--", label=rf"coupling, $\delta$ = {d:g}")
        Lf = r["L_fit_w1"][-1]
        if np.isfinite(Lf):
            ax.semilogy(t, np.exp(max(Lf, 0) * t), "k:", label=r"$e^{L_{eff} t}$")
        ax.set_xlabel(T_LABEL)
        ax.set_ylabel(RATIO_LABEL)
        ax.set_title(f"initial perturbation, H = {H}")
        legend_outside(ax)
    finish_figure(fig)
    paths.append(save_figure(fig, out_dir, "stability_initial.png", dpi=110))
    fig, ax = subplots(figsize=(8.2, 4.2), layout="constrained")
    eps_all = []
    for H, r in results["weights"].items():
        if H == "S":
            continue
        e = np.asarray(r["eps"])
        eps_all += list(e)
        ax.loglog(e, [w[-1] for w in r["w1"]], "o-", label=f"particles $W_1$, H = {H} (order {r['order_w1']:.2f})")
    if "mesh" in results:
        b = results["mesh"]["weights"]
        eps_all += list(b["eps"])
        ax.loglog(b["eps"], [v[-1] for v in b["l1"]], "s--", label=f"mesh $L^1$ (order {b['order_l1']:.2f})")
        ax.loglog(b["eps"], [v[-1] for v in b["w1"]], "^--", label=f"mesh $W_1$ (order {b['order_w1']:.2f})")
    data_ticks(ax, "x", eps_all, "{:g}")
    ax.set_xlabel(r"weight perturbation $\varepsilon$ (dimensionless)")
    ax.set_ylabel("distance at T\n" + r"($W_1$ in rad, $L^1$ dimensionless)")
    ax.set_title(r"weight perturbation $D + \varepsilon S$")
    legend_outside(ax)
    finish_figure(fig)
    paths.append(save_figure(fig, out_dir, "stability_weights.png", dpi=110))
    if "mesh" in results:
        m = results["mesh"]
        fig, ax = subplots(figsize=(7.6, 4.2), layout="constrained")
        for i, e in enumerate(m["initial"]["eps"]):
            v = np.asarray(m["initial"]["l1"][i])
            w = np.asarray(m["initial"]["w1"][i])
            ax.semilogy(m["t"], v / v[0], "o-", label=rf"$L^1$, $\varepsilon$ = {e:g}")
            ax.semilogy(m["t"], w / w[0], "x--", label=rf"$W_1$, $\varepsilon$ = {e:g}")
        ax.set_xlabel(T_LABEL)
        ax.set_ylabel(RATIO_LABEL)
        ax.set_title(rf"mesh level {m['level']}: perturbed $\rho_0$")
        legend_outside(ax)
        finish_figure(fig)
        paths.append(save_figure(fig, out_dir, "stability_mesh.png", dpi=110))
    return paths
