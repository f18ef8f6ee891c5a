"""The target expansions of :mod:`spherepde.attention.harmonic`, degree by degree with an a-posteriori stop.

Same sums, same source moments, same error statement as the a-priori kernel
(:func:`spherepde.attention.harmonic._target_kernel`); only the degree is chosen differently.
With b = A_h^T x, kappa = |b| and the scaled partial sums

    Z~_l = sum_{l' <= l} 4 pi exp(-kappa) i_l'(kappa) sum_m Y_l'm(b / kappa) S_l'm,

the truncation bound |Z~_l - Z_s| <= sum w exp(-kappa) T_l(kappa) (module docstring of
:mod:`~spherepde.attention.harmonic`: |P_l| <= 1, T_l(kappa) = sum_{l' > l} (2l'+1) i_l'(kappa))
holds at *every* degree l, not only at the a-priori one. The harmonic module accepts a target
when 3 eta <= tol Z~_s, eta = sum w (exp(-kappa) T_L(kappa) + rho), and proves from that alone
(whatever L is) |Z~ - Z| / Z <= tol / 2 and ||Mom~/Z~ - Mom/Z|| < tol. So a block of _P
targets may stop at the first degree l at which every target of the block passes the test:

    4 sum w (exp(-kappa_p) T_l(kappa_q) + rho) <= tol Z~_l,p   for all lanes p,

with kappa_q >= kappa_p the block's largest kappa rounded up to a multiple of 1/64 (T_l is
increasing in kappa) and the factor 4 > 3 leaving room for the change of Z~ by the later
degrees (at most eta <= tol Z~_l / 4), so the unchanged final test of ``_store_block`` (3 eta <=
tol Z~ at the degree reached) passes. The moments Mom, Q stop the same way at ``tol_m`` (they
are accumulated up to that degree, Z alone beyond). The a-priori degree
(:func:`spherepde.attention.harmonic.degree_table` at ``tol``) is the upper limit: targets that
do not pass by then are flagged and summed directly, exactly as before.

Why it pays: the a-priori degree assumes the worst density (Z = exp(-kappa) sum w, all mass
antipodal to b); where the target sees mass around it, Z~_s is larger by up to exp(2 kappa) and the
test passes several degrees earlier (measured by ``spherepde.studies.bench_h100``). The
Legendre recurrence runs along with the accumulation (three rows of q kept), so the degrees
not reached cost nothing but the Bessel coefficients (computed to the a-priori degree).
"""

from __future__ import annotations

import math
import sys

import numpy as np

from spherepde._numba import SIMD_FASTMATH, njit, prange
from spherepde.attention import harmonic
from spherepde.attention.harmonic import _P, _azimuth_v, _bessel_block, _block_centres, _load_block, _scaled_il, _store_block

__all__ = ["tail_table"]

_TAILS: dict = {}


def _tail_row(kappa: float, l_max: int) -> np.ndarray:
    """T_L(kappa) = sum_{l > L} (2l+1) i_l(kappa) for L = 0..l_max, upper bounds (the series summed to
    max(l_max, 2 kappa) + 40, the rest bounded geometrically as in :func:`~spherepde.attention.harmonic.log_tail_bound`),
    times (1 + 1e-12) against the summation's round-off; inf where it overflows."""
    if kappa <= 0.0:
        return np.zeros(l_max + 1)
    top = int(max(l_max, 2.0 * kappa)) + 40
    ls = np.arange(0, top + 1)
    terms = (2 * ls + 1) * _scaled_il(ls, kappa)  # scaled by exp(-kappa)
    r = kappa / (2 * top + 1)
    rest = terms[-1] * r / (1.0 - r)
    suffix = np.cumsum(terms[::-1])[::-1]  # suffix[l] = sum_{l' >= l}
    tails = np.append(suffix[1:], 0.0)[: l_max + 1] + rest
    with np.errstate(over="ignore"):
        return tails * (1.0 + 1e-12) * math.exp(kappa) if kappa < 700.0 else np.full(l_max + 1, np.inf)


def tail_table(nq: int, l_max: int) -> np.ndarray:
    """(nq, l_max + 1) array: row kq holds the tail bounds T_L(kq / 64), L = 0..l_max (cached, grown as needed)."""
    tab = _TAILS.get(l_max)
    if tab is None or tab.shape[0] < nq:
        old = 0 if tab is None else tab.shape[0]
        rows = [_tail_row(k / 64.0, l_max) for k in range(old, max(nq, 2 * old))]
        tab = np.concatenate(([tab] if tab is not None else []) + [np.array(rows).reshape(-1, l_max + 1)])
        tab.flags.writeable = False
        _TAILS[l_max] = tab
    return tab[:nq]


@njit(fastmath=SIMD_FASTMATH)
def _legendre_row(z, l, a, b, diag, sub, q0, q1, q2):  # pragma: no cover - compiled
    """Row l of the recurrences of :func:`~spherepde.attention.harmonic._legendre_v`: q0[m, p] = q_lm(z[p]),
    m = 0..l, from q1 = row l-1 and q2 = row l-2 (the same operations in the same order)."""
    if l == 0:
        for p in range(_P):
            q0[0, p] = 0.28209479177387814  # 1/sqrt(4 pi)
        return
    if l == 1:
        for p in range(_P):
            q0[0, p] = sub[0] * z[p] * q1[0, p]
            q0[1, p] = diag[1] * q1[0, p]
        return
    for m in range(l - 1):
        alm = a[l, m]
        blm = b[l, m]
        for p in range(_P):
            q0[m, p] = alm * (z[p] * q1[m, p] - blm * q2[m, p])
    sl = sub[l - 1]
    dl = diag[l]
    for p in range(_P):
        q0[l - 1, p] = sl * z[p] * q1[l - 1, p]
        q0[l, p] = dl * q1[l - 1, p]


@njit(fastmath=SIMD_FASTMATH)
def _accumulate_degree(S, l, nmom, cl, ql, cr, ci, acc):  # pragma: no cover - compiled
    """acc[s, p] += sum_m cl[l, p] (Y_{l,m}(c_p) S[s, l,m] + Y_{l,-m}(c_p) S[s, l,-m]) for the first ``nmom``
    moments (1, 4 or 10) of the one degree l (ql = row l of q); the loop body of
    :func:`~spherepde.attention.harmonic._accumulate`."""
    a0 = acc[0]
    o = l * l
    for m in range(l + 1):
        k0 = S[0, o + m]
        j0 = S[0, o + l + m] if m > 0 else 0.0
        if nmom == 1:
            for p in range(_P):
                t = cl[l, p] * ql[m, p]
                a0[p] += t * (cr[m, p] * k0 + ci[m, p] * j0)
            continue
        a1 = acc[1]
        a2 = acc[2]
        a3 = acc[3]
        k1 = S[1, o + m]
        k2 = S[2, o + m]
        k3 = S[3, o + m]
        j1 = S[1, o + l + m] if m > 0 else 0.0
        j2 = S[2, o + l + m] if m > 0 else 0.0
        j3 = S[3, o + l + m] if m > 0 else 0.0
        for p in range(_P):
            t = cl[l, p] * ql[m, p]
            uc = t * cr[m, p]
            us = t * ci[m, p]
            a0[p] += uc * k0 + us * j0
            a1[p] += uc * k1 + us * j1
            a2[p] += uc * k2 + us * j2
            a3[p] += uc * k3 + us * j3
        if nmom == 10:
            for s in range(4, 10, 3):
                g0 = acc[s]
                g1 = acc[s + 1]
                g2 = acc[s + 2]
                k0 = S[s, o + m]
                k1 = S[s + 1, o + m]
                k2 = S[s + 2, o + m]
                j0 = S[s, o + l + m] if m > 0 else 0.0
                j1 = S[s + 1, o + l + m] if m > 0 else 0.0
                j2 = S[s + 2, o + l + m] if m > 0 else 0.0
                for p in range(_P):
                    t = cl[l, p] * ql[m, p]
                    uc = t * cr[m, p]
                    us = t * ci[m, p]
                    g0[p] += uc * k0 + us * j0
                    g1[p] += uc * k1 + us * j1
                    g2[p] += uc * k2 + us * j2


@njit(fastmath=SIMD_FASTMATH)
def _passes(acc, ek, T, wsum, rho, tol):  # pragma: no cover - compiled
    """Whether every lane passes 4 wsum (ek[p] T + rho) <= tol acc[0, p] (ek = exp(-kappa_p))."""
    ok = True
    for p in range(_P):
        ok = ok and (4.0 * wsum * (ek[p] * T + rho) <= tol * acc[0, p])
    return ok


@njit(parallel=True, fastmath=SIMD_FASTMATH)
def _target_kernel(X, A, S, want_q, deg_z, tails, wsum, tol_z, tol_mt, rho, log_form,
                           a, b, diag, sub, C, Z, M, Q, bad, degs):  # pragma: no cover - compiled
    """The expansions of all heads at the targets X with the degree stopped a posteriori (module docstring).

    Arguments and outputs as :func:`spherepde.attention.harmonic._target_kernel`, except: ``deg_z[kq]`` is the
    upper limit of the degree (the a-priori degree at ``tol_z``, -1: too large, flagged), ``tails[kq, l]`` =
    T_l(kq / 64), ``degs[kb, h]`` receives the degrees reached by block kb for head h (Z, moments), and the
    moments' tolerance is per target, ``tol_mt[i]`` (a block uses its targets' smallest)."""
    m_t = X.shape[0]
    H = A.shape[0]
    nmom = 10 if want_q else 4
    ntab = deg_z.shape[0]
    Lmax = 0
    for k in range(ntab):
        Lmax = max(Lmax, deg_z[k])
    nblk = (m_t + _P - 1) // _P
    for kb in prange(nblk):
        q = np.empty((3, Lmax + 1, _P))
        cr = np.empty((Lmax + 1, _P))
        ci = np.empty((Lmax + 1, _P))
        cl = np.empty((Lmax + 1, _P))
        re = np.empty(_P)
        im = np.empty(_P)
        rr = np.empty(_P)
        ek = np.empty(_P)
        x0 = np.empty(_P)
        x1 = np.empty(_P)
        x2 = np.empty(_P)
        c0 = np.empty(_P)
        c1 = np.empty(_P)
        c2 = np.empty(_P)
        kap = np.empty(_P)
        acc = np.empty((nmom, _P))
        i0 = kb * _P
        nv = min(_P, m_t - i0)
        _load_block(X, i0, nv, x0, x1, x2)
        tol_m = tol_mt[i0]
        for p in range(1, nv):
            tol_m = min(tol_m, tol_mt[i0 + p])
        for h in range(H):
            kmax = _block_centres(A, h, x0, x1, x2, kap, c0, c1, c2)
            for p in range(nv):
                C[i0 + p, h] = kap[p]
            kq = min(int(math.ceil(kmax * 64.0)), ntab - 1)
            Ltop = deg_z[kq]
            if Ltop < 0:
                for p in range(nv):
                    bad[i0 + p, h] = 1
                degs[kb, h, 0] = -1
                degs[kb, h, 1] = -1
                continue
            kmin = kap[0]
            for p in range(_P):
                kmin = min(kmin, kap[p])
                ek[p] = math.exp(-kap[p])
            _bessel_block(kap, kmin, Ltop, Ltop + 16 + int(kmax), cl, rr)
            _azimuth_v(c0, c1, Ltop, cr, ci, re, im)
            for s in range(nmom):
                for p in range(_P):
                    acc[s, p] = 0.0
            nm = nmom
            Lm = Ltop
            Lz = Ltop
            for l in range(Ltop + 1):
                ql = q[l % 3]
                _legendre_row(c2, l, a, b, diag, sub, ql, q[(l + 2) % 3], q[(l + 1) % 3])
                _accumulate_degree(S, l, nm, cl, ql, cr, ci, acc)
                T = tails[kq, l]
                if nm > 1 and _passes(acc, ek, T, wsum, rho, tol_m):
                    nm = 1
                    Lm = l
                if nm == 1 and _passes(acc, ek, T, wsum, rho, tol_z):
                    Lz = l
                    break
            degs[kb, h, 0] = Lz
            degs[kb, h, 1] = Lm
            _store_block(acc, kap, x0, x1, x2, i0, nv, h, want_q, log_form, wsum, tails[kq, Lz], tails[kq, Lm], rho,
                         tol_z, tol_m, Z, M, Q, bad)


harmonic.ADAPTIVE_RULE["module"] = sys.modules[__name__]  # the degree_rule "adaptive" of harmonic.moments
