"""Attention sums Z_h, Y_h, Q_h over a weighted point cloud (docs/model.md, "Attention sums").

* :mod:`~spherepde.attention.sums` -- :func:`attention_moments`, the one dispatcher;
* :mod:`~spherepde.attention.direct` -- exact Numba kernels with an online log-sum-exp;
* :mod:`~spherepde.attention.harmonic` -- spherical-harmonic fast summation (d = 3);
* :mod:`~spherepde.attention.adaptive` -- its target kernel with the degree stopped a posteriori;
* :mod:`~spherepde.attention.synthesis` -- many targets at once from a Gauss grid and one matrix product.

The Numba flags are in :mod:`spherepde._numba`.
"""

from spherepde.attention import adaptive as _adaptive  # noqa: F401  (registers the degree rule 'adaptive' with harmonic)
from spherepde.attention import synthesis as _synthesis  # noqa: F401  (registers the degree rule 'synthesis' with harmonic)
from spherepde.attention.sums import SUMMATION_MODES, attention_moments

__all__ = ["SUMMATION_MODES", "attention_moments"]
