"""Mesh solver versus particle solver on one weight path (convergence in h and in n).

Both solvers are driven by the identical weight path Theta_t (frozen weights here, so the
weight grid only fixes where the mesh solver may step). For two cases,

* ``repulsive`` -- the paper's sign s = -1 with positive-definite frozen heads
  D_h = I + (G + G^T)/4 (H = 2), started from a smooth von Mises--Fisher mixture: the
  flow spreads the mass and stays smooth. (The paper's indefinite D_h = G + G^T is not
  used here: with s = -1 it aggregates along the negative eigen-directions, and the
  flow amplifies the sampling differences between token clouds, which masks both rates.
  The stability study measures that amplification.)
* ``clustering`` -- s = +1, D = 4 I (H = 1, frozen), a vMF mixture that contracts into
  point-like clusters within the run (the Geshkovski et al. clustering regime),

we run the first-order upwind mesh solver (:class:`spherepde.solvers.mesh.MeshSolver`,
order 1, forward Euler at CFL 0.5) on icosphere levels ``levels`` and the particle
solver (Heun, the path's grid step) for token counts ``n_list``; tokens are iid samples
of the same continuous initial law whose cell averages are the mesh's rho_0.

Distances at every record time (:mod:`spherepde.solvers.distances`):

* W1 on S^2 with geodesic cost (POT exact network simplex; sliced spherical Wasserstein
  -- a different, much smaller metric -- where the exact problem is too large; the two
  are never mixed in one fit);
* L1 between the mesh density and the vMF-smoothed token histogram (bandwidth tied to
  the mesh: kappa = 1/(2h)^2; :func:`spherepde.solvers.distances.l1_to_particles`) -- it carries
  the kernel's smoothing bias, which does not vanish as n grows;
* "L1 smooth": L1 between the SAME vMF kernel applied to both measures (the mesh's cell
  masses and the tokens; one kappa = 1/(2 h_finest)^2 for every level), which has no
  smoothing bias;
* |E_mesh - E_particles| and |G^2_mesh - G^2_particles|;
* (h-study only) L1 self-convergence: each level against the finest level remapped by
  cell (conservative histogram of the finest cell masses).

h-study: every level against one particle run (n = ``n_ref``, default max n_list, seed 0),
and against the finest level (L1 and W1 "self", energy and G^2 differences: no sampling noise).
n-study: every n (several seeds for small n, distances averaged) against the finest level.
Rates are least-squares log-log slopes (``spherepde.model.statistics.fit_rate``).

Theory (REFERENCES.md): upwind is O(h) in L1 for smooth densities and O(h^{1/2}) in W1
for measure solutions (Delarue--Lagoutiere--Vauchelet); the W1 distance of n iid samples
to their law on a 2-manifold decays like n^{-1/2} (up to a sqrt(log n) factor). The
mesh--particle distance is bounded below by both errors, so each fit flattens once the
other error dominates.

Solver checks (each a measured order against the expected one, with a band that the
first-order scheme meets at every size; the measured orders are in the study's report):

* W1 between mesh levels (each level against the finest, t = T): order in h in
  [0.8, 1.3] (expected 1);
* L1 between mesh levels: order in h in [0.7, 1.3] for the smooth repulsive case and
  [0.5, 1.3] for the concentrating clustering case, where the L1 order of upwind drops
  below 1;
* mesh-to-token W1 at t = T (finest level against n tokens): order in n in
  [-0.7, -0.25] (Monte-Carlo -1/2 up to sqrt(log n)). This is the check that sees a wrong
  mesh solution: the self-convergence rates above are blind to a consistently wrong scheme
  (every level converges to the same wrong limit), but then the distance to the tokens
  stalls at the discrepancy and its order in n drops towards 0;
* mass conservation on every level: max |M(t) - 1| <= 1e-10.

Finite distances are a precondition (the study aborts with
:class:`spherepde.studies.common.StudyPreconditionError`). The mesh-to-token W1 order in
h and the sampling order at t = 0 are reported, not checked: the first flattens at the
tokens' own sampling distance, the second tests the sampling, not a solver.

Sizes (``SIZES``): quick: levels 4, 8, 12, n up to 4000 (exact W1 problems of up to
2880 cells x 4000 tokens); full: levels up to 24, n up to 16000.
"""

from __future__ import annotations

import math
import time

import numpy as np

from spherepde.model.statistics import fit_rate
from spherepde.studies import common as _v
from spherepde.studies.common import checks_line, figure_path, markdown_table, require, require_finite, solver_check, study_params
from spherepde.studies.common import format_number as _fmt

NAME = "mesh_vs_particles"
TITLE = "Mesh solver versus particle solver: convergence in mesh size h and token count n"

SIZES = {
    "smoke": {
        "levels": (3, 6, 9),
        "n_list": (200, 800),
        "seeds_small": 2,
        "T": {"repulsive": 0.5, "clustering": 0.5},
        "weights_dt": 0.05,
        "n_records": 2,
        "max_exact": 5_000_000,
        "sliced_projections": 50,
        "cases": ("repulsive", "clustering"),
    },
    "quick": {
        "levels": (4, 8, 12),
        "n_list": (250, 1000, 4000),
        "seeds_small": 4,
        "T": {"repulsive": 1.0, "clustering": 1.5},
        "weights_dt": 0.05,
        "n_records": 3,
        "max_exact": 25_000_000,
        "sliced_projections": 100,
        "cases": ("repulsive", "clustering"),
    },
    "full": {
        "levels": (4, 8, 16, 24),
        "n_list": (250, 1000, 4000, 16000),
        "n_ref": 4000,  # h-study reference: exact W1 on 11520 cells x 4000 tokens
        "seeds_small": 8,
        "T": {"repulsive": 1.0, "clustering": 1.5},
        "weights_dt": 0.05,
        "n_records": 5,
        "max_exact": 50_000_000,
        "sliced_projections": 200,
        "cases": ("repulsive", "clustering"),
    },
}

#: What each size parameter may be (``spherepde validate --set`` checks overrides against it before anything runs).
RANGES = {
    "levels": _v.LEVEL,
    "n_list": _v.TOKENS,
    "n_ref": _v.TOKENS,
    "seeds_small": _v.SEEDS,
    "T": _v.TIME,
    "weights_dt": _v.STEP,
    "n_records": _v.COUNT,
    "max_exact": _v.Range(int, 1, 10**11, memory=lambda m: 24.0 * m, what="the largest exact-W1 cost matrix (cells x tokens)"),
    "sliced_projections": _v.COUNT,
    "cases": _v.Range(None, choices=("repulsive", "clustering")),
}

#: Case definitions: weight path and initial law.
CASES = {
    "repulsive": {
        "description": "s = -1 (paper's sign), H = 2 frozen positive-definite heads D_h = I + (G + G^T)/4 (seed 3), 4 vMF bumps kappa = 6",
        "sign": -1.0,
        "H": 2,
        "init": "I+(G+GT)/4",
        "beta": 1.0,
        "seed": 3,
        "means": [[1, 0, 0], [0, 1, 0], [0, 0, 1], [-1, -1, -1]],
        "kappa": 6.0,
        "l1_self_band": (0.7, 1.3, 1.0),  # smooth solution: upwind is first order in L1
    },
    "clustering": {
        "description": "s = +1 (ascent), H = 1 frozen head D = 4 I, 4 vMF bumps kappa = 3",
        "sign": 1.0,
        "H": 1,
        "init": "beta",
        "beta": 4.0,
        "seed": 3,
        "means": [[1, 0, 0], [0, 1, 0], [0, 0, 1], [-1, -1, -1]],
        "kappa": 3.0,
        "l1_self_band": (0.5, 1.3, "<= 1 (concentrating)"),  # the L1 order of upwind drops as the clusters sharpen
    },
}

#: W1 between mesh levels: order in h (expected 1).
W1_SELF_BAND = (0.8, 1.3, 1.0)
#: Mesh-to-token W1 at t = T: order in n (Monte-Carlo: -1/2).
N_RATE_T_BAND = (-0.7, -0.25, -0.5)
MASS_TOL = 1e-10


# ----------------------------------------------------------------------------- helpers
def _seeds_for(n: int, n_list, seeds_small: int) -> int:
    """Replicas per token count: ~ sqrt(n_max / n), capped by ``seeds_small``, 1 for n_max."""
    n_max = max(n_list)
    return int(max(1, min(seeds_small, round(math.sqrt(n_max / n)))))


def _initial_matrices(c) -> np.ndarray | str:
    if c["init"] == "I+(G+GT)/4":
        rng = np.random.default_rng(c["seed"])
        G = rng.standard_normal((c["H"], 3, 3))
        D0 = np.eye(3)[None] + 0.25 * (G + np.swapaxes(G, 1, 2))
        assert np.all(np.linalg.eigvalsh(D0) > 0)
        return D0
    return c["init"]


def _l1_between_meshes(mesh_a, rho_a, mesh_b, rho_b, qmesh) -> float:
    """L1 distance of two piecewise-constant densities on different meshes, by the
    midpoint rule on the cells of a much finer quadrature mesh ``qmesh``."""
    from spherepde.geometry.densities import locate_cells

    ca = locate_cells(mesh_a, qmesh.centers)
    cb = locate_cells(mesh_b, qmesh.centers)
    return float(np.sum(np.abs(rho_a[ca] - rho_b[cb]) * qmesh.areas))


def _w1_between_meshes(mesh_a, rho_a, mesh_b, rho_b) -> float:
    """Exact W1 (geodesic cost) between two mesh measures (cell masses at cell centres)."""
    import ot

    a = rho_a * mesh_a.areas
    b = rho_b * mesh_b.areas
    ka, kb = a > 0, b > 0
    C = np.arccos(np.clip(mesh_a.centers[ka] @ mesh_b.centers[kb].T, -1.0, 1.0))
    return float(ot.emd2(a[ka] / a[ka].sum(), b[kb] / b[kb].sum(), C, numItermax=10_000_000))


def _run_mesh(mesh, rho0, path, times):
    from spherepde.solvers.mesh import MeshSolver
    from spherepde.solvers.protocol import integrate

    ms = MeshSolver(mesh, rho0, path, order=1, integrator="euler", cfl=0.5)
    tr = integrate(ms, times, snapshots=True)
    return [s["rho"] for s in tr.snapshots], tr.rows, ms.step_count


def _run_particles(X0, path, times):
    from spherepde.solvers.particles import ParticleSolver
    from spherepde.solvers.protocol import integrate

    ps = ParticleSolver(X0, path, integrator="heun")
    tr = integrate(ps, times, snapshots=True)
    return [s["X"] for s in tr.snapshots], tr.rows


def _case(case: str, p: dict, log) -> dict:
    """One case: mesh runs on every level and particle runs for every n on one frozen weight path, then the
    h-study, the n-study and the curves for the plots."""
    from spherepde.geometry.meshfiles import icosphere
    from spherepde.model.weights import FrozenProcess, generate_weight_path

    c = CASES[case]
    T = float(p["T"][case])
    wdt = float(p["weights_dt"])
    path = generate_weight_path(
        FrozenProcess(), H=c["H"], d=3, T=T, dt=wdt, seed=c["seed"], init=_initial_matrices(c), beta=c["beta"], sign=c["sign"]
    )
    K = path.K
    idx = np.unique(np.round(np.linspace(0, K, int(p["n_records"]))).astype(int))
    times = [float(k * wdt) for k in idx]
    means = np.asarray(c["means"], float)
    kappas = np.full(len(means), c["kappa"])
    levels = list(p["levels"])
    n_list = list(p["n_list"])
    out = {"description": c["description"], "T": T, "times": times, "weights_dt": wdt, "H": c["H"], "sign": c["sign"]}
    meshes, mesh_runs, mesh_wall = _mesh_runs(case, levels, means, kappas, path, times, log)
    part_runs, part_wall = _particle_runs(case, n_list, int(p["seeds_small"]), means, kappas, path, times, log)
    kappa_s = 1.0 / (2.0 * icosphere(levels[-1]).h) ** 2  # one kernel for every level
    metrics = _Metrics(int(p["max_exact"]), int(p["sliced_projections"]), kappa_s)
    nt = len(times)
    out["h_study"] = _h_study(case, p, nt, meshes, mesh_runs, mesh_wall, part_runs, metrics, log)
    out["n_study"] = _n_study(case, p, nt, meshes, mesh_runs, part_runs, part_wall, metrics, log)
    out["curves"] = _curves(mesh_runs, part_runs, levels, n_list)
    return out


def _mesh_runs(case: str, levels, means, kappas, path, times, log):
    """The mesh solver from the vMF mixture on each icosphere level: ``meshes``, ``runs`` {L: (rhos, rows, steps)}, wall times."""
    from spherepde.geometry import densities
    from spherepde.geometry.meshfiles import icosphere

    meshes, mesh_runs, mesh_wall = {}, {}, {}
    for L in levels:
        t0 = time.perf_counter()
        mesh = icosphere(L)
        rho0 = densities.vmf_mixture(mesh, means, kappas)
        rhos, rows, steps = _run_mesh(mesh, rho0, path, times)
        meshes[L] = mesh
        mesh_runs[L] = (rhos, rows, steps)
        mesh_wall[L] = time.perf_counter() - t0
        log(f"[{case}] mesh level {L} ({mesh.n_cells} cells): {steps} steps, {mesh_wall[L]:.1f} s")
    return meshes, mesh_runs, mesh_wall


def _particle_runs(case: str, n_list, seeds_small: int, means, kappas, path, times, log):
    """The particle solver from iid vMF-mixture tokens for each n (several seeds for small n):
    ``runs`` {n: [(X, rows) per seed]}, wall times."""
    from spherepde.solvers.particles import initial_tokens

    part_runs, part_wall = {}, {}
    for n in n_list:
        reps = _seeds_for(n, n_list, seeds_small)
        t0 = time.perf_counter()
        part_runs[n] = []
        for r in range(reps):
            X0 = initial_tokens("vmf", n, seed=1000 * r + n, means=means, kappas=kappas)
            part_runs[n].append(_run_particles(X0, path, times))
        part_wall[n] = time.perf_counter() - t0
        log(f"[{case}] particles n = {n} x {reps} seed(s): {part_wall[n]:.1f} s")
    return part_runs, part_wall


_KEYS = ("w1", "w1_sliced", "l1_hist", "l1_smooth", "dE", "dG2")


class _Metrics:
    """Mesh-to-token distances at one time (the keys of ``_KEYS``), cached by the arrays compared.

    ``max_exact``: exact W1 only when (cells with mass) x tokens is at most this; ``nproj``: projections of the
    sliced W1; ``kappa_s``: the vMF kernel that smooths both measures for "l1_smooth"."""

    def __init__(self, max_exact: int, nproj: int, kappa_s: float):
        self.max_exact, self.nproj, self.kappa_s = max_exact, nproj, kappa_s
        self.cache = {}

    def __call__(self, mesh, rho, row, X, prow, *, sliced: bool) -> dict:
        key = (id(rho), id(X), sliced)
        if key not in self.cache:
            self.cache[key] = self._compute(mesh, rho, row, X, prow, sliced=sliced)
        return self.cache[key]

    def _compute(self, mesh, rho, row, X, prow, *, sliced: bool) -> dict:
        from spherepde.solvers.distances import l1_to_particles, particle_density, wasserstein_sphere

        kappa_s = self.kappa_s
        ncell = int(np.sum(rho > 0))
        w_exact = wasserstein_sphere(mesh, rho, X, method="exact") if ncell * X.shape[0] <= self.max_exact else float("nan")
        w_sl = wasserstein_sphere(mesh, rho, X, method="sliced", n_projections=self.nproj) if sliced else float("nan")
        return {
            "w1": w_exact,
            "w1_sliced": w_sl,
            "l1_hist": l1_to_particles(mesh, rho, X),
            # both measures smoothed by the same vMF kernel: no smoothing bias
            "l1_smooth": float(np.sum(np.abs(particle_density(mesh, mesh.centers, rho * mesh.areas, kappa=kappa_s) - particle_density(mesh, X, kappa=kappa_s)) * mesh.areas)),
            "dE": abs(row["energy"] - prow["energy"]),
            "dG2": abs(row["G2"] - prow["G2"]),
        }


def _h_study(case: str, p: dict, nt: int, meshes, mesh_runs, mesh_wall, part_runs, metrics: _Metrics, log) -> dict:
    """Every level against the n_ref (seed 0) particle run and against the finest level, at the ``nt`` record
    times; rates in h."""
    from spherepde.geometry.meshfiles import icosphere

    levels, n_list = list(p["levels"]), list(p["n_list"])
    n_ref = int(p.get("n_ref") or max(n_list))
    if n_ref not in part_runs:
        raise ValueError(f"n_ref = {n_ref} must be one of n_list = {n_list}")
    Xref, prows_ref = part_runs[n_ref][0]
    hs = {k: [] for k in _KEYS}
    hs["l1_self"] = []
    hs["w1_self"] = []
    tm0 = time.perf_counter()
    Lf = levels[-1]
    qmesh = icosphere(int(p.get("quadrature_level", 4 * Lf)))
    for L in levels:
        rhos, rows, _ = mesh_runs[L]
        per = [metrics(meshes[L], rhos[i], rows[i], Xref[i], prows_ref[i], sliced=False) for i in range(nt)]
        for k in _KEYS:
            hs[k].append([m[k] for m in per])
        if L != Lf:
            hs["l1_self"].append([_l1_between_meshes(meshes[L], rhos[i], meshes[Lf], mesh_runs[Lf][0][i], qmesh) for i in range(nt)])
            hs["w1_self"].append([_w1_between_meshes(meshes[L], rhos[i], meshes[Lf], mesh_runs[Lf][0][i]) for i in range(nt)])
    log(f"[{case}] h-study distances: {time.perf_counter() - tm0:.1f} s")
    h = [float(meshes[L].h) for L in levels]
    hs.update(levels=levels, h=h, n_ref=n_ref, cells=[meshes[L].n_cells for L in levels],
              steps=[mesh_runs[L][2] for L in levels], wall_s=[mesh_wall[L] for L in levels])
    hk = ("w1", "l1_hist", "l1_smooth", "dE", "dG2")
    hs["rates_T"] = {k: fit_rate(h, [v[-1] for v in hs[k]]) for k in hk}
    hs["rates_0"] = {k: fit_rate(h, [v[0] for v in hs[k]]) for k in hk}
    for k in ("l1_self", "w1_self"):
        hs["rates_T"][k] = fit_rate(h[:-1], [v[-1] for v in hs[k]])
        hs["rates_0"][k] = fit_rate(h[:-1], [v[0] for v in hs[k]])
    # energy and G^2: differences at one time can cross zero, so fit their sup over the record times;
    # "self": against the finest level (no sampling noise)
    rows_f = mesh_runs[Lf][1]
    for q in ("energy", "G2"):
        hs[f"d{'E' if q == 'energy' else 'G2'}_self"] = [
            [abs(mesh_runs[L][1][i][q] - rows_f[i][q]) for i in range(nt)] for L in levels[:-1]
        ]
    hs["rates_sup"] = {k: fit_rate(h, [max(v) for v in hs[k]]) for k in ("dE", "dG2")}
    for k in ("dE_self", "dG2_self"):
        hs["rates_sup"][k] = fit_rate(h[:-1], [max(v) for v in hs[k]])
    return hs


def _n_study(case: str, p: dict, nt: int, meshes, mesh_runs, part_runs, part_wall, metrics: _Metrics, log) -> dict:
    """Every n (distances averaged over its seeds) against the finest level, at the ``nt`` record times; rates in n."""
    from spherepde.geometry.meshfiles import icosphere

    levels, n_list = list(p["levels"]), list(p["n_list"])
    Lf = levels[-1]
    # sliced W only where the exact problem is too large somewhere in the n-study
    # (then for every n, so that one fit uses one metric)
    use_sliced = max(n_list) * icosphere(Lf).n_cells > metrics.max_exact
    tm0 = time.perf_counter()
    rhos_f, rows_f, _ = mesh_runs[Lf]
    ns = {k: [] for k in _KEYS}
    ns["spread_w1"] = []
    for n in n_list:
        per_seed = []
        for Xs, prows in part_runs[n]:
            per_seed.append([
                metrics(meshes[Lf], rhos_f[i], rows_f[i], Xs[i], prows[i], sliced=use_sliced and i in (0, nt - 1))
                for i in range(nt)
            ])
        for k in _KEYS:
            ns[k].append([float(np.mean([ps[i][k] for ps in per_seed])) for i in range(nt)])
        ns["spread_w1"].append(float(np.std([ps[-1]["w1"] for ps in per_seed])) if len(per_seed) > 1 else 0.0)
    log(f"[{case}] n-study distances: {time.perf_counter() - tm0:.1f} s")
    ns.update(kappa_smooth=metrics.kappa_s, level=Lf, h=float(meshes[Lf].h), n=n_list, seeds=[len(part_runs[n]) for n in n_list],
              wall_s=[part_wall[n] for n in n_list])
    ns["rates_T"] = {k: fit_rate(n_list, [v[-1] for v in ns[k]]) for k in _KEYS}
    ns["rates_0"] = {k: fit_rate(n_list, [v[0] for v in ns[k]]) for k in _KEYS}
    ns["rates_sup"] = {k: fit_rate(n_list, [max(v) for v in ns[k]]) for k in ("dE", "dG2")}
    return ns


def _curves(mesh_runs, part_runs, levels, n_list) -> dict:
    """G^2, energy, rho_max and the mass error per mesh level, G^2 and energy per token count (seed 0), for the plots."""
    return {
        "mesh_G2": {str(L): [r["G2"] for r in mesh_runs[L][1]] for L in levels},
        "mesh_energy": {str(L): [r["energy"] for r in mesh_runs[L][1]] for L in levels},
        "mesh_rho_max": {str(L): [r["rho_max"] for r in mesh_runs[L][1]] for L in levels},
        "mesh_mass_err": {str(L): max(abs(r["mass"] - 1.0) for r in mesh_runs[L][1]) for L in levels},
        "particles_G2": {str(n): [r["G2"] for r in part_runs[n][0][1]] for n in n_list},
        "particles_energy": {str(n): [r["energy"] for r in part_runs[n][0][1]] for n in n_list},
    }


# -------------------------------------------------------------------------------- run
def run(size: str = "quick", **overrides) -> dict:
    """Run the study at ``size`` (smoke/quick/full); keyword overrides replace parameters."""
    p, log = study_params(SIZES, size, overrides)
    t0 = time.perf_counter()
    cases = {c: _case(c, p, log) for c in p["cases"]}
    wall = time.perf_counter() - t0
    res = {"name": NAME, "title": TITLE, "size": size, "params": p, "cases": cases, "wall_s": wall}
    _preconditions(cases, p)
    res["checks"] = _checks(cases)
    res["summary"] = _summary(res)
    return res


def _preconditions(cases, p) -> None:
    require(len(p["levels"]) >= 3, f"mesh_vs_particles: the h-study needs at least 3 levels (self-convergence against the finest), got {list(p['levels'])}")
    require(len(p["n_list"]) >= 2, f"mesh_vs_particles: the n-study needs at least 2 token counts, got {list(p['n_list'])}")
    for c, r in cases.items():
        hs, ns = r["h_study"], r["n_study"]
        require_finite(f"mesh_vs_particles [{c}]: mesh-to-token W1 of the h-study", hs["w1"])
        require_finite(f"mesh_vs_particles [{c}]: distances between mesh levels", hs["w1_self"], hs["l1_self"])
        require_finite(f"mesh_vs_particles [{c}]: L1 distances of the n-study", ns["l1_hist"], ns["l1_smooth"])
        require_finite(f"mesh_vs_particles [{c}]: mesh masses", list(r["curves"]["mesh_mass_err"].values()))


def _n_key(ns) -> str:
    """The metric of the n-study fit: exact W1 where every n has it, else sliced W (one metric per fit)."""
    return "w1" if np.all(np.isfinite(np.asarray([v[-1] for v in ns["w1"]], float))) else "w1_sliced"


def _checks(cases) -> dict:
    ch = {}
    for c, r in cases.items():
        hs, ns = r["h_study"], r["n_study"]
        ch[f"{c}: mass conservation, max |M(t) - 1| over levels and times"] = solver_check(
            max(r["curves"]["mesh_mass_err"].values()), hi=MASS_TOL, expected=0.0, tolerance=f"<= {MASS_TOL:g}"
        )
        lo, hi, ex = W1_SELF_BAND
        ch[f"{c}: W1 between mesh levels at T, order in h"] = solver_check(hs["rates_T"]["w1_self"], lo=lo, hi=hi, expected=ex)
        lo, hi, ex = CASES[c]["l1_self_band"]
        ch[f"{c}: L1 between mesh levels at T, order in h"] = solver_check(hs["rates_T"]["l1_self"], lo=lo, hi=hi, expected=ex)
        key = _n_key(ns)
        lo, hi, ex = N_RATE_T_BAND
        ch[f"{c}: mesh-to-token {'W1' if key == 'w1' else 'sliced W'} at T (finest level), order in n"] = solver_check(
            ns["rates_T"][key], lo=lo, hi=hi, expected=ex
        )
    return ch


def _summary(res) -> str:
    lines = [
        (
            f"Mesh (first-order upwind, forward Euler, CFL 0.5) versus particles (Heun) on one frozen weight path "
            f"(grid step {next(iter(res['cases'].values()))['weights_dt']}); tokens are iid samples of the continuous "
            "initial vMF mixture whose cell averages are the mesh's rho_0. W1 is exact (POT, geodesic cost) unless marked sliced."
        )
    ]
    for c, r in res["cases"].items():
        hs, ns = r["h_study"], r["n_study"]
        rows = []
        for i, L in enumerate(hs["levels"]):
            rows.append([L, hs["h"][i], hs["w1"][i][0], hs["w1"][i][-1], hs["l1_hist"][i][-1], hs["l1_smooth"][i][-1],
                         hs["l1_self"][i][-1] if i < len(hs["l1_self"]) else float("nan"),
                         hs["w1_self"][i][-1] if i < len(hs["w1_self"]) else float("nan"),
                         hs["dE"][i][-1], hs["dG2"][i][-1]])
        rt, r0 = hs["rates_T"], hs["rates_0"]
        lines.append(f"\n**{c}** ({r['description']}, T = {r['T']}).")
        lines.append(f"h-study against n = {hs['n_ref']} tokens (distances at t = 0 and t = T):\n")
        lines.append(markdown_table(["level", "h", "W1(0)", "W1(T)", "L1 hist(T)", "L1 smooth(T)", "L1 self(T)", "W1 self(T)", "|dE|(T)", "|dG2|(T)"], rows))
        lines.append(
            f"\nRates in h at t = T: W1 {_fmt(rt['w1'])}, L1-hist {_fmt(rt['l1_hist'])}, L1-smooth {_fmt(rt['l1_smooth'])}, L1-self {_fmt(rt['l1_self'])}, W1-self {_fmt(rt['w1_self'])}, "
            f"|dE| {_fmt(rt['dE'])}, |dG2| {_fmt(rt['dG2'])} (at t = 0: W1 {_fmt(r0['w1'])}, L1-self {_fmt(r0['l1_self'])}, W1-self {_fmt(r0['w1_self'])}). 'L1/W1 self': each level against the finest level (no sampling noise; the finest level's own error is ignored, which biases these rates upward)."
        )
        rows = []
        for i, n in enumerate(ns["n"]):
            rows.append([n, ns["seeds"][i], ns["w1"][i][0], ns["w1"][i][-1], ns["w1_sliced"][i][-1], ns["l1_hist"][i][-1], ns["l1_smooth"][i][-1], ns["dE"][i][-1], ns["dG2"][i][-1]])
        lines.append(f"\nn-study against level {ns['level']} (h = {ns['h']:.3g}; distances averaged over seeds):\n")
        lines.append(markdown_table(["n", "seeds", "W1(0)", "W1(T)", "SW(T)", "L1 hist(T)", "L1 smooth(T)", "|dE|(T)", "|dG2|(T)"], rows))
        rt, r0 = ns["rates_T"], ns["rates_0"]
        lines.append(
            f"\nRates in n at t = T: W1 {_fmt(rt['w1'])}, sliced {_fmt(rt['w1_sliced'])}, L1-hist {_fmt(rt['l1_hist'])}, L1-smooth {_fmt(rt['l1_smooth'])}, "
            f"|dE| {_fmt(rt['dE'])}, |dG2| {_fmt(rt['dG2'])}; at t = 0: W1 {_fmt(r0['w1'])} (Monte-Carlo theory: -1/2, "
            "or a little flatter with the sqrt(log n) factor on a 2-manifold)."
        )
        lines.append(_interpret(c, r))
    lines.append(checks_line(res["checks"]))
    return "\n".join(lines)


def _interpret(case, r) -> str:
    hs, ns = r["h_study"], r["n_study"]
    rt, nr = hs["rates_T"], ns["rates_T"]
    parts = []
    w, ws, l1s = rt["w1"], rt["w1_self"], rt["l1_self"]
    floor = hs["w1"][-1][0]
    parts.append(
        f"in h, W1 to the n = {hs['n_ref']} tokens decreases at rate {_fmt(w, '{:.2f}')}, flattened by the tokens' own sampling "
        f"distance (W1 of the finest level at t = 0 is {floor:.3g}); without sampling noise (against the finest level) W1 "
        f"converges at {_fmt(ws, '{:.2f}')} and L1 at {_fmt(l1s, '{:.2f}')} (theory: L1 ~ h for smooth densities, W1 >= h^(1/2) "
        "once the solution concentrates)"
    )
    parts.append(
        f"in n, W1 decays like n^{_fmt(ns['rates_0']['w1'], '{:.2f}')} at t = 0 and n^{_fmt(nr['w1'], '{:.2f}')} at t = T "
        f"(Monte-Carlo: n^-1/2 up to sqrt(log n); the finest mesh's own error is a floor), the bias-free smoothed L1 like "
        f"n^{_fmt(nr['l1_smooth'], '{:.2f}')}, while the L1 to the kernel histogram (rate {_fmt(nr['l1_hist'], '{:.2f}')}) is "
        "dominated by the kernel's smoothing bias and hardly moves"
    )
    hsup, nsup = hs["rates_sup"], ns["rates_sup"]
    parts.append(
        f"energy and G^2 differences (sup over the record times; one time can hit a zero crossing): against the particles "
        f"|dE| ~ h^{_fmt(hsup['dE'], '{:.2f}')}, |dG2| ~ h^{_fmt(hsup['dG2'], '{:.2f}')} in h and n^{_fmt(nsup['dE'], '{:.2f}')}, "
        f"n^{_fmt(nsup['dG2'], '{:.2f}')} in n; against the finest level |dE| ~ h^{_fmt(hsup['dE_self'], '{:.2f}')}, "
        f"|dG2| ~ h^{_fmt(hsup['dG2_self'], '{:.2f}')} (where the mesh error is below the n = {hs['n_ref']} sampling error "
        "the particle-referenced h-rates are meaningless; where the mesh cannot resolve concentrated clusters the n-rates "
        "stall at the mesh's error)"
    )
    rmax = max(r["curves"]["mesh_rho_max"][str(hs["levels"][-1])])
    parts.append(f"max density on the finest mesh {rmax:.3g}")
    return "Observed: " + "; ".join(parts) + "."


# ------------------------------------------------------------------------------- plot
def plot(results, out_dir) -> list:
    """Figures per case: W1 between mesh and tokens over time, errors at T against the mesh
    size h and against the number of tokens n; G²(t) of every mesh and token run. Axes
    labelled with units, ticks at the studied h and n, legends beside the data."""
    from spherepde.viz.figstyle import data_ticks, finish_figure, legend_outside, subplots

    ERR_LABEL = "error at T\n" + r"($W_1$ in rad; $L^1$, $|\Delta E|$, $|\Delta G^2|$ dimensionless)"
    paths = []
    for c, r in results["cases"].items():
        hs, ns = r["h_study"], r["n_study"]
        t = r["times"]
        fig, axes = subplots(3, 1, figsize=(8.6, 11.5), layout="constrained")
        ax = axes[0]
        for i, L in enumerate(hs["levels"]):
            ax.plot(t, hs["w1"][i], "o-", label=f"level {L} (h = {hs['h'][i]:.3f} rad)")
        ax.set_xlabel("time t (dimensionless)")
        ax.set_ylabel(f"$W_1$(mesh, {hs['n_ref']} tokens) (rad)")
        ax.set_title(f"{c}: $W_1$ between mesh and tokens over time")
        legend_outside(ax, fontsize=8)
        ax = axes[1]
        h = np.asarray(hs["h"])
        for k, lab in (("w1", "$W_1$"), ("l1_hist", "$L^1$ histogram"), ("l1_smooth", "$L^1$ smoothed"), ("dE", r"$|\Delta E|$"), ("dG2", r"$|\Delta G^2|$")):
            y = np.asarray([v[-1] for v in hs[k]], float)
            ax.loglog(h, y, "o-", label=f"{lab} (rate {hs['rates_T'][k]:.2f})")
        if hs["l1_self"]:
            ax.loglog(h[:-1], [v[-1] for v in hs["l1_self"]], "s--", label=f"$L^1$ to the finest mesh (rate {hs['rates_T']['l1_self']:.2f})")
            ax.loglog(h[:-1], [v[-1] for v in hs["w1_self"]], "^--", label=f"$W_1$ to the finest mesh (rate {hs['rates_T']['w1_self']:.2f})")
        ax.loglog(h, 0.3 * h / h[-1] * np.nanmin([v[-1] for v in hs["w1"]]), "k:", label=r"$\propto h$")
        data_ticks(ax, "x", h)
        ax.set_xlabel("h, longest edge of the mesh (rad)")
        ax.set_ylabel(ERR_LABEL)
        ax.set_title(f"{c}: errors at T = {r['T']} against the mesh size")
        legend_outside(ax)
        ax = axes[2]
        n = np.asarray(ns["n"], float)
        for k, lab in (("w1", "$W_1$"), ("w1_sliced", "sliced $W_1$"), ("l1_hist", "$L^1$ histogram"), ("l1_smooth", "$L^1$ smoothed"), ("dE", r"$|\Delta E|$"), ("dG2", r"$|\Delta G^2|$")):
            y = np.asarray([v[-1] for v in ns[k]], float)
            if np.any(np.isfinite(y) & (y > 0)):
                ax.loglog(n, y, "o-", label=f"{lab} (rate {ns['rates_T'][k]:.2f})")
        y0 = np.asarray([v[0] for v in ns["w1"]], float)
        if np.all(np.isfinite(y0)):
            ax.loglog(n, y0, "x--", label=f"$W_1$ at t = 0 (rate {ns['rates_0']['w1']:.2f})")
            ax.loglog(n, y0[0] * (n / n[0]) ** -0.5, "k:", label=r"$\propto n^{-1/2}$")
        data_ticks(ax, "x", n, "{:.0f}")
        ax.set_xlabel("number of tokens n")
        ax.set_ylabel(ERR_LABEL)
        ax.set_title(f"{c}: errors at T against the number of tokens (mesh level {ns['level']})")
        legend_outside(ax)
        finish_figure(fig)
        pth = figure_path(out_dir, f"mesh_vs_particles_{c}.png")
        fig.savefig(pth, dpi=110)
        paths.append(pth)
        # G2 curves
        fig, ax = subplots(figsize=(7.6, 4.2), layout="constrained")
        for L, y in r["curves"]["mesh_G2"].items():
            ax.plot(t, y, "o-", label=f"mesh, level {L}")
        for nn, y in r["curves"]["particles_G2"].items():
            ax.plot(t, y, "x--", label=f"particles, n = {nn}")
        ax.set_xlabel("time t (dimensionless)")
        ax.set_ylabel("dissipation $G^2$ (dimensionless)")
        ax.set_title(f"{c}: $G^2(t)$")
        legend_outside(ax)
        finish_figure(fig)
        pth = figure_path(out_dir, f"mesh_vs_particles_{c}_G2.png")
        fig.savefig(pth, dpi=110)
        paths.append(pth)
    return paths
