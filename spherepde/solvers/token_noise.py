"""Brownian motion of the tokens on S^{d-1}: ``model.noise = nu > 0`` (docs/model.md §10).

Each token follows the Ito SDE (ambient coordinates; generator nu Delta_S on S^{d-1})

    dX = v dt - nu (d - 1) X dt + sqrt(2 nu) (I - X X^T) dB,

whose density solves d_t rho + div_S(rho v) = nu Delta_S rho. The particle solver splits one
step of size dt into the deterministic token step (its stepper, :mod:`spherepde.solvers.integrators`)
followed by the projected Euler step of the Brownian part (:func:`brownian_step`)

    x <- (x + s P_x xi) / |x + s P_x xi|,   s = sqrt(2 nu dt),   xi ~ N(0, I_d),   P_x = I - x x^T,

which is weak order 1 (e.g. E[x . e] decays per step by E[1 / sqrt(1 + s^2 |P_x xi|^2)] =
1 - nu (d - 1) dt + O(dt^2)); the Lie splitting keeps weak order 1 for the whole step. The
step is always defined: P_x xi is orthogonal to x, so |x + s P_x xi| >= 1. The exact per-step
factor of a degree-l zonal harmonic's mean (Funk--Hecke) is lambda_l = E[G_l((1 + s^2 q)^{-1/2})],
q ~ chi^2_{d-1}, G_l the Gegenbauer polynomial with G_l(1) = 1; lambda_l^{T/dt} - exp(-nu l(l+d-2) T)
= O(dt) (tests/solvers/test_noisy_tokens.py). Noisy transformer tokens on spheres: Shalova &
Schlichting (2024).

The noise is drawn from its own stream (:func:`noise_generator`): the first child of
``SeedSequence(seed)``, ``seed`` the token seed (``initial.seed``), so it is independent of the
tokens' initial draw (the root of that SeedSequence) and of the weight noise; with nu = 0 no
number is drawn. :func:`pack_state` / :func:`unpack_state` carry the generator's state through a
checkpoint (a uint64 array), so a resumed run draws the same numbers.

Step bound (:func:`noise_step_limit`): the root-mean-square angle of one Brownian step is about
sqrt(2 nu (d - 1) dt); the particle step keeps it below the same MAX_DISPLACEMENT as the drift's
largest move, dt <= MAX_DISPLACEMENT^2 / (2 nu (d - 1)).
"""

from __future__ import annotations

import numpy as np

__all__ = ["brownian_step", "noise_generator", "pack_state", "unpack_state", "noise_step_limit", "STATE_KEY"]

#: The key of the noise generator's state in the particle solver's state (checkpoints).
STATE_KEY = "noise_rng"

_MASK = (1 << 64) - 1


def noise_generator(seed) -> np.random.Generator:
    """The tokens' noise generator: PCG64 seeded by the first child of ``SeedSequence(seed)``
    (independent of ``default_rng(seed)``, the initial draw, and of the weight path's streams)."""
    ss = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    return np.random.Generator(np.random.PCG64(ss.spawn(1)[0]))


def brownian_step(X: np.ndarray, scale: float, rng: np.random.Generator) -> np.ndarray:
    """One projected Brownian step of unit tokens X (n, d): (x + scale P_x xi)/|.|, xi ~ N(0, I_d)
    drawn as ``rng.standard_normal((n, d))``; ``scale`` = sqrt(2 nu dt). Returns a new (n, d) array."""
    xi = rng.standard_normal(X.shape)
    xi -= np.sum(xi * X, axis=1, keepdims=True) * X
    Y = X + scale * xi
    return Y / np.linalg.norm(Y, axis=1, keepdims=True)


def noise_step_limit(noise: float, d: int, max_angle: float) -> float:
    """The largest dt whose Brownian step has root-mean-square angle sqrt(2 nu (d - 1) dt) <= ``max_angle``
    (inf for nu = 0)."""
    if noise <= 0:
        return float("inf")
    return max_angle**2 / (2.0 * noise * (d - 1))


def pack_state(rng: np.random.Generator) -> np.ndarray:
    """The PCG64 state of ``rng`` as a uint64 array of 6: state (high, low), increment (high, low),
    has_uint32, uinteger."""
    st = rng.bit_generator.state
    if st.get("bit_generator") != "PCG64":
        raise ValueError(f"token noise: expected a PCG64 generator, got {st.get('bit_generator')!r}")
    s, inc = int(st["state"]["state"]), int(st["state"]["inc"])
    return np.array([s >> 64, s & _MASK, inc >> 64, inc & _MASK, int(st["has_uint32"]), int(st["uinteger"])], dtype=np.uint64)


def unpack_state(rng: np.random.Generator, packed) -> None:
    """Set ``rng`` (PCG64) to the state :func:`pack_state` wrote (ValueError for anything else)."""
    a = np.asarray(packed)
    if a.shape != (6,) or a.dtype.kind not in "ui":
        raise ValueError(f"token noise: the generator state must be 6 unsigned integers, got shape {a.shape} ({a.dtype})")
    v = [int(x) for x in a.astype(np.uint64)]
    rng.bit_generator.state = {"bit_generator": "PCG64", "state": {"state": (v[0] << 64) | v[1], "inc": (v[2] << 64) | v[3]},
                               "has_uint32": v[4], "uinteger": v[5]}
