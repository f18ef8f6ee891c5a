"""Benchmark: the metastable token run at fixed Heun steps against error-controlled steps (issue 36, part 3).

The shipped example ``metastable-particles`` (400 stratified tokens on five vMF bumps, one frozen head
D = 10 I, T = 1,500) is run in this process with two integrators, alternately, from the same start:

* **fixed**: Heun at the example's weight grid step (weights.dt = 0.01: 150,000 steps), the
  integrator the example shipped with before issue 36;
* **adaptive**: the Bogacki--Shampine 3(2) pair ``rk23`` (:class:`~spherepde.solvers.integrators.EmbeddedPair`)
  at the tolerance ``solver.tol`` of the example (or :data:`DEFAULT_TOL` while the example is fixed-step).

Both land on the example's record times (output.record_dt) as a run does. After every step the
**merge times** are located as in ``validation/metastable-twin/run.py`` (one definition on both
levels, :data:`spherepde.model.clusters.MERGE_ANGLE`): the tokens of each bump form a group (the
stratified start places them bump by bump, :func:`~spherepde.solvers.particles.vmf_counts` of
them), a group's centre is its tokens' normalised mean, two groups merge (and become one) where
the angle between their centres falls below MERGE_ANGLE, located inside the step by interpolating
log(angle) linearly in t (the approach is exponential). Sampling at every step instead of at
snapshots adds no landing times, so the adaptive run takes the steps the example takes.

Reported (JSON-able): steps, rejected attempts and velocity evaluations of each, wall time of each,
the ratios fixed / adaptive of steps, evaluations and wall time, the merge times of each and their
max relative difference, the largest relative difference of the energy over the records, both
runs' final ``edi_exact`` (the energy balance's residual), the tolerance, and ``target_met``: at
full size (T = 1,500) >= 10x fewer steps and every merge within 0.5 % (issue 36); ``quick`` (T =
:data:`QUICK_T`: the first merge, during the bumps' collapse, and a stretch of the plateau) says "n/a".
The runs alternate and each wall time is the minimum over its repeats (``quick``: two of each; full
size: the adaptive run before and after the one fixed run, by far the longest), so a loaded machine
slows both alike as far as it can.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np

__all__ = ["bench_tokens", "GroupMerges", "DEFAULT_TOL", "QUICK_T", "TARGET_STEP_RATIO", "TARGET_MERGE_REL"]

EXAMPLE = "metastable-particles"
#: The adaptive pair's tolerance while the example itself takes fixed steps.
DEFAULT_TOL = 1e-5
#: The quick size's final time (the first merge is near t = 1.7).
QUICK_T = 20.0
#: Issue 36's targets: fixed steps / adaptive steps, and the merge times' max relative difference.
TARGET_STEP_RATIO, TARGET_MERGE_REL = 10.0, 0.005


class GroupMerges:
    """Merge times of token groups (one per bump: ``counts`` tokens each, in order), fed state by state (module docstring)."""

    def __init__(self, counts, t0: float, X0: np.ndarray):
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(int)
        self.groups = [np.arange(offsets[j], offsets[j + 1]) for j in range(len(counts))]
        self.t, self.X = float(t0), np.array(X0)
        self.times: list[float] = []

    @staticmethod
    def _centre(X: np.ndarray) -> np.ndarray:
        c = X.mean(axis=0)
        return c / np.linalg.norm(c)

    @staticmethod
    def _angle(a: np.ndarray, b: np.ndarray) -> float:
        return float(np.arccos(np.clip(a @ b, -1.0, 1.0)))

    def add(self, t: float, X: np.ndarray) -> None:
        """The next state (t, X): every merge between the previous state and this one."""
        from spherepde.model.clusters import MERGE_ANGLE

        while len(self.groups) > 1:
            c1 = [self._centre(X[g]) for g in self.groups]
            ang, i, j = min((self._angle(c1[i], c1[j]), i, j) for i in range(len(c1)) for j in range(i + 1, len(c1)))
            if ang >= MERGE_ANGLE:
                break
            a0 = self._angle(self._centre(self.X[self.groups[i]]), self._centre(self.X[self.groups[j]]))
            tm = self.t + (t - self.t) * math.log(a0 / MERGE_ANGLE) / math.log(a0 / ang) if a0 > MERGE_ANGLE else self.t
            self.times.append(float(tm))
            self.groups = [g for k, g in enumerate(self.groups) if k not in (i, j)] + [np.concatenate([self.groups[i], self.groups[j]])]
        self.t, self.X = float(t), np.array(X)


def _example_file() -> Path:
    from importlib import resources

    return Path(str(resources.files("spherepde.runs.configs") / f"{EXAMPLE}.toml"))


def _config(T: float, integrator: str, tol: float | None):
    from spherepde.runs.config import load_config

    overrides = {"solver.T": T, "solver.integrator": integrator, "output.vtk": False}
    if tol is not None:
        overrides["solver.tol"] = tol
    return load_config(_example_file(), overrides)


def _run(T: float, integrator: str, tol: float | None) -> dict:
    """One run of the example to T with ``integrator``, stepping to each record time; merges after every step."""
    from spherepde.runs.runner import build_solver, build_weight_path
    from spherepde.solvers.particles import vmf_counts

    cfg = _config(T, integrator, tol)
    ps = build_solver(cfg, build_weight_path(cfg))
    calls = [0]
    evaluate = ps._evaluate

    def counted(X, t):
        calls[0] += 1
        return evaluate(X, t)

    ps._evaluate = counted
    merges = GroupMerges(vmf_counts(cfg.initial.n, cfg.initial.weights), ps.t, ps.X)
    n_rec = int(round(T / cfg.output.record_dt))
    energy = []
    t0 = time.perf_counter()
    for r in range(1, n_rec + 1):
        t_r = T if r == n_rec else r * cfg.output.record_dt
        if ps.adaptive:
            while ps.t < t_r - 1e-9 * ps.path.dt:
                ps.step(t_r)
                merges.add(ps.t, ps.X)
        else:
            for _ in range(int(round((t_r - ps.t) / ps.dt))):
                ps.step()
                merges.add(ps.t, ps.X)
        energy.append(ps.record()["energy"])
    wall = time.perf_counter() - t0
    row = ps.record()
    return {"integrator": ps.integrator, "dt": float(ps.dt), "tol": ps.tol if ps.adaptive else None, "steps": int(ps.step_count),
            "rejected": int(ps.rejected), "evaluations": int(calls[0]), "wall_s": wall, "merge_times": merges.times,
            "n_clusters": int(row["n_clusters"]), "edi_exact": float(row["edi_exact"]), "energy": energy}


def bench_tokens(quick: bool) -> dict:
    """The example's fixed-Heun and error-controlled token runs side by side (module docstring); a JSON-able dict."""
    from spherepde.runs.config import load_config

    shipped = load_config(_example_file())
    T = QUICK_T if quick else float(shipped.solver.T)
    tol = float(shipped.solver.tol) if shipped.integrator in ("rk23", "adaptive") else DEFAULT_TOL
    # alternating, wall times the minima over the repeats (the runs are deterministic: the same steps each time);
    # full size: the adaptive run before and after the one fixed run (about 15 min)
    order = ("rk23", "heun", "rk23", "heun") if quick else ("rk23", "heun", "rk23")
    runs: dict[str, dict] = {}
    for integrator in order:
        r = _run(T, integrator, tol if integrator == "rk23" else None)
        if integrator in runs:
            if r["steps"] != runs[integrator]["steps"] or r["merge_times"] != runs[integrator]["merge_times"]:
                raise RuntimeError(f"bench_tokens: two {integrator} runs of the same problem differ ({r['steps']} / {runs[integrator]['steps']} steps)")
            runs[integrator]["wall_s"] = min(runs[integrator]["wall_s"], r["wall_s"])
            runs[integrator]["repeats"] += 1
        else:
            runs[integrator] = {**r, "repeats": 1}
    adaptive, fixed = runs["rk23"], runs["heun"]
    ef, ea = np.asarray(fixed.pop("energy")), np.asarray(adaptive.pop("energy"))
    mf, ma = fixed["merge_times"], adaptive["merge_times"]
    rel = [abs(a - f) / f for a, f in zip(ma, mf)] if len(ma) == len(mf) else []
    merge_rel = max(rel) if rel else (0.0 if len(ma) == len(mf) else math.inf)
    out = {
        "example": EXAMPLE, "T": T, "n": int(shipped.initial.n), "quick": bool(quick), "tol": tol,
        "fixed": fixed, "adaptive": adaptive,
        "step_ratio": fixed["steps"] / adaptive["steps"],
        "evaluation_ratio": fixed["evaluations"] / adaptive["evaluations"],
        "wall_ratio": fixed["wall_s"] / adaptive["wall_s"],
        "merge_max_rel_diff": merge_rel,
        "merge_count_equal": len(ma) == len(mf),
        "energy_max_rel_diff": float(np.max(np.abs(ea - ef) / np.abs(ef))),
        "target": {"step_ratio": TARGET_STEP_RATIO, "merge_max_rel_diff": TARGET_MERGE_REL},
    }
    met = out["step_ratio"] >= TARGET_STEP_RATIO and out["merge_count_equal"] and merge_rel <= TARGET_MERGE_REL
    out["target_met"] = "n/a (quick)" if quick else bool(met)
    return out
