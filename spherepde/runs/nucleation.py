"""Nucleation on the circle, recorded in a run folder: the predicted clusters and the clusters a run ends with.

Bruno, Pasqualotto & Agazzi's prediction (docs/model.md, "Linear growth rates on the circle";
:mod:`spherepde.model.linear`): under one frozen head A = beta I, V = c I (c > 0; a gradient head
D = beta I with s = +1 has c = beta), a near-uniform start on the circle breaks into

    k* = argmax_k gamma_k  clusters, at  theta_j = (2 pi j - arg mu_hat_{k*}(0)) / k*,  j = 0 .. k*-1,

with mu_hat_k(0) = int e^{-ik theta} d mu_0 the start's Fourier coefficient. For a run with
model.d = 2, one head and a constant weight path of that form, :func:`nucleation_summary` reads
the run folder's snapshots and returns the ``"circle_nucleation"`` entry of ``summary.json``:

* the prediction from the first snapshot (t = 0): mu_hat_{k*}(0) = sum_c rho_c h_c e^{-ik theta_c}
  over the cells (node angles theta_c, arc lengths h_c of ``mesh.npz``), or sum_i e^{-ik theta_i} / n
  over the tokens;
* the clusters of the last snapshot (:func:`final_clusters`): the arcs denser than five times the uniform
  density -- the cells of a mesh run, the TOKEN_BINS equal bins of the token histogram of a particle
  run -- linked at chordal distance 0.1 into groups of at least 1 % of the mass (the definition of
  :mod:`spherepde.model.clusters` applied to the dense arcs, as the mesh solver's cluster count does);
* the offsets: for each predicted angle, the arc to the nearest final cluster.

Every number is recomputable from ``snapshots.npz`` and ``mesh.npz`` (docs/guide/results-as-data.md).
"""

from __future__ import annotations

import logging
import math

import numpy as np

from spherepde.geometry.circle import angles, arc_between, unit
from spherepde.model.clusters import weighted_clusters
from spherepde.model.linear import fastest_mode, fourier_coefficient, linear_rate, nucleation_angles

__all__ = ["isotropic_head", "nucleation_summary", "predicted_clusters", "final_clusters", "token_histogram", "describe", "run_entry"]

log = logging.getLogger(__name__)

#: The rates recorded beside k*: gamma_k for k = 1 .. RATES_RECORDED.
RATES_RECORDED = 8
#: A cluster is made of arcs at least this many times denser than the uniform density 1/(2 pi) (as the mesh's dense cells).
DENSE = 5.0
#: Tokens are binned on this many equal arcs before the clusters are found (single linkage of the tokens themselves
#: joins clusters that are still connected by a thin spread of tokens).
TOKEN_BINS = 256


def isotropic_head(path) -> tuple[float, float] | None:
    """(beta, c) when the weight path is one constant head A = beta I, V = c I with beta > 0 and c > 0, else None."""
    if path.H != 1 or not path.is_constant:
        return None
    A, V = path.matrices(0.0)
    A, V = np.asarray(A)[0], np.asarray(V)[0]
    eye = np.eye(A.shape[0])
    beta, c = float(A[0, 0]), float(V[0, 0])
    if not (beta > 0 and c > 0) or not np.allclose(A, beta * eye, rtol=0, atol=1e-12 * beta) or not np.allclose(V, c * eye, rtol=0, atol=1e-12 * c):
        return None
    return beta, c


def predicted_clusters(theta, weights, beta: float, *, attention: str) -> dict:
    """k*, mu_hat_{k*} and the predicted angles for a start of points at angles ``theta`` with masses ``weights``."""
    k = fastest_mode(beta, attention=attention, d=2)
    mu = fourier_coefficient(theta, k, weights)
    return {"k_star": k, "mu_hat": [mu.real, mu.imag], "abs_mu_hat": abs(mu), "angles": nucleation_angles(mu, k).tolist()}


def final_clusters(theta, masses, widths) -> dict:
    """The clusters of a density on the circle given as arcs (centres ``theta``, ``masses``, lengths ``widths``):
    the arcs at least DENSE times denser than uniform (mass / width >= DENSE / (2 pi)), linked as in
    :func:`spherepde.model.clusters.weighted_clusters` (chordal radius 0.1, at least 1 % of the mass);
    their masses and angles (mass-weighted mean directions), by decreasing mass."""
    theta, masses, widths = (np.asarray(a, dtype=np.float64) for a in (theta, masses, widths))
    dense = masses / widths >= DENSE / (2.0 * math.pi)
    _, m, centres = weighted_clusters(unit(theta[dense]), masses[dense])
    return {"n": int(m.size), "masses": m.tolist(), "angles": angles(centres).tolist()}


def token_histogram(X, bins: int = TOKEN_BINS) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bin centres, masses and widths of the histogram of tokens X (n, 2) on ``bins`` equal arcs from angle 0."""
    edges = np.linspace(0.0, 2.0 * math.pi, int(bins) + 1)
    counts = np.histogram(angles(X), bins=edges)[0]
    return 0.5 * (edges[1:] + edges[:-1]), counts / max(len(X), 1), np.diff(edges)


def _offsets(predicted, found) -> list[float]:
    if not len(found):
        return [math.pi] * len(predicted)
    return [float(np.min(arc_between(p, np.asarray(found)))) for p in predicted]


def nucleation_summary(snapshots, beta: float, c: float, *, attention: str) -> dict:
    """The ``"circle_nucleation"`` entry (module docstring) from a run's snapshots
    (:class:`~spherepde.runs.runfolder.RunSnapshots`): the prediction from the first, the clusters of the last."""
    if snapshots.rho is not None and snapshots.mesh is not None:
        g = snapshots.mesh
        theta, weights, source = g.theta, snapshots.rho[0] * g.areas, "cells"
        found = final_clusters(g.theta, snapshots.rho[-1] * g.areas, g.areas)
    else:
        theta, weights, source = angles(np.asarray(snapshots.X[0])), None, "tokens"
        found = final_clusters(*token_histogram(np.asarray(snapshots.X[-1])))
    pred = predicted_clusters(theta, weights, beta, attention=attention)
    off = _offsets(pred["angles"], found["angles"])
    return {
        "beta": beta,
        "c": c,
        "attention": attention,
        "rates": [linear_rate(k, beta, c, attention=attention, d=2) for k in range(1, RATES_RECORDED + 1)],
        "start": source,
        "predicted": pred,
        "t_final": float(snapshots.t[-1]),
        "final": found,
        "offsets": off,
        "max_offset": max(off),
        "matches": bool(found["n"] == pred["k_star"]),
    }


def describe(entry: dict) -> str:
    """One line for run.log."""
    p, f = entry["predicted"], entry["final"]
    pa = ", ".join(f"{a:.3f}" for a in p["angles"])
    fa = ", ".join(f"{a:.3f} ({m:.2f})" for a, m in zip(f["angles"], f["masses"]))
    return (f"circle nucleation: predicted k* = {p['k_star']} clusters at theta = {pa} (from mu_hat_{p['k_star']}(0) of the start); "
            f"at t = {entry['t_final']:g}: {f['n']} cluster(s) at theta (mass) = {fa or 'none'}; largest offset {entry['max_offset']:.3g} rad")


def run_entry(folder, cfg, path) -> dict:
    """``{"circle_nucleation": ...}`` for a finished mesh or particle run on the circle with one frozen isotropic
    head (:func:`isotropic_head`), else {}; the runner adds it to summary.json, and :func:`describe` logs it (run.log)."""
    if cfg.model.d != 2 or cfg.run.solver not in ("mesh", "particles"):
        return {}
    head = isotropic_head(path)
    if head is None:
        return {}
    from spherepde.runs.runfolder import load_snapshots

    entry = nucleation_summary(load_snapshots(folder), *head, attention=cfg.model.attention)
    log.info("%s", describe(entry))
    return {"circle_nucleation": entry}
