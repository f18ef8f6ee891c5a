"""A new weight process is one class and one registration: defined here, in the test file only,
registered in :data:`spherepde.model.weights.PROCESSES`, named by a TOML config and run through
the entry point ``spherepde run`` uses (:func:`spherepde.cli.main.main`). No package file knows it.

The toy process is linear decay dD_h = -kappa D_h dt (sigma = 0) with its own exact transition
D_{k+1} = e^{-kappa dt} D_k, so from D_h(0) = I the weights are D_h(t) = e^{-kappa t} I.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest

from spherepde.model.weights import PROCESSES, WeightPath, WeightProcess, configurable_processes
from spherepde.runs.config import config_to_toml, default_config, load_config

TOY = "toy-decay"


@dataclass(frozen=True)
class ToyDecay(WeightProcess):
    """dD = -kappa D dt; exact step D e^{-kappa dt}."""

    kappa: float = 1.0
    name = TOY

    @classmethod
    def from_config(cls, section) -> ToyDecay:
        return cls(kappa=section.kappa)

    def drift(self, D, t):
        return -self.kappa * D

    def stepper(self, scheme):
        return self.exact_step if scheme == "exact" else self.euler_maruyama_step

    def exact_step(self, D, f, t, dt, rng):
        return math.exp(-self.kappa * dt) * D, None


@pytest.fixture
def toy():
    PROCESSES.register(TOY, ToyDecay, about="linear decay (test only)")
    yield ToyDecay
    PROCESSES.unregister(TOY)


CONFIG = f"""
[run]
solver = "particles"

[model]
H = 2

[weights]
process = "{TOY}"
kappa = 0.7
init = "identity"
scheme = "exact"
dt = 0.05

[initial]
n = 20

[solver]
T = 0.5

[output]
record_dt = 0.1
snapshot_dt = 0.5
vtk = false
"""


def test_a_registered_process_runs_from_a_config(toy, tmp_path):
    from spherepde.cli.main import main

    cfg = tmp_path / "toy.toml"
    cfg.write_text(CONFIG)
    assert TOY in configurable_processes() and f"'{TOY}'" in config_to_toml(default_config())  # config --show names it
    assert load_config(cfg).weights.process == TOY
    out = tmp_path / "run"
    assert main(["run", str(cfg), "--out", str(out), "-q"]) == 0
    path = WeightPath.load(out / "weights.npz")
    assert path.meta["process"] == TOY and path.meta["params"] == {"kappa": 0.7} and path.sigma == 0.0
    expected = np.exp(-0.7 * path.times)[:, None, None, None] * np.eye(3)  # D_h(t) = e^{-kappa t} I
    np.testing.assert_allclose(path.D, np.broadcast_to(expected, path.D.shape), rtol=1e-13, atol=0)
    np.testing.assert_allclose(path.drift, -0.7 * path.D, rtol=1e-15)
    assert (out / "diagnostics.csv").is_file()


def test_unregistered_the_name_is_refused_again(tmp_path):
    from spherepde._base import ConfigError

    cfg = tmp_path / "toy.toml"
    cfg.write_text(CONFIG)
    assert TOY not in PROCESSES and TOY not in configurable_processes()
    with pytest.raises(ConfigError, match=f"weights.process: '{TOY}' is not allowed"):
        load_config(cfg)
