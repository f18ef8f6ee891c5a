"""The velocity field of the heads (docs/model.md, "The model").

For a weighted point cloud (x_i, w_i) -- tokens with w_i = 1/n, or mesh cells with
their masses m_c = rho_c |C_c| -- and heads (A_h, V_h):

    Z_h(x) = sum_j w_j e^{x A_h x_j},   Y_h(x) = sum_j w_j e^{x A_h x_j} x_j
    v(x)   = (1/H) sum_h P_x V_h Y_h(x) / Z_h(x)      (P_x = I - x x^T; softmax attention)
    v(x)   = (1/H) sum_h P_x V_h Y_h(x)               (unnormalised attention, docs/model.md
                                                       "Unnormalised attention")

The velocity is the model's: both solvers transport with it, and the energy balance
(:mod:`spherepde.model.energy`) is evaluated on the same head fields.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from spherepde._registry import Registry
from spherepde.attention import attention_moments

__all__ = ["ATTENTION_KINDS", "DEFAULT_ATTENTION", "HeadFields", "head_fields", "is_normalised", "softmax_heads", "unnormalised_heads",
           "velocity_from_fields", "project"]


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


#: The attention kinds: how a head turns its sums into the value it transports with. An entry is
#: a function ``(fields, V) -> a`` of :class:`HeadFields` and the value matrices V (H, d, d)
#: returning the per-head ambient vectors a_h(x), shape (n, H, d); the velocity is
#: v(x) = (1/H) sum_h P_x a_h(x). ``softmax`` is the model's (normalised by Z_h);
#: ``unnormalised`` drops the division (a_h = V_h Y_h). Each entry carries ``normalised`` (info):
#: whether a_h is divided by Z_h, which fixes the energy structure of gradient heads (softmax:
#: v = s grad_S Phi, Phi = (1/H) sum_h log Z_h, mobility 1/Z_h per head; unnormalised: v = s grad_S xi,
#: xi = (1/H) sum_h Z_h, mobility 1; docs/model.md "Unnormalised attention"). The config key
#: ``model.attention`` names one.
ATTENTION_KINDS = Registry("attention kind", key="model.attention")

#: The attention of a run unless told otherwise (every result before the key existed is softmax's).
DEFAULT_ATTENTION = "softmax"


@ATTENTION_KINDS.register("softmax", about="a_h(x) = V_h Y_h(x) / Z_h(x), the softmax average (docs/model.md §1)", normalised=True)
def softmax_heads(fields: HeadFields, V) -> np.ndarray:
    """a_h(x) = V_h Y_h(x) / Z_h(x), shape (n, H, d)."""
    return np.einsum("hkl,ihl->ihk", V, fields.Y) / fields.Z[:, :, None]


@ATTENTION_KINDS.register("unnormalised", about="a_h(x) = V_h Y_h(x), no division by Z_h (unnormalised attention, "
                                                 "docs/model.md \"Unnormalised attention\")", normalised=False)
def unnormalised_heads(fields: HeadFields, V) -> np.ndarray:
    """a_h(x) = V_h Y_h(x), shape (n, H, d)."""
    return np.einsum("hkl,ihl->ihk", V, fields.Y)


def is_normalised(kind: str) -> bool:
    """Whether the attention kind ``kind`` divides by Z_h (softmax) or not (unnormalised); ValueError
    naming the choices for an unknown kind."""
    return bool(ATTENTION_KINDS.entry(kind).info.get("normalised", True))


def velocity_from_fields(X, fields: HeadFields, V, *, kind: str = DEFAULT_ATTENTION) -> np.ndarray:
    """v(x) = (1/H) sum_h P_x a_h(x), shape (n, d), with a_h of the attention kind ``kind``
    (:data:`ATTENTION_KINDS`; ``softmax``: a_h = V_h Y_h / Z_h, docs/model.md §1;
    ``unnormalised``: a_h = V_h Y_h)."""
    a = ATTENTION_KINDS.get(kind)(fields, V)
    return project(X, a.mean(axis=1))
