"""The ``spherepde`` command line, in process (``cli.main``) and as real subprocesses."""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
from conftest import cli, evil_npy, folder_state, one_line_error, tree

from spherepde import __version__
from spherepde.cli.main import main
from spherepde.runs import runner
from spherepde.runs.config import default_config, load_config
from spherepde.runs.runfolder import read_diagnostics

CFG = """
[run]
solver = "particles"
[model]
H = 2
[weights]
process = "ou"
seed = 0
dt = 0.005
[initial]
n = {n}
[solver]
T = {T}
integrator = "{integrator}"
[output]
record_dt = 0.025
snapshot_dt = 0.05
checkpoint_every = {every}
"""


def write_config(tmp_path: Path, *, n=20, T=0.2, integrator="euler", every=200, name="run.toml") -> Path:
    p = tmp_path / name
    p.write_text(CFG.format(n=n, T=T, integrator=integrator, every=every))
    return p


def spherepde(*args, cwd=None, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "spherepde", *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=timeout, check=False)


# ----------------------------------------------------------------------- help, version
def test_help(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for word in ("usage: spherepde", "run", "resume", "config", "mesh", "--version"):
        assert word in out
    with pytest.raises(SystemExit) as info:
        main(["run", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for word in ("--set", "--out", "--force", "--example"):
        assert word in out
    # no command: the help on stderr, exit 2 (issue 14)
    code, out, err = cli(capsys)
    assert code == 2 and "usage: spherepde" in err and not out


def test_version(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"spherepde {__version__}"


def test_unknown_command_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        main(["frobnicate"])
    assert info.value.code == 2


# ------------------------------------------------------------------------------ config
def test_config_show_prints_commented_defaults_that_load_back(capsys, tmp_path):
    code, out, err = cli(capsys, "config", "--show")
    assert code == 0 and err == ""
    key_lines = [ln for ln in out.splitlines() if ln and not ln.startswith("[")]
    assert key_lines and all("#" in ln for ln in key_lines)
    (tmp_path / "defaults.toml").write_text(out)
    assert load_config(tmp_path / "defaults.toml") == default_config()
    # 'config' alone shows the same
    code, out2, _ = cli(capsys, "config")
    assert code == 0 and out2 == out


def test_config_show_with_overrides(capsys, tmp_path):
    code, out, _ = cli(capsys, "config", "--set", "model.H=5", "--set", "run.name=abc")
    assert code == 0
    (tmp_path / "c.toml").write_text(out)
    cfg = load_config(tmp_path / "c.toml")
    assert cfg.model.H == 5 and cfg.run.name == "abc"


def test_config_list_and_show_examples(capsys, tmp_path):
    code, out, _ = cli(capsys, "config", "--list-examples")
    assert code == 0
    names = [ln.split()[0] for ln in out.splitlines() if ln.strip()]
    assert {"paper-ou-particles", "paper-oscillating-particles"} <= set(names)
    for name in names:
        code, text, _ = cli(capsys, "config", "--example", name)
        assert code == 0
        shipped = (resources.files("spherepde.runs.configs") / f"{name}.toml").read_text()
        assert text == shipped
        (tmp_path / f"{name}.toml").write_text(text)
        assert load_config(tmp_path / f"{name}.toml") == load_config(Path(str(resources.files("spherepde.runs.configs") / f"{name}.toml")))
        code, out, _ = cli(capsys, "config", "--example", name, "--check")
        assert code == 0 and "valid" in out
    with pytest.raises(SystemExit) as info:
        main(["config", "--example", "no-such-example"])
    assert info.value.code == 2
    line = one_line_error(capsys.readouterr().err)
    assert "no-such-example" in line and "paper-ou-particles" in line


def test_config_check(capsys, tmp_path):
    good = write_config(tmp_path)
    code, out, err = cli(capsys, "config", good, "--check")
    assert code == 0 and "valid" in out and err == ""
    # a FILE without --check prints it resolved
    code, out, _ = cli(capsys, "config", good)
    assert code == 0 and "n = 20" in out
    bad = tmp_path / "bad.toml"
    for text, key in [("[solver]\nTT = 1\n", "solver.TT"), ("[model]\nsign = 0\n", "model.sign"), ("[solver\n", "malformed TOML")]:
        bad.write_text(text)
        code, out, err = cli(capsys, "config", bad, "--check")
        assert code == 2 and out == ""
        assert key in one_line_error(err)
    code, _, err = cli(capsys, "config", good, "--check", "--set", "solver.T=-1")
    assert code == 2 and "solver.T" in one_line_error(err)


# --------------------------------------------------------------------------------- run
def test_run_with_overrides(capsys, tmp_path):
    cfg_path = write_config(tmp_path, T=1.0)
    out_dir = tmp_path / "out"
    code, out, err = cli(capsys, "run", cfg_path, "--set", "solver.T=0.1", "--set", "weights.seed=7", "--out", out_dir, "-q")
    assert code == 0, err
    cfg = load_config(out_dir / "config.toml")
    assert cfg.solver.T == 0.1 and cfg.weights.seed == 7 and cfg.initial.n == 20
    s = json.loads((out_dir / "summary.json").read_text())
    assert s["status"] == "completed" and s["seed"] == 7 and s["final"]["t"] == pytest.approx(0.1)
    assert read_diagnostics(out_dir / "diagnostics.csv")["t"][-1] == pytest.approx(0.1)
    # without -q a short report goes to stdout
    code, out, _ = cli(capsys, "run", cfg_path, "--set", "solver.T=0.05", "--out", tmp_path / "loud")
    assert code == 0 and "run completed" in out and "energy" in out


def test_run_default_folder_from_config(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg_path = write_config(tmp_path, T=0.05)
    code, _, err = cli(capsys, "run", cfg_path, "--set", "run.name=named", "--set", "run.out=results", "-q")
    assert code == 0, err
    assert json.loads((tmp_path / "results" / "named" / "summary.json").read_text())["status"] == "completed"


@pytest.mark.parametrize(
    "setup, args, key",
    [
        ("[solver]\nTT = 1\n", [], "solver.TT"),
        ("[solvr]\nT = 1\n", [], "solvr"),
        ("[solver]\nT = -1.0\n", [], "solver.T"),
        ('[solver]\nT = "long"\n', [], "solver.T"),
        ("[initial]\nn = 2.5\n", [], "initial.n"),
        ("[solver]\ncfl = 2.0\n", [], "solver.cfl"),
        ('[run]\nsolver = "mesh"\n[model]\nd = 4\n', [], "model.d"),
        ('[run]\nsolver = "particles"\n[initial]\nkind = "harmonic"\n', [], "initial.kind"),
        ("[solver]\nT = 0.0123\n", [], "solver.T"),
        ('[initial]\nkind = "file"\nfile = "missing.npy"\n', [], "initial.file"),
        ('[weights]\ninit = "file"\ninit_file = "missing.npy"\n', [], "weights.init_file"),
        ("[solver\nT = 1\n", [], "malformed TOML"),
        ("", ["--set", "solver.T"], "section.key"),
        ("", ["--set", "solver.T=fast"], "solver.T"),
        ("", ["--set", "nosuch.key=1"], "nosuch"),
        (None, [], "not found"),
    ],
)
def test_run_bad_config_exits_2_and_writes_nothing(capsys, tmp_path, monkeypatch, setup, args, key):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    cfg_path = work / "bad.toml"
    if setup is not None:
        cfg_path.write_text(setup)
    before = tree(work)
    code, out, err = cli(capsys, "run", cfg_path, *args)
    assert code == 2
    assert key in one_line_error(err)
    assert out == ""
    assert tree(work) == before  # no run folder (default: ./runs/...)
    code, out, err = cli(capsys, "run", cfg_path, *args, "--out", work / "explicit")
    assert code == 2 and not (work / "explicit").exists()
    assert tree(work) == before


def test_run_object_array_file_exits_2(capsys, tmp_path):
    marker = tmp_path / "PWNED"
    evil_npy(tmp_path / "evil.npy", marker)
    cfg_path = write_config(tmp_path)
    code, _, err = cli(capsys, "run", cfg_path, "--set", "initial.kind=file", "--set", f"initial.file={tmp_path / 'evil.npy'}", "--out", tmp_path / "r")
    assert code == 2
    line = one_line_error(err)
    assert "initial.file" in line and "evil.npy" in line
    assert not marker.exists() and not (tmp_path / "r").exists()


def test_existing_run_folder_is_refused_unless_force(capsys, tmp_path):
    cfg_path = write_config(tmp_path, T=0.05)
    folder = tmp_path / "r"
    assert cli(capsys, "run", cfg_path, "--out", folder, "-q")[0] == 0
    before = folder_state(folder)
    time.sleep(0.01)
    code, _, err = cli(capsys, "run", cfg_path, "--out", folder, "-q")
    assert code == 2
    line = one_line_error(err)
    assert "exists" in line and "--force" in line
    assert folder_state(folder) == before  # contents and mtimes untouched
    # a bad config with --force does not destroy the old run either
    code, _, err = cli(capsys, "run", cfg_path, "--out", folder, "--force", "--set", "solver.T=-1")
    assert code == 2 and folder_state(folder) == before
    code, _, err = cli(capsys, "run", cfg_path, "--out", folder, "--force", "--set", "solver.T=0.1", "-q")
    assert code == 0, err
    after = folder_state(folder)
    assert after["summary.json"][1] != before["summary.json"][1]
    assert json.loads((folder / "summary.json").read_text())["final"]["t"] == pytest.approx(0.1)


def test_run_example_and_monte_carlo(capsys, tmp_path):
    folder = tmp_path / "mc"
    code, out, err = cli(
        capsys,
        "run",
        "--example",
        "paper-ou-particles",
        "--set",
        "model.H=2",
        "--set",
        "initial.n=10",
        "--set",
        "solver.T=0.05",
        "--set",
        "montecarlo.paths=2",
        "--out",
        folder,
    )
    assert code == 0, err
    assert "run completed" in out
    assert (folder / "path-000" / "summary.json").is_file() and (folder / "path-001" / "summary.json").is_file()
    assert (folder / "diagnostics_mean.csv").is_file() and (folder / "diagnostics_std.csv").is_file()


def test_resume_errors(capsys, tmp_path):
    code, _, err = cli(capsys, "resume", tmp_path / "nothing-here")
    assert code == 2 and "run folder " in one_line_error(err) and "nothing-here does not exist" in one_line_error(err)


# -------------------------------------------------------------------------------- mesh
def test_mesh_json(capsys):
    code, out, _ = cli(capsys, "mesh", "8", "--json")
    assert code == 0
    q = json.loads(out)
    assert q["n_cells"] == 1280 and q["n_vertices"] == 642 and q["n_edges"] == 1920
    assert q["area_total"] == pytest.approx(4 * np.pi, rel=1e-12)
    code, out, _ = cli(capsys, "mesh", "2")
    assert code == 0 and "80" in out


# ---------------------------------------------------------------- real subprocesses
def test_subprocess_basics(tmp_path):
    r = spherepde("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"spherepde {__version__}"
    r = spherepde("--help")
    assert r.returncode == 0 and "usage: spherepde" in r.stdout
    r = spherepde("mesh", "8", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["n_cells"] == 1280
    bad = tmp_path / "bad.toml"
    bad.write_text("[solver]\nTT = 1\n")
    r = spherepde("run", bad, cwd=tmp_path)
    assert r.returncode == 2 and r.stdout == ""
    assert "did you mean 'T'" in one_line_error(r.stderr)
    assert tree(tmp_path) == {"bad.toml"}
    r = spherepde("config", "--show")
    assert r.returncode == 0
    (tmp_path / "d.toml").write_text(r.stdout)
    assert load_config(tmp_path / "d.toml") == default_config()


def test_ctrl_c_then_resume_is_bit_for_bit(tmp_path):
    """SIGINT a running `spherepde run`: exit 130, status interrupted, a checkpoint; `resume` finishes it exactly."""
    cfg_path = write_config(tmp_path, n=300, T=1.5, integrator="heun", every=1000)
    folder = tmp_path / "interrupted"
    proc = subprocess.Popen([sys.executable, "-m", "spherepde", "run", str(cfg_path), "--out", str(folder)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        csv_file = folder / "diagnostics.csv"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if csv_file.exists():
                with open(csv_file, newline="") as fh:
                    if len(list(csv.reader(fh))) >= 3:  # header + two records
                        break
            if proc.poll() is not None:
                pytest.fail(f"the run ended before Ctrl-C: {proc.communicate()}")
            time.sleep(0.01)
        else:
            pytest.fail("no diagnostics rows appeared")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "resume" in err
    s = json.loads((folder / "summary.json").read_text())
    assert s["status"] == "interrupted"
    assert (folder / "checkpoint.npz").is_file()
    with open(folder / "diagnostics.csv", newline="") as fh:
        rows = list(csv.reader(fh))
    assert 3 <= len(rows) < 1 + 61, "the run was not interrupted early"
    assert not (folder / "snapshots.npz").exists()

    r = spherepde("resume", folder, "-q")
    assert r.returncode == 0, r.stderr
    s = json.loads((folder / "summary.json").read_text())
    assert s["status"] == "completed"

    ref = runner.run(load_config(cfg_path), out=tmp_path / "ref", progress=False)
    assert (folder / "diagnostics.csv").read_text() == (ref.folder / "diagnostics.csv").read_text()
    d_res, d_ref = read_diagnostics(folder / "diagnostics.csv"), ref.diagnostics
    for k in d_ref:
        np.testing.assert_array_equal(d_res[k], d_ref[k], err_msg=k)
    with np.load(folder / "snapshots.npz") as a, np.load(ref.folder / "snapshots.npz") as b:
        np.testing.assert_array_equal(a["X"], b["X"])
        np.testing.assert_array_equal(a["t"], b["t"])
    assert s["final"] == json.loads((ref.folder / "summary.json").read_text())["final"]


# ------------------------------------------------------------------ issue 37: example lists from the shipped configs
def test_the_guides_example_list_is_generated_from_the_shipped_configs():
    from spherepde.cli.common import examples, examples_markdown

    text = (Path(__file__).resolve().parents[2] / "docs" / "guide" / "configuration.md").read_text()
    start = text.index("<!-- examples: generated from spherepde/runs/configs")
    block = text[text.index("\n", start) + 1: text.index("<!-- end of the generated examples -->")]
    assert block == examples_markdown(), "regenerate the list in docs/guide/configuration.md from spherepde.cli.common.examples_markdown()"
    assert all(f"`{name}`" in block for name in examples()) and "`metastable-particles`" in block


def test_list_examples_never_cuts_a_sentence(capsys):
    from spherepde.cli.common import example_summary, examples

    code, out, _ = cli(capsys, "config", "--list-examples")
    assert code == 0
    listed = {ln.split()[0]: ln.split(None, 1)[1] for ln in out.splitlines() if ln.strip()}
    for name, text in examples().items():
        summary = listed[name]
        assert summary == example_summary(text) and summary.count("(") == summary.count(")"), summary
        header = " ".join(ln.lstrip("#").strip() for ln in text.splitlines() if ln.startswith("#"))
        rest = header[len(summary):].lstrip()
        assert header.startswith(summary) and (not rest or rest[0].isupper()), (name, summary, rest[:40])
    assert "merge one pair at a time" in listed["metastable-mesh"]  # the old first line stopped at "D = 10 I"
    assert example_summary("# Title line\n# continued here (a, b. c). Next sentence.\n") == "Title line continued here (a, b. c)."
