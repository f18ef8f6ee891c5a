"""The tokens' estimate of int rho log rho (the ``entropy`` column of noisy token runs; docs/model.md §10.3).

With token noise nu > 0 the density is smooth and its (negative) entropy int rho log rho d sigma is
finite (a point mass has +infinity); it is the nu-part of the free energy F = -s E + nu int rho log rho
(docs/model.md §10). From weighted tokens x_i (masses w_i) it is estimated by the leave-one-out
von Mises--Fisher kernel density estimate evaluated at the tokens (resubstitution; Ahmad & Lin 1976,
IEEE Trans. Inf. Theory 22, 372; leave-one-out: Joe 1989, Ann. Inst. Stat. Math. 41, 683;
the vMF kernel on the sphere: Hall, Watson & Cabrera 1987, Biometrika 74, 751):

    S = sum_i w_i log f_i(x_i),   f_i(x) = C_d(kappa) sum_{j != i} w_j exp(kappa x . x_j) / (1 - w_i),
    C_d(kappa) = kappa^{d/2 - 1} / ((2 pi)^{d/2} I_{d/2 - 1}(kappa))   (the vMF density on S^{d-1}).

The concentration kappa is the leave-one-out likelihood cross-validation choice: the kappa that
maximises S itself on the grid kappa = 2^{j/2}, j = 0..2 KAPPA_MAX_LOG2 (two chains of doublings,
so each chain takes one exponential per pair and squares it; :func:`cross_validated_kappa`). Maximising S over kappa biases it upwards by a little;
the kernel's smoothing bias is of second order in 1/kappa (a kernel keeps the mass, so the
first-order term int (K*rho - rho) vanishes). Uniform density: -log |S^{d-1}| (-log 4 pi on S^2,
-log 2 pi on S^1). Cost O(n^2 d) per grid point, in row chunks of :data:`CHUNK` tokens.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["token_entropy", "cross_validated_kappa", "loo_log_density", "log_vmf_constant", "KAPPA_MAX_LOG2", "CHUNK"]

#: The largest concentration searched is 2^KAPPA_MAX_LOG2 (a kernel width of about 2^{-KAPPA_MAX_LOG2/2} rad).
KAPPA_MAX_LOG2 = 16

#: Rows of the n x n dot-product matrix held at once (at most CELLS entries in all).
CHUNK = 512
CELLS = 2_000_000


def log_vmf_constant(kappa: float, d: int) -> float:
    """log C_d(kappa), the von Mises--Fisher normalising constant on S^{d-1} (kappa > 0)."""
    from scipy.special import ive

    nu = d / 2.0 - 1.0
    return nu * math.log(kappa) - (d / 2.0) * math.log(2.0 * math.pi) - math.log(ive(nu, kappa)) - kappa


def loo_log_density(X, w, kappas) -> np.ndarray:
    """log f_i(x_i) of the leave-one-out vMF kernel estimate (module docstring) for each kappa:
    shape (len(kappas), n). X (n, d) unit tokens, w (n,) masses summing to 1, n >= 2.

    Per row i the sum is taken relative to its nearest other token (m_i = max_{j != i} x_i . x_j),
    sum_j w_j exp(kappa (x_i . x_j - m_i)) <= 1, so nothing overflows; a kappa twice the one before it
    squares that one's exponentials instead of taking new ones (the coarse grid doubles)."""
    X = np.asarray(X, float)
    w = np.asarray(w, float)
    kappas = np.asarray(kappas, float)
    n, d = X.shape
    logc = np.array([log_vmf_constant(float(k), d) for k in kappas])
    out = np.empty((kappas.size, n))
    live = w > 0
    rows = max(1, min(CHUNK, CELLS // max(n, 1)))
    for a in range(0, n, rows):
        b = min(n, a + rows)
        G = np.minimum(X[a:b] @ X.T, 1.0)
        G[np.arange(b - a), np.arange(a, b)] = -np.inf  # leave the token itself out
        G[:, ~live] = -np.inf
        m = np.max(G, axis=1)
        G -= m[:, None]
        rest = np.log1p(-np.minimum(w[a:b], 1.0 - 1e-16))
        E, prev = None, None
        for k, kappa in enumerate(kappas):
            if E is not None and kappa == 2.0 * prev:
                E *= E
            else:
                E = np.exp(kappa * G)
            prev = kappa
            out[k, a:b] = logc[k] + kappa * m + np.log(E @ w) - rest
    return out


def token_entropy(X, w=None) -> float:
    """int rho log rho estimated from tokens X (n, d) with masses w (default 1/n): the leave-one-out
    vMF kernel estimate at its cross-validated concentration (module docstring). NaN for n < 2."""
    X = np.asarray(X, float)
    n = X.shape[0]
    w = np.full(n, 1.0 / n) if w is None else np.asarray(w, float)
    if n < 2 or np.count_nonzero(w > 0) < 2:
        return float("nan")

    chains = (2.0 ** np.arange(KAPPA_MAX_LOG2 + 1), math.sqrt(2.0) * 2.0 ** np.arange(KAPPA_MAX_LOG2))  # two doubling chains
    kappas = np.concatenate(chains)
    scores = loo_log_density(X, w, kappas) @ w
    return float(np.max(scores))


def cross_validated_kappa(X, w=None) -> float:
    """The concentration :func:`token_entropy` uses for tokens X (n, d) with masses w (default 1/n)."""
    X = np.asarray(X, float)
    n = X.shape[0]
    w = np.full(n, 1.0 / n) if w is None else np.asarray(w, float)
    kappas = np.concatenate((2.0 ** np.arange(KAPPA_MAX_LOG2 + 1), math.sqrt(2.0) * 2.0 ** np.arange(KAPPA_MAX_LOG2)))
    return float(kappas[int(np.argmax(loo_log_density(X, w, kappas) @ w))])
