"""Closed forms of the model about simple states: linear growth rates and the two-point merge ODE.

One frozen head A = beta I, V = c I (a gradient head is c = s beta), docs/model.md "Linear
stability" and "Unnormalised attention":

* **Linear rates about the uniform state.** A perturbation eps Y_lm (S^2) or eps cos(k theta + c0)
  (the circle S^1) of the uniform density grows like e^{gamma t} with

      S^2:  gamma_l = (c / beta) l (l+1) i_l(beta) / i_0(beta)     (softmax)
            gamma_l = (c / beta) l (l+1) i_l(beta)                 (unnormalised attention)
      S^1:  gamma_k = (c / beta) k^2 I_k(beta) / I_0(beta)         (softmax)
            gamma_k = (c / beta) k^2 I_k(beta)                     (unnormalised attention)

  (i_l: modified spherical Bessel function, ``scipy.special.spherical_in``; I_k: modified Bessel
  function, ``scipy.special.iv``). The unnormalised rate is the softmax rate times Z of the uniform
  state (i_0(beta) = sinh(beta)/beta on S^2, I_0(beta) on S^1).
* **Two point masses** m1, m2 at angle theta (any d: they stay on their great circle):

      d theta/dt = -c sin theta [ m2 q / (m1 + m2 q) + m1 q / (m2 + m1 q) ],  q = e^{beta (cos theta - 1)}   (softmax)
      d theta/dt = -c (m1 + m2) e^{beta cos theta} sin theta                                               (unnormalised)
"""

from __future__ import annotations

import math

from spherepde.model.velocity import DEFAULT_ATTENTION, is_normalised

__all__ = ["linear_rate", "two_point_rate"]


def linear_rate(mode: int, beta: float, c: float, *, attention: str = DEFAULT_ATTENTION, d: int = 3) -> float:
    """gamma of the degree-``mode`` perturbation of the uniform state (module docstring), one head A = beta I,
    V = c I, on S^2 (``d`` = 3, degree l) or the circle (``d`` = 2, wave number k); beta > 0."""
    from scipy.special import iv, spherical_in

    if not beta > 0:
        raise ValueError(f"linear_rate: beta must be positive, got {beta!r}")
    if d == 3:
        g = (c / beta) * mode * (mode + 1) * float(spherical_in(mode, beta))
        return g / float(spherical_in(0, beta)) if is_normalised(attention) else g
    if d == 2:
        g = (c / beta) * mode**2 * float(iv(mode, beta))
        return g / float(iv(0, beta)) if is_normalised(attention) else g
    raise ValueError(f"linear_rate: closed forms for S^2 (d = 3) and the circle (d = 2), got d = {d}")


def two_point_rate(theta: float, beta: float, m1: float, m2: float, c: float, *, attention: str = DEFAULT_ATTENTION) -> float:
    """d theta/dt of two point masses m1, m2 at angle ``theta`` (radians) under one head A = beta I, V = c I (module docstring)."""
    if is_normalised(attention):
        q = math.exp(beta * (math.cos(theta) - 1.0))
        return -c * math.sin(theta) * (m2 * q / (m1 + m2 * q) + m1 * q / (m2 + m1 * q))
    return -c * (m1 + m2) * math.exp(beta * math.cos(theta)) * math.sin(theta)
