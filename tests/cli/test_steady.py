"""``spherepde steady``: the branch in nu or beta written as CSV, figure and summary into a new folder;
bad input is one line, exit 2, nothing written."""

from __future__ import annotations

import csv
import json

import pytest
from conftest import cli, one_line_error, tree

from spherepde.model.stationary import critical_nu, tricritical_beta

SMALL = ("--nodes", "32", "--points", "9")


def test_steady_writes_csv_figure_and_summary_with_the_fold(capsys, tmp_path):
    out = tmp_path / "usa"
    code, stdout, err = cli(capsys, "steady", "--attention", "unnormalised", "--beta", "3.6", *SMALL, "--out", out)
    assert code == 0, err
    nu_c = critical_nu(3.6, "unnormalised", 3)
    assert f"nu_c = {nu_c:.6g}" in stdout and "transition: discontinuous" in stdout and "fold: nu = " in stdout
    assert f"beta_* = {tricritical_beta(3):.6g}" in stdout
    assert sorted(p.name for p in out.iterdir()) == ["steady.csv", "steady.json", "steady.png"]
    rows = list(csv.DictReader((out / "steady.csv").open()))
    assert set(rows[0]) == {"nu", "order", "direction", "converged", "residual", "stable"}
    by = {d: [r for r in rows if r["direction"] == d] for d in ("down", "up", "branch")}
    assert len(by["down"]) == len(by["up"]) == 9 and len(by["branch"]) > 5
    assert all(r["converged"] == "true" and float(r["residual"]) < 1e-9 for r in rows)
    summary = json.loads((out / "steady.json").read_text())
    assert summary["threshold"] == pytest.approx(nu_c) and summary["published_threshold"] == pytest.approx(nu_c)
    (fold,) = summary["folds"]
    assert nu_c < fold["value"] < 1.5 * nu_c
    lo, hi = summary["hysteresis"]
    assert nu_c <= lo < hi < fold["value"] and "hysteresis: the up and down sweeps settle on different states" in stdout
    # hysteresis: at the grid point between threshold and fold the up sweep is clustered, the down sweep uniform
    mid = [float(r["nu"]) for r in by["down"] if nu_c < float(r["nu"]) < fold["value"]]
    assert mid
    order = {(r["direction"], round(float(r["nu"]), 9)): float(r["order"]) for r in rows if r["direction"] != "branch"}
    assert all(order[("down", round(v, 9))] < 1e-9 and order[("up", round(v, 9))] > 0.5 for v in mid)


def test_steady_in_beta_on_the_circle_continuous(capsys, tmp_path):
    out = tmp_path / "circle"
    code, stdout, err = cli(capsys, "steady", "--geometry", "circle", "--vary", "beta", "--nu", "0.5", *SMALL, "--out", out)
    assert code == 0, err
    assert "beta_c = " in stdout and "transition: continuous (no fold in the range)" in stdout and "hysteresis: none" in stdout
    rows = list(csv.DictReader((out / "steady.csv").open()))
    assert "beta" in rows[0]
    up = [r for r in rows if r["direction"] == "up"]
    assert float(up[0]["order"]) < 1e-9 and float(up[-1]["order"]) > 0.3  # clusters as beta grows past beta_c


def test_repulsive_head_needs_a_range_and_stays_uniform(capsys, tmp_path):
    code, _, err = cli(capsys, "steady", "--s", "-1", "--out", tmp_path / "x")
    assert code == 2 and "--range" in one_line_error(err) and not (tmp_path / "x").exists()
    code, stdout, err = cli(capsys, "steady", "--s", "-1", "--range", "0.1", "1", *SMALL, "--out", tmp_path / "y")
    assert code == 0, err
    assert "linear threshold: none" in stdout and "transition: none" in stdout
    rows = list(csv.DictReader((tmp_path / "y" / "steady.csv").open()))
    assert all(float(r["order"]) < 1e-9 for r in rows)


@pytest.mark.parametrize("args, words", [
    (("--range", "2", "1"), "--range"),
    (("--points", "1"), "--points"),
    (("--beta", "-1"), "--beta"),
    (("--nu", "nan", "--vary", "beta"), "--nu"),
    (("--nodes", "4"), "--nodes"),
    (("--vary", "beta", "--nu", "2"), "no beta threshold"),  # softmax: nu_c < 1
])
def test_bad_input_is_one_line_and_writes_nothing(capsys, tmp_path, monkeypatch, args, words):
    monkeypatch.chdir(tmp_path)
    code, _, err = cli(capsys, "steady", *args, "--out", "o")
    assert code == 2 and words in one_line_error(err)
    assert tree(tmp_path) == set()


def test_unknown_choice_is_the_parser_s_one_line(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        cli(capsys, "steady", "--geometry", "torus")
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(err) == 1 and "--geometry" in err[0] and tree(tmp_path) == set()


def test_existing_folder_is_never_overwritten(capsys, tmp_path):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    code, _, err = cli(capsys, "steady", *SMALL, "--out", out)
    assert code == 2 and "already exists" in one_line_error(err)
    assert [p.name for p in out.iterdir()] == ["keep.txt"] and (out / "keep.txt").read_text() == "mine"


def _console_blocks(text: str):
    """(command arguments, printed lines) of every ```console block of a guide page."""
    import re
    import shlex

    for block in re.findall(r"```console\n(.*?)```", text, re.S):
        lines = block.strip().splitlines()
        assert lines[0].startswith("$ spherepde ")
        yield shlex.split(lines[0][len("$ spherepde "):]), lines[1:]


def test_guide_examples_print_what_the_guide_shows(capsys, tmp_path, monkeypatch):
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "guide" / "noise.md").read_text(encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    blocks = [b for b in _console_blocks(text) if b[0][0] == "steady"]
    assert len(blocks) == 2
    for args, shown in blocks:
        code, stdout, err = cli(capsys, *args)
        assert code == 0, err
        assert stdout.strip().splitlines() == shown


def test_higher_mode_traces_only_its_branch(capsys, tmp_path):
    from scipy.special import iv

    code, stdout, err = cli(capsys, "steady", "--geometry", "circle", "--attention", "unnormalised", "--beta", "2", "--mode", "2", *SMALL, "--out", tmp_path / "m2")
    assert code == 0, err
    assert f"nu_c = {float(iv(2, 2.0)):.6g} (mode 2)" in stdout and "sweeps: none for --mode 2" in stdout
    rows = list(csv.DictReader((tmp_path / "m2" / "steady.csv").open()))
    assert {r["direction"] for r in rows} == {"branch"} and max(float(r["order"]) for r in rows) > 0.1
