"""Token runs note their progress in run.log at each quarter of T like mesh runs (issue 37
item 4): the step count there is the fixed step's count t / dt, and a time to go is given."""

from __future__ import annotations

import re

from spherepde.runs.config import default_config
from spherepde.runs.runner import run


def test_token_run_logs_steps_at_each_quarter(tmp_path):
    cfg = default_config().with_overrides({"run.solver": "particles", "solver.T": 0.4, "initial.n": 30, "output.record_dt": 0.05,
                                           "output.snapshot_dt": 0.2, "weights.dt": 0.01})
    folder = run(cfg, out=tmp_path / "run", progress=False).folder
    log = (folder / "run.log").read_text()
    assert re.search(r"T = 0.4, 40 steps of dt = 0.01", log)
    lines = re.findall(r"t = ([0-9.]+): (\d+) steps so far \(dt = ([0-9.e-]+)\), \d+ s of wall time, about \d+ s to go", log)
    assert [float(t) for t, _, _ in lines] == [0.1, 0.2, 0.3]
    for t, n, dt in lines:
        assert int(n) == round(float(t) / float(dt)) and float(dt) == 0.01


def test_rk23_progress_names_the_controllers_next_try(tmp_path):
    # the step at a quarter lands on a record and is cut short: the line also gives the step the controller tries next
    cfg = default_config().with_overrides({"run.solver": "particles", "solver.T": 0.4, "initial.n": 30, "output.record_dt": 0.05,
                                           "output.snapshot_dt": 0.2, "weights.dt": 0.01, "solver.integrator": "rk23", "solver.tol": 1e-3,
                                           "output.vtk": False})
    folder = run(cfg, out=tmp_path / "run", progress=False).folder
    lines = re.findall(r"t = ([0-9.]+): \d+ steps so far \(dt = ([0-9.e-]+); next try ([0-9.e-]+)\)", (folder / "run.log").read_text())
    assert [float(t) for t, _, _ in lines] == [0.1, 0.2, 0.3]
    assert all(float(nxt) > 0 for _, _, nxt in lines)
    done = re.findall(r"completed in [0-9.]+ s, (\d+) steps and (\d+) rejected tries", (folder / "run.log").read_text())
    assert len(done) == 1 and int(done[0][0]) >= 8  # at least one step per record
