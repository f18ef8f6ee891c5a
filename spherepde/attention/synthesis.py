"""The attention sums at many targets by synthesis: sample on a Gauss grid, project, evaluate by one matrix product.

The degree rule ``"synthesis"`` of :func:`spherepde.attention.harmonic.moments`. The target expansions of
:mod:`~spherepde.attention.harmonic` cost O(L^2) recurrences per (target, head). Seen as a function of the
*target*, each sum is band-limited too: for a source y and c = A_h y, kappa^x_h = max_j |A_h y_j|,

    exp(x . c) = sum_l 4 pi i_l(|c|) sum_m Y_lm(c / |c|) Y_lm(x),

so F(x) = Z_h(x), Mom_h(x) (and Q_h(x) = sum_j w_j exp(x . c_j) (x . y_j)^2) differ from a polynomial g of degree
L (L + 2 for Q: the truncated plane wave times (x . y)^2) by at most T_L(kappa^x_h) sum w (T_L of
:mod:`~spherepde.attention.harmonic`; |y_jk| <= 1, (x . y_j)^2 <= 1). So each F is sampled at the
N_q = (L+1)(2L+1) points of a Gauss-Legendre x trapezoid grid (exact for degree 2L; by the expansions of
:mod:`~spherepde.attention.harmonic`, at tolerance ``tol_q``), projected onto the real spherical harmonics of degree
<= L by that quadrature (hyperinterpolation), and evaluated at all m targets by one matrix product
(the targets' harmonics are cached per point set). Cost O(N_q L^2 H + m sum_h L_h^2), with the m-part in BLAS,
against O(m sum_h L_h^2) recurrences: worth it when m >> N_q (:data:`MIN_TARGETS_PER_POINT`).

Error statement (a posteriori, per target and head). The projection P reproduces g; for any f,
|P f (x)| <= Lambda max_q |f(x_q)| with Lambda = sum_q w_q |K_L(x, x_q)| <= sqrt(4 pi K_L(x, x)) = L + 1 (Cauchy--Schwarz
with the reproducing kernel K_L, whose square the grid integrates exactly). With e_q the evaluation errors at the
grid (|e_q| <= tol_q F~_max / 3 by the expansion's own a-posteriori test, F~_max the largest sampled Z),
the synthesised value errs by at most

    E = T_L sum w (L + 2) + (L + 1) tol_q Zq_max / 3 + rho,
    rho = 1.01 u Zq_max ((L+1)^3 + N_q (L+1)^2)

(rho: the worst-case round-off of the projection's and the synthesis's sums, |c|_2 <= sqrt(4 pi) max_q |F(x_q)| and
sum_lm |c_lm Y_lm(x)| <= (L+1) max_q |F(x_q)|; for Q, L -> L + 2). A pair (target, head) is accepted when
3 E_Z <= tol Z~ and 3 E_M <= tol_m Z~ (and 3 E_Q <= tol_m Z~): the harmonic module's test, so the same statement
follows (relative error of Z <= tol / 2, error of Mom/Z and Q/Z < tol_m). Rejected pairs, the heads whose degree
would pass :data:`SYNTHESIS_L_MAX` and the grid points the expansion rejects are summed by the expansion (and from
there directly), exactly as before: the rule changes the cost, never the error statement.

Where it pays: the mesh solver's cell fields (m = all cells) at tolerances well above the grid's floor
(the expansion meets tol_q = :data:`TOL_Q` at the grid; below tol ~ 1e-9 most pairs would be rejected, so the
rule hands smaller tolerances to the adaptive kernel whole). Measured by ``spherepde.studies.bench_h100``.
"""

from __future__ import annotations

import hashlib
import math
import sys

import numpy as np

from spherepde._numba import njit, prange
from spherepde.attention import harmonic
from spherepde.attention.direct import direct_scaled

__all__ = ["gauss_grid", "SYNTHESIS_L_MAX", "TOL_Q"]

#: the largest degree synthesised (the cached target harmonics are m (L+1)^2 doubles); heads needing more are expanded
SYNTHESIS_L_MAX = 32
#: the tolerance of the sampled values at the grid (near the expansion's round-off floor)
TOL_Q = 1e-12
#: the rule synthesises only where the targets outnumber the grid points this many times and ``tol`` >= TOL_MIN
MIN_TARGETS_PER_POINT = 4
TOL_MIN = 1e-9
#: the most memory the cached target harmonics (m (L+1)^2 doubles) may take; larger problems keep the per-target route
BASIS_BYTES_MAX = 1 << 30
_U = 2.0**-53

_GRIDS: dict = {}
_BASIS: dict = {}


def gauss_grid(L: int):
    """(Xq (N_q, 3), Wq (N_q,)): L + 1 Gauss--Legendre nodes in z times 2L + 1 equispaced longitudes; integrates
    every polynomial of degree <= 2L on S^2 exactly (weights sum to 4 pi)."""
    L = int(L)
    got = _GRIDS.get(L)
    if got is None:
        z, wz = np.polynomial.legendre.leggauss(L + 1)
        nph = 2 * L + 1
        ph = 2.0 * np.pi * np.arange(nph) / nph
        st = np.sqrt(1.0 - z * z)
        Xq = np.stack([np.outer(st, np.cos(ph)).ravel(), np.outer(st, np.sin(ph)).ravel(), np.repeat(z, nph)], axis=1)
        Wq = np.repeat(wz, nph) * (2.0 * np.pi / nph)
        got = (np.ascontiguousarray(Xq), Wq)
        _GRIDS[L] = got
    return got


def _harmonics(X, L: int, cache: dict, key) -> np.ndarray:
    """real_sph_harm(X, L) (columns l^2 + l + m; a lower degree is a prefix), cached per key (one point set)."""
    got = cache.get(key)
    if got is None or got.shape[1] < (L + 1) ** 2:
        if len(cache) >= 4:
            cache.clear()
        got = harmonic.real_sph_harm(X, L)
        cache[key] = got
    return got[:, : (L + 1) ** 2]


def _harmonics_t(X, L: int) -> np.ndarray:
    """The transposed target harmonics ((L+1)^2, m), C order (a lower degree is a row prefix), cached per point set."""
    key = ("T",) + _point_key(X)
    got = _BASIS.get(key)
    if got is None or got.shape[0] < (L + 1) ** 2:
        if len(_BASIS) >= 4:
            _BASIS.clear()
        got = np.ascontiguousarray(harmonic.real_sph_harm(X, L).T)
        _BASIS[key] = got
    return got[: (L + 1) ** 2]


def _point_key(X):
    return (X.shape, hashlib.blake2b(X.tobytes(), digest_size=16).hexdigest())


def _degrees(kappa, tol: float, l_max: int, extra: int | None = None) -> np.ndarray:
    """Per head the a-priori degree of :func:`~spherepde.attention.harmonic.choose_degree` at ``tol`` (-1 above
    ``l_max``), from harmonic's cached degree tables (kappa rounded up to 1/64). With ``extra``: the synthesis degree,
    T_L(kappa) sum w (L + 2 + extra) <= tol Z / 12 for every Z >= exp(-kappa) sum w (tol / (2 (l_max + 2 + extra)))."""
    kq = np.ceil(np.maximum(np.asarray(kappa, dtype=np.float64), 0.0) * 64.0).astype(np.int64)
    t = tol if extra is None else tol / (2.0 * (l_max + 2 + extra))
    deg, _tail = harmonic._degree_table(int(kq.max()) + 1, float(t), int(l_max))
    return deg[kq]


def _tails(kappa, degrees) -> np.ndarray:
    """T_L(kappa) upper bounds per head (kappa rounded up to 1/64, cached)."""
    return np.array([harmonic._tail_cached(harmonic._round_up(float(k)), int(L)) for k, L in zip(kappa, degrees)])


def _synthesise(YnT, coefT, degrees, ncol):
    """out[h*ncol + k, :] = coefT[h*ncol + k, :(L_h+1)^2] @ YnT[:(L_h+1)^2, :] (the targets' values of the
    function k of head h, degree L_h), one matrix product per distinct degree over contiguous rows."""
    H = len(degrees)
    m = YnT.shape[1]
    order = np.argsort(np.asarray(degrees), kind="stable")
    rows = (order[:, None] * ncol + np.arange(ncol)[None, :]).ravel()
    cT = np.ascontiguousarray(coefT[rows])
    tmp = np.empty((H * ncol, m))
    a = 0
    for L in sorted(set(int(d) for d in degrees)):
        count = sum(1 for d in degrees if int(d) == L) * ncol
        K = (L + 1) ** 2
        np.matmul(cT[a : a + count, :K], YnT[:K], out=tmp[a : a + count])
        a += count
    out = np.empty_like(tmp)
    out[rows] = tmp
    return out


@njit(parallel=True)
def _assemble(ZT, MT, QT, hidx, ez, em, eq, tol, tol_m, want_q, log_form, Z, M, Q, ok):  # pragma: no cover - compiled
    """Z[i, h], M[i, h], Q[i, h] (log form: log Z, M / Z, Q / Z) of the synthesised heads h = hidx[k] from the
    transposed values ZT[k, i], MT[3k + j, i], QT[k, i]; ok[i, k] = the a-posteriori test (module docstring)."""
    Hs, m = ZT.shape
    nblk = (m + 63) // 64
    for b in prange(nblk):
        i0 = b * 64
        i1 = min(m, i0 + 64)
        for k in range(Hs):
            h = hidx[k]
            for i in range(i0, i1):
                z = ZT[k, i]
                good = 3.0 * ez[k] <= tol * z and 3.0 * em[k] <= tol_m * z
                if want_q:
                    good = good and 3.0 * eq[k] <= tol_m * z
                ok[i, k] = good
                if log_form:
                    if z > 0.0:
                        Z[i, h] = math.log(z)
                        M[i, h, 0] = MT[3 * k, i] / z
                        M[i, h, 1] = MT[3 * k + 1, i] / z
                        M[i, h, 2] = MT[3 * k + 2, i] / z
                        if want_q:
                            Q[i, h] = QT[k, i] / z
                    else:
                        Z[i, h] = -np.inf
                else:
                    Z[i, h] = z
                    M[i, h, 0] = MT[3 * k, i]
                    M[i, h, 1] = MT[3 * k + 1, i]
                    M[i, h, 2] = MT[3 * k + 2, i]
                    if want_q:
                        Q[i, h] = QT[k, i]


def _direct_at_grid(Xq, Y, w, As, far, badq, want_q: bool, Cq, Zq, Mq, Qq) -> None:
    """The grid's scaled sums (Cq, Zq, Mq, Qq, in place) directly for the heads ``far`` (too large for the expansion) and
    for the (grid point, head) pairs the expansion rejected (``badq``)."""

    def put_q(idx, h, res):
        Cd, Zd, Md, Qd = res
        Cq[idx, h], Zq[idx, h], Mq[idx, h] = Cd, Zd, Md
        if want_q:
            Qq[idx, h] = Qd

    if far:
        put_q(slice(None), far, direct_scaled(Xq, Y, w, np.ascontiguousarray(As[far]), want_q, True))
    harmonic._recheck(Xq, As, badq, lambda Xs, Ah: direct_scaled(Xs, Y, w, Ah, want_q, True), put_q, want_q, TOL_Q,
                      harmonic.logging.DEBUG, "synthesis")


def expand(X, Y, w, A, kappa, degrees, far, wsum, tol, tol_m, l_max, want_q, log_form, degree_rule="synthesis", info=None,
           target_masses=None):
    """:func:`spherepde.attention.harmonic._expand` by synthesis (module docstring): same arguments and results."""
    m, H = X.shape[0], A.shape[0]
    near = [h for h in range(H) if degrees[h] >= 0]
    adaptive_all = (harmonic._expand, dict(degree_rule="adaptive", info=info, target_masses=target_masses))
    if tol < TOL_MIN or not near:
        return adaptive_all[0](X, Y, w, A, kappa, degrees, far, wsum, tol, tol_m, l_max, want_q, log_form, **adaptive_all[1])
    kx = harmonic.kappa_max(Y, np.ascontiguousarray(A.transpose(0, 2, 1)))  # kappa^x_h = max_j |A_h y_j|
    dzs = _degrees(kx, tol, SYNTHESIS_L_MAX, 0)
    dms = _degrees(kx, tol_m, SYNTHESIS_L_MAX, 2 if want_q else 0)
    Lz = {h: int(dzs[h]) for h in near}
    Lm = {h: int(dms[h]) for h in near}
    syn = [h for h in near if Lz[h] >= 0 and Lm[h] >= 0 and Lm[h] + (2 if want_q else 0) <= SYNTHESIS_L_MAX]
    if syn:
        Lg = max(max(Lz[h], Lm[h] + (2 if want_q else 0)) for h in syn)
        if m < MIN_TARGETS_PER_POINT * (Lg + 1) * (2 * Lg + 1) or 8 * m * (Lg + 1) ** 2 > BASIS_BYTES_MAX:
            syn = []
    if not syn:
        return adaptive_all[0](X, Y, w, A, kappa, degrees, far, wsum, tol, tol_m, l_max, want_q, log_form, **adaptive_all[1])
    rest = [h for h in near if h not in syn]  # expanded at every target
    Xq, Wq = gauss_grid(Lg)
    nq = Xq.shape[0]
    As = np.ascontiguousarray(A[syn])
    Hs = len(syn)
    # --- the sums at the grid, by the expansion at tol_q (grid points it rejects: directly)
    kq = harmonic.kappa_max(Xq, As)
    dq = [int(d) for d in _degrees(kq, TOL_Q, l_max)]
    far_q = [i for i in range(Hs) if dq[i] < 0]
    Smax = max([max(degrees)] + [d for d in dq if d >= 0])
    S = harmonic.source_moments(Y, w, Smax, want_q)
    Cq, Zq, Mq, Qq, badq = harmonic._expand(Xq, Y, w, As, kq, dq, far_q, wsum, TOL_Q, TOL_Q, l_max, want_q, False,
                                            degree_rule="adaptive", S=S)
    _direct_at_grid(Xq, Y, w, As, far_q, badq, want_q, Cq, Zq, Mq, Qq)
    sc = np.exp(Cq)
    funcs = [Zq * sc, (Mq * sc[:, :, None]).reshape(nq, 3 * Hs)]
    if want_q:
        funcs.append(Qq * sc)
    # --- project (hyperinterpolation on the grid) and synthesise at the targets (transposed: rows = functions)
    Yq = _harmonics(Xq, Lg, _BASIS, ("grid", Lg))
    YnT = _harmonics_t(X, Lg)
    projT = [np.ascontiguousarray((Yq.T @ (Wq[:, None] * f)).T) for f in funcs]
    dz = [Lz[h] for h in syn]
    dm = [Lm[h] for h in syn]
    ZT = _synthesise(YnT, projT[0], dz, 1)
    MT = _synthesise(YnT, projT[1], dm, 3)
    QT = _synthesise(YnT, projT[2], [d + 2 for d in dm], 1) if want_q else np.empty((0, 0))
    # --- the a-posteriori test per (target, head)
    zmax = np.max(funcs[0], axis=0)

    def bound(L, kxs, Lt=None):
        """E of the module docstring for synthesis degrees L, truncation at Lt (default L: Z, Mom; Q: L - 2)."""
        Lt = L if Lt is None else Lt
        L = np.asarray(L, dtype=np.float64)
        tail = _tails(kxs, Lt)
        rho = 1.01 * _U * zmax * ((L + 1) ** 3 + nq * (L + 1) ** 2)
        return tail * wsum * (L + 2) + (L + 1) * TOL_Q * zmax / 3.0 + rho

    kxs = kx[syn]
    ez = bound(dz, kxs)
    em = bound(dm, kxs)
    eq = bound([d + 2 for d in dm], kxs, dm) if want_q else np.zeros(Hs)
    # --- assemble: synthesised heads (unscaled, C = 0), the rest by the expansion
    C = np.zeros((m, H))
    Z = np.empty((m, H))
    Mom = np.empty((m, H, 3))
    Q = np.empty((m, H) if want_q else (0, 0))
    bad = np.zeros((m, H), dtype=np.uint8)
    ok = np.empty((m, Hs), dtype=np.bool_)
    _assemble(ZT, MT, QT, np.asarray(syn, dtype=np.int64), ez, em, eq, float(tol), float(tol_m), bool(want_q), bool(log_form),
              Z, Mom, Q, ok)
    redo = {h: np.flatnonzero(~ok[:, i]) for i, h in enumerate(syn)}
    redo.update({h: slice(None) for h in rest})
    for h, idx in redo.items():
        if isinstance(idx, np.ndarray) and idx.size == 0:
            continue
        Xs = X if isinstance(idx, slice) else np.ascontiguousarray(X[idx])
        Ce, Ze, Me, Qe, be = harmonic._expand(Xs, Y, w, np.ascontiguousarray(A[h : h + 1]), kappa[h : h + 1], [degrees[h]], [],
                                              wsum, tol, tol_m, l_max, want_q, log_form, degree_rule="adaptive", S=S,
                                              target_masses=None if target_masses is None or not isinstance(idx, slice) else target_masses)
        C[idx, h], Z[idx, h], Mom[idx, h], bad[idx, h] = Ce[:, 0], Ze[:, 0], Me[:, 0], be[:, 0]
        if want_q:
            Q[idx, h] = Qe[:, 0]
    if info is not None:
        info.synthesis = {"heads": len(syn), "grid_degree": int(Lg), "grid_points": int(nq),
                          "rejected_pairs": int(sum(np.size(v) for h, v in redo.items() if h in syn)),
                          "grid_rechecked": int(np.count_nonzero(badq))}
    return C, Z, Mom, Q, bad


harmonic.SYNTHESIS_RULE["module"] = sys.modules[__name__]  # the degree_rule "synthesis" of harmonic.moments


# ------------------------------------------------------------------ the mesh solver's head sums
#: the fewest rows of one matrix product of :func:`_synthesise_groups` (fewer: BLAS runs far below its peak)
_GROUP_ROWS = 24


def _synthesise_groups(YnT, coefT, degrees):
    """(out, order, L_used): out[k, :] = coefT[order[k], :K_k] @ YnT[:K_k, :] with the rows sorted by degree and cut
    into groups of >= _GROUP_ROWS, each at its largest degree (L_used[k] >= degrees[order[k]]: never less accurate)."""
    H = len(degrees)
    degrees = np.asarray(degrees, dtype=np.int64)
    order = np.argsort(degrees, kind="stable")
    d = degrees[order]
    cT = np.ascontiguousarray(coefT[order])
    out = np.empty((H, YnT.shape[1]))
    used = np.empty(H, dtype=np.int64)
    ng = max(1, H // _GROUP_ROWS)
    bounds = [H * j // ng for j in range(ng + 1)]
    for a, b in zip(bounds[:-1], bounds[1:]):
        L = int(d[b - 1])
        K = (L + 1) ** 2
        np.matmul(cT[a:b, :K], YnT[:K], out=out[a:b])
        used[a:b] = L
    return out, order, used


@njit(parallel=True)
def _assemble_z(ZT, hidx, ez, tol, logZ, Zn, ok, phi, zs, mob):  # pragma: no cover - compiled
    """For the rows k with h = hidx[k] >= 0: Zn[i, h] = ZT[k, i], logZ[i, h] = log ZT[k, i] and ok[i, h] =
    (3 ez[k] <= tol ZT[k, i]) (the a-posteriori test of Z), and the head sums phi_i = sum_h log Z_h, zs_i = sum_h Z_h,
    mob_i = sum_h 1 / Z_h (summed in the fixed order of the rows). Blocks of 64 cells: the block's columns of ZT stay
    in cache while each cell's row of the outputs is written."""
    nrow, m = ZT.shape
    nblk = (m + 63) // 64
    for b in prange(nblk):
        for i in range(b * 64, min(m, b * 64 + 64)):
            p = 0.0
            s = 0.0
            r = 0.0
            for k in range(nrow):
                h = hidx[k]
                if h < 0:  # a row of another field synthesised alongside
                    continue
                z = ZT[k, i]
                Zn[i, h] = z
                ok[i, h] = 3.0 * ez[k] <= tol * z
                if z > 0.0:
                    lz = math.log(z)
                    logZ[i, h] = lz
                    p += lz
                    s += z
                    r += 1.0 / z
                else:
                    logZ[i, h] = -np.inf
            phi[i] = p
            zs[i] = s
            mob[i] = r


@njit(parallel=True)
def _rate_sums(X, w, zs, mob, a, H, part):  # pragma: no cover - compiled
    """Per chunk c: part[c] = (sum w xi, sum w |P_x a|^2 / (mob / H)), xi = zs / H (chunks fixed: the same bits on any
    thread count)."""
    n = X.shape[0]
    nch = part.shape[0]
    csize = (n + nch - 1) // nch
    for c in prange(nch):
        e_sum = 0.0
        g2 = 0.0
        for i in range(c * csize, min(n, (c + 1) * csize)):
            ax = a[i, 0] * X[i, 0] + a[i, 1] * X[i, 1] + a[i, 2] * X[i, 2]
            v0 = a[i, 0] - ax * X[i, 0]
            v1 = a[i, 1] - ax * X[i, 1]
            v2 = a[i, 2] - ax * X[i, 2]
            e_sum += w[i] * zs[i] / H
            g2 += w[i] * (v0 * v0 + v1 * v1 + v2 * v2) / (mob[i] / H)
        part[c, 0] = e_sum
        part[c, 1] = g2


def _grid_sums(X, w, As, Lg: int, want_q: bool, tol_m: float, wsum: float, l_max: int):
    """(Xq, Wq, Z, Mom, Q, S) at the Gauss grid of degree Lg: the true sums (unscaled) of the heads As over the sources
    X, w by the expansion (Z at TOL_Q, the moments at tol_m / 100; grid points it rejects directly), and the source
    moments S it used; None where a head needs a degree above ``l_max`` at the grid."""
    Xq, Wq = gauss_grid(Lg)
    kq = harmonic.kappa_max(Xq, As)
    dq = [int(d) for d in _degrees(kq, TOL_Q, l_max)]
    if min(dq) < 0:
        return None
    S = harmonic.source_moments(X, w, max(max(dq), Lg), want_q)
    tq_m = max(TOL_Q, tol_m / 100.0)
    Cq, Zq, Mq, Qq, badq = harmonic._expand(Xq, X, w, As, kq, dq, [], wsum, TOL_Q, tq_m, l_max, want_q, False,
                                            degree_rule="adaptive", S=S)
    _direct_at_grid(Xq, X, w, As, [], badq, want_q, Cq, Zq, Mq, Qq)
    sc = np.exp(Cq)
    return Xq, Wq, Zq * sc, Mq * sc[:, :, None], (Qq * sc if want_q else None), S


def _per_cell_heads(X, w, A, V, rest, want_q: bool, tol: float, tol_m: float, logZ, Zn, phi, zs, mob, a, M) -> float:
    """The heads ``rest`` (beyond SYNTHESIS_L_MAX) per cell by the adaptive expansion (moments by mass): their log Z, Z,
    head sums, velocity terms and M_h written in place; returns their Ito sum sum_h sum_i w_i Q_h(x_i)."""
    from spherepde.attention.sums import attention_moments

    H = A.shape[0]
    lz_r, yb_r, qb_r = attention_moments(X, X, w, np.ascontiguousarray(A[rest]), want_q=want_q, log=True, summation="fast",
                                         tol=tol, tol_moments=tol_m, target_masses=w)
    Zr = np.exp(lz_r)
    logZ[:, rest], Zn[:, rest] = lz_r, Zr
    phi += lz_r.sum(axis=1)
    zs += Zr.sum(axis=1)
    mob += (1.0 / Zr).sum(axis=1)
    a += np.einsum("hkl,ihl->ik", V[rest], yb_r) / H
    M[rest] = np.einsum("ih,ik,ihl->hkl", w[:, None] * Zr, X, yb_r)
    return float(np.sum(w[:, None] * Zr * qb_r)) if want_q else 0.0


def _redo_rejected(X, w, A, ok, wsum: float, tol: float, l_max: int, S, logZ, Zn, phi, zs, mob) -> None:
    """The (cell, head) pairs that failed the test, by the expansion (per head, its rejected cells; the grid's source
    moments), and the head sums by difference (the synthesised value's terms out, the expansion's in)."""
    for h in np.flatnonzero(~ok.all(axis=0)):
        idx = np.flatnonzero(~ok[:, h])
        z_old = Zn[idx, h]
        had = z_old > 0.0
        lz = _expand_log_z(np.ascontiguousarray(X[idx]), X, w, A[h : h + 1], wsum, tol, l_max, S)
        z = np.exp(lz)
        phi[idx] += lz - np.where(had, logZ[idx, h], 0.0)
        zs[idx] += z - np.where(had, z_old, 0.0)
        mob[idx] += 1.0 / z - np.where(had, 1.0 / np.where(had, z_old, 1.0), 0.0)
        logZ[idx, h], Zn[idx, h] = lz, z


def cell_rates(X, w, A, V, f, sigma: float, *, tol: float, tol_m: float, l_max: int = harmonic.L_MAX):
    """The rates of :func:`spherepde.model.fused.fused_rates` (softmax gradient heads, sources = targets = the cell
    nodes X with masses w) without the per-(cell, head) moments, or None where this route does not apply
    (``tol`` < :data:`TOL_MIN`, too few cells for the grid, no head within :data:`SYNTHESIS_L_MAX`, the cells' harmonics
    above :data:`BASIS_BYTES_MAX`).

    * log Z_h at every cell: synthesised from the Gauss grid with the a-posteriori test of the module docstring
      (relative error of Z_h <= tol / 2; rejected pairs by the expansion, and from there directly);
      Phi, xi, the energy and the mobility (1/H) sum_h 1/Z_h follow from them;
    * M_h = sum_i w_i x_i Mom_h(x_i)^T and sum_h sum_i w_i Q_h(x_i) (the Ito term): quadratures on the grid with the
      weights omega_q = W_q sum_lm Y_lm(x_q) R_lm, R_lm = sum_i w_i (1, x_i) Y_lm(x_i), exact for the degree-L parts of
      Mom_h and Q_h (L of ``tol_m``), so they err by the truncation and the grid's evaluation error as above;
    * the nodal velocity v = P_x a, a = (1/H) sum_h V_h Mom_h / Z_h, for the nodal G^2: a is a head sum of smooth
      functions, sampled on the grid and synthesised at the grid's degree -- an interpolant without a proved bound
      (measured against the per-cell route by tests/attention/test_synthesis.py and spherepde.studies.bench_h100).

    Heads whose degree would pass :data:`SYNTHESIS_L_MAX` (large ||A_h||) are summed per cell by the adaptive
    expansion (moments by mass, as the per-cell route) and enter the same sums. Returns (logZ (m, H), dict with
    energy, dEdt_partial, G2, Phi, xi, M, Z) or None.
    """
    m, H = X.shape[0], A.shape[0]
    want_q = sigma > 0
    q2 = 2 if want_q else 0
    if tol < TOL_MIN or m == 0 or H == 0 or d_of(X) != 3:
        return None
    wsum = float(np.sum(w))
    if not wsum > 0 or np.any(w < 0):
        return None
    kx_all = np.linalg.norm(A, 2, axis=(1, 2))  # >= max_j |A_h y_j| (an upper bound is all the tails need: T_L increases)
    Lz_all = _degrees(kx_all, tol, SYNTHESIS_L_MAX, 0)
    Lm_all = _degrees(kx_all, tol_m, SYNTHESIS_L_MAX, q2)
    fits = (Lz_all >= 0) & (Lm_all >= 0) & (Lm_all + q2 <= SYNTHESIS_L_MAX)
    syn = np.flatnonzero(fits)
    rest = np.flatnonzero(~fits)
    if syn.size == 0:
        return None
    Lz, Lm, kx = Lz_all[syn], Lm_all[syn], kx_all[syn]
    Lg = int(max(Lz.max(), Lm.max() + q2))
    if m < MIN_TARGETS_PER_POINT * (Lg + 1) * (2 * Lg + 1) or 8 * m * (Lg + 1) ** 2 > BASIS_BYTES_MAX:
        return None
    Hs = syn.size
    As = np.ascontiguousarray(A[syn])
    grid = _grid_sums(X, w, As, Lg, want_q, tol_m, wsum, l_max)
    if grid is None:
        return None
    Xq, Wq, Zq, Mq, Qq, S = grid
    nq = Xq.shape[0]
    Yq = _harmonics(Xq, Lg, _BASIS, ("grid", Lg))
    YnT = _harmonics_t(X, Lg)
    # log Z_h at the cells (tested per pair, with their head sums) and the head-summed velocity field
    # a = (1/H) sum_h V_h Ybar_h, synthesised alongside (3 more rows of the same products)
    with np.errstate(divide="ignore", invalid="ignore"):
        Ybq = Mq / Zq[:, :, None]
    a_q = Ybq.reshape(nq, 3 * Hs) @ np.ascontiguousarray(V[syn].transpose(0, 2, 1)).reshape(3 * Hs, 3) / H
    coef = Yq.T @ (Wq[:, None] * np.column_stack([Zq, a_q]))  # (K, Hs + 3)
    La = int(Lz.max())  # a at the largest degree of Z (a is not band-limited: no degree is exact for it)
    ZT, order, used = _synthesise_groups(YnT, np.ascontiguousarray(coef.T), np.append(Lz, [La, La, La]))
    a = np.ascontiguousarray(ZT[np.argsort(order)[Hs:]].T)  # (m, 3)
    head = order < Hs
    hidx = np.where(head, syn[np.where(head, order, 0)], -1)  # each row's head (-1: a row of a)
    zmax = np.max(Zq, axis=0)[np.where(head, order, 0)]
    L = used.astype(np.float64)
    tail = _tails(kx[np.where(head, order, 0)], used)
    ez = tail * wsum * (L + 2) + (L + 1) * TOL_Q * zmax / 3.0 + 1.01 * _U * zmax * ((L + 1) ** 3 + nq * (L + 1) ** 2)
    logZ = np.empty((m, H))
    Zn = np.empty((m, H))
    ok = np.ones((m, H), dtype=np.bool_)
    phi, zs, mob = np.empty(m), np.empty(m), np.empty(m)
    _assemble_z(ZT, hidx, ez, float(tol), logZ, Zn, ok, phi, zs, mob)
    M = np.empty((H, 3, 3))
    qsum = 0.0
    if rest.size:  # the heads beyond SYNTHESIS_L_MAX: per cell, as the per-cell route
        qsum += _per_cell_heads(X, w, A, V, rest, want_q, tol, tol_m, logZ, Zn, phi, zs, mob, a, M)
    _redo_rejected(X, w, A, ok, wsum, tol, l_max, S, logZ, Zn, phi, zs, mob)
    # the grid quadratures of M_h and the Ito term
    R = _to_columns(S[:4], Lg).T  # (K, 4): sum_i w_i (1, x_i) Y_lm(x_i), the source moments in real_sph_harm's columns
    omega = Wq[:, None] * (Yq @ R)  # (nq, 4)
    M[syn] = (omega[:, 1:].T @ Mq.reshape(nq, 3 * Hs)).reshape(3, Hs, 3).transpose(1, 0, 2)  # M_h[k, l] = sum_q omega_qk Mom_hl
    part = np.empty((32, 2))
    _rate_sums(X, w, zs, mob, a, H, part)
    Phi, xi = phi / H, zs / H
    tot = part.sum(axis=0)
    dEdt = float(np.sum(np.asarray(f) * M))
    if want_q:
        qsum += float(omega[:, 0] @ Qq.sum(axis=1))
        dEdt += (sigma**2 / 4) * (H * tot[0] + qsum)
    rates = {"energy": float(tot[0] / 2), "dEdt_partial": dEdt / (2 * H), "G2": float(tot[1]), "Phi": Phi, "xi": xi, "M": M,
             "Z": Zn}  # Z: for scheme_g2 (no exponential per edge), popped by the mesh solver
    return logZ, rates


def _to_columns(S, L: int) -> np.ndarray:
    """Source moments S (rows, >= (L+1)^2) from harmonic's internal layout (at l^2: m = 0..l cosines, then m = 1..l sines)
    to the columns of real_sph_harm (l^2 + l + m for Y_lm, l^2 + l - m for Y_l,-m), degree <= L."""
    idx = _column_map(L)
    return np.ascontiguousarray(S[:, idx])


def _column_map(L: int) -> np.ndarray:
    idx = np.empty((L + 1) ** 2, dtype=np.int64)
    for l in range(L + 1):
        o = l * l
        for m in range(l + 1):
            idx[o + l + m] = o + m  # cosine / m = 0
        for m in range(1, l + 1):
            idx[o + l - m] = o + l + m  # sine
    return idx


def _expand_log_z(Xs, Y, w, Ah, wsum: float, tol: float, l_max: int, S) -> np.ndarray:
    """log Z of one head (Ah (1, 3, 3)) at the targets Xs by the adaptive expansion with the source moments S (rows
    >= 4, degree high enough), its rejected targets directly: the expansion's error statement."""
    kap = harmonic.kappa_max(Xs, Ah)
    deg = [harmonic.choose_degree(float(kap[0]), tol, l_max)]
    if deg[0] < 0:
        C, Z, _, _ = direct_scaled(Xs, Y, w, Ah, False, True)
        return np.log(Z[:, 0]) + C[:, 0]
    if S.shape[1] < (deg[0] + 1) ** 2:
        S = harmonic.source_moments(Y, w, deg[0], False)
    C, Z, M, _, bad = harmonic._expand(Xs, Y, w, Ah, kap, deg, [], wsum, tol, 1.0, l_max, False, True,
                                       degree_rule="adaptive", S=np.ascontiguousarray(S[:4]))

    def put(idx, h, res):
        Cd, Zd, _, _ = res
        Z[idx, h] = np.log(Zd) + Cd

    harmonic._recheck(Xs, Ah, bad, lambda X2, A2: direct_scaled(X2, Y, w, A2, False, True), put, False, tol,
                      harmonic.logging.DEBUG, "synthesis")
    return Z[:, 0]


def d_of(X) -> int:
    return int(X.shape[1]) if X.ndim == 2 else -1


def _attention_moments(X, Y, w, A, tol):
    from spherepde.attention.sums import attention_moments

    return attention_moments(np.ascontiguousarray(X), Y, w, np.ascontiguousarray(A), log=True, summation="fast", tol=tol)
