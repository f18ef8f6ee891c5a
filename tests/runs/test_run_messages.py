"""What a run says while it runs (issue 26): a first line at once when it compiles the kernels,
the wall time of this session on resume, and step estimates in run.log that match the count."""

from __future__ import annotations

import json
import os
import re
import selectors
import subprocess
import sys
import time

from spherepde.cli.main import main

TINY = ["--set", "output.vtk=false"]


def test_first_run_after_install_says_at_once_that_it_compiles(tmp_path):
    """Found: about 20 s of silence before the first line when the output is not a terminal."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba-cache"), MPLBACKEND="Agg")
    proc = subprocess.Popen([sys.executable, "-m", "spherepde", "run", "--set", "solver.T=0.05", *TINY, "--out", str(tmp_path / "r")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        t0 = time.monotonic()
        sel = selectors.DefaultSelector()
        sel.register(proc.stderr, selectors.EVENT_READ)
        assert sel.select(timeout=15), "no line on stderr within 15 s"
        line = proc.stderr.readline().decode()
        assert time.monotonic() - t0 < 15
        assert line.startswith("compiling the kernels (the first run after an install"), line
    finally:
        proc.kill()
        proc.wait()


def test_a_run_with_cached_kernels_does_not_say_it_compiles(tmp_path, capsys):
    assert main(["run", "--set", "solver.T=0.05", *TINY, "--out", str(tmp_path / "warm")]) == 0  # compiles here if need be
    assert main(["run", "--set", "solver.T=0.05", *TINY, "--out", str(tmp_path / "r")]) == 0
    assert "compiling" not in capsys.readouterr().err


def test_resume_prints_the_wall_time_of_this_session(tmp_path, capsys):
    """Found: resume printed the wall time summed over all sessions, labelled as if it were its own."""
    run = tmp_path / "r"
    assert main(["run", "--set", "solver.T=0.1", "--set", "output.snapshot_dt=0.05", *TINY, "--out", str(run), "-q"]) == 0
    first = json.loads((run / "summary.json").read_text())["wall_time_s"]
    capsys.readouterr()
    assert main(["resume", str(run), "--set", "solver.T=0.2"]) == 0
    out = capsys.readouterr().out
    s = json.loads((run / "summary.json").read_text())
    assert s["session_wall_time_s"] < s["wall_time_s"]
    assert abs(s["wall_time_s"] - (first + s["session_wall_time_s"])) < 0.05  # the first session counted to its end
    assert f"wall time: {s['session_wall_time_s']:.1f} s this session ({s['wall_time_s']:.1f} s in all since the run started)" in out
    assert re.search(r"completed in [0-9.]+ s \([0-9.]+ s since the start, all sessions\)", (run / "run.log").read_text())


def _estimates(log: str) -> tuple[int, list[int], int]:
    start = int(re.search(r"about (\d+) steps at the initial state's step", log).group(1))
    updates = [int(v) for v in re.findall(r"steps so far, about (\d+) in all at the current step", log)]
    final = int(re.search(r"completed in [0-9.]+ s, (\d+) steps \(estimated at the start: (\d+)\)", log).group(1))
    return start, updates, final


def test_step_estimates_in_run_log_are_within_a_factor_of_the_count(tmp_path):
    """Found: off by 1.5-3.5x -- the estimate T / dt ignored that a step never crosses a point of
    the weight grid (a CFL step of 0.9 grid steps takes two steps per grid interval)."""
    cases = {
        "default": ["--set", "solver.T=0.5"],
        # s = +1, beta = 10 on level 6: the CFL step is 0.91 of the weight grid's step
        "clustering": ["--set", "solver.T=0.5", "--set", "model.sign=1", "--set", "weights.process=frozen", "--set", "weights.init=beta",
                       "--set", "weights.beta=10", "--set", "model.H=1", "--set", "mesh.level=6"],
    }
    for name, args in cases.items():
        out = tmp_path / name
        assert main(["run", *args, *TINY, "--out", str(out), "-q"]) == 0
        start, updates, final = _estimates((out / "run.log").read_text())
        steps = int(json.loads((out / "summary.json").read_text())["final"]["step"])
        assert final == steps
        assert updates, "no update of the estimate in run.log"
        for est in [start, *updates]:
            assert steps / 1.5 <= est <= 1.5 * steps, (name, est, steps)
