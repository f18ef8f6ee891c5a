"""A new explicit time scheme is one data object and one registration (issue 33, the stepper seam).

The classical fourth-order Runge--Kutta method, which the package does not ship, is written
here in Shu--Osher form, registered in :data:`spherepde.solvers.integrators.STEPPERS` and run
through ``spherepde run`` (the CLI entry point) with ``solver.integrator`` naming it. That it
is really the scheme used shows in its order: with frozen weights and fixed steps the final
energy converges at rate 4 (the shipped ssprk3 at rate 3).
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest

from spherepde.cli.main import main
from spherepde.runs.config import default_config
from spherepde.solvers.integrators import STEPPERS, ExplicitScheme, register_stepper

#: Kutta's classical RK4: u1 = u + h/2 L(u), u2 = u + h/2 L(u1), u3 = u + h L(u2),
#: u_new = (-u + u1 + 2 u2 + u3)/3 + h/6 L(u3).
RK4 = ExplicitScheme(
    "rk4-test", 4, ("mesh",),
    alpha=((1.0,), (1.0, 0.0), (1.0, 0.0, 0.0), (-1.0 / 3.0, 1.0 / 3.0, 2.0 / 3.0, 1.0 / 3.0)),
    beta=((0.5,), (0.0, 0.5), (0.0, 0.0, 1.0), (0.0, 0.0, 0.0, 1.0 / 6.0)),
    c=(0.0, 0.5, 0.5, 1.0),
    b=(1.0 / 6.0, 1.0 / 3.0, 1.0 / 3.0, 1.0 / 6.0),
)

CONFIG = """
[run]
solver = "mesh"
name = "rk4"
[model]
H = 1
sign = 1
[weights]
process = "frozen"
init = "beta"
beta = 4.0
dt = 0.05
[initial]
kind = "vmf"
means = [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]
kappas = [4.0]
[mesh]
level = 4
[solver]
T = 0.2
integrator = "rk4-test"
summation = "direct"
[output]
record_dt = 0.2
snapshot_dt = 0.2
vtk = false
"""


@pytest.fixture
def rk4():
    register_stepper(RK4, aliases=("classical-rk4-test",), about="classical Runge--Kutta (a test's own scheme)")
    try:
        yield RK4
    finally:
        STEPPERS.unregister(RK4.name)


def _final_energy(tmp_path: Path, integrator: str, dt: float) -> float:
    cfg = tmp_path / "rk4.toml"
    cfg.write_text(CONFIG, encoding="utf-8")
    out = tmp_path / f"{integrator}-{dt}"
    code = main(["run", str(cfg), "--out", str(out), "--set", f"solver.integrator={integrator}", "--set", f"solver.dt={dt}", "-q"])
    assert code == 0
    (diag,) = out.rglob("diagnostics.csv")
    with open(diag, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert float(rows[-1]["t"]) == pytest.approx(0.2)
    return float(rows[-1]["energy"])


def _observed_order(tmp_path: Path, integrator: str) -> float:
    """log2 of the ratio of successive differences of the final energy at dt, dt/2, dt/4."""
    e = [_final_energy(tmp_path, integrator, dt) for dt in (0.0125, 0.00625, 0.003125)]
    return math.log2(abs(e[0] - e[1]) / abs(e[1] - e[2]))


def test_the_toy_tableau_is_kuttas_rk4(rk4):
    A, b, c = rk4.butcher()
    np.testing.assert_allclose(A, [[0, 0, 0, 0], [0.5, 0, 0, 0], [0, 0.5, 0, 0], [0, 0, 1, 0]], atol=1e-15)
    np.testing.assert_allclose(b, rk4.b, atol=1e-15)
    np.testing.assert_allclose(c, rk4.c, atol=1e-15)


def test_a_registered_scheme_runs_through_spherepde_run_at_its_order(tmp_path, rk4):
    assert "rk4-test" in default_config().with_overrides({"solver.integrator": "rk4-test"}).integrator
    assert 3.6 < _observed_order(tmp_path, "rk4-test") < 4.7
    assert 2.6 < _observed_order(tmp_path, "ssprk3") < 3.5  # the same measurement tells the schemes apart


def test_the_alias_names_it_and_unregistering_removes_it(tmp_path):
    register_stepper(RK4, aliases=("classical-rk4-test",))
    try:
        assert STEPPERS.get("classical-rk4-test") is RK4
        assert "classical-rk4-test" in default_config().with_overrides({"solver.integrator": "classical-rk4-test"}).integrator
        assert _final_energy(tmp_path, "classical-rk4-test", 0.0125) == _final_energy(tmp_path, "rk4-test", 0.0125)
    finally:
        STEPPERS.unregister(RK4.name)
    assert "rk4-test" not in STEPPERS
    with pytest.raises(ValueError, match="solver.integrator"):
        default_config().with_overrides({"solver.integrator": "rk4-test"})
