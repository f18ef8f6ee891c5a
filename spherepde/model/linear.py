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
* **Token noise** nu (docs/model.md "Token noise"): the Laplacian's eigenvalue is -l(l+1) on S^2 (-k^2 on S^1), so
  the rate becomes gamma_l - nu l(l+1) (gamma_k - nu k^2); the uniform state is stable for nu > nu_c =
  max_l gamma_l / (l(l+1)). For c > 0 the ratio decreases in l (i_l/i_0 does), so nu_c is reached at l = 1: for a
  softmax gradient head (c = beta) nu_c = i_1(beta)/i_0(beta) = coth(beta) - 1/beta (the Langevin function) on S^2
  and I_1(beta)/I_0(beta) on S^1; for unnormalised attention i_1(beta) and I_1(beta).

* **Two point masses** m1, m2 at angle theta (any d: they stay on their great circle):

      d theta/dt = -c sin theta [ m2 q / (m1 + m2 q) + m1 q / (m2 + m1 q) ],  q = e^{beta (cos theta - 1)}   (softmax)
      d theta/dt = -c (m1 + m2) e^{beta cos theta} sin theta                                               (unnormalised)

* **Nucleation on the circle** (Bruno, Pasqualotto & Agazzi 2025): from a near-uniform start the
  mode of the largest rate wins, k* = argmax_k gamma_k (for c > 0 the same k for both kinds:
  they differ by the factor I_0(beta)), and its k* clusters sit where cos(k* theta - phase) peaks,
  at theta_j = (2 pi j - arg mu_hat_{k*}(0)) / k*, j = 0 .. k*-1, with mu_hat_k = int e^{-ik theta} dmu
  the Fourier coefficient of the start (sum_i w_i e^{-ik theta_i} for weighted points): the density
  is 1/(2 pi) + (1/pi) sum_{k>0} |mu_hat_k| cos(k theta + arg mu_hat_k), whose mode k peaks where
  k theta = -arg mu_hat_k (mod 2 pi).
"""

from __future__ import annotations

import math

from spherepde.model.velocity import DEFAULT_ATTENTION, is_normalised

__all__ = ["critical_noise", "fastest_mode", "fourier_coefficient", "linear_rate", "nucleation_angles", "two_point_rate"]


def linear_rate(mode: int, beta: float, c: float, *, attention: str = DEFAULT_ATTENTION, d: int = 3, noise: float = 0.0) -> float:
    """gamma of the degree-``mode`` perturbation of the uniform state (module docstring), one head A = beta I,
    V = c I, on S^2 (``d`` = 3, degree l) or the circle (``d`` = 2, wave number k); beta > 0. ``noise`` nu >= 0:
    the noisy rate gamma - nu l(l+1) (gamma - nu k^2 on the circle)."""
    from scipy.special import iv, spherical_in

    if not beta > 0:
        raise ValueError(f"linear_rate: beta must be positive, got {beta!r}")
    if not noise >= 0:
        raise ValueError(f"linear_rate: the noise must be >= 0, got {noise!r}")
    if d == 3:
        g = (c / beta) * mode * (mode + 1) * float(spherical_in(mode, beta))
        g = g / float(spherical_in(0, beta)) if is_normalised(attention) else g
        return g - noise * mode * (mode + 1)
    if d == 2:
        g = (c / beta) * mode**2 * float(iv(mode, beta))
        g = g / float(iv(0, beta)) if is_normalised(attention) else g
        return g - noise * mode**2
    raise ValueError(f"linear_rate: closed forms for S^2 (d = 3) and the circle (d = 2), got d = {d}")


def critical_noise(beta: float, c: float, *, attention: str = DEFAULT_ATTENTION, d: int = 3, modes: int = 64) -> float:
    """nu_c = max_l gamma_l / (l(l+1)) over l = 1 .. ``modes`` (gamma_k / k^2 on the circle): the noise above which the
    uniform state is linearly stable (module docstring; coth(beta) - 1/beta for one softmax gradient head on S^2)."""
    lam = (lambda k: k * (k + 1)) if d == 3 else (lambda k: k * k)
    return max(linear_rate(k, beta, c, attention=attention, d=d) / lam(k) for k in range(1, modes + 1))


def two_point_rate(theta: float, beta: float, m1: float, m2: float, c: float, *, attention: str = DEFAULT_ATTENTION) -> float:
    """d theta/dt of two point masses m1, m2 at angle ``theta`` (radians) under one head A = beta I, V = c I (module docstring)."""
    if is_normalised(attention):
        q = math.exp(beta * (math.cos(theta) - 1.0))
        return -c * math.sin(theta) * (m2 * q / (m1 + m2 * q) + m1 * q / (m2 + m1 * q))
    return -c * (m1 + m2) * math.exp(beta * math.cos(theta)) * math.sin(theta)


def fastest_mode(beta: float, *, attention: str = DEFAULT_ATTENTION, d: int = 2, modes: int = 64) -> int:
    """k* = argmax_k gamma_k over k = 1 .. ``modes`` (degree l* on S^2 with ``d`` = 3) for one head A = beta I,
    V = c I with c > 0 (the argmax does not depend on c > 0): 3 at beta = 5 and 4 at beta = 7 on the circle."""
    rates = [linear_rate(k, beta, 1.0, attention=attention, d=d) for k in range(1, modes + 1)]
    return 1 + max(range(len(rates)), key=rates.__getitem__)


def fourier_coefficient(theta, k: int, weights=None) -> complex:
    """mu_hat_k = sum_i w_i e^{-i k theta_i} of points at angles ``theta`` with weights ``weights``
    (default 1/n; for a mesh: cell masses at the cell nodes)."""
    import numpy as np

    th = np.asarray(theta, dtype=np.float64)
    w = np.full(th.size, 1.0 / th.size) if weights is None else np.asarray(weights, dtype=np.float64)
    return complex(np.sum(w * np.exp(-1j * k * th)))


def nucleation_angles(mu_hat: complex, k: int):
    """The k angles in [0, 2 pi) where the mode k of a start with Fourier coefficient ``mu_hat`` peaks:
    theta_j = (2 pi j - arg mu_hat) / k, sorted (module docstring)."""
    import numpy as np

    if mu_hat == 0:
        raise ValueError("nucleation_angles: the start has no component in this mode (mu_hat = 0): the positions are not determined")
    phase = math.atan2(mu_hat.imag, mu_hat.real)
    return np.sort(np.mod((2 * math.pi * np.arange(k) - phase) / k, 2 * math.pi))
