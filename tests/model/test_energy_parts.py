"""The energy's derivative in the weights (spherepde.model.energy.weights_work, issue 37) against central
finite differences of the energy itself, and the trapezoid booking of EnergyBalance.add_weights_change."""

from __future__ import annotations

import numpy as np
import pytest

from spherepde.model.energy import EnergyBalance, state_rates, weights_work
from spherepde.model.velocity import head_fields, velocity_from_fields


def _sym(rng, H, scale):
    G = rng.normal(size=(H, 3, 3)) * scale
    return G + G.transpose(0, 2, 1)


def _energy(X, w, D) -> dict:
    F = head_fields(X, w, D, want_q=False)
    return state_rates(X, w, F, D, np.zeros_like(D), 0.0, velocity_from_fields(X, F, -D))


def test_weights_work_is_the_derivative_of_the_energy_in_D():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(50, 3))
    X /= np.linalg.norm(X, axis=1)[:, None]
    w = rng.random(50)
    w /= w.sum()
    D, dD = _sym(rng, 3, 1.0), _sym(rng, 3, 1.0)
    eps = 1e-5
    fd = (_energy(X, w, D + eps * dD)["energy"] - _energy(X, w, D - eps * dD)["energy"]) / (2 * eps)
    assert weights_work(dD, _energy(X, w, D)["M"]) == pytest.approx(fd, rel=1e-8)


def test_the_trapezoid_booking_keeps_the_curvature_in_D():
    """Over a step of the weights alone (tokens fixed) the booked change equals E(D1) - E(D0) to third
    order in the step: halving the step divides the error by about 8."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(40, 3))
    X /= np.linalg.norm(X, axis=1)[:, None]
    w = np.full(40, 1 / 40)
    D, dD = _sym(rng, 2, 1.0), _sym(rng, 2, 1.0)
    errs = []
    for h in (0.02, 0.01):
        b = EnergyBalance(sign=-1.0)
        b.add_weights_change(h * dD, _energy(X, w, D)["M"], _energy(X, w, D + h * dD)["M"])
        errs.append(abs(b.int_dE_weights - (_energy(X, w, D + h * dD)["energy"] - _energy(X, w, D)["energy"])))
    assert 6.0 < errs[0] / errs[1] < 12.0  # 8: third order (a second-order rule: 4, the left-point rule: 2)
    b = EnergyBalance(sign=-1.0)
    b.add_weights_change(None, None, None)  # constant weights: nothing booked
    assert b.int_dE_weights == 0.0
