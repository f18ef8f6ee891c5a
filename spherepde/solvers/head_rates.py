"""The mesh solver's head fields and energy rates at the cells: which route computes them.

* ``synthesis`` (:func:`spherepde.attention.synthesis.cell_rates`): log Z_h at every cell synthesised from a Gauss grid
  (same error statement as the expansion), the moments only at the grid (M_h and the Ito term by grid quadratures, the
  nodal velocity of the nodal G^2 as one head-summed field). Softmax gradient heads on S^2 where the summation mode tries the fast sums, at
  ``summation_tol`` >= :data:`spherepde.attention.synthesis.TOL_MIN` and enough cells for the grid; else
* the per-cell moments (:func:`spherepde.solvers.fv.cell_fields`) into the fused kernel
  (:func:`spherepde.model.fused.fused_rates`), or the NumPy route (``MeshSolver._numpy_rates``, the circle).

Both give the same quantities (docs/model.md §4.8); tests/attention/test_synthesis.py compares them.
"""

from __future__ import annotations

from spherepde.attention import SUMMATION_MODES, synthesis
from spherepde.model.fused import fused_rates
from spherepde.solvers.fv import cell_fields

__all__ = ["cell_rates"]


def cell_rates(ms, masses, A, V, t: float, sigma: float):
    """(logZ (nc, H), rates dict of :func:`~spherepde.model.fused.fused_rates`) of the mesh solver ``ms`` at the cell
    masses ``masses`` and the head matrices A, V at time t (module docstring)."""
    g = ms.geom
    tol_m = ms.summation_tol if ms.diagnostics_tol is None else max(ms.diagnostics_tol, ms.summation_tol)  # None: summation_tol
    nc, H = g.nodes.shape[0], A.shape[0]
    if (ms._degree_rule == "synthesis" and ms.normalised and g.d == 3 and not ms._numpy_rates
            and SUMMATION_MODES.get(ms.summation).tries(nc, nc, H, 3)):  # where the summation mode tries the fast sums
        out = synthesis.cell_rates(g.nodes, masses, A, V, ms.path.drift_at(t), sigma, tol=ms.summation_tol, tol_m=tol_m)
        if out is not None:
            return out
    rule = "adaptive" if ms._degree_rule == "synthesis" else ms._degree_rule
    logZ, Ybar, Qbar = cell_fields(g, masses, A, want_q=sigma > 0, summation=ms.summation, tol=ms.summation_tol,
                                   tol_moments=ms.diagnostics_tol, degree_rule=rule, moments_by_mass=ms._moments_by_mass)
    if ms._numpy_rates or g.d != 3:  # the NumPy route (reference of the fused kernel, which is d = 3 only; the circle)
        return logZ, ms._numpy_route(masses, logZ, Ybar, Qbar, A, V, t)
    return logZ, fused_rates(g.nodes, masses, logZ, Ybar, Qbar, V, ms.path.drift_at(t), sigma, normalised=ms.normalised)
