"""The one entry point to the attention sums: direct, spherical-harmonic (S^2) or Bessel/FFT (S^1) summation.

For targets x_i, sources y_j with weights w_j and attention matrices A_h
(docs/model.md, "Attention sums"):

    Z_h(x_i) = sum_j w_j exp(x_i^T A_h y_j),   Y_h(x_i) = sum_j w_j exp(x_i^T A_h y_j) y_j,
    Q_h(x_i) = sum_j w_j exp(x_i^T A_h y_j) (x_i . y_j)^2.

:func:`attention_moments` chooses between the exact O(m n H) Numba kernels
(:mod:`spherepde.attention.direct`) and, with a-posteriori error control, the O((m H + n) L^2)
spherical-harmonic expansion on S^2 (:mod:`spherepde.attention.harmonic`) or the
O((m H + n) K) Bessel series / O(H n log n) FFT on S^1 (:mod:`spherepde.attention.circle`),
and undoes the overflow-safe scaling all of them return.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from spherepde._registry import Registry
from spherepde.attention import circle, harmonic
from spherepde.attention.direct import direct_scaled

__all__ = ["SUMMATION_MODES", "SummationMode", "attention_moments"]

#: ``summation="auto"`` does not consider the fast path below this many (target, source,
#: head) triples; above it the cost model of :func:`spherepde.attention.harmonic.predicted_costs`
#: decides. Measured side by side on the idle 2-core machine (``spherepde bench`` entry
#: b_auto_crossover, log form with Q): the fast path is 1.8x / 3.4x / 2.0x / 2.6x faster at
#: 640 / 1,280 / 2,000 / 3,000 points with one head and 3.2x at 1,280 with ten; the cost
#: model is conservative and picks it from 3,000 points (one head) and 1,280 (ten heads).
#: With a second process competing for the cores the fast path's several parallel regions
#: lose more than the direct kernel's one (0.8-0.9x at those two sizes).
_AUTO_MIN_WORK = 1_000_000


#: The same threshold on the circle (d = 2), where the Bessel series / FFT cost little to set up:
#: measured on the 2-core machine (one head A = 5 I, log form, m = n points of a uniform grid),
#: direct and fast take the same time at 128 points (16,384 triples) and the fast sums are 3x /
#: 10x faster at 256 / 512 points; from this many triples the circle's cost model decides.
_AUTO_MIN_WORK_CIRCLE = 30_000


def auto_considers_fast(m: int, n: int, H: int) -> bool:
    """Whether ``summation="auto"`` lets the cost model weigh the fast sums for m targets, n sources, H heads."""
    return m * n * H >= _AUTO_MIN_WORK


def auto_considers_circle_sums(m: int, n: int, H: int) -> bool:
    """The same on the circle (``_AUTO_MIN_WORK_CIRCLE``)."""
    return m * n * H >= _AUTO_MIN_WORK_CIRCLE


@dataclass(frozen=True)
class SummationMode:
    """How :func:`attention_moments` sums: ``tries_fast(m, n, H)`` says whether the fast
    route is tried for m targets, n sources and H heads (d = 3: spherical harmonics, d = 2:
    Bessel series / FFT; with ``simd`` only); ``harmonic`` is the ``mode`` that route then runs in
    (:func:`spherepde.attention.harmonic.moments`, :func:`spherepde.attention.circle.moments`:
    ``"fast"`` keeps to direct sums only where it cannot meet the tolerance, ``"auto"`` also
    where it is not predicted cheaper)."""

    tries_fast: Callable[[int, int, int], bool]
    harmonic: str = "fast"
    #: the rule on the circle (d = 2); None: ``tries_fast``
    tries_fast_circle: Callable[[int, int, int], bool] | None = None

    def tries(self, m: int, n: int, H: int, d: int) -> bool:
        """``tries_fast`` (d = 3) or ``tries_fast_circle`` (d = 2) for m targets, n sources, H heads."""
        rule = self.tries_fast_circle if (d == 2 and self.tries_fast_circle is not None) else self.tries_fast
        return bool(rule(m, n, H))


#: The summation modes: the ``summation`` argument of :func:`attention_moments` and the config
#: key ``solver.summation`` name one; each entry is a :class:`SummationMode`.
SUMMATION_MODES = Registry("summation mode", key="solver.summation")
SUMMATION_MODES.register("direct", SummationMode(lambda m, n, H: False), about="the exact O(m n H) sums (spherepde.attention.direct)")
SUMMATION_MODES.register("fast", SummationMode(lambda m, n, H: True, "fast"), about="with error control: spherical harmonics on S^2, O((m H + n) L^2); Bessel series or FFT on S^1")
SUMMATION_MODES.register("auto", SummationMode(auto_considers_fast, "auto", auto_considers_circle_sums), about="fast where it meets the tolerance and is predicted cheaper, else direct")


def attention_moments(X, Y, w, A, *, want_q: bool = False, log: bool = False, simd: bool = True,
                      summation: str = "auto", tol: float = 1e-10, tol_moments: float | None = None,
                      degree_rule: str = "adaptive", target_masses=None):
    """Attention sums Z_h, Y_h (and Q_h) at targets X over weighted sources Y.

    Parameters
    ----------
    X : (m, d) float array, unit target points.
    Y : (n, d) float array, unit source points.
    w : (n,) float array, non-negative source weights (masses).
    A : (H, d, d) float array, attention matrices A_h.
    want_q : also return Q_h(x_i) = sum_j w_j e^{x_i A_h y_j} (x_i . y_j)^2.
    log : return log Z and the moments divided by Z (Y/Z, Q/Z) instead of the raw
        sums; this form never overflows.
    simd : for d = 3 and ||A_h||_2 <= 64 use the vectorised kernel (polynomial
        exponential, reassociated sums; agrees with the scalar one to round-off, as
        tests/test_kernels.py checks);
        ``False`` forces the scalar online-log-sum-exp kernel (any d, any ||A||) and
        direct summation.
    summation : ``"direct"`` (the exact O(m n H) sums above), ``"fast"`` (d = 3:
        spherical-harmonic expansion, :mod:`spherepde.attention.harmonic`, O((m H + n) L^2);
        d = 2: Bessel series or FFT, :mod:`spherepde.attention.circle`, for heads with A_h in
        span{I, J}; with relative error of Z and error of Y/Z, Q/Z at most ``tol``; heads or
        targets where that cannot be guaranteed are summed directly, with a log record) or ``"auto"``
        (default: "fast" where it meets ``tol`` and is predicted to be cheaper, else
        "direct"; small problems are always direct).
    tol : accuracy of the fast path (relative error of Z; error of the softmax
        averages Y/Z and Q/Z, whose norm is at most 1).
    tol_moments : accuracy of Y/Z and Q/Z alone (default ``tol``; at least ``tol``): the
        fast path truncates them at the lower degree this allows (the moments feed only
        the energy diagnostics where the velocity comes from log Z); d = 3 only (on the
        circle all sums meet ``tol``).
    degree_rule : how the spherical-harmonic path (d = 3) picks its degree, both meeting ``tol``:
        ``"adaptive"`` (default) stops each block of targets at the first degree that passes the
        a-posteriori test (:mod:`spherepde.attention.adaptive`), ``"a-priori"`` takes the degree
        of the worst-case bound (the previous kernel).
    target_masses : (m,) masses of the targets when Y/Z and Q/Z feed only mass-weighted sums: their
        tolerance is then loosened where the mass is small, keeping ``tol_moments`` on average
        (:func:`spherepde.attention.harmonic.moments`); d = 3 fast path with the adaptive rule only.

    Returns
    -------
    Z : (m, H)   (or log Z)
    Mom : (m, H, d)   sum_j w_j e^{...} y_j   (or divided by Z)
    Q : (m, H) or None
    """
    how = SUMMATION_MODES.get(summation)
    X = np.ascontiguousarray(X, dtype=np.float64)
    Y = np.ascontiguousarray(Y, dtype=np.float64)
    w = np.ascontiguousarray(w, dtype=np.float64)
    A = np.ascontiguousarray(A, dtype=np.float64)
    if X.ndim != 2 or Y.ndim != 2 or A.ndim != 3 or X.shape[1] != Y.shape[1] or A.shape[1:] != (X.shape[1],) * 2 or w.shape != (Y.shape[0],):
        raise ValueError(
            f"attention_moments: inconsistent shapes X{X.shape}, Y{Y.shape}, w{w.shape}, A{A.shape}; "
            "expected X (m, d), Y (n, d), w (n,), A (H, d, d)"
        )
    m, d = X.shape
    H = A.shape[0]
    if simd and d == 2 and how.tries(m, Y.shape[0], H, d):
        C, Z, Mom, Q, _info = circle.moments(X, Y, w, A, want_q=want_q, tol=tol, mode=how.harmonic, log_form=log)
        if log:  # already in log form (log Z, Mom/Z, Q/Z)
            return Z, Mom, (Q if want_q else None)
    elif not simd or d != 3 or not how.tries_fast(m, Y.shape[0], H):
        C, Z, Mom, Q = direct_scaled(X, Y, w, A, want_q, simd)
    else:
        C, Z, Mom, Q, _info = harmonic.moments(X, Y, w, A, want_q=want_q, tol=tol, tol_moments=tol_moments, mode=how.harmonic, log_form=log,
                                             degree_rule=degree_rule, target_masses=target_masses)
        if log:  # already in log form (log Z, Mom/Z, Q/Z)
            return Z, Mom, (Q if want_q else None)
    if log:
        Mom /= Z[:, :, None]
        if want_q:
            Q = Q / Z
        logZ = np.log(Z) + C
        return logZ, Mom, (Q if want_q else None)
    scale = np.exp(C)
    Z *= scale
    Mom *= scale[:, :, None]
    if want_q:
        Q *= scale
        return Z, Mom, Q
    return Z, Mom, None
