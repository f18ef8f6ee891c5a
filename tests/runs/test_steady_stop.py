"""Stopping a run at a stationary density (``solver.steady_tol``, :mod:`spherepde.runs.steady_stop`).

A noisy mesh run under one frozen head D = 4 I (s = +1, softmax, nu = 0.5 < nu_c = coth 4 - 1/4) clusters
and settles on its stationary state; the run ends there, and that state is the self-consistent solution
rho = Z[rho]^{1/nu} / int Z[rho]^{1/nu} of :mod:`spherepde.model.stationary` on the same mesh.
"""

from __future__ import annotations

import json
import signal

import numpy as np
import pytest

import spherepde as sp
from spherepde.cli.common import example_path
from spherepde.cli.main import main
from spherepde.model import stationary as st
from spherepde.runs import runner
from spherepde.runs.config import ConfigError, load_config
from spherepde.runs.runfolder import RunFolder
from spherepde.runs.steady_stop import SteadyStop, steady_rate
from spherepde.solvers.mesh import MeshSolver

BETA, NU = 4.0, 0.5
#: a level-8 mesh (1,280 cells), implicit order-1 steps (Scharfetter-Gummel: the discrete steady states
#: are exactly the self-consistent ones, docs/model.md §10.4), one broad bump as the start
NOISY = {"mesh.level": 8, "model.noise": NU, "weights.beta": BETA, "solver.T": 50.0, "solver.integrator": "implicit", "solver.order": 1,
         "solver.steady_tol": 1e-4, "initial.means": [[0.0, 0.0, 1.0]], "initial.kappas": [3.0], "initial.weights": [],
         "output.record_dt": 0.5, "output.snapshot_dt": 2.0, "output.vtk": False, "output.checkpoint_every": 1}


def _cfg(**over):
    return load_config(example_path("clustering-mesh")).with_overrides({**NOISY, **over})


def _summary(folder):
    return json.loads((folder / "summary.json").read_text())


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
    folder = tmp_path_factory.mktemp("steady") / "run"
    return sp.run(_cfg(), out=folder, progress=False)


def test_rate_is_the_relative_max_change_per_unit_time():
    rho0, rho1 = np.array([1.0, 2.0, 4.0]), np.array([1.0, 2.5, 4.0])
    assert steady_rate(rho0, 1.0, rho1, 1.5) == pytest.approx(0.5 / 0.5 / 4.0)
    tr = SteadyStop(0.2)
    assert not tr.observe(1.0, rho0)  # the first record has nothing to compare with
    assert not tr.observe(1.5, rho1) and tr.rate == pytest.approx(0.25)
    assert tr.observe(2.0, rho1 + 0.1) and tr.rate == pytest.approx(0.1 / 0.5 / 4.1)


def test_a_noisy_run_stops_at_its_stationary_state(stopped):
    folder, d = stopped.folder, stopped.diagnostics
    s = _summary(folder)
    assert stopped.status == "completed" and s["status"] == "completed" and s["stopped"] == "stationary"
    t_s = s["stationary"]["t"]
    assert 2.0 < t_s < 25.0  # well before T = 50
    assert d["t"][-1] == t_s and s["records"] == len(d["t"]) == round(t_s / 0.5) + 1  # the final row is the record where it stopped
    assert s["stationary"]["rate"] < 1e-4 <= _rate_before(folder, t_s)
    snaps = np.load(folder / "snapshots.npz")
    assert snaps["t"][-1] == t_s  # the stopping record's snapshot
    rho = snaps["rho"][-1]
    # the stationary state on the same mesh: the self-consistency rho = Z^{1/nu} / int Z^{1/nu}
    mesh = runner.build_mesh(load_config(folder / "config.toml"))
    grid = st.MeshGrid(mesh)
    ref = st.solve_fixed_point(grid, st.SteadyProblem(d=3, beta=BETA, nu=NU), rho, tol=1e-12)
    assert ref.converged
    err = np.max(np.abs(rho - ref.rho)) / np.max(ref.rho)
    # the run stops when rho changes by < tol = 1e-4 max rho per unit time; it approaches its limit (the scheme's steady
    # state, which is this one) like exp(-lambda t) with lambda of order 1, so it is about tol / lambda from it (measured:
    # 1.4e-3, 1.2e-4, 1.3e-5 at tol = 1e-3, 1e-4, 1e-5)
    assert err < 3e-4, err
    assert grid.order(rho) == pytest.approx(grid.order(ref.rho), abs=3e-4)
    assert st.residual(grid, st.SteadyProblem(d=3, beta=BETA, nu=NU), rho) < 1e-3


def _rate_before(folder, t_s):
    """The rate over the record interval before the stop, from the snapshots (every 2.0) nearest to it."""
    z = np.load(folder / "snapshots.npz")
    t, rho = z["t"], z["rho"]
    i = int(np.searchsorted(t, t_s)) - 1
    return steady_rate(rho[i - 1], t[i - 1], rho[i], t[i])


def test_a_run_that_is_not_stationary_runs_to_T(tmp_path):
    """Without noise the same start keeps concentrating (its rate grows): no stop at a tolerance it never reaches."""
    res = sp.run(_cfg(**{"model.noise": 0.0, "solver.T": 3.0, "solver.steady_tol": 1e-2}), out=tmp_path / "r", progress=False)
    s = _summary(res.folder)
    assert res.status == "completed" and "stopped" not in s and "stationary" not in s
    assert res.diagnostics["t"][-1] == 3.0
    rho = np.load(res.folder / "snapshots.npz")["rho"]
    assert steady_rate(rho[-2], 2.0, rho[-1], 3.0) > 1e-2  # indeed not stationary at the tolerance


def test_steady_tol_zero_changes_nothing(tmp_path):
    cfg = _cfg(**{"solver.T": 1.0})
    a = sp.run(cfg.with_overrides({"solver.steady_tol": 0.0}), out=tmp_path / "a", progress=False)
    b = sp.run(cfg.with_overrides({"solver.steady_tol": 1e-12}), out=tmp_path / "b", progress=False)  # on, never reached
    assert (tmp_path / "a" / "diagnostics.csv").read_text() == (tmp_path / "b" / "diagnostics.csv").read_text()
    assert "stopped" not in _summary(a.folder) and "stopped" not in _summary(b.folder)


def test_an_interrupted_run_resumes_and_stops_at_the_same_record(tmp_path, monkeypatch, stopped):
    from tests.runs.test_run_safety import interrupt_after

    folder = tmp_path / "int"
    k = int(stopped.diagnostics["step"][-2])  # the step that reaches the record before the stop: the check at the stop needs its density
    with monkeypatch.context() as m:
        interrupt_after(m, MeshSolver, k, signal.SIGINT)
        res = sp.run(_cfg(), out=folder, progress=False)
    assert res.status == "interrupted"
    state, meta = RunFolder(folder).read_checkpoint()
    assert meta["record"] == len(stopped.diagnostics["t"]) - 2 and float(state["steady_t"]) == stopped.diagnostics["t"][-2]
    again = runner.resume(folder, progress=False)
    assert again.status == "completed"
    assert (folder / "diagnostics.csv").read_text() == (stopped.folder / "diagnostics.csv").read_text()
    assert _summary(folder)["stationary"] == _summary(stopped.folder)["stationary"]
    # resuming or extending a run that ended as stationary does nothing: a run to a later T stops there too
    before = (folder / "diagnostics.csv").read_text()
    assert runner.resume(folder, progress=False).status == "completed"
    assert runner.resume(folder, progress=False, overrides={"solver.T": 60.0}).status == "completed"
    assert (folder / "diagnostics.csv").read_text() == before and load_config(folder / "config.toml").solver.T == 50.0


def test_a_both_run_stops_with_its_mesh(tmp_path):
    res = sp.run(_cfg(**{"run.solver": "both", "initial.n": 40, "solver.steady_tol": 2e-3}), out=tmp_path / "b", progress=False)
    s = _summary(res.folder)
    assert s["stopped"] == "stationary" and res.diagnostics["t"][-1] == s["stationary"]["t"] < 50.0
    assert len(res.diagnostics["p_mean_resultant"]) == len(res.diagnostics["t"])


@pytest.mark.parametrize("sets, words", [
    (["solver.steady_tol=-1"], "solver.steady_tol"),
    (["solver.steady_tol=1e-3", "run.solver=particles", "initial.n=8", "solver.integrator=heun"], "use run.solver = 'mesh' or 'both'"),
    (["solver.steady_tol=1e-3", "montecarlo.paths=2"], "montecarlo.paths = 1"),
])
def test_bad_steady_tol_is_refused_in_one_line(tmp_path, capsys, sets, words):
    args = ["run", "--example", "clustering-mesh", "--out", str(tmp_path / "r"), "-q", "--set", "mesh.level=2", "--set", "solver.T=0.05"]
    for s in sets:
        args += ["--set", s]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("spherepde: error: solver.steady_tol") and words in err[0], err
    assert not (tmp_path / "r").exists()
    with pytest.raises(ConfigError):
        load_config(example_path("clustering-mesh")).with_overrides(dict(s.split("=") for s in sets[:1]) | {"solver.steady_tol": -1.0})


def test_the_cli_says_where_the_run_stopped(tmp_path, capsys):
    args = ["run", "--example", "noisy-clustering-mesh", "--out", str(tmp_path / "r"), "--set", "mesh.level=8", "--set", "output.vtk=false"]
    assert main(args) == 0
    out = capsys.readouterr().out
    t_s = _summary(tmp_path / "r")["stationary"]["t"]
    assert f"stopped as stationary at t = {t_s:g} (max |d rho/dt| / max rho = " in out and "< solver.steady_tol = 0.001)" in out
