"""Bad input (issue 14): everything that can be checked before a run starts is answered with
one line on stderr, ``spherepde: error: ...`` naming the key or file and what to do, exit
status 2 and nothing written -- never a traceback, a hang, or a Rust or VTK backtrace.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from spherepde._base import available_memory
from spherepde.cli.main import main
from spherepde.model.weights import OUProcess, WeightPath, generate_weight_path, initial_matrices
from spherepde.runs.config import ConfigError, check_resources, default_config, estimate_memory, load_config, parse_override
from spherepde.runs.sweep import load_sweep
from spherepde.solvers.particles import initial_tokens

#: A tiny mesh run; each test adds what it breaks.
TINY = ["--set", "mesh.level=2", "--set", "solver.T=0.05", "--set", "model.H=1", "--set", "output.vtk=false"]
PARTICLES = ["--set", "run.solver=particles", "--set", "initial.n=8"]


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """Run in an empty folder (the default run folder is ./runs/...); the memory limit is
    pinned so that the size checks answer the same on every machine."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SPHEREPDE_MAX_MEMORY", "16G")
    return tmp_path


def files_in(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def refused(capsys, folder: Path, *args, command="run") -> str:
    """Run the CLI; assert exit 2, one error line, no traceback and nothing written; return the line."""
    before = files_in(folder)
    code = main([command, *[str(a) for a in args]])
    out, err = capsys.readouterr()
    assert code == 2, (code, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"expected one line, got {err!r}"
    assert lines[0].startswith("spherepde: error: ")
    assert "Traceback" not in err and "Traceback" not in out
    assert files_in(folder) == before, "bad input must not write anything"
    return lines[0]


# ------------------------------------------------------------------ non-finite values
@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "sets, key",
    [
        (["initial.kind=vmf", "initial.kappas=[inf]", "run.solver=particles", "initial.n=8"], "initial.kappas"),  # hung forever
        (["initial.kind=vmf", "initial.kappas=[inf]"], "initial.kappas"),
        (["initial.kind=vmf", "initial.kappas=[nan]"], "initial.kappas"),
        (["initial.kappas=[nan]"], "initial.kappas"),  # checked even when kind is not vmf
        (["initial.kind=vmf", "initial.means=[[nan, 0, 1]]"], "initial.means"),
        (["initial.kind=vmf", "initial.means=[[0, 0, 1], [1, 0, 0]]", "initial.weights=[inf, 1]"], "initial.weights"),
        (["weights.init=beta", "weights.beta=nan"], "weights.beta"),
        (["weights.mean=inf"], "weights.mean"),
        (["weights.sigma=-inf"], "weights.sigma"),
        (["solver.T=inf"], "solver.T"),
        (["solver.cfl=nan"], "solver.cfl"),
        (["output.record_dt=nan"], "output.record_dt"),
        (["model.H=inf"], "model.H"),
    ],
)
def test_non_finite_values_are_bad_input(capsys, workdir, sets, key):
    line = refused(capsys, workdir, *TINY, *[x for s in sets for x in ("--set", s)])
    assert key in line


def test_impossible_magnitudes_are_refused_with_the_key(capsys, workdir):
    line = refused(capsys, workdir, *TINY, "--set", "weights.sigma=1e200")  # sigma**2 overflowed
    assert "weights.sigma" in line and "at most" in line
    line = refused(capsys, workdir, *TINY, *PARTICLES, "--set", "initial.kind=vmf", "--set", "initial.kappas=[1e200]")
    assert "initial.kappas" in line
    # an Euler-Maruyama OU path with kappa dt = 1e4 overflows over 200 steps ...
    line = refused(capsys, workdir, *TINY, "--set", "weights.kappa=1e6", "--set", "solver.T=2")
    assert "weights.kappa" in line and "exact" in line
    # ... but a large kappa in itself is not an error (the run decides), nor with the exact scheme
    default_config().with_overrides({"weights.kappa": 1e6, "solver.T": 0.05})
    default_config().with_overrides({"weights.kappa": 1e6, "weights.scheme": "exact"})
    default_config().with_overrides({"weights.sigma": 1e6})


def test_vmf_mean_of_zero_names_the_key(capsys, workdir):
    for extra in ([], PARTICLES):
        line = refused(capsys, workdir, *TINY, *extra, "--set", "initial.kind=vmf", "--set", "initial.means=[[0,0,0]]")
        assert "initial.means" in line and "zero" in line


@pytest.mark.timeout(30)
def test_library_vmf_tokens_refuse_infinite_or_zero_input():
    with pytest.raises(ValueError, match="concentrations"):
        initial_tokens("vmf", 5, 3, means=[[0, 0, 1]], kappas=[np.inf])
    with pytest.raises(ValueError, match="concentrations"):
        initial_tokens("vmf", 5, 3, means=[[0, 0, 1]], kappas=[np.nan])
    with pytest.raises(ValueError, match="non-zero"):
        initial_tokens("vmf", 5, 3, means=[[0, 0, 0]], kappas=[1.0])


# ------------------------------------------------------------------ sizes that cannot fit
@pytest.mark.parametrize(
    "sets, key",
    [
        (["model.H=1e9"], "model.H"),
        (["model.H=1e9", "run.solver=particles", "initial.n=8"], "model.H"),
        (["initial.n=1e9", "run.solver=particles"], "initial.n"),
        (["mesh.level=2000"], "mesh.level"),  # a 64-line Rust backtrace from meshzoo, or MemoryError
        (["solver.T=1e308"], "solver.T"),  # OverflowError
        (["weights.dt=1e-300"], "weights.dt"),
        (["output.record_dt=0.01", "solver.T=1e8", "weights.process=frozen", "model.H=1"], "output.record_dt"),
    ],
)
def test_sizes_that_cannot_fit_are_refused_before_allocating(capsys, workdir, sets, key):
    line = refused(capsys, workdir, *TINY, *[x for s in sets for x in ("--set", s)])
    assert line.startswith(f"spherepde: error: {key}:"), line
    assert "16 GiB of memory is SPHEREPDE_MAX_MEMORY" in line  # the estimate against the limit


@pytest.mark.parametrize("value", ["1e30", "100000000000000000000000000000"])
def test_integer_overflow_names_the_key(capsys, workdir, value):
    line = refused(capsys, workdir, *TINY, "--set", f"model.H={value}")
    assert "model.H" in line and "too large for an integer" in line
    (workdir / "big.toml").write_text(f"[model]\nH = {value}\n")
    assert "model.H" in refused(capsys, workdir, "big.toml", "--set", "solver.T=0.05")


def test_memory_estimate_and_limit(monkeypatch):
    cfg = default_config()
    terms = estimate_memory(cfg)
    assert all(b >= 0 for b, *_ in terms) and sum(b for b, *_ in terms) < 2**28  # the default run is small
    check_resources(cfg)
    big = cfg.with_overrides({"mesh.level": 64, "model.H": 4})
    mesh_term = next(b for b, key, *_ in estimate_memory(big) if key == "mesh.level")
    assert 81920 * 1000 < mesh_term < 81920 * 4000  # measured: ~1.8 kB per cell at H = 4
    monkeypatch.setenv("SPHEREPDE_MAX_MEMORY", "64M")
    assert available_memory() == (64 * 2**20, "SPHEREPDE_MAX_MEMORY")
    with pytest.raises(ConfigError, match="mesh.level"):
        check_resources(big)
    monkeypatch.setenv("SPHEREPDE_MAX_MEMORY", "lots")
    with pytest.raises(ConfigError, match="SPHEREPDE_MAX_MEMORY"):
        available_memory()
    monkeypatch.delenv("SPHEREPDE_MAX_MEMORY")
    limit, source = available_memory()
    assert limit > 0 and source


def test_mesh_command_refuses_a_level_that_cannot_fit(capsys, workdir):
    line = refused(capsys, workdir, "2000", command="mesh")
    assert "level 2000" in line and "GiB" in line
    line = refused(capsys, workdir, "2", "--out", "mesh.xyz", command="mesh")
    assert "--out" in line and ".npz" in line


# ------------------------------------------------------------------ configuration files
def test_unreadable_configuration_files(capsys, workdir):
    (workdir / "latin1.toml").write_bytes(b"[solver]\nT = 0.05 # caf\xe9\n")
    line = refused(capsys, workdir, "latin1.toml")
    assert "latin1.toml" in line and "UTF-8" in line
    (workdir / "binary.toml").write_bytes(bytes(range(256)) * 4)
    assert "binary.toml" in refused(capsys, workdir, "binary.toml")
    (workdir / "nul.toml").write_bytes(b"[solver]\x00\n")
    assert "nul.toml" in refused(capsys, workdir, "nul.toml")
    (workdir / "deep.toml").write_text("a = " + "[" * 5000 + "]" * 5000 + "\n")  # RecursionError
    line = refused(capsys, workdir, "deep.toml")
    assert "deep.toml" in line and "nested too deeply" in line
    (workdir / "folder.toml").mkdir()
    line = refused(capsys, workdir, "folder.toml")
    assert "folder.toml is a directory" in line and "not found" not in line
    assert "nested too deeply" in refused(capsys, workdir, *TINY, "--set", "initial.means=" + "[" * 5000 + "]" * 5000)
    for args in (["folder.toml", "--check"], ["latin1.toml", "--check"]):
        assert args[0] in refused(capsys, workdir, *args, command="config")


def test_configuration_file_and_example_together_are_refused(capsys, workdir):
    (workdir / "my.toml").write_text("[solver]\nT = 0.05\n")
    line = refused(capsys, workdir, "my.toml", "--example", "paper-ou-particles")
    assert "my.toml" in line and "--example paper-ou-particles" in line
    assert "my.toml" in refused(capsys, workdir, "my.toml", "--example", "paper-ou-particles", command="config")


def test_no_command_prints_the_help_and_exits_2(capsys):
    assert main([]) == 2
    out, err = capsys.readouterr()
    assert not out and "usage: spherepde" in err and "spherepde: error:" in err


@pytest.mark.parametrize("name", ["../x", "/abs/x", "a/b", "a\\b", "..", ".", " x", "C:x"])
def test_run_name_must_be_a_plain_name(capsys, workdir, name):
    with pytest.raises(ConfigError, match="run.name"):
        default_config().with_overrides({"run.name": name})
    (workdir / "cfg.toml").write_text(f"[run]\nname = {name!r}\n".replace("'", '"').replace("\\", "\\\\"))
    assert "run.name" in refused(capsys, workdir, "cfg.toml")
    assert not (workdir.parent / "x").exists()


# ------------------------------------------------------------------ input files
def forged_npy(path: Path, shape: tuple) -> None:
    """An .npy whose header claims ``shape`` (float64) but holds 64 bytes."""
    header = "{'descr': '<f8', 'fortran_order': False, 'shape': " + repr(shape) + ", }"
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    path.write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + bytes(64))


def test_token_and_density_files(capsys, workdir):
    np.save(workdir / "empty.npy", np.zeros((0, 3)))
    line = refused(capsys, workdir, *TINY, *PARTICLES, "--set", "initial.kind=file", "--set", "initial.file=empty.npy")
    assert "initial.file" in line and "empty.npy" in line and "(0, 3)" in line
    forged_npy(workdir / "huge.npy", (2**38, 1))  # claims 2 TiB
    for extra in (PARTICLES, []):  # tokens, then cell densities
        line = refused(capsys, workdir, *TINY, *extra, "--set", "initial.kind=file", "--set", "initial.file=huge.npy")
        assert "initial.file" in line and "huge.npy" in line
    line = refused(capsys, workdir, *TINY, *PARTICLES, "--set", "initial.kind=file", "--set", f"initial.file={workdir}")
    assert "initial.file" in line and "is a directory" in line


def test_forged_headers_are_refused_before_loading(tmp_path):
    forged_npy(tmp_path / "huge.npy", (2**38,))
    with pytest.raises(ValueError, match="2 TiB"):
        initial_tokens("file", 1, 3, file=tmp_path / "huge.npy")
    with pytest.raises(ValueError, match="huge.npy"):
        initial_matrices("file", 1, 3, file=tmp_path / "huge.npy")
    # the same header inside an .npz archive
    import zipfile

    with zipfile.ZipFile(tmp_path / "huge.npz", "w") as zf:
        zf.writestr("X.npy", (tmp_path / "huge.npy").read_bytes())
    with pytest.raises(ValueError, match="huge.npz.*damaged"):
        initial_tokens("file", 1, 3, file=tmp_path / "huge.npz")


@pytest.fixture
def saved_paths(workdir):
    kw = dict(H=1, d=3, T=0.05, dt=0.01, seed=0)
    generate_weight_path(OUProcess(), sign=1, **kw).save(workdir / "plus.npz")
    generate_weight_path(OUProcess(), sign=-1, **kw).save(workdir / "minus.npz")
    generate_weight_path(OUProcess(), sign=-1, heads="general", **kw).save(workdir / "general.npz")
    z = dict(np.load(workdir / "minus.npz"))
    np.savez(workdir / "no_sign.npz", **{k: v for k, v in z.items() if k != "sign"})
    np.savez(workdir / "no_v.npz", **{k: v for k, v in z.items() if k != "V"})
    A = z["A"].copy()
    A[3, 0, 0, 1] += 0.5
    np.savez(workdir / "asym.npz", **{**z, "A": A, "V": -A})
    nan = z["A"].copy()
    nan[2, 0, 1, 1] = np.nan
    np.savez(workdir / "nan.npz", **{**z, "A": nan, "V": -nan})
    np.save(workdir / "plain.npy", z["A"])
    return workdir


FILE_PATH = ["--set", "weights.process=file"]


@pytest.mark.parametrize(
    "file, extra, words",
    [
        ("plain.npy", [], [".npy", ".npz"]),  # a traceback before
        ("no_sign.npz", [], ["no_sign.npz", "'sign'"]),  # KeyError before
        ("no_v.npz", [], ["no_v.npz", "'V'"]),
        ("asym.npz", [], ["asym.npz", "head 0", "grid point 3", "0.5"]),  # accepted before
        ("nan.npz", [], ["nan.npz", "NaN"]),
        ("plus.npz", [], ["plus.npz", "s = +1", "model.sign=1"]),  # silently ran with s = +1 before
        ("general.npz", ["--set", "solver.velocity=midpoint"], ["general.npz", "general", "model.heads"]),
    ],
)
def test_saved_weight_paths_are_validated(capsys, saved_paths, file, extra, words):
    line = refused(capsys, saved_paths, *TINY, *FILE_PATH, *extra, "--set", f"weights.path_file={file}")
    assert "weights.path_file" in line
    for w in words:
        assert w in line, (w, line)


def test_a_matching_saved_path_runs(capsys, saved_paths):
    assert main(["run", "-q", *TINY, *FILE_PATH, "--set", "weights.path_file=minus.npz", "--out", "r"]) == 0
    capsys.readouterr()
    assert main(["run", "-q", *TINY, *FILE_PATH, "--set", "weights.path_file=plus.npz", "--set", "model.sign=1", "--out", "r1"]) == 0


def test_weight_path_load_checks_the_file(saved_paths):
    WeightPath.load(saved_paths / "minus.npz")
    for name, match in (("asym.npz", "symmetric"), ("nan.npz", "NaN"), ("no_sign.npz", "not a spherepde weight path"), ("plain.npy", "single .npy")):
        with pytest.raises(ValueError, match=match):
            WeightPath.load(saved_paths / name)


def test_asymmetric_initial_matrices_name_the_file_and_head(capsys, workdir):
    D = np.stack([np.eye(3), np.eye(3)])
    D[1, 0, 2] = 0.25
    np.save(workdir / "d0.npy", D)
    line = refused(capsys, workdir, *TINY, "--set", "model.H=2", "--set", "weights.init=file", "--set", "weights.init_file=d0.npy")
    assert "weights.init_file" in line and "d0.npy" in line and "head 1" in line and "0.25" in line


@pytest.mark.parametrize("suffix", [".vtk", ".vtp", ".ply"])
def test_garbage_mesh_files_give_one_line_without_vtk_noise(capfd, workdir, suffix):
    bad = workdir / f"garbage{suffix}"
    bad.write_bytes(np.random.default_rng(1).bytes(3000))
    for args in (["mesh", "--file", str(bad)], ["run", *TINY, "--set", f"mesh.file={bad}"]):
        before = files_in(workdir)
        assert main(args) == 2
        out, err = capfd.readouterr()  # file-descriptor level: VTK writes there directly
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("spherepde: error: ") and bad.name in lines[0], err
        assert "Traceback" not in err and files_in(workdir) == before


# ------------------------------------------------------------------ sweeps
def test_sweep_set_valid_only_with_the_grid_values(workdir):
    for i, n in enumerate((5, 6)):
        np.save(workdir / f"x{i}.npy", np.random.default_rng(i).standard_normal((n, 3)))
    sweep = {
        "base_example": "paper-ou-particles",
        "set": {"initial.kind": "file", "solver.T": 0.05},
        "grid": {"initial.file": ["x0.npy", "x1.npy"]},
    }
    sw = load_sweep(sweep, base_dir=workdir)
    assert [Path(r.config.initial.file).name for r in sw.runs] == ["x0.npy", "x1.npy"]
    assert all(r.config.initial.kind == "file" for r in sw.runs)
    # a [set] value that is wrong in every combination is still reported as [set]
    with pytest.raises(ConfigError, match=r"^\[set\]: model.H"):
        load_sweep({**sweep, "set": {**sweep["set"], "model.H": 0}}, base_dir=workdir)
    # and one that only fails with one grid value names that run
    bad = {**sweep, "grid": {"initial.file": ["x0.npy", "missing.npy"]}}
    with pytest.raises(ConfigError, match=r"run 1 \(initial.file='missing.npy'\): initial.file"):
        load_sweep(bad, base_dir=workdir)


def test_sweep_file_problems_are_one_line(capsys, workdir):
    (workdir / "sweep.toml").mkdir()
    assert "is a directory" in refused(capsys, workdir, "sweep.toml", "--dry-run", command="sweep")
    (workdir / "s2.toml").write_bytes(b"base = \"x\xff\"\n")
    assert "UTF-8" in refused(capsys, workdir, "s2.toml", "--dry-run", command="sweep")


def test_parse_override_nesting():
    with pytest.raises(ConfigError, match="nested too deeply"):
        parse_override("initial.means=" + "[" * 5000 + "]" * 5000)
    with pytest.raises(ConfigError, match="nested too deeply"):
        default_config().with_overrides({"initial.means": [[[0.0]]]})


def test_load_config_errors_name_the_file(tmp_path):
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(tmp_path)
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "none.toml")


# ------------------------------------------------------------------ issue 37: refusals before work
VMF2 = ["--set", "initial.kind=vmf", "--set", "initial.means=[[0, 0, 1], [1, 0, 0]]"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("extra", [[], PARTICLES])
def test_vmf_mean_that_cannot_be_normalised_is_refused(capsys, workdir, extra):
    # its squared length overflowed: the bump was silently dropped (mesh: no mass; tokens: resultant 0.02)
    line = refused(capsys, workdir, *TINY, *extra, "--set", "initial.kind=vmf", "--set", "initial.means=[[1e300, 1e300, 0]]")
    assert "initial.means" in line and "overflows" in line
    line = refused(capsys, workdir, *TINY, *extra, "--set", "initial.kind=vmf", "--set", "initial.means=[[1e-300, 0, 0]]")
    assert "initial.means" in line and "underflows" in line
    default_config().with_overrides({"initial.kind": "vmf", "initial.means": [[1e150, 1e150, 0]]})  # large but normalisable


def test_point_masses_in_a_token_run_are_refused(capsys, workdir):
    line = refused(capsys, workdir, *TINY, *PARTICLES, "--set", "solver.atoms=true")
    assert "solver.atoms" in line and "remove" in line


def test_vmf_weights_must_sum_to_one(capsys, workdir):
    for extra in ([], PARTICLES):
        line = refused(capsys, workdir, *TINY, *extra, "--set", "initial.kind=vmf", "--set",
                       "initial.means=[[0, 0, 1], [1, 0, 0], [0, 1, 0]]", "--set", "initial.weights=[0.5, 0.3, 0.3]")
        assert "initial.weights" in line and "sum to 1.1" in line
    # decimal weights that sum to 1 up to round-off (the shipped metastable start) are accepted
    default_config().with_overrides({"initial.kind": "vmf", "initial.means": [[0, 0, 1]] * 5, "initial.weights": [0.3, 0.15, 0.2, 0.2, 0.15]})


def test_tokens_drawn_for_a_mesh_start_count_in_the_memory_estimate(capsys, workdir, monkeypatch):
    monkeypatch.setenv("SPHEREPDE_MAX_MEMORY", "1G")
    line = refused(capsys, workdir, *TINY, "--set", "initial.kind=vmf", "--set", "initial.sample=true", "--set", "initial.n=10000000")
    assert "initial.n" in line and "10000000" in line and "GiB" in line
    monkeypatch.setenv("SPHEREPDE_MAX_MEMORY", "64G")
    cfg = default_config().with_overrides({"initial.kind": "vmf", "initial.sample": True, "initial.n": 10**7})
    need = dict((key, b) for b, key, _, _ in estimate_memory(cfg))["initial.n"]
    assert need >= 3.7e9  # what such a start was measured to take (issue 37)


@pytest.mark.timeout(120)
def test_euler_weights_that_make_the_token_step_vanish_are_refused_before_work(capsys, workdir):
    # 10 Euler steps with kappa dt = 1e4 grow the path by ~1e40, under the overflow check: the
    # token step became weights.dt / 1.9e39 and the run crawled at t ~ 1e-37 until killed
    line = refused(capsys, workdir, "--set", "run.solver=particles", "--set", "initial.n=50", "--set", "solver.T=0.1",
                   "--set", "weights.kappa=1e6", "--set", "output.vtk=false")
    assert "weights.kappa" in line and "steps" in line and "exact" in line


@pytest.mark.timeout(300)
def test_an_implicit_run_with_a_tiny_tolerance_meets_the_step_budget(capsys, workdir):
    from spherepde.runs.runner import MIN_STEPS_CHECKED, STEP_GROWTH

    code = main(["run", *TINY, "--set", "solver.T=0.1", "--set", "solver.integrator=implicit", "--set", "solver.tol=1e-12"])
    _, err = capsys.readouterr()
    assert code == 1, err
    line = err.strip().splitlines()[-1]
    assert len(err.strip().splitlines()) == 1 and "time step collapsed" in line and "solver.tol" in line
    assert f"{STEP_GROWTH:g} x an explicit scheme's" in line
    log = next(workdir.glob("runs/*/run.log")).read_text()
    assert "step budget: an explicit scheme would take about" in log
    # the estimate of the run's own step count, from its first step, before the budget stops it
    first = [ln for ln in log.splitlines() if "the first error-controlled step took dt = " in ln]
    assert len(first) == 1 and log.index(first[0]) < log.index("time step collapsed")
    h = float(first[0].split("dt = ")[1].split(":")[0])
    steps = float(first[0].split("about ")[1].split(" steps to T = 0.1")[0])
    assert steps == pytest.approx(0.1 / h, rel=1e-2)  # dt is printed to 3 digits
    assert f"step {MIN_STEPS_CHECKED}" in line or "step 1" in line  # stopped at the first check, not after crawling


def test_an_implicit_run_warns_when_its_start_perturbation_is_below_its_tolerance(capsys, workdir):
    """A perturbation within 10 x solver.tol of the uniform state is not resolved by the implicit step's
    error control: the run says so (one warning line naming the fix); a tighter tol or an explicit run does not."""
    base = [*TINY, "--set", "solver.T=0.02", "--set", "initial.kind=uniform", "--set", "initial.noise=0.003", "--set", "output.vtk=false"]
    for extra, warns in ((["--set", "solver.integrator=implicit"], True), (["--set", "solver.integrator=implicit", "--set", "solver.tol=1e-4"], False),
                         ([], False)):
        code = main(["run", *base, *extra, "--force"])
        _, err = capsys.readouterr()
        assert code == 0, err
        lines = [ln for ln in err.splitlines() if "perturbation" in ln]
        assert len(lines) == int(warns), err
        if warns:
            assert "solver.tol <= 0.0003" in lines[0] and "ssprk3" in lines[0]


@pytest.mark.timeout(120)
def test_rk23_tokens_with_a_tiny_tolerance_meet_the_step_budget_without_a_mesh_hint(capsys, workdir):
    code = main(["run", "--example", "metastable-particles", "--set", "initial.n=40", "--set", "solver.T=5",
                 "--set", "solver.tol=1e-14", "--set", "output.vtk=false", "--out", str(workdir / "tight")])
    _, err = capsys.readouterr()
    assert code == 1, err
    line = err.strip().splitlines()[-1]
    assert "time step collapsed" in line and "loosen solver.tol" in line and "mesh" not in line  # a token run has no mesh
