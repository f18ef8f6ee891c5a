"""Token runs with Brownian noise (issue 35, ``model.noise``): accepted for run.solver = 'particles',
refused in one line for the density level (not yet) and with point masses; resumed and extended
bit for bit (the noise stream is in the checkpoint); the ``entropy`` column is written."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import HardKill, cli, csv_rows, one_line_error

from spherepde.model.columns import solver_columns
from spherepde.runs import runner
from spherepde.runs.config import ConfigError, default_config
from spherepde.runs.dataset import read_diagnostics
from spherepde.runs.runfolder import RunFolder

NOISY = """
[run]
solver = "particles"
[model]
H = 2
noise = 0.5
[weights]
process = "ou"
seed = 3
dt = 0.005
[initial]
n = 30
seed = 1
[solver]
T = 0.2
integrator = "heun"
[output]
record_dt = 0.025
snapshot_dt = 0.05
checkpoint_every = 2
"""


def _config(tmp_path: Path, text: str = NOISY) -> Path:
    p = tmp_path / "noisy.toml"
    p.write_text(text)
    return p


def test_noisy_token_run_resumed_through_the_cli_is_bit_identical(tmp_path, capsys, monkeypatch):
    """spherepde run, killed after its first checkpoint (record 2), then spherepde resume: the same
    diagnostics.csv and snapshots as an uninterrupted run; the rows carry a finite entropy column."""
    cfg = _config(tmp_path)
    code, _, err = cli(capsys, "run", cfg, "--out", tmp_path / "ref", "-q")
    assert code == 0, err
    calls = {"n": 0}
    original = RunFolder.write_checkpoint

    def write_checkpoint(self, state, meta):
        calls["n"] += 1
        if calls["n"] == 2:
            raise HardKill
        return original(self, state, meta)

    with monkeypatch.context() as m:
        m.setattr(RunFolder, "write_checkpoint", write_checkpoint)
        with pytest.raises(HardKill):
            cli(capsys, "run", cfg, "--out", tmp_path / "killed", "-q")
    with np.load(tmp_path / "killed" / "checkpoint.npz") as z:
        assert "state_noise_rng" in z.files
    assert len(csv_rows(tmp_path / "killed" / "diagnostics.csv")) < len(csv_rows(tmp_path / "ref" / "diagnostics.csv"))
    code, _, err = cli(capsys, "resume", tmp_path / "killed", "-q")
    assert code == 0, err
    ref, got = tmp_path / "ref", tmp_path / "killed"
    assert (got / "diagnostics.csv").read_text() == (ref / "diagnostics.csv").read_text()
    with np.load(ref / "snapshots.npz") as a, np.load(got / "snapshots.npz") as b:
        for k in a.files:
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    rows = csv_rows(ref / "diagnostics.csv")
    assert tuple(rows[0]) == solver_columns("particles", noise=True)
    d = read_diagnostics(ref / "diagnostics.csv")
    assert np.all(np.isfinite(d["entropy"])) and np.all(d["entropy"] > -np.log(4 * np.pi) - 0.05)


def test_noisy_token_run_extended_equals_the_longer_run(tmp_path):
    """resume --set solver.T: the noise stream continues from the checkpoint, every digit as a run made to the later time."""
    base = {"run.solver": "particles", "model.H": 1, "model.noise": 0.3, "initial.n": 20, "solver.T": 0.05, "output.record_dt": 0.01,
            "output.snapshot_dt": 0.05, "output.vtk": False}
    short, full = tmp_path / "short", tmp_path / "full"
    runner.run(default_config().with_overrides(base), out=short, progress=False)
    runner.run(default_config().with_overrides({**base, "solver.T": 0.1}), out=full, progress=False)
    runner.resume(short, overrides={"solver.T": 0.1}, progress=False)
    assert (short / "diagnostics.csv").read_text() == (full / "diagnostics.csv").read_text()


def test_noise_changes_the_tokens_and_zero_noise_draws_nothing(tmp_path):
    """nu > 0 moves the tokens off the noiseless run; nu = 0 writes the noiseless columns."""
    base = {"run.solver": "particles", "model.H": 1, "initial.n": 20, "solver.T": 0.05, "output.record_dt": 0.05,
            "output.snapshot_dt": 0.05, "output.vtk": False}
    quiet = runner.run(default_config().with_overrides(base), out=tmp_path / "q", progress=False)
    noisy = runner.run(default_config().with_overrides({**base, "model.noise": 0.2}), out=tmp_path / "n", progress=False)
    assert tuple(csv_rows(quiet.folder / "diagnostics.csv")[0]) == solver_columns("particles")
    assert quiet.diagnostics["mean_resultant"][-1] != noisy.diagnostics["mean_resultant"][-1]


@pytest.mark.parametrize(
    "overrides, words",
    [
        ({"run.solver": "mesh", "solver.integrator": "implicit", "solver.atoms": True}, "point masses and token noise do not mix"),
    ],
)
def test_noise_refused_where_it_is_not_carried(overrides, words):
    with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)")):
        default_config().with_overrides({"model.noise": 0.1, **overrides})


def test_noise_refusal_is_one_cli_line(tmp_path, capsys):
    code, _, err = cli(capsys, "run", "--set", "run.solver=mesh", "--set", "model.noise=0.1", "--set", "solver.integrator=implicit",
                       "--set", "solver.atoms=true", "--out", tmp_path / "x")
    assert code == 2 and "model.noise" in one_line_error(err) and not (tmp_path / "x").exists()
    code, _, err = cli(capsys, "run", "--set", "run.solver=particles", "--set", "model.noise=-1", "--out", tmp_path / "y")
    assert code == 2 and "model.noise" in one_line_error(err)


def test_a_too_large_token_step_with_noise_is_refused_naming_the_step(tmp_path, capsys):
    code, _, err = cli(capsys, "run", "--set", "run.solver=particles", "--set", "model.noise=2", "--set", "solver.dt=0.01",
                       "--set", "initial.n=10", "--out", tmp_path / "z")
    line = one_line_error(err)
    assert code == 2 and "solver.dt" in line and "model.noise = 2" in line and "use solver.dt = 0.005" in line


def test_one_noisy_token_completes_with_nan_entropy(tmp_path):
    """A single token has no leave-one-out estimate: entropy is NaN by design there, not a blow-up."""
    res = runner.run(default_config().with_overrides({"run.solver": "particles", "model.H": 1, "model.noise": 0.3, "initial.n": 1,
                                                      "solver.T": 0.02, "output.record_dt": 0.01, "output.snapshot_dt": 0.02}),
                     out=tmp_path / "one", progress=False)
    assert res.status == "completed" and np.all(np.isnan(res.diagnostics["entropy"]))
