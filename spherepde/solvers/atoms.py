"""Point masses of the mesh solver: collapsed clusters carried as weighted Dirac masses (docs/model.md §4.6).

The mesh solver with ``atoms=True`` evolves the measure rho dsigma + sum_k m_k delta_{y_k}.
:class:`PointMasses` owns the point masses (positions (k, 3), masses (k,)), their rules and
their merge events:

* **collapse / absorb / merge** (:meth:`PointMasses.collapse`) after every step;
* **evaluate** (:meth:`PointMasses.evaluate`): cells and point masses are sources and targets
  of the same attention sums; a point mass moves with the token velocity
  v(y_k) = (1/H) sum_h P_y V_h Y_h/Z_h (unnormalised attention: without / Z_h), computed by the
  tokens' code (:func:`spherepde.model.velocity.velocity_from_fields`);
* **move** with the stepper that carries them (:meth:`predict`, :meth:`correct`, :meth:`error`:
  Euler predictor, Heun corrector and the local error of the positions);
* **deposit** (:meth:`PointMasses.deposit`): each point mass drawn in the cell whose node is nearest.

:meth:`PointMasses.check_options` is the one place their option rules are written (the
solver and the config both call it).
"""

from __future__ import annotations

import logging
import math

import numpy as np

from spherepde._numba import njit
from spherepde.attention import attention_moments
from spherepde.attention.sums import auto_considers_fast
from spherepde.geometry.protocol import local_maxima
from spherepde.model.clusters import MERGE_ANGLE, MIN_CLUSTER_MASS
from spherepde.model.fused import fused_rates
from spherepde.model.velocity import DEFAULT_ATTENTION, HeadFields, is_normalised, project, velocity_from_fields
from spherepde.solvers.errors import positive
from spherepde.solvers.fv import face_values, fv_rhs, potential_edge_velocity, with_scheme_g2
from spherepde.solvers.implicit import W_MAX
from spherepde.solvers.integrators import STEPPERS, OptionError, Stepper

__all__ = ["DENSE_FLOOR", "SKIP_SHARE", "UNIT_TOL", "PointMasses", "check_point_masses", "initial_point_masses"]

log = logging.getLogger(__name__)

#: Cells denser than this (5x the uniform density) count as concentrated mass (collapse candidates, cluster count).
DENSE_FLOOR = 5.0 / (4.0 * math.pi)


def dense_floor(d: int) -> float:
    """Five times the uniform density on S^{d-1}: :data:`DENSE_FLOOR` on S^2, 5/(2 pi) on the circle."""
    return DENSE_FLOOR if d == 3 else 5.0 / (2.0 * math.pi)


#: A collapse takes a disk about a dense local maximum only when the disk's outer band holds at most this share of its mass
#: (a disk cut through a cluster: 0.85 measured in metastable-mesh at order 2; whole clusters 0.13-0.23).
EDGE_SHARE = 0.5


#: The cells' sums at the cells are skipped when twice the cells' mass is at most this share of the step's tolerance
#: (:meth:`PointMasses._sums`; docs/model.md §4.10).
SKIP_SHARE = 0.1

#: The cells skipped at an evaluation (:meth:`PointMasses._skipped`) fill this share of the skip's part of the tolerance,
#: SKIP_SHARE * tol; the kept sums' cells are reused while the rest stays within SKIP_KEEP of it.
SKIP_FILL = 0.4
SKIP_KEEP = 0.5

#: At most this many changed cells update the kept cell sums directly (:meth:`PointMasses._cell_sums`) instead of a full sum.
UPDATE_CELLS = 64


def _direct_few(X, Y, w, A, want_q: bool):
    """(log Z_h, Y_h/Z_h, Q_h/Z_h or None) at targets X (m, d) over sources Y (k, d) with weights w > 0 (k,),
    summed directly; over a few sources (point masses, k <= 8) by :func:`_few_kernel` (one pass over the targets,
    log-sum-exp of the exponents x_i^T A_h y_j + log w_j), which costs less than a kernel made for many sources; else by the
    direct kernels of :func:`~spherepde.attention.attention_moments`."""
    k = Y.shape[0]
    if k > 8:
        return attention_moments(X, Y, w, A, want_q=want_q, log=True, summation="direct")
    m, H, d = X.shape[0], A.shape[0], X.shape[1]
    B = np.ascontiguousarray((A @ np.ascontiguousarray(Y, dtype=np.float64).T).transpose(0, 2, 1))  # B[h, j] = A_h y_j
    logZ = np.empty((m, H))
    Ybar = np.empty((m, H, d))
    Qbar = np.empty((m, H) if want_q else (0, 0))
    _few_kernel(np.ascontiguousarray(X, dtype=np.float64), np.ascontiguousarray(Y, dtype=np.float64), np.log(np.asarray(w, dtype=np.float64)),
                B, bool(want_q), logZ, Ybar, Qbar)
    return logZ, Ybar, (Qbar if want_q else None)


@njit
def _few_kernel(X, Y, logw, B, want_q, logZ, Ybar, Qbar):  # pragma: no cover - compiled
    """The sums of :func:`_direct_few` over k <= 8 sources: s_j = x^T B[h, j] + log w_j, c = max_j s_j,
    p_j = exp(s_j - c) / sum_j exp(s_j - c); log Z = log sum_j exp(s_j - c) + c, Y/Z = sum_j p_j y_j,
    Q/Z = sum_j p_j (x^T y_j)^2."""
    m, d = X.shape
    H, k = B.shape[0], B.shape[1]
    s = np.empty(k)
    for i in range(m):
        for h in range(H):
            c = -np.inf
            for j in range(k):
                acc = logw[j]
                for a in range(d):
                    acc += X[i, a] * B[h, j, a]
                s[j] = acc
                if acc > c:
                    c = acc
            z = 0.0
            for j in range(k):
                s[j] = math.exp(s[j] - c)
                z += s[j]
            for a in range(d):
                Ybar[i, h, a] = 0.0
            q = 0.0
            for j in range(k):
                p = s[j] / z
                for a in range(d):
                    Ybar[i, h, a] += p * Y[j, a]
                if want_q:
                    xy = 0.0
                    for a in range(d):
                        xy += X[i, a] * Y[j, a]
                    q += p * xy * xy
            if want_q:
                Qbar[i, h] = q
            logZ[i, h] = math.log(z) + c


def _log_add(a, b):
    """The sums of two source sets in log form: (log Z, Y/Z, Q/Z or None) of each, combined (log Z = logaddexp)."""
    logZ = np.logaddexp(a[0], b[0])
    wa, wb = np.exp(a[0] - logZ), np.exp(b[0] - logZ)
    Ybar = wa[..., None] * a[1] + wb[..., None] * b[1]
    Qbar = None if a[2] is None else wa * a[2] + wb * b[2]
    return logZ, Ybar, Qbar


def skip_deltas(nodes, A, logZ_points, m_cells: float, normalised: bool = True) -> np.ndarray:
    """How far the flux potential at each cell node x can move when the cells' own sum there is left out, (nc,).

    The cells hold mass m_c, so their sum Z^c_h(x) = sum_c' m_c' exp(x^T A_h x_c') <= m_c exp(|A_h^T x|) (the
    nodes are unit vectors). With the point masses' sum Z^p_h(x) = exp(``logZ_points``) (nc, H) kept, softmax
    (Phi = (1/H) sum_h log Z_h) moves by at most max_h log(1 + m_c exp(|A_h^T x|) / Z^p_h(x)); unnormalised
    attention (xi = (1/H) sum_h Z_h) by at most (1/H) sum_h m_c exp(|A_h^T x|)."""
    out = np.empty(nodes.shape[0])
    _skip_deltas_kernel(np.ascontiguousarray(nodes, dtype=np.float64), np.ascontiguousarray(A, dtype=np.float64),
                        np.ascontiguousarray(logZ_points, dtype=np.float64), float(m_cells), bool(normalised), out)
    return out


@njit
def _skip_deltas_kernel(X, A, logZ, m_cells, normalised, out):  # pragma: no cover - compiled
    nc, d = X.shape
    H = A.shape[0]
    for c in range(nc):
        acc = 0.0
        for h in range(H):
            k2 = 0.0
            for j in range(d):
                b = 0.0
                for i in range(d):
                    b += A[h, i, j] * X[c, i]
                k2 += b * b
            kappa = math.sqrt(k2)
            if normalised:
                acc = max(acc, math.log1p(m_cells * math.exp(kappa - logZ[c, h])))
            else:
                acc += m_cells * math.exp(kappa)
        out[c] = acc if normalised else acc / H


def face_weight_sums(geom, rho) -> np.ndarray:
    """a_c = sum over the faces e of cell c of |e| / d_e max(rho_c, rho_n) (n the other cell of e), shape (nc,)."""
    c, n = geom.edge_cells[:, 0], geom.edge_cells[:, 1]
    f = geom.edge_lengths / geom.node_distances * np.maximum(rho[c], rho[n])
    return np.bincount(c, f, geom.n_cells) + np.bincount(n, f, geom.n_cells)


def skip_bound(geom, skip, rho, h: float, weights=None) -> float:
    """The most by which an implicit step of size h with potentials off by at most delta differs from the step with
    the exact ones, in mass (L^1), for ``skip`` = (delta (nc,), m_c) of :meth:`PointMasses._sums` (docs/model.md §4.10):

        min(2 m_c, 2 h sum_e |e| (delta_c + delta_n) / d_e max(w_c rho_c, w_n rho_n))

    (rho the cells' densities at the step's end, w the frozen face weights, 1 at order 1). The step keeps
    the cells' mass, so the two end states differ by at most 2 m_c; and with M = C + h K(u) (column sums those of
    C, M^{-1} >= 0) rho - rho* = M*^{-1} h (K(u*) - K(u)) rho, whose C-weighted L^1 norm is at most h ||(K(u*) -
    K(u)) rho||_1 <= 2 h sum_e |e| |u_e - u*_e| max(w rho), with |u_e - u*_e| <= (delta_c + delta_n) / d_e."""
    if skip is None:
        return 0.0
    delta, m_cells = skip
    if delta is None:  # every cell skipped because 2 m_c is within the tolerance's share
        return 2.0 * m_cells
    c, n = geom.edge_cells[:, 0], geom.edge_cells[:, 1]
    wc, wn = (rho[c], rho[n]) if weights is None else (weights[0] * rho[c], weights[1] * rho[n])
    B = 2.0 * h * float(np.sum(geom.edge_lengths * (delta[c] + delta[n]) / geom.node_distances * np.maximum(wc, wn)))
    return min(2.0 * m_cells, B)


#: A point mass lies on the sphere when ||x| - 1| <= UNIT_TOL (positions are renormalised every step).
UNIT_TOL = 1e-9


def check_point_masses(x, m, d: int | None = None) -> str | None:
    """What is wrong with point masses at positions ``x`` (k, d) with masses ``m`` (k,), as a phrase,
    or None: the shapes fit, every value is finite, every position lies on the sphere
    (:data:`UNIT_TOL`) and every mass is positive. (Total mass is the caller's: it needs the cells.)
    ``d``: the ambient dimension (None: that of ``x``, 2 (the circle) or 3)."""
    x, m = np.asarray(x), np.asarray(m)
    if x.dtype.kind not in "iuf" or m.dtype.kind not in "iuf":
        return f"their arrays hold {x.dtype} and {m.dtype}, not numbers"
    d = (x.shape[1] if x.ndim == 2 and x.shape[1] in (2, 3) else 3) if d is None else int(d)
    if m.ndim != 1 or x.shape != (m.size, d):
        return f"positions of shape {x.shape} do not fit masses of shape {m.shape} (expected (k, {d}) and (k,))"
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(m))):
        return f"{int(np.sum(~np.isfinite(x)) + np.sum(~np.isfinite(m)))} NaN/inf value(s)"
    off = np.abs(np.linalg.norm(x, axis=1) - 1.0) > UNIT_TOL
    if off.any():
        k = int(np.argmax(off))
        return f"{int(off.sum())} position(s) off the unit sphere (|x_{k}| = {float(np.linalg.norm(x[k])):.6g})"
    if np.any(m <= 0):
        k = int(np.argmin(m))
        return f"{int(np.sum(m <= 0))} mass(es) not positive (m_{k} = {float(m[k]):.3g})"
    return None


def initial_point_masses(x, m, *, atoms: bool = True, d: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """Initial point masses (positions (k, d), masses (k,)) checked by :func:`check_point_masses`
    (ValueError naming the problem), positions renormalised onto the sphere; ``atoms``: the solver
    carries point masses (else any are refused)."""
    if not atoms:
        raise ValueError("initial point masses need atoms = True (the solver carries point masses only then)")
    x = np.array(x, dtype=np.float64).reshape(-1, d) if np.size(x) else np.zeros((0, d))
    m = np.array(m, dtype=np.float64).reshape(-1)
    problem = check_point_masses(x, m, d)
    if problem:
        raise ValueError(f"initial point masses: {problem}")
    return x / np.linalg.norm(x, axis=1)[:, None], m


def _kept_targets(value, nc: int) -> np.ndarray | None:
    """The kept sums' cells of a state (:meth:`PointMasses.state`): an integer array of sorted distinct cell indices
    in [0, nc), as int64; None for anything else (then the kept sums are ignored and summed anew, :meth:`PointMasses.restore`)."""
    t = np.asarray(value)
    if t.dtype.kind not in "iu" or t.size == 0:
        return None
    t = t.reshape(-1).astype(np.int64)
    return t if (t[0] >= 0 and t[-1] < nc and np.all(np.diff(t) > 0)) else None


class PointMasses:
    """The point masses of one mesh solver, with their parameters (module docstring).

    Parameters
    ----------
    geom : the solver's FV geometry (nodes, areas, neighbours).
    h_mesh : mean edge length, the default scale of ``spread`` and ``radius``.
    spread : collapse when the mass-weighted angular spread is at most this; cells within it of a
        point mass are absorbed (default ``h_mesh``).
    radius : cells within this angle of a dense local maximum are candidates (default 2.5 ``h_mesh``).
    min_mass : the least mass that collapses (default: a cluster's least mass, 1 % of the total; a smaller
        remnant stays in the cells until a point mass absorbs it).
    merge_radius : point masses closer than this angle merge (an event; default
        :data:`~spherepde.model.clusters.MERGE_ANGLE`, the one definition of a merge).
    """

    def __init__(self, geom, h_mesh: float, *, spread=None, radius=None, min_mass: float = MIN_CLUSTER_MASS, merge_radius: float = MERGE_ANGLE):
        self.geom = geom
        self.spread = positive("atom_spread", h_mesh if spread is None else spread)
        self.radius = positive("atom_radius", 2.5 * h_mesh if radius is None else radius)
        self.min_mass = positive("atom_min_mass", min_mass)
        self.merge_radius = positive("merge_radius", merge_radius)
        #: positions (k, d) and masses (k,)
        self.x = np.zeros((0, geom.d))
        self.dense_floor = dense_floor(geom.d)
        self.m = np.zeros(0)
        #: merge events: (t, m1, m2, angle) per merge
        self.merges: list[tuple[float, float, float, float]] = []
        self._tree = None
        #: the cells' sums at the cells, kept for the next evaluation (:meth:`_cell_sums`), and how many were computed in full
        self._kept_sums: tuple | None = None
        self._kept_masses: tuple | None = None  # after a restore: the masses and A_h of the kept sums, to sum again
        self.n_cell_sums = 0
        #: the last step's interpolant (:meth:`remember_step`), used by the next merge test only
        self._step: _StepPath | None = None

    @staticmethod
    def check_options(*, atoms: bool, stepper: Stepper, gradient: bool, velocity: str, prescribed: bool = False) -> None:
        """Raise :class:`~spherepde.solvers.errors.OptionError` (option ``atoms``) unless point masses can
        run: a stepper that moves them, gradient heads and the potential velocity (no prescribed field)."""
        if not atoms:
            return
        if not stepper.moves_point_masses:
            movers = ", ".join(repr(n) for n in STEPPERS.names(where=lambda e: e.obj.moves_point_masses))
            raise OptionError("atoms", f"atoms = True (collapsed clusters carried as point masses) needs integrator = {movers}")
        if not gradient or velocity != "potential" or prescribed:
            raise OptionError("atoms", "atoms = True (point masses) needs gradient heads and velocity = 'potential'")

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, ms, rho: np.ndarray, t: float, atom_x: np.ndarray):
        """The mesh solver's evaluation for the measure rho dsigma + sum_k m_k delta_{y_k} at positions ``atom_x``.

        The cells move by the upwind scheme with u_e = s (Phi_n - Phi_c)/d_cn (unnormalised attention:
        xi for Phi), a point mass with the exact token velocity. Energy, xi and the nodal G^2 cover the
        whole measure; the scheme's G^2 adds the exact point-mass terms m_k |v_k|^2 / mobility(y_k)
        (softmax: (1/H) sum_h 1/Z_h(y_k); unnormalised: 1) to the cells'
        :func:`~spherepde.solvers.fv.scheme_g2`, and the transport rate adds m_k grad xi(y_k) . v_k.
        Returns (edge velocities u, d rho/dt, the face values, rates, point-mass velocities (k, 3)).
        """
        g = self.geom
        nc = g.n_cells
        faces = face_values(g, rho, 1)
        X = np.concatenate([g.nodes, atom_x])
        m = np.concatenate([rho * g.areas, self.m])
        A, V = ms.path.matrices(t)
        sigma = ms.path.sigma
        skipped = None
        if getattr(ms.stepper, "legacy", False):  # the previous route: one sum over cells and point masses together
            # empty cells add nothing to the sums; neither do the round-off masses the sparse solve
            # leaves in them (below 1e-16 of the total, far below the sums' accuracy)
            src = np.flatnonzero(m > 1e-16)
            self.n_cell_sums += 1
            logZ, Ybar, Qbar = attention_moments(X, X[src], m[src], A, want_q=sigma > 0, log=True, summation=ms.summation,
                                                 tol=ms.summation_tol, tol_moments=ms.diagnostics_tol)
        else:
            logZ, Ybar, Qbar, skipped = self._sums(ms, m[:nc], atom_x, A, sigma > 0)
        if g.d == 3:
            rates = fused_rates(X, m, logZ, Ybar, Qbar, V, ms.path.drift_at(t), sigma, normalised=ms.normalised)
        else:  # the fused kernel is d = 3 only
            rates = ms._numpy_route(m, logZ, Ybar, Qbar, A, V, t, X=X)
        u = potential_edge_velocity(g, rates["Phi" if ms.normalised else "xi"][:nc], ms.path.sign)
        flux = np.empty(g.n_edges)
        rhs = fv_rhs(g, faces, u, flux=flux)
        v, gx, mob = self._velocity(A, V, Ybar[nc:], logZ[nc:], atom_x, ms.attention)
        rates["transport"] = float(np.sum(rates["xi"][:nc] * g.areas * rhs) + np.sum(self.m * np.sum(gx * v, axis=1)))
        rates["G2_atoms"] = float(np.sum(self.m * np.sum(v * v, axis=1) / mob))
        rates["transport_atoms"] = float(np.sum(self.m * np.sum(gx * v, axis=1)))
        rates = with_scheme_g2(rates, g, logZ[:nc], u, flux, ms.normalised, rates["G2_atoms"], now=getattr(ms.stepper, "legacy", False))
        rates["logZ"] = logZ[:nc]
        rates["skip"] = skipped
        rates["Phi"] = rates["Phi"][:nc]
        rates["xi"] = rates["xi"][:nc]
        return u, rhs, faces, rates, v

    def _sums(self, ms, masses: np.ndarray, atom_x: np.ndarray, A: np.ndarray, want_q: bool):
        """(log Z_h, Y_h/Z_h, Q_h/Z_h or None, skip) at the cells' nodes and then the point masses, summed by
        source (docs/model.md §4.10): the point masses directly at every target (k sources), the cells directly at
        the point masses (k targets), the cells at the cells by ``ms.summation`` (:meth:`_cell_sums`, kept while
        the cells do not change) -- at the cells where they matter only (:meth:`_skipped`): at a skipped cell the
        cells' part is left out, which changes the flux potential there by at most ``delta`` (:func:`skip_deltas`).
        ``skip``: None (nothing skipped) or (delta with 0 at the summed cells (nc,), the cells' mass m_c), from
        which :func:`skip_bound` bounds the step's change by the skip (the step's error estimate adds it)."""
        g = self.geom
        nc = g.n_cells
        X = np.concatenate([g.nodes, atom_x])
        pts = _direct_few(X, atom_x, self.m, A, want_q)
        src = np.flatnonzero(masses > 1e-16)  # empty cells and the sparse solve's round-off masses add nothing
        if src.size == 0:
            return (*pts, None)
        at_points = _direct_few(atom_x, g.nodes[src], masses[src], A, want_q)
        m_cells = float(np.sum(masses))
        top = _log_add(at_points, tuple(None if a is None else a[nc:] for a in pts))
        cells = tuple(None if a is None else a[:nc].copy() for a in pts)
        if 2.0 * m_cells <= SKIP_SHARE * ms.tol:  # every cell skipped: the bound 2 m_c needs no delta
            delta, skip = None, np.ones(nc, dtype=bool)
        else:
            delta = skip_deltas(g.nodes, A, cells[0], m_cells, ms.normalised)
            skip = self._skipped(ms, masses, delta)
        act = np.flatnonzero(~skip)
        if act.size:
            got = _log_add(self._cell_sums(ms, np.where(masses > 1e-16, masses, 0.0), A, want_q, act),
                           tuple(None if a is None else a[act] for a in cells))
            for a, b in zip(cells, got):
                if a is not None:
                    a[act] = b
        logZ, Ybar, Qbar = (None if a is None else np.concatenate([a, b]) for a, b in zip(cells, top))
        if act.size == nc:
            return logZ, Ybar, Qbar, None
        return logZ, Ybar, Qbar, (None if delta is None else np.where(skip, delta, 0.0), m_cells)

    def _skipped(self, ms, masses: np.ndarray, delta: np.ndarray) -> np.ndarray:
        """Which cells' sums at the cells are skipped, (nc,) bool, when 2 m_c exceeds ``SKIP_SHARE * ms.tol``
        (below it all are, :meth:`_sums`): the cells whose share 2 h a_c delta_c of :func:`skip_bound` is smallest
        (a_c of :func:`face_weight_sums` at the largest density of each cell and its neighbours -- a step moves mass
        into cells a collapse emptied --, times the largest face weight; h the proposed step), as many as keep its
        sum within ``SKIP_FILL * SKIP_SHARE * ms.tol``; the kept sums' cells instead while the others' share stays
        within ``SKIP_KEEP * SKIP_SHARE * ms.tol`` (their sum is reused, :meth:`_cell_sums`). None skipped before
        a first step is proposed. The step's error estimate adds the actual bound (:meth:`skip_error`)."""
        g = self.geom
        nc = g.n_cells
        budget = SKIP_SHARE * ms.tol
        skip = np.zeros(nc, dtype=bool)
        h = ms.dt if ms.dt is not None else ms.h_next
        if not (budget > 0.0 and math.isfinite(h) and h > 0.0):
            return skip
        rho = masses / g.areas * (W_MAX if ms.order == 2 else 1.0)
        c, n = g.edge_cells[:, 0], g.edge_cells[:, 1]
        near = rho.copy()
        np.maximum.at(near, c, rho[n])
        np.maximum.at(near, n, rho[c])
        share = 2.0 * h * face_weight_sums(g, near) * delta
        # the kept sums' masses and cells; after a restore those of the state (summed again by _cell_sums only after this
        # choice, which must see them as the uninterrupted run saw its kept sums, for a bit-for-bit resume)
        kept = self._kept_sums
        base, targets = (kept[1], kept[4]) if kept is not None else (None, None) if self._kept_masses is None else (self._kept_masses[0], self._kept_masses[2])
        if base is not None and np.count_nonzero(base != masses) <= UPDATE_CELLS:  # the kept sums' cells (reused), if the rest still fits
            skip[:] = True
            skip[targets] = False
            if float(np.sum(share[skip])) <= SKIP_KEEP * budget:
                return skip
            skip[:] = False
        order = np.argsort(share, kind="stable")
        skip[order[: int(np.searchsorted(np.cumsum(share[order]), SKIP_FILL * budget, side="right"))]] = True
        return skip

    def skip_error(self, evs, rho: np.ndarray, h: float, weights=None) -> float:
        """What the skipped cell sums of the evaluations ``evs`` = (start, end) add to the error estimate of a step of
        size h ending at the cell densities ``rho``: :func:`skip_bound` of the start (whose velocities the step froze,
        with its face ``weights``) plus that of the end (whose rates, from first-order faces, enter the estimate and
        start the next step) (docs/model.md §4.10)."""
        ev0, ev1 = evs
        return skip_bound(self.geom, ev0.rates.get("skip"), rho, h, weights) + skip_bound(self.geom, ev1.rates.get("skip"), rho, h)

    def _cell_sums(self, ms, masses: np.ndarray, A: np.ndarray, want_q: bool, targets: np.ndarray | None = None):
        """(log Z_h, Y_h/Z_h, Q_h/Z_h) of the cells (masses (nc,), zero where empty) at the nodes of the cells
        ``targets`` (sorted indices; None: all) by ``ms.summation``. The last full sum is kept with its masses and
        targets: the same masses at the same targets or a subset of them return it; where at most
        :data:`UPDATE_CELLS` cells differ from them (an absorption, a collapse), it is updated by those cells'
        changes, summed directly (:meth:`_update_sums`; always from the kept full sum, so the result depends on
        the kept masses and the new ones only, and a resume that recomputes the kept sum from its masses and
        targets, :meth:`state`, continues bit for bit); otherwise the full sum, which is then kept."""
        g = self.geom
        targets = np.arange(g.n_cells) if targets is None else np.asarray(targets, dtype=np.int64)
        key = (A.tobytes(), bool(want_q), ms.summation, ms.summation_tol, ms.diagnostics_tol)
        if self._kept_sums is None and self._kept_masses is not None:  # after a restore: the kept sum again
            (base, A_kept, t_kept), self._kept_masses = self._kept_masses, None
            if np.array_equal(A_kept, A):
                self._kept_sums = (key, base, self._full_cell_sums(ms, base, A, want_q, t_kept), A.copy(), t_kept)
        kept = self._kept_sums
        if kept is not None and kept[0] == key:
            base, sums, t_kept = kept[1], kept[2], kept[4]
            pos = np.searchsorted(t_kept, targets)
            if pos.size == 0 or (pos[-1] < t_kept.size and np.array_equal(t_kept[np.minimum(pos, t_kept.size - 1)], targets)):
                sub = sums if pos.size == t_kept.size else tuple(None if a is None else a[pos] for a in sums)
                changed = np.flatnonzero(base != masses)
                if changed.size == 0:
                    return sub
                if changed.size <= UPDATE_CELLS:
                    new = self._update_sums(sub, g.nodes[changed], masses[changed] - base[changed], A, want_q, g.nodes[targets])
                    if new is not None:
                        return new
        sums = self._full_cell_sums(ms, masses, A, want_q, targets)
        self._kept_sums = (key, masses.copy(), sums, A.copy(), targets.copy())
        return sums

    def _full_cell_sums(self, ms, masses, A, want_q, targets):
        src = np.flatnonzero(masses > 0.0)
        self.n_cell_sums += 1
        summation = ms.summation
        if targets.size == self.geom.n_cells:
            X = self.geom.nodes
        else:
            X = np.ascontiguousarray(self.geom.nodes[targets])
            if summation == "auto":  # some cells only: the sources' expansion costs as much as for all, the targets little
                # (auto's cost model, made for as many targets as sources, picks the direct sums here although the fast
                # ones are several times faster: 2.2 ms against 13 ms at 200 of 5,120 cells, H = 4, measured)
                summation = "fast" if auto_considers_fast(targets.size, src.size, A.shape[0]) else "direct"
        return attention_moments(X, self.geom.nodes[src], masses[src], A, want_q=want_q, log=True,
                                 summation=summation, tol=ms.summation_tol, tol_moments=ms.diagnostics_tol)

    def _update_sums(self, sums, y, dm, A, want_q, X):
        """The kept sums at the targets X plus the sources y (j, d) with mass changes dm (j,), summed directly; None
        where the removed part exceeds half of Z_h at some target (the kept sums' error, relative to Z_h, would more
        than double)."""
        out = sums
        up, down = dm > 0.0, dm < 0.0
        if up.any():
            out = _log_add(out, _direct_few(X, y[up], dm[up], A, want_q))
        if down.any():
            rem = _direct_few(X, y[down], -dm[down], A, want_q)
            r = np.exp(rem[0] - out[0])  # the removed share of Z_h
            if not np.all(r <= 0.5):
                return None
            keep = 1.0 - r
            logZ = out[0] + np.log1p(-r)
            Ybar = (out[1] - r[..., None] * rem[1]) / keep[..., None]
            Qbar = None if out[2] is None else (out[2] - r * rem[2]) / keep
            out = (logZ, Ybar, Qbar)
        return out

    @staticmethod
    def _velocity(A, V, Yk, logZk, y, attention: str = DEFAULT_ATTENTION):
        """Velocity v (k, 3), grad xi (A = D for gradient heads) and mobility (k,) at the point masses
        from their normalised moments Yk = Y_h/Z_h (k, H, 3) and log Z_h (k, H), for the attention kind
        ``attention`` (softmax: v from Y_h/Z_h, mobility (1/H) sum_h 1/Z_h; unnormalised: from Y_h, mobility 1)."""
        H = A.shape[0]
        Zk = np.exp(logZk)  # (k, H)
        if is_normalised(attention):
            v = velocity_from_fields(y, HeadFields(np.ones_like(Zk), Yk, None), V)
            mob = np.mean(1.0 / Zk, axis=1)
        else:
            v = velocity_from_fields(y, HeadFields(Zk, Yk * Zk[:, :, None], None), V, kind=attention)
            mob = np.ones(len(y))
        gx = project(y, np.einsum("kh,hij,khj->ki", Zk, A, Yk) / H)
        return v, gx, mob

    # ------------------------------------------------------------------ motion
    def predict(self, h: float, v0: np.ndarray) -> np.ndarray:
        """Euler predictor of the positions after a step h, on the sphere."""
        new_x = self.x + h * v0
        new_x /= np.linalg.norm(new_x, axis=1)[:, None]
        return new_x

    def correct(self, h: float, v0: np.ndarray, v1: np.ndarray) -> np.ndarray:
        """Heun corrector of the positions after a step h (velocities at both ends), on the sphere."""
        new_x = self.x + (0.5 * h) * (v0 + v1)
        new_x /= np.linalg.norm(new_x, axis=1)[:, None]
        return new_x

    def remember_step(self, t0: float, t1: float, x0: np.ndarray, v0: np.ndarray, x1: np.ndarray, v1: np.ndarray) -> None:
        """Keep the step from t0 to t1 (positions and velocities (k, 3) at both ends) for locating the
        merges that the collapse after it finds (:func:`merge_time_in_step`)."""
        self._step = _StepPath(float(t0), float(t1), x0.copy(), v0.copy(), x1.copy(), v1.copy())

    def error(self, h: float, v0: np.ndarray, v1: np.ndarray) -> float:
        """Local error of the positions over a step h: (h/2) sum_k m_k |v_k(end) - v_k(start)|."""
        return 0.5 * h * float(self.m @ np.linalg.norm(v1 - v0, axis=1))

    # ------------------------------------------------------------------ collapse, merge, absorb
    def node_tree(self):
        """A k-d tree of the cell nodes (built once)."""
        if self._tree is None:
            from scipy.spatial import cKDTree

            self._tree = cKDTree(self.geom.nodes)
        return self._tree

    def collapse(self, rho: np.ndarray, t: float) -> bool:
        """Carry collapsed clusters as point masses; ``rho`` (nc,) is changed in place. True if the state changed.

        1. absorb: the mass of the cells whose nodes lie within ``spread`` of a point mass
           joins it (at the mass-weighted mean position, projected to the sphere);
        2. merge: point masses closer than ``merge_radius`` (radians) become one (an event);
        3. collapse: around every cell holding a local maximum of rho with
           rho_c >= :data:`DENSE_FLOOR`, the cells within ``radius`` whose mass-weighted angular
           spread about their mean is at most ``spread`` and whose mass is at least
           ``min_mass`` become one point mass at that mean.
        Mass is conserved exactly (moved, never created); the first moment of the moved mass is
        kept up to the projection onto the sphere.
        """
        masses = rho * self.geom.areas
        step, self._step = self._step, None
        if step is not None and (step.x0.shape != self.x.shape or step.t1 != t):
            step = None
        changed = self._absorb(rho, masses)
        changed = self._merge(t, step) or changed
        return self._collapse_cells(rho, masses, t) or changed

    def _absorb(self, rho: np.ndarray, masses: np.ndarray) -> bool:
        g = self.geom
        tree = self.node_tree()
        changed = False
        for k in range(len(self.m)):
            idx = tree.query_ball_point(self.x[k], _chord(self.spread))
            idx = [i for i in idx if masses[i] > 1e-16]
            if idx:
                mk = masses[idx]
                tot = self.m[k] + mk.sum()
                p = self.m[k] * self.x[k] + mk @ g.nodes[idx]
                self.x[k] = p / np.linalg.norm(p)
                self.m[k] = tot
                masses[idx] = 0.0
                rho[idx] = 0.0
                changed = True
        return changed

    def _merge(self, t: float, step: _StepPath | None = None) -> bool:
        """Merge the closest pair while its angle is below ``merge_radius``. The event's time is located
        inside the step ``step`` (:func:`merge_time_in_step`; without one, ``t``); the state is merged at ``t``."""
        changed = False
        merged = True
        t_last = -math.inf if step is None else step.t0
        while merged and len(self.m) > 1:
            merged = False
            cosang = np.clip(self.x @ self.x.T, -1.0, 1.0)
            np.fill_diagonal(cosang, -2.0)
            i, j = np.unravel_index(int(np.argmax(cosang)), cosang.shape)
            ang = math.acos(cosang[i, j])
            if ang < self.merge_radius:
                mi, mj = self.m[i], self.m[j]
                p = mi * self.x[i] + mj * self.x[j]
                t_ev = t if step is None else max(t_last, merge_time_in_step(step, i, j, self.merge_radius))
                t_last = t_ev
                self.merges.append((float(t_ev), float(mi), float(mj), float(ang)))
                log.info("t = %.6g: point masses %.4g and %.4g merge (angle %.3g rad; the step ends at %.6g)", t_ev, mi, mj, ang, t)
                self.x[i] = p / np.linalg.norm(p)
                self.m[i] = mi + mj
                self.x = np.delete(self.x, j, axis=0)
                self.m = np.delete(self.m, j)
                if step is not None:
                    step.merge(i, j, mi, mj)
                merged = changed = True
        return changed

    def _collapse_cells(self, rho: np.ndarray, masses: np.ndarray, t: float) -> bool:
        g = self.geom
        tree = self.node_tree()
        changed = False
        dense = rho >= self.dense_floor
        if not dense.any():  # no candidate: no pass over the cells' neighbours
            return False
        cand = np.flatnonzero(dense & local_maxima(g, rho))
        for c in cand[np.argsort(-rho[cand], kind="stable")]:
            if masses[c] <= 0.0:
                continue
            idx = np.asarray(tree.query_ball_point(g.nodes[c], _chord(self.radius)), dtype=np.int64)
            mk = masses[idx]
            tot = float(mk.sum())
            if tot < self.min_mass:
                continue
            p = mk @ g.nodes[idx]
            centre = p / np.linalg.norm(p)
            ang = np.arccos(np.clip(g.nodes[idx] @ centre, -1.0, 1.0))
            spread = math.sqrt(float(mk @ ang**2) / tot)
            if spread > self.spread:
                continue
            # the disk must hold the whole cluster: its outer band (beyond 0.6 of the radius, one mean edge length by default)
            # carries at most EDGE_SHARE of its mass -- a disk cutting through a cluster
            # (a local maximum off its centre) would take a part of it
            rim = np.arccos(np.clip(g.nodes[idx] @ g.nodes[c], -1.0, 1.0)) > 0.6 * self.radius
            rim_share = float(mk[rim].sum()) / tot
            if rim_share > EDGE_SHARE:
                log.debug("t = %.6g: a cluster of mass %.4g is not collapsed: %.3g of it lies in the disk's outer band", t, tot, rim_share)
                continue
            self.x = np.concatenate([self.x, centre[None]])
            self.m = np.concatenate([self.m, [tot]])
            masses[idx] = 0.0
            rho[idx] = 0.0
            changed = True
            log.info("t = %.6g: a cluster of mass %.4g (spread %.3g rad, %.3g of it in the outer band) becomes a point mass", t, tot, spread, rim_share)
        return changed

    def after_step(self, ms) -> None:
        """Collapse after a step of the mesh solver ``ms``; the energy jump E(after) - E(before) of the
        collapses, absorptions and merges (the self-energy difference of the moved mass, O(m spread^2)) is
        booked into the balance's jumps (the column ``int_collapse_energy``, J_t), which every residual
        leaves out, so that they keep measuring the time stepping (docs/model.md §3.6)."""
        if not ms._has_energy:
            ms._collapse()
            return
        E_before = ms._current().rates["energy"]
        if ms._collapse():
            jump = ms._current().rates["energy"] - E_before
            ms.balance.jumps += jump

    # ------------------------------------------------------------------ output and state
    def deposit(self, rho: np.ndarray) -> np.ndarray:
        """The cell densities ``rho`` (nc,) with every point mass added to its nearest cell (a new array)."""
        rho = rho.copy()
        if len(self.m):
            _, idx = self.node_tree().query(self.x)
            np.add.at(rho, np.atleast_1d(idx), self.m / self.geom.areas[np.atleast_1d(idx)])
        return rho

    def cluster_points(self, rho: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The points and masses the cluster definition sees: the dense cells of ``rho`` (rho >= :data:`DENSE_FLOOR`) and the point masses."""
        dense = rho >= self.dense_floor
        masses = rho[dense] * self.geom.areas[dense]
        return np.concatenate([self.geom.nodes[dense], self.x]), np.concatenate([masses, self.m])

    def events(self) -> dict:
        """``{"merges": [{t, m1, m2, angle_rad}, ...]}``."""
        return {"merges": [{"t": t, "m1": m1, "m2": m2, "angle_rad": a} for t, m1, m2, a in self.merges]}

    def state(self) -> dict:
        """The point masses, their merges and the cell masses of the kept cell sums (:meth:`_cell_sums`; empty if none)."""
        kept = self._kept_sums
        return {"atom_x": self.x.copy(), "atom_m": self.m.copy(), "merges": np.asarray(self.merges, dtype=np.float64).reshape(-1, 4),
                "cell_sums_masses": np.zeros(0) if kept is None else kept[1].copy(), "cell_sums_A": np.zeros(0) if kept is None else kept[3].copy(),
                "cell_sums_targets": np.zeros(0, dtype=np.int64) if kept is None else kept[4].copy()}

    def restore(self, st: dict) -> None:
        self._kept_sums = None
        nc = self.geom.n_cells
        kept = np.asarray(st.get("cell_sums_masses", np.zeros(0)), dtype=np.float64).reshape(-1)
        A_kept = np.asarray(st.get("cell_sums_A", np.zeros(0)), dtype=np.float64)
        # checkpoints written before the kept sums had targets kept them at every cell
        t_kept = _kept_targets(st["cell_sums_targets"], nc) if "cell_sums_targets" in st else np.arange(nc)
        ok = kept.size == nc and t_kept is not None
        self._kept_masses = (kept.copy(), A_kept.copy(), t_kept.copy()) if ok else None
        if "atom_x" in st:
            self.x = np.asarray(st["atom_x"], dtype=np.float64).reshape(-1, self.geom.d).copy()
            self.m = np.asarray(st["atom_m"], dtype=np.float64).reshape(-1).copy()
            self.merges = [tuple(float(v) for v in row) for row in np.asarray(st["merges"], dtype=np.float64).reshape(-1, 4)]


class _StepPath:
    """One step of the point masses: times t0 < t1, positions x0, x1 and velocities v0, v1 (k, 3) at both ends."""

    def __init__(self, t0, t1, x0, v0, x1, v1):
        self.t0, self.t1, self.x0, self.v0, self.x1, self.v1 = t0, t1, x0, v0, x1, v1

    def merge(self, i: int, j: int, mi: float, mj: float) -> None:
        """Row i becomes the mass-weighted mean path of rows i and j (positions projected to the sphere); row j goes."""
        for name in ("x0", "v0", "x1", "v1"):
            a = getattr(self, name)
            a[i] = (mi * a[i] + mj * a[j]) / (mi + mj)
            setattr(self, name, np.delete(a, j, axis=0))
        for a in (self.x0, self.x1):
            a[i] /= np.linalg.norm(a[i])


def _angle_and_rate(x, y, vx, vy) -> tuple[float, float]:
    """The angle theta = atan2(|x cross y|, x . y) of two unit vectors (accurate near 0, unlike arccos) and
    d theta/dt = -(vx . y + x . vy) / sin theta."""
    s = float(np.linalg.norm(np.cross(x, y))) if x.shape[0] == 3 else abs(float(x[0] * y[1] - x[1] * y[0]))  # d = 2: the circle
    th = math.atan2(s, float(x @ y))
    return th, (-(float(vx @ y) + float(x @ vy)) / s if s > 0.0 else 0.0)


def merge_time_in_step(step: _StepPath, i: int, j: int, radius: float) -> float:
    """The time in [t0, t1] at which the angle of point masses i and j crosses ``radius`` (their merge event).

    The step's interpolant of the pair's angle: the cubic Hermite interpolant of log theta in time with the
    values and slopes d log theta/dt = theta'/theta at both ends (theta' from the positions and velocities of
    the step's ends, :func:`_angle_and_rate`). It is exact for theta = theta0 e^{-lambda t}, the approach of two
    point masses (d theta/dt = -beta theta near theta = 0 for one head D = beta I, docs/model.md §4.6;
    -beta (m1 + m2) e^beta theta with unnormalised attention, §9.5). The first
    crossing is bracketed on 64 sub-intervals and bisected to round-off. Without a crossing (the pair was
    within ``radius`` at t0, or absorbing cells moved it there at t1): t0 if theta(t0) < radius, else t1.
    """
    t0, t1 = step.t0, step.t1
    h = t1 - t0
    th0, d0 = _angle_and_rate(step.x0[i], step.x0[j], step.v0[i], step.v0[j])
    th1, d1 = _angle_and_rate(step.x1[i], step.x1[j], step.v1[i], step.v1[j])
    if th0 < radius:
        return t0
    if not (h > 0.0 and th1 > 0.0 and th1 < radius):
        return t1
    g0, g1, s0, s1, gr = math.log(th0), math.log(th1), h * d0 / th0, h * d1 / th1, math.log(radius)

    def f(s: float) -> float:
        s2, s3 = s * s, s * s * s
        return (2 * s3 - 3 * s2 + 1) * g0 + (s3 - 2 * s2 + s) * s0 + (-2 * s3 + 3 * s2) * g1 + (s3 - s2) * s1 - gr

    grid = np.linspace(0.0, 1.0, 65)
    vals = [f(s) for s in grid]
    k = next(k for k in range(64) if vals[k + 1] <= 0.0)  # f(0) > 0 >= f(1)
    lo, hi = grid[k], grid[k + 1]
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if f(mid) > 0.0 else (lo, mid)
    return t0 + h * 0.5 * (lo + hi)


def _chord(ang: float) -> float:
    """The chord length of an angle (capped at pi)."""
    return 2.0 * math.sin(0.5 * min(ang, math.pi))
