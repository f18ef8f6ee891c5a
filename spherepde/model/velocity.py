"""The velocity field of the heads (docs/model.md, "The model").

For a weighted point cloud (x_i, w_i) -- tokens with w_i = 1/n, or mesh cells with
their masses m_c = rho_c |C_c| -- and heads (A_h, V_h):

    Z_h(x) = sum_j w_j e^{x A_h x_j},   Y_h(x) = sum_j w_j e^{x A_h x_j} x_j
    v(x)   = (1/H) sum_h P_x V_h Y_h(x) / Z_h(x)      (P_x = I - x x^T)

The velocity is the model's: both solvers transport with it, and the energy balance
(:mod:`spherepde.model.energy`) is evaluated on the same head fields.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from spherepde.attention import attention_moments

__all__ = ["HeadFields", "head_fields", "velocity_from_fields", "project"]


@dataclass
class HeadFields:
    """Per-head attention sums at the points of a weighted cloud (shapes (n, H), (n, H, d))."""

    Z: np.ndarray
    Y: np.ndarray
    Q: np.ndarray | None


def head_fields(X, w, A, *, want_q: bool = False, targets=None) -> HeadFields:
    """Z_h, Y_h (and Q_h) of the cloud (X, w) evaluated at ``targets`` (default X)."""
    T = X if targets is None else targets
    Z, Y, Q = attention_moments(T, X, w, A, want_q=want_q)
    return HeadFields(Z, Y, Q)


def project(X, vec):
    """P_x vec = vec - (x . vec) x, row-wise."""
    return vec - np.sum(X * vec, axis=-1, keepdims=True) * X


def velocity_from_fields(X, fields: HeadFields, V) -> np.ndarray:
    """v(x) = (1/H) sum_h P_x V_h Y_h(x) / Z_h(x), shape (n, d) (docs/model.md §1)."""
    a = np.einsum("hkl,ihl->ihk", V, fields.Y) / fields.Z[:, :, None]
    return project(X, a.mean(axis=1))
