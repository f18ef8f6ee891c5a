"""Bad input to the newer commands (issue 28): ``export``, ``compare``, ``validate --set``
and sweeps answer with one line on stderr naming the file, key or option, exit status 2,
and write nothing -- no traceback, no MemoryError, no Rust panic, no file in a run folder.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from conftest import cli, folder_state, one_line_error, tree

from spherepde.cli.main import main
from spherepde.runs import runner
from spherepde.runs.config import default_config

TINY = {"mesh.level": 2, "model.H": 1, "solver.T": 0.04, "output.record_dt": 0.01, "output.snapshot_dt": 0.02, "weights.dt": 0.01, "output.vtk": False}


def files_in(folder: Path) -> tuple[dict, set]:
    """Everything under ``folder``: every file's bytes and mtime, and every path (empty folders too)."""
    return folder_state(folder), tree(folder)


def refused(capsys, folder: Path, *args) -> str:
    """Run the CLI; assert exit 2, one error line, no traceback and nothing written or changed under ``folder``."""
    before = files_in(folder)
    line = one_line_exit(capsys, *args, code=2)
    assert files_in(folder) == before, "bad input must not write anything"
    return line


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A tiny mesh run and a particle run on its weight path (module-wide; tests copy before damaging)."""
    base = tmp_path_factory.mktemp("runs")
    runner.run(default_config().with_overrides(TINY), out=base / "mesh", progress=False)
    runner.run(default_config().with_overrides({**TINY, "run.solver": "particles", "initial.n": 8, "weights.process": "file",
                                                "weights.path_file": str(base / "mesh" / "weights.npz")}), out=base / "tokens", progress=False)
    return base


@pytest.fixture
def work(runs, tmp_path, monkeypatch):
    import shutil

    monkeypatch.chdir(tmp_path)
    for name in ("mesh", "tokens"):
        shutil.copytree(runs / name, tmp_path / name)
    return tmp_path


# ------------------------------------------------------------------------------ export
@pytest.mark.parametrize("target", ["mesh/diagnostics.csv", "mesh/run.nc", "mesh/snapshots/x.nc", "tokens/x.nc", "mesh"])
def test_export_never_writes_into_a_run_folder(capsys, work, target):
    line = refused(capsys, work, "export", "mesh", "--netcdf", target, "--force")
    assert "run folder" in line or "is a folder" in line


@pytest.mark.parametrize("part", ["snapshots.npz", "mesh.npz", "weights.npz"])
@pytest.mark.parametrize("damage", ["truncated", "flipped", "pickle"])
def test_damaged_parts_refuse_export_and_compare_naming_the_file(capsys, work, part, damage):
    f = work / "mesh" / part
    data = f.read_bytes()
    if damage == "truncated":
        f.write_bytes(data[: len(data) // 2])
    elif damage == "flipped":  # a byte in the middle of the largest member's data: the archive opens, its checksum fails
        import zipfile

        with zipfile.ZipFile(f) as zf:
            info = max(zf.infolist(), key=lambda i: i.compress_size)
        start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
        b = bytearray(data)
        b[start + info.compress_size // 2] ^= 0xFF
        f.write_bytes(bytes(b))
    else:
        np.savez(f, t=np.array([object()], dtype=object))
    line = refused(capsys, work, "export", "mesh", "--netcdf", "out.nc")
    assert part in line
    line = refused(capsys, work, "compare", "mesh", "tokens", "--out", "cmp")
    assert part in line


@pytest.mark.parametrize("part, content", [("config.toml", b"[[[ not toml"), ("summary.json", b"\xff\xfe{")])
def test_a_damaged_config_or_summary_refuses_export_and_compare(capsys, work, part, content):
    (work / "mesh" / part).write_bytes(content)
    assert part in refused(capsys, work, "export", "mesh", "--netcdf", "out.nc")
    assert part in refused(capsys, work, "compare", "mesh", "tokens", "--out", "cmp")


def test_export_of_a_mesh_run_without_its_mesh_is_refused(capsys, work):
    (work / "mesh" / "mesh.npz").unlink()
    line = refused(capsys, work, "export", "mesh", "--netcdf", "out.nc")
    assert "mesh.npz is missing" in line


def test_export_refuses_a_snapshots_npz_that_is_a_folder(capsys, work):
    (work / "mesh" / "snapshots.npz").unlink()
    (work / "mesh" / "snapshots.npz").mkdir()
    assert "snapshots.npz is not a file" in refused(capsys, work, "export", "mesh", "--netcdf", "out.nc")


def test_export_of_garbage_diagnostics_names_the_file_and_row(capsys, work):
    (work / "tokens" / "diagnostics.csv").write_text("t,energy\n0.0,1.0\nabc,2.0\n")
    line = refused(capsys, work, "export", "tokens", "--netcdf", "out.nc")
    assert "diagnostics.csv" in line and "row 3" in line


def test_export_of_an_intact_run_still_works(capsys, work):
    assert main(["export", "mesh", "--netcdf", "out.nc", "-q"]) == 0
    assert (work / "out.nc").is_file()


# ------------------------------------------------------------------------------ compare
@pytest.mark.parametrize("dpi", ["0", "-3", "5", "1201", "100000"])
def test_compare_checks_dpi_before_creating_the_output(capsys, work, dpi):
    line = refused(capsys, work, "compare", "mesh", "tokens", "--out", "cmp", "--dpi", dpi)
    assert "--dpi" in line and "10 to 1200" in line
    assert not (work / "cmp").exists()


@pytest.mark.parametrize("text, words", [
    ("t,energy\n0.0,1.0\nabc,2.0\n0.03,1.0\n", ["row 3", "'abc'"]),
    ("t,energy\n", ["no records"]),
    ("energy\n1.0\n", ["row 1", "'t'"]),
    ("t,energy\n0.0\n0.01,1.0,3.0\n0.02,1.0\n", ["row 2", "fields"]),
    ("t,energy\n0.0,1.0\n0.01,1.0\n0.02,abc\n", ["row 4", "'abc'"]),  # a complete last line is no half-written row
])
def test_compare_garbage_diagnostics_names_the_file_and_row(capsys, work, text, words):
    (work / "tokens" / "diagnostics.csv").write_text(text)
    line = refused(capsys, work, "compare", "mesh", "tokens", "--out", "cmp")
    assert "tokens/diagnostics.csv" in line
    for w in words:
        assert w in line


def test_compare_never_writes_into_a_run_folder(capsys, work):
    refused(capsys, work, "compare", "mesh", "tokens", "--out", "mesh/cmp")
    refused(capsys, work, "compare", "mesh", "tokens", "--out", "tokens", "--force")


# ------------------------------------------------------------------------------ plot and render: where the figures go
@pytest.mark.parametrize("cmd", ["plot", "render"])
@pytest.mark.parametrize("out, words", [
    ("tokens/figs", "lies inside the run folder"),  # was: figures dropped into another run's folder
    ("afile", "afile is a file, not a folder"),  # was: a traceback (plot) or a bare errno (render)
    ("afile/sub", "afile is a file"),
])
def test_plot_and_render_refuse_an_output_they_cannot_or_may_not_write(capsys, work, cmd, out, words):
    (work / "afile").write_text("x")
    line = refused(capsys, work, cmd, "mesh", "--out", out)
    assert words in line and "choose another --out" in line, line


@pytest.mark.parametrize("cmd", ["plot", "render"])
def test_plot_and_render_name_an_unwritable_output_folder(capsys, work, cmd, monkeypatch):
    import os

    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if mode & os.W_OK else real(p, mode, **kw))  # a read-only mount
    line = refused(capsys, work, cmd, "mesh", "--out", "figs")  # was: a traceback ending in OSError: [Errno 30]
    assert "cannot write into" in line and "read-only or no permission" in line, line
    line = refused(capsys, work, cmd, "mesh")  # the default, RUN_DIR/figures
    assert "cannot write into" in line, line


@pytest.mark.parametrize("args, words", [
    (["plot", "mesh", "--dpi", "100000"], "10 to 1200"),  # was: MemoryError: std::bad_alloc
    (["plot", "mesh", "--dpi", "0"], "10 to 1200"),
    (["render", "mesh", "--size", "100000", "100000"], "to 8192 x 8192 pixels"),  # was: an abort (exit 134)
])
def test_plot_and_render_bound_the_image_size(capsys, work, args, words):
    line = refused(capsys, work, *args)
    assert words in line, line


@pytest.mark.parametrize("args, words", [
    (["plot", "afile"], "run folder afile is a file, not a run folder"),  # was: "does not exist"
    (["render", "afile"], "run folder afile is a file, not a run folder"),
    (["compare", "mesh", "afile"], "run folder afile is a file, not a run folder"),
    (["resume", "afile"], "afile is not a spherepde run folder (a file)"),
    (["resume", "nowhere"], "run folder nowhere does not exist"),  # was: "is not a spherepde run folder (no config.toml)"
])
def test_a_file_or_a_missing_folder_is_named_as_such(capsys, work, args, words):
    (work / "afile").write_text("x")
    line = refused(capsys, work, *args)
    assert words in line, line


def test_plot_into_its_own_run_folder_still_works(capsys, work):
    code, _, err = cli(capsys, "plot", "mesh", "--out", "mesh/figs2", "-q")
    assert code == 0 and (work / "mesh" / "figs2" / "energy.png").is_file(), err


# ------------------------------------------------------------------------------ validate --set
@pytest.fixture
def vwork(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SPHEREPDE_MAX_MEMORY", "16G")
    return tmp_path


@pytest.mark.parametrize("setting, words", [
    ("analytic.steps=2.5", ["analytic.steps", "whole number"]),  # ran as if it were 2
    ("analytic.steps=0", ["analytic.steps", "at least 1"]),
    ("analytic.steps=-4", ["analytic.steps", "at least 1"]),
    ("analytic.steps=1000000000000", ["analytic.steps", "TiB of memory"]),  # MemoryError at 67 GiB
    ("analytic.T=0", ["analytic.T", "above 0"]),
    ("analytic.T=-0.1", ["analytic.T", "above 0"]),
    ("analytic.levels=[100000]", ["analytic.levels", "at most 256", "memory"]),  # a Rust panic in meshzoo
    ("analytic.levels=[0]", ["analytic.levels", "at least 1"]),
    ("analytic.levels=[8.5]", ["analytic.levels", "whole number"]),
    ("analytic.levels=[]", ["analytic.levels", "empty"]),
    ("analytic.signs=[2]", ["analytic.signs", "not one of"]),
    ("stability.mesh_level=128", ["stability.mesh_level", "memory"]),
    ("structure.cfls=[1.5]", ["structure.cfls", "at most 1"]),
    ("mesh_vs_particles.n_list=[-5]", ["mesh_vs_particles.n_list", "at least 1"]),
    ("paper_section6.paths={ou=0, osc=2}", ["paper_section6.paths['ou']", "at least 1"]),
    ("paper_section6.regimes=[\"oops\"]", ["paper_section6.regimes", "not one of"]),
    ("paper_section6.dt=1e-9", ["paper_section6.T", "weight path", "memory"]),
    ("mesh_convergence.integrators={1=\"rk9\", 2=\"ssprk2\"}", ["mesh_convergence.integrators['1']", "not one of"]),
])
def test_validate_set_values_are_checked_against_the_studys_range(capsys, vwork, setting, words):
    line = refused(capsys, vwork, "validate", "--smoke", "--out", "rep", "--set", setting)
    for w in words:
        assert w in line, line
    assert not (vwork / "rep").exists()


@pytest.mark.parametrize("setting, words", [
    ("metastability.cases=[[8.0, 1.2, 90.0]]", ["metastability.cases", "m1 = 1.2", "(0, 1)"]),  # ZeroDivisionError / nan
    ("metastability.cases=[[8.0, 0.0, 90.0]]", ["metastability.cases", "out of range"]),
    ("metastability.cases=[[8.0, 0.5]]", ["metastability.cases", "triple"]),  # IndexError
    ("metastability.cases=[8.0, 0.5, 90.0]", ["metastability.cases", "case 0 = 8.0", "triple"]),  # a flat list
    ("metastability.cases=[[8.0, 0.5, 180.0]]", ["metastability.cases", "theta0 = 180", "never move"]),
    ("metastability.cases=[[8.0, 0.5, 10.0]]", ["metastability.cases", "start merged"]),
    ("metastability.cases=[[100.0, 0.5, 90.0]]", ["metastability.cases", "beta = 100"]),  # OverflowError
    ("metastability.cost_case=3", ["metastability.cost_case", "index", "1 cases"]),
    ("metastability.tol=1e-300", ["metastability.tol", "at least 1e-10"]),
])
def test_validate_metastability_cases_are_refused_before_the_report_folder(capsys, vwork, setting, words):
    """Issue 37: each of these passed the range check, wrote a report folder, then failed with a Python exception name."""
    line = refused(capsys, vwork, "validate", "--smoke", "--only", "metastability", "--out", "rep", "--set", setting)
    for w in words:
        assert w in line, line
    assert not (vwork / "rep").exists()


def test_every_studys_joint_rules_accept_its_defaults():
    import importlib

    from spherepde.studies import STUDIES

    for name in STUDIES:
        check = getattr(importlib.import_module(f"spherepde.studies.{name}"), "check_params", None)
        if check is not None:
            for size, params in importlib.import_module(f"spherepde.studies.{name}").SIZES.items():
                assert check(params) is None, (name, size, check(params))


def test_every_size_parameter_declares_its_range_and_the_defaults_fit():
    import importlib

    from spherepde.studies import STUDIES
    from spherepde.studies.common import range_problem

    checked = 0
    for name in STUDIES:
        mod = importlib.import_module(f"spherepde.studies.{name}")
        ranges = getattr(mod, "RANGES", None)
        if ranges is None:  # a study without declared ranges gets the kind check only
            continue
        checked += 1
        for size, params in mod.SIZES.items():
            for k, v in params.items():
                assert k in ranges, f"{name}.{k} has no range"
                assert range_problem(f"{name}.{k}", ranges[k], v) is None, (name, size, k, v)
    assert checked >= 7


def test_validate_out_that_cannot_be_created_is_one_line(capsys, vwork):
    (vwork / "afile").write_text("x")
    line = refused(capsys, vwork, "validate", "--smoke", "--only", "analytic", "--out", "afile/rep")
    assert "afile" in line and "not a folder" in line


def test_validate_out_in_an_unwritable_folder_is_one_line(capsys, vwork, monkeypatch):
    import os

    (vwork / "locked").mkdir()
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if str(p).endswith("locked") else real(p, mode, **kw))
    line = refused(capsys, vwork, "validate", "--smoke", "--only", "analytic", "--out", "locked/rep")
    assert "not writable" in line


# ------------------------------------------------------------------------------ sweeps
SWEEP_HEAD = 'base_example = "paper-ou-particles"\n[set]\n"solver.T" = 0.02\n"initial.n" = 8\n"model.H" = 1\n'


def _values(n: int, scale: float = 1.0) -> str:
    return ", ".join(repr(scale * (i + 1)) if scale != 1.0 else str(i + 1) for i in range(n))


def test_a_huge_grid_is_refused_at_once_dry_run_too(capsys, vwork):
    from spherepde.runs.sweep import load_sweep
    from spherepde.runs.sweep.plan import SweepError

    (vwork / "huge.toml").write_text(SWEEP_HEAD + f'[grid]\n"weights.seed" = [{_values(1000)}]\n"initial.seed" = [{_values(1000)}]\n')
    t0 = time.perf_counter()
    with pytest.raises(SweepError, match="1,000,000 runs"):
        load_sweep(vwork / "huge.toml")
    assert time.perf_counter() - t0 < 1.0  # hung past 90 s
    line = refused(capsys, vwork, "sweep", "huge.toml", "--dry-run")
    assert "1,000,000 runs" in line and "at most 10,000" in line
    refused(capsys, vwork, "sweep", "huge.toml", "--serial")


def test_a_long_list_is_refused_before_its_entries_are_compared(capsys, vwork):
    (vwork / "long.toml").write_text(SWEEP_HEAD + f'[list]\n"weights.seed" = [{_values(20000)}]\n')
    assert "20,000 runs" in refused(capsys, vwork, "sweep", "long.toml", "--dry-run")


def test_a_six_axis_grid_is_one_line_not_a_memory_error(capsys, vwork):
    axes = ["weights.seed", "initial.seed", "weights.kappa", "mesh.level", "output.snapshot_dt", "weights.dt"]
    grid = "".join(f'"{k}" = [{_values(100, 0.001 if k in ("output.snapshot_dt", "weights.dt") else 1.0)}]\n' for k in axes)
    (vwork / "six.toml").write_text(SWEEP_HEAD + "[grid]\n" + grid)
    line = refused(capsys, vwork, "sweep", "six.toml", "--dry-run")
    assert "1,000,000,000,000 runs" in line


@pytest.fixture
def small_sweep(vwork):
    (vwork / "ok.toml").write_text(SWEEP_HEAD + '[grid]\n"weights.seed" = [0, 1]\n')
    return vwork


def test_sweep_out_that_cannot_be_a_folder_is_one_line(capsys, small_sweep, runs):
    import shutil

    work = small_sweep
    (work / "afile").write_text("x")
    assert "is a file" in refused(capsys, work, "sweep", "ok.toml", "--serial", "--out", "afile")
    assert "is a file" in refused(capsys, work, "sweep", "ok.toml", "--serial", "--out", "afile/sw")
    shutil.copytree(runs / "tokens", work / "tokens")
    assert "run folder" in refused(capsys, work, "sweep", "ok.toml", "--serial", "--out", "tokens/sw")


def test_sweep_out_in_an_unwritable_folder_is_one_line(capsys, small_sweep, monkeypatch):
    import os

    (small_sweep / "locked").mkdir()
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if str(p).endswith("locked") else real(p, mode, **kw))
    assert "not writable" in refused(capsys, small_sweep, "sweep", "ok.toml", "--serial", "--out", "locked/sw")


@pytest.mark.parametrize("content", [b"[1, 2]", b"\x00\xffgarbage", b"{}", b'{"pid": "x", "host": 3}'])
def test_a_garbage_sweep_lock_is_one_line(capsys, small_sweep, content):
    (small_sweep / "sw").mkdir()
    (small_sweep / "sw" / "sweep.lock").write_bytes(content)
    assert "sweep.lock" in refused(capsys, small_sweep, "sweep", "ok.toml", "--serial", "--out", "sw")


@pytest.mark.parametrize("key, file, where", [
    ("initial.file", "evil.npy", "set"), ("weights.path_file", "evil.npz", "set"), ("initial.file", "evil.npy", "grid"),
])
def test_an_object_array_in_a_sweep_file_path_is_refused_once_before_the_sweep(capsys, vwork, key, file, where):
    arr = np.array([{"payload": 1}, None], dtype=object)
    if file.endswith(".npy"):
        np.save(vwork / file, arr, allow_pickle=True)
    else:
        np.savez(vwork / file, D=arr)
    kind = '"initial.kind" = "file"\n' if key == "initial.file" else '"weights.process" = "file"\n'
    value = f'"{key}" = "{file}"\n' if where == "set" else ""
    grid = '[grid]\n"weights.seed" = [0, 1]\n' if where == "set" else f'[grid]\n"{key}" = ["{file}"]\n"weights.seed" = [0, 1]\n'
    (vwork / "evil.toml").write_text(SWEEP_HEAD + kind + value + grid)
    for extra in (["--dry-run"], ["--serial"]):
        line = refused(capsys, vwork, "sweep", "evil.toml", *extra)
        assert f"[{where}] {key}" in line and "Python objects" in line
    assert not (vwork / "sweeps").exists()


# ------------------------------------------------------------------------------ the second campaign (issue 28)
def one_line_exit(capsys, *args, code: int) -> str:
    """Run the CLI; assert exit ``code`` and one error line, no traceback."""
    got, out, err = cli(capsys, *args)
    assert got == code, (got, err)
    assert "Traceback" not in out
    return one_line_error(err)


@pytest.mark.parametrize("damage, words", [
    ("no weights", ["weights.npz is missing"]),
    ("no diagnostics", ["diagnostics.csv is missing"]),
    ("diagnostics cut", ["diagnostics.csv", "cut short"]),
    ("diagnostics empty", ["diagnostics.csv", "empty"]),
    ("config cut", ["config.toml", "section"]),
])
def test_export_refuses_a_run_that_is_not_whole(capsys, work, damage, words):
    run = work / "mesh"
    if damage == "no weights":
        (run / "weights.npz").unlink()
    elif damage == "no diagnostics":
        (run / "diagnostics.csv").unlink()
    elif damage == "diagnostics empty":
        (run / "diagnostics.csv").write_bytes(b"")
    else:
        f = run / ("diagnostics.csv" if damage == "diagnostics cut" else "config.toml")
        data = f.read_bytes()
        half = data[: len(data) // 2]
        f.write_bytes(half if damage == "diagnostics cut" else half[: half.rindex(b"\n") + 1])  # config: cut after a whole line
    line = refused(capsys, work, "export", "mesh", "--netcdf", "out.nc")  # exported silently before
    for w in words:
        assert w in line, line


def test_compare_refuses_a_completed_run_whose_diagnostics_were_cut(capsys, work):
    f = work / "tokens" / "diagnostics.csv"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])  # an unfinished last line, and rows missing
    line = refused(capsys, work, "compare", "mesh", "tokens", "--out", "cmp")
    assert "tokens/diagnostics.csv" in line and "cut short" in line


def test_a_nan_time_in_diagnostics_is_refused_naming_the_file_and_row(capsys, work):
    f = work / "tokens" / "diagnostics.csv"
    lines = f.read_text().splitlines(keepends=True)
    lines[2] = "nan" + lines[2][lines[2].index(","):]
    f.write_text("".join(lines))
    for args in (["compare", "mesh", "tokens", "--out", "cmp"], ["export", "tokens", "--netcdf", "out.nc"]):
        line = refused(capsys, work, *args)
        assert "tokens/diagnostics.csv" in line and "row 3" in line and "'t'" in line, line


def test_export_refuses_at_once_when_the_disk_lacks_room(capsys, work, monkeypatch):
    import collections
    import shutil

    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda p: collections.namedtuple("u", "total used free")(real(p).total, real(p).used, 5000))
    line = refused(capsys, work, "export", "mesh", "--netcdf", "out.nc")  # h5py crashed (SIGSEGV) on the full disk
    assert "not enough space" in line and "out.nc" in line
    assert not list(work.glob(".*tmp"))


@pytest.mark.parametrize("option", [["--dpi", "nan"], ["--dpi", "1e3"], ["--format", "gif"]])
def test_an_option_argparse_rejects_is_one_line(capsys, work, option):
    with pytest.raises(SystemExit) as info:
        main(["compare", "mesh", "tokens", "--out", "cmp", *option])
    out, err = capsys.readouterr()
    assert info.value.code == 2
    assert len(err.strip().splitlines()) == 1, err  # was a four-line usage block first
    assert err.startswith("spherepde compare: error: ") and option[0] in err
    assert not (work / "cmp").exists()


def test_compare_on_a_full_disk_names_the_file_and_keeps_no_folder(capsys, work, monkeypatch):
    import errno

    from spherepde.viz import compare as vc

    def full(tracks, diffs, reference, out, *a, **k):
        (out / "G2.png").write_bytes(b"\x89PNG half")
        raise OSError(errno.ENOSPC, "No space left on device", str(out / "G2.png"))

    monkeypatch.setattr(vc, "compare_figures", full)
    before = files_in(work)
    line = one_line_exit(capsys, "compare", "mesh", "tokens", "--out", "new/cmp", code=2)
    assert "cmp/G2.png" in line and "No space left" in line
    assert not (work / "new").exists() and files_in(work) == before


def test_validate_on_a_full_disk_is_one_line_and_no_partial_report(capsys, vwork, monkeypatch):
    import errno

    from spherepde.studies import analytic, common

    monkeypatch.setattr(analytic, "run", lambda size, **kw: {"summary": "", "checks": {}, "claims": {}})
    monkeypatch.setattr(analytic, "plot", lambda results, fig_dir: [])

    def full(obj, path):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(common, "save_json", full)
    line = one_line_exit(capsys, "validate", "--smoke", "--only", "analytic", "--out", "rep", "-q", code=1)
    assert "rep" in line and "No space left" in line
    assert not (vwork / "rep").exists()


def test_validate_out_inside_a_run_folder_is_refused(capsys, work):
    for out in ("mesh", "mesh/v"):
        line = refused(capsys, work, "validate", "--smoke", "--only", "analytic", "--out", out, "--force")
        assert "run folder" in line


def test_a_sweep_lock_with_an_impossible_pid_is_one_line(capsys, small_sweep):
    import json
    import socket

    (small_sweep / "sw").mkdir()
    (small_sweep / "sw" / "sweep.lock").write_text(json.dumps({"pid": 10**30, "host": socket.gethostname()}))
    line = refused(capsys, small_sweep, "sweep", "ok.toml", "--serial", "--out", "sw")  # OverflowError from os.kill
    assert "sweep.lock" in line and "not a possible process id" in line


def test_a_garbage_scheduler_address_is_one_line(capsys, small_sweep):
    pytest.importorskip("distributed")
    line = refused(capsys, small_sweep, "sweep", "ok.toml", "--scheduler", "garbage://", "--out", "sw")
    assert "garbage://" in line


def test_a_sweep_on_a_full_disk_is_one_line(capsys, small_sweep, monkeypatch):
    import errno

    from spherepde.runs.sweep import state

    def full(path, text):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(state, "atomic_write_text", full)
    line = one_line_exit(capsys, "sweep", "ok.toml", "--serial", "-q", "--out", "sw", code=1)
    assert "No space left" in line and "sweep_state.json" in line
