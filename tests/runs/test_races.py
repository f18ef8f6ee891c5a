"""Races and locks (issue 28 part A): two runs started at the same instant on one new folder,
locks from another host or that are not locks, Ctrl-C at any moment of start-up.
"""

from __future__ import annotations

import contextlib
import io
import json
import multiprocessing as mp
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import cli, csv_rows, folder_state, one_line_error

from spherepde.cli.main import main
from spherepde.runs import runner
from spherepde.runs.files import FolderLock

#: A tiny particle run (about 20 ms once compiled): two records.
TINY = ["--set", "run.solver=particles", "--set", "initial.n=8", "--set", "solver.T=0.02", "--set", "output.vtk=false",
        "--set", "output.record_dt=0.01", "--set", "output.snapshot_dt=0.01"]


def _racer(barrier, args, conn) -> None:
    err = io.StringIO()
    barrier.wait()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(args)
    conn.send((code, err.getvalue(), os.getpid()))
    conn.close()


def race(args: list[str]) -> list[tuple[int, str, int]]:
    """Run ``spherepde ARGS`` in two processes released at the same instant; [(exit code, stderr, pid)] * 2."""
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(2)
    pipes, procs = [], []
    for _ in range(2):
        recv, send = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_racer, args=(barrier, args, send))
        p.start()
        pipes.append(recv)
        procs.append(p)
    out = [r.recv() for r in pipes]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    return out


def assert_one_winner(results, folder: Path, expected_rows: int) -> None:
    codes = sorted(code for code, _, _ in results)
    assert codes == [0, 2], results
    (_, _, winner), = [r for r in results if r[0] == 0]
    (_, err, _), = [r for r in results if r[0] == 2]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("spherepde: error: ") and "Traceback" not in err, err
    # the loser names the first process (it held the lock, or created the folder), or finds a finished run
    assert f"pid {winner}" in lines[0] or "exists already" in lines[0], lines[0]
    assert len(csv_rows(folder / "diagnostics.csv")) == expected_rows
    assert json.loads((folder / "summary.json").read_text())["status"] == "completed"
    assert not (folder / runner.LOCK_FILE).exists()


@pytest.fixture(scope="module")
def tiny_rows(tmp_path_factory) -> int:
    folder = tmp_path_factory.mktemp("ref") / "r"
    with contextlib.redirect_stderr(io.StringIO()):
        assert main(["run", *TINY, "--out", str(folder), "-q"]) == 0  # also compiles the kernels before forking
    return len(csv_rows(folder / "diagnostics.csv"))


def test_two_runs_started_together_on_a_new_folder_never_both_write(tmp_path, tiny_rows):
    """20 trials: exactly one exits 0, the other exits 2 with one line, the folder holds one run."""
    for trial in range(20):
        folder = tmp_path / f"new-{trial}" / "run"  # the parent does not exist either
        assert_one_winner(race(["run", *TINY, "--out", str(folder), "-q"]), folder, tiny_rows)


def test_two_runs_started_together_on_an_empty_folder_never_both_write(tmp_path, tiny_rows):
    for trial in range(5):
        folder = tmp_path / f"empty-{trial}"
        folder.mkdir()
        assert_one_winner(race(["run", *TINY, "--out", str(folder), "-q"]), folder, tiny_rows)


def test_two_forced_runs_on_one_run_folder_never_both_write(tmp_path, tiny_rows):
    folder = tmp_path / "r"
    with contextlib.redirect_stderr(io.StringIO()):
        assert main(["run", *TINY, "--out", str(folder), "-q"]) == 0
    for _ in range(5):
        results = race(["run", *TINY, "--out", str(folder), "--force", "-q"])
        # both may win one after the other (each replaced a finished run), never both at once
        assert all(code in (0, 2) for code, _, _ in results) and any(code == 0 for code, _, _ in results), results
        for code, err, _ in results:
            if code == 2:
                assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
        assert len(csv_rows(folder / "diagnostics.csv")) == tiny_rows
        assert json.loads((folder / "summary.json").read_text())["status"] == "completed"


def test_two_cli_processes_started_together_on_a_new_folder(tmp_path, tiny_rows):
    """The real command line, 3 trials (each process imports spherepde, about 1 s)."""
    for trial in range(3):
        folder = tmp_path / f"cli-{trial}"
        procs = [subprocess.Popen([sys.executable, "-m", "spherepde", "run", *TINY, "--out", str(folder), "-q"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
        results = [(p.wait(60), p.stderr.read(), p.pid) for p in procs]
        for p in procs:
            p.stdout.close()
            p.stderr.close()
        assert_one_winner(results, folder, tiny_rows)


def test_the_folder_lock_is_exclusive_under_contention(tmp_path):
    """FolderLock itself: of two processes acquiring at the same instant, exactly one holds it."""
    ctx = mp.get_context("fork")
    for trial in range(20):
        folder = tmp_path / f"f{trial}"
        folder.mkdir()
        barrier = ctx.Barrier(2)
        q = ctx.Queue()

        def take(barrier=barrier, q=q, folder=folder):
            lock = FolderLock(folder, "x.lock", error=RuntimeError)
            barrier.wait()
            try:
                lock.acquire()
            except RuntimeError as exc:
                q.put(("refused", str(exc)))
                return
            time.sleep(0.05)  # hold it while the other tries
            q.put(("held", os.getpid()))

        procs = [ctx.Process(target=take) for _ in range(2)]
        for p in procs:
            p.start()
        got = sorted(q.get(timeout=30) for _ in procs)
        for p in procs:
            p.join(30)
        assert [g[0] for g in got] == ["held", "refused"], got
        assert f"pid {got[0][1]}" in got[1][1]


# ============================================================================= lock files
def _interrupted_run(tmp_path: Path) -> Path:
    """A run folder with a checkpoint and no lock (as after a crash)."""
    folder = tmp_path / "r"
    with contextlib.redirect_stderr(io.StringIO()):
        assert main(["run", *TINY, "--set", "output.checkpoint_every=1", "--out", str(folder), "-q"]) == 0
    data = json.loads((folder / "summary.json").read_text())
    data["status"] = "interrupted"
    (folder / "summary.json").write_text(json.dumps(data))
    return folder


def test_a_lock_from_another_host_is_held_unless_force(capsys, tmp_path):
    folder = _interrupted_run(tmp_path)
    (folder / runner.LOCK_FILE).write_text(json.dumps({"pid": 4242, "host": "elsewhere.example"}))
    before = folder_state(folder)
    code, _, err = cli(capsys, "resume", folder, "-q")
    line = one_line_error(err)
    assert code == 2 and "elsewhere.example" in line and "pid 4242" in line and "--force" in line
    code, _, err = cli(capsys, "run", *TINY, "--out", folder, "--force", "-q")  # --force of run replaces only unheld folders...
    assert code == 0, err  # ...and a lock from another host is taken over with --force
    (folder / runner.LOCK_FILE).write_text(json.dumps({"pid": 4242, "host": "elsewhere.example"}))
    before = folder_state(folder)
    code, _, err = cli(capsys, "run", *TINY, "--out", folder, "-q")
    assert code == 2 and "elsewhere.example" in one_line_error(err)
    assert folder_state(folder) == before
    code, _, err = cli(capsys, "resume", folder, "--force", "-q")
    assert code == 0, err
    assert not (folder / runner.LOCK_FILE).exists()


@pytest.mark.parametrize("content", ["garbage{", "[1, 2]", '{"pid": "x", "host": 3}', "", "null", '{"pid": -1, "host": "h"}', b"\xff\xfe"])
def test_a_lock_file_that_is_not_a_lock_is_one_clear_line(capsys, tmp_path, content):
    folder = _interrupted_run(tmp_path)
    lock = folder / runner.LOCK_FILE
    lock.write_bytes(content if isinstance(content, bytes) else content.encode())
    before = folder_state(folder)
    code, _, err = cli(capsys, "resume", folder, "-q")
    line = one_line_error(err)
    assert code == 2 and ("is not a spherepde lock" in line or "cannot be read" in line) and str(folder / runner.LOCK_FILE) in line
    assert folder_state(folder) == before
    code, _, err = cli(capsys, "resume", folder, "--force", "-q")
    assert code == 0, err


def test_a_sweep_lock_that_is_not_a_lock_is_refused_in_one_line(tmp_path):
    from spherepde.runs.sweep.execute import LOCK_FILE, SweepError

    (tmp_path / LOCK_FILE).write_text("[1]")
    lock = FolderLock(tmp_path, LOCK_FILE, error=SweepError, what="sweep")
    with pytest.raises(SweepError, match="is not a spherepde lock"):
        lock.acquire()
    (tmp_path / LOCK_FILE).write_text(json.dumps({"pid": 1, "host": "other-host"}))
    with pytest.raises(SweepError, match="other-host"):
        lock.acquire()
    assert socket.gethostname() != "other-host"


# ============================================================================= Ctrl-C
#: A particle run long enough (a few seconds) to be interrupted at any point of its start-up.
LONG = ["--set", "run.solver=particles", "--set", "initial.n=8", "--set", "solver.T=200", "--set", "output.vtk=false"]


@pytest.fixture(scope="module")
def interpreter_start() -> float:
    """Seconds from starting the interpreter (site included) until Python has found the spherepde
    package, before any spherepde code can run: a Ctrl-C in that window is Python's, not
    spherepde's. Finding the package is measured too because it is not free: with an editable
    install in a virtual environment that also sees the system's site-packages, the finders walk
    several path entries (a Ctrl-C there once failed this test with Python's own traceback)."""
    find = "import importlib.util as u; u.find_spec('spherepde')"
    times = []
    for _ in range(3):
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-c", find], check=True)
        times.append(time.monotonic() - t0)
    return max(times)


def interrupt(cmd: list[str], delay: float, *, double: bool) -> tuple[int, str]:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        if double:
            time.sleep(0.01)
            proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err


@pytest.mark.parametrize("delay,double", [(0.05, False), (0.2, False), (0.5, False), (0.05, True), (0.5, True)])
def test_ctrl_c_at_start_up_exits_130_with_at_most_one_line(tmp_path, interpreter_start, delay, double):
    folder = tmp_path / "r"
    code, err = interrupt([sys.executable, "-m", "spherepde", "run", *LONG, "--out", str(folder), "-q"],
                          1.5 * interpreter_start + delay, double=double)
    assert code == 130, err
    assert len(err.strip().splitlines()) <= 1 and "Traceback" not in err, err


def test_ctrl_c_at_start_up_of_the_console_script(tmp_path, interpreter_start):
    script = Path(sys.executable).with_name("spherepde")
    if not script.is_file():
        pytest.skip("no spherepde console script next to this interpreter")
    code, err = interrupt([str(script), "run", *LONG, "--out", str(tmp_path / "r"), "-q"], 1.5 * interpreter_start + 0.2, double=True)
    assert code == 130 and len(err.strip().splitlines()) <= 1 and "Traceback" not in err, err


def test_double_ctrl_c_during_a_run_exits_130_with_one_line(tmp_path):
    folder = tmp_path / "r"
    proc = subprocess.Popen([sys.executable, "-m", "spherepde", "run", *LONG, "--out", str(folder), "-q"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not ((folder / "diagnostics.csv").is_file() and len(csv_rows(folder / "diagnostics.csv")) >= 3):
            assert proc.poll() is None and time.monotonic() < deadline, "the run did not start"
            time.sleep(0.01)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.01)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and f"spherepde resume {folder}" in lines[0] and "Traceback" not in err, err
    assert json.loads((folder / "summary.json").read_text())["status"] == "interrupted"
    assert not (folder / runner.LOCK_FILE).exists()


#: Offsets (s) of the second Ctrl-C after the first: a double key press (under REPEAT_S = 1 s,
#: the same request), around REPEAT_S, and after it (a second request while the run stops or exits).
SECOND_CTRL_C = (0.0, 0.002, 0.01, 0.03, 0.1, 0.25, 0.5, 0.8, 0.95, 1.0, 1.05, 1.2, 1.5)


@contextlib.contextmanager
def busy_processes(n: int = 2):
    """``n`` processes spinning on a CPU (the load under which the race was seen), ended by their pids."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def _double_ctrl_c(folder: Path, offset: float) -> tuple[int, str]:
    """Start a long run, wait until it has written records, SIGINT, SIGINT again ``offset`` s later."""
    proc = subprocess.Popen([sys.executable, "-m", "spherepde", "run", *LONG, "--out", str(folder), "-q"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not ((folder / "diagnostics.csv").is_file() and len(csv_rows(folder / "diagnostics.csv")) >= 3):
            assert proc.poll() is None and time.monotonic() < deadline, "the run did not start"
            time.sleep(0.01)
        proc.send_signal(signal.SIGINT)
        time.sleep(offset)
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err


#: How many double Ctrl-Cs the slow race test sends (cycling through SECOND_CTRL_C): one per offset by
#: default; ``SPHEREPDE_RACE_REPEATS=100`` repeats it 100 times in a row (issue 37's acceptance run).
RACE_REPEATS = int(os.environ.get("SPHEREPDE_RACE_REPEATS", len(SECOND_CTRL_C)))


@pytest.mark.slow  # 13 runs started under load: minutes
@pytest.mark.timeout(120 + 60 * RACE_REPEATS)
def test_a_second_ctrl_c_at_any_offset_never_claims_nothing_was_written(tmp_path):
    """Issue 37: under load, the second Ctrl-C at any moment after the first (which wrote a
    checkpoint) says how to resume, never that nothing was written or that there is nothing to resume."""
    offsets = [SECOND_CTRL_C[i % len(SECOND_CTRL_C)] for i in range(RACE_REPEATS)]
    with busy_processes():
        for i, offset in enumerate(offsets):
            folder = tmp_path / f"r{i}"
            code, err = _double_ctrl_c(folder, offset)
            assert code == 130, (offset, err)
            assert "nothing" not in err and "Traceback" not in err, (offset, err)
            lines = err.strip().splitlines()
            assert lines and all(f"spherepde resume {folder}" in ln for ln in lines), (offset, err)
            assert json.loads((folder / "summary.json").read_text())["status"] == "interrupted", offset
            assert (folder / "checkpoint.npz").is_file() and not (folder / runner.LOCK_FILE).exists(), offset


# ============================================================================= sweeps
SWEEP_BASE = """
[run]
solver = "particles"
[weights]
dt = 0.005
[initial]
n = 8
[solver]
T = 0.05
[output]
record_dt = 0.025
snapshot_dt = 0.05
vtk = false
"""


def _sweep_file(folder: Path) -> Path:
    (folder / "base.toml").write_text(SWEEP_BASE)
    (folder / "sweep.toml").write_text('base = "base.toml"\n[grid]\n"model.H" = [1, 2]\n')
    return folder / "sweep.toml"


def test_two_sweeps_started_together_on_a_new_folder_never_both_write(tmp_path):
    sweep = _sweep_file(tmp_path)
    for trial in range(5):
        out = tmp_path / f"sweep-{trial}"
        results = race(["sweep", str(sweep), "--serial", "--out", str(out), "-q"])
        codes = sorted(code for code, _, _ in results)
        # the second is refused while the first holds the folder, or (started after it ended) finds every run done
        assert codes in ([0, 2], [0, 0]), results
        for code, err, _ in results:
            if code == 2:
                lines = err.strip().splitlines()
                assert len(lines) == 1 and "another sweep (pid " in lines[0] and "Traceback" not in err, err
        runs = sorted((out / "runs").iterdir())
        assert len(runs) == 2
        for run in runs:
            assert len(csv_rows(run / "diagnostics.csv")) == 4  # the header and t = 0, 0.025, 0.05: one run's rows
            assert json.loads((run / "summary.json").read_text())["status"] == "completed"
        assert not (out / "sweep.lock").exists()


@pytest.mark.parametrize("content", ["[1]", "garbage", json.dumps({"pid": 1, "host": "other-host.example"})])
def test_a_sweep_lock_that_is_not_ours_is_one_line(capsys, tmp_path, content):
    sweep = _sweep_file(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "sweep.lock").write_text(content)
    code, _, err = cli(capsys, "sweep", sweep, "--serial", "--out", out, "-q")
    line = one_line_error(err)
    assert code == 2 and ("sweep.lock" in line or "other-host.example" in line), line
    assert sorted(p.name for p in out.iterdir()) == ["sweep.lock"]  # nothing written


def test_ctrl_c_in_a_monte_carlo_run_is_one_line(capsys, tmp_path, monkeypatch):
    from spherepde.solvers.particles import ParticleSolver

    original, count = ParticleSolver.step, {"n": 0}

    def step(self, *a, **kw):
        out = original(self, *a, **kw)
        count["n"] += 1
        if count["n"] == 3:
            signal.raise_signal(signal.SIGINT)  # a real Ctrl-C in the first path
        return out

    monkeypatch.setattr(ParticleSolver, "step", step)
    folder = tmp_path / "mc"
    code, _, err = cli(capsys, "run", *LONG, "--set", "montecarlo.paths=2", "--out", folder, "-q")
    lines = err.strip().splitlines()
    assert code == 130 and len(lines) == 1 and f"spherepde resume {folder}" in lines[0] and "path-000" not in lines[0], err
    assert "interrupted at t" in (folder / "path-000" / "run.log").read_text()  # the path's own line stays in its log


# ============================================================================= Ctrl-C that Python cannot propagate
def test_a_ctrl_c_swallowed_by_a_weakref_callback_still_exits_130(capsys, monkeypatch):
    """A Ctrl-C landing in a weakref callback (Matplotlib's, during compare) was printed as
    'Exception ignored ... KeyboardInterrupt' and the command exited 0."""
    import weakref

    from spherepde.cli import config as cli_config

    def command(args):
        class Thing:
            pass

        def callback(ref):
            raise KeyboardInterrupt  # what the SIGINT handler raises when the signal lands here

        thing = Thing()
        ref = weakref.ref(thing, callback)
        del thing  # the callback runs now; its exception cannot propagate
        assert ref() is None
        print("all figures written")
        return 0

    monkeypatch.setattr(cli_config, "cmd_config", command)
    code = main(["config", "--show"])
    out, err = capsys.readouterr()
    assert code == 130, (code, err)
    assert err.strip().splitlines() == ["spherepde: error: interrupted"], err
    assert sys.unraisablehook is not None and "Lost" not in type(sys.unraisablehook).__name__  # the caller's hook is back


def test_noise_at_exit_after_a_ctrl_c_is_not_printed(tmp_path):
    """A double Ctrl-C in validate left a half-built object whose __del__ failed at exit:
    'Exception ignored in: <function Forward.__del__ ...>' and five more lines after the one line."""
    script = (
        "import sys\n"
        "sys.argv[0] = 'spherepde'\n"
        "from spherepde.cli import config as c\n"
        "from spherepde.cli.main import main\n"
        "class HalfBuilt:\n"
        "    def __del__(self):\n"
        "        self.expr is None\n"
        "def command(args):\n"
        "    global left\n"
        "    left = HalfBuilt()\n"
        "    raise KeyboardInterrupt\n"
        "c.cmd_config = command\n"
        "sys.exit(main(['config', '--show']))\n"
    )
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 130, r.stderr
    assert r.stderr.strip().splitlines() == ["spherepde: error: interrupted"], r.stderr


def test_the_start_up_handler_never_speaks_once_main_has_started(monkeypatch):
    """A second Ctrl-C that lands while main returns (its handler inactive, the start-up handler behind it)
    once printed 'interrupted while starting; nothing was written' after a checkpoint had been written."""
    from spherepde.cli.main import _InterruptOnce
    from spherepde.runs import interrupt

    monkeypatch.setattr(interrupt, "_started", [True])
    assert interrupt.interrupted_while_starting(signal.SIGINT, None) is None  # no os._exit, no message
    handler = _InterruptOnce(interrupt.interrupted_while_starting)
    handler.active = False
    assert handler(signal.SIGINT, None) is None
