"""Configuration: TOML round trip, validation errors (ConfigError, one line, naming the key), --set parsing."""

from __future__ import annotations

import dataclasses
import math
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from spherepde.runs.config import (
    Config,
    ConfigError,
    config_from_dict,
    config_to_toml,
    default_config,
    load_config,
    parse_override,
)


def write(tmp_path: Path, text: str, name: str = "cfg.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def config_error(tmp_path: Path, text: str, *, overrides=None) -> str:
    """Load ``text`` as a config file; it must fail with a one-line ConfigError. Returns the message."""
    p = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(p, overrides)
    msg = str(info.value)
    assert "\n" not in msg, f"message is not one line: {msg!r}"
    assert msg.strip() == msg and msg
    return msg


def roundtrip(cfg: Config, tmp_path: Path, *, comments: bool = True) -> Config:
    p = tmp_path / f"roundtrip-{comments}.toml"
    p.write_text(config_to_toml(cfg, comments=comments))
    return load_config(p)


def example_paths():
    files = resources.files("spherepde.runs.configs")
    return sorted(Path(str(f)) for f in files.iterdir() if f.name.endswith(".toml") and not f.name.startswith("sweep-"))


# ------------------------------------------------------------------------ round trip
@pytest.mark.parametrize("comments", [True, False])
def test_default_config_roundtrip(tmp_path, comments):
    cfg = default_config()
    assert cfg == Config()
    back = roundtrip(cfg, tmp_path, comments=comments)
    assert back == cfg
    assert back.to_dict() == cfg.to_dict()


def test_commented_toml_documents_every_key():
    text = config_to_toml(default_config(), comments=True)
    cfg = default_config()
    for sec in dataclasses.fields(cfg):
        assert f"[{sec.name}]" in text
        for f in dataclasses.fields(getattr(cfg, sec.name)):
            lines = [ln for ln in text.splitlines() if ln.split("=")[0].strip() == f.name]
            assert lines, f"{sec.name}.{f.name} missing from the commented TOML"
            assert all("#" in ln for ln in lines), f"{sec.name}.{f.name} has no description comment"


def test_examples_exist_and_roundtrip(tmp_path):
    paths = example_paths()
    names = {p.stem for p in paths}
    assert {"paper-ou-particles", "paper-oscillating-particles"} <= names
    for p in paths:
        cfg = load_config(p)
        assert cfg.run.solver == ("mesh" if p.stem.endswith("-mesh") else "particles")
        assert roundtrip(cfg, tmp_path) == cfg
    ou = load_config(next(p for p in paths if p.stem == "paper-ou-particles"))
    assert (ou.model.H, ou.initial.n, ou.solver.T, ou.weights.dt, ou.weights.process) == (10, 200, 20.0, 0.005, "ou")
    assert ou.weights.sigma == math.sqrt(2.0)


def test_nondefault_config_roundtrip_exact(tmp_path):
    tok = tmp_path / "tokens.npy"
    np.save(tok, np.eye(3))
    text = f"""
[run]
solver = "particles"
name = 'odd "name" # with = signs'
out = "some/where"
[model]
d = 3
H = 7
sign = 1
[weights]
process = "oscillating"
phase = "figure"
sigma = 0.30000000000000004
mean = -2
init = "beta"
beta = 0.1
seed = 12345
init_seed = 3
dt = 0.01
[initial]
kind = "vmf"
means = [[0.0, 0.0, 1.0], [1, 0, 0]]
kappas = [5.0, 0.5]
weights = [0.25, 0.75]
file = "{tok.name}"
[solver]
T = 0.5
dt = 0.02
integrator = "heun"
[output]
record_dt = 0.04
snapshot_dt = 0.08
vtk = false
checkpoint_every = 3
checkpoint_minutes = 0.5
[montecarlo]
paths = 4
"""
    cfg = load_config(write(tmp_path, text))
    assert cfg.run.name == 'odd "name" # with = signs'
    assert cfg.weights.sigma == 0.30000000000000004
    assert cfg.weights.mean == -2.0 and isinstance(cfg.weights.mean, float)
    assert cfg.initial.means == [[0.0, 0.0, 1.0], [1, 0, 0]]
    assert cfg.output.vtk is False
    assert cfg.integrator == "heun"
    # file paths are stored absolute (resolved against the config file's folder)
    assert Path(cfg.initial.file) == tok.resolve()
    back = roundtrip(cfg, tmp_path)
    assert back == cfg
    assert roundtrip(back, tmp_path, comments=False) == cfg


def test_config_is_frozen():
    cfg = default_config()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.solver.T = 3.0  # type: ignore[misc]


def test_integer_given_for_float_is_accepted(tmp_path):
    cfg = load_config(write(tmp_path, "[solver]\nT = 1\n[weights]\nmean = 2\n"))
    assert cfg.solver.T == 1.0 and isinstance(cfg.solver.T, float)
    assert cfg.weights.mean == 2.0


def test_default_integrator_per_solver():
    assert default_config().run.solver == "mesh"
    assert default_config().integrator == "ssprk3"
    assert default_config().with_overrides({"run.solver": "particles"}).integrator == "euler"


# ------------------------------------------------------------------ unknown names
@pytest.mark.parametrize(
    "section, key, suggestion",
    [
        ("solver", "TT", "T"),
        ("weights", "sigm", "sigma"),
        ("initial", "kappa", "kappas"),
        ("output", "record_dtt", "record_dt"),
        ("model", "heds", "heads"),
        ("montecarlo", "path", "paths"),
    ],
)
def test_unknown_key_suggests_closest(tmp_path, section, key, suggestion):
    msg = config_error(tmp_path, f"[{section}]\n{key} = 1\n")
    assert f"{section}.{key}" in msg
    assert f"'{suggestion}'" in msg
    assert "did you mean" in msg


def test_unknown_key_without_close_match_lists_valid_keys(tmp_path):
    msg = config_error(tmp_path, "[solver]\nzzzzzzzz = 1\n")
    assert "solver.zzzzzzzz" in msg
    for valid in ("T", "dt", "integrator", "cfl"):
        assert valid in msg


def test_unknown_section(tmp_path):
    msg = config_error(tmp_path, "[solvr]\nT = 1\n")
    assert "solvr" in msg and "'solver'" in msg
    msg = config_error(tmp_path, "[plotting]\ncolor = 'red'\n")
    assert "plotting" in msg and "solver" in msg  # the valid sections are listed


def test_section_must_be_a_table(tmp_path):
    msg = config_error(tmp_path, "solver = 3\n")
    assert "solver" in msg


# ---------------------------------------------------------------------- wrong types
@pytest.mark.parametrize(
    "section, key, value",
    [
        ("solver", "T", '"fast"'),  # string for a number
        ("solver", "cfl", '"0.5"'),
        ("initial", "n", "2.5"),  # float for an int
        ("model", "H", "1.5"),
        ("weights", "seed", "0.5"),
        ("model", "d", '"3"'),
        ("solver", "T", "true"),  # bool for a number
        ("initial", "n", "true"),
        ("output", "vtk", '"yes"'),  # string for a bool
        ("output", "vtk", "1"),
        ("run", "solver", "1"),  # number for a string
        ("initial", "means", '"north"'),  # string for a list
        ("initial", "kappas", "20.0"),
        ("solver", "T", "[1, 2]"),
        ("solver", "T", "nan"),
        ("solver", "T", "inf"),
    ],
)
def test_wrong_type(tmp_path, section, key, value):
    msg = config_error(tmp_path, f"[{section}]\n{key} = {value}\n")
    assert f"{section}.{key}" in msg


# ------------------------------------------------------------------- out of range
@pytest.mark.parametrize(
    "section, key, value",
    [
        ("solver", "T", "-1.0"),
        ("solver", "T", "0.0"),
        ("solver", "cfl", "1.5"),
        ("solver", "cfl", "0.0"),
        ("solver", "dt", "-0.01"),
        ("solver", "order", "3"),
        ("solver", "integrator", '"rk4"'),
        ("model", "d", "1"),
        ("model", "H", "0"),
        ("model", "sign", "0"),
        ("model", "sign", "2"),
        ("model", "heads", '"mixed"'),
        ("weights", "kappa", "-1.0"),
        ("weights", "sigma", "-0.5"),
        ("weights", "dt", "0.0"),
        ("weights", "seed", "-1"),
        ("weights", "init_seed", "-2"),
        ("weights", "process", '"brownian"'),
        ("initial", "n", "0"),
        ("initial", "kind", '"gaussian"'),
        ("mesh", "level", "0"),
        ("output", "record_dt", "0.0"),
        ("output", "checkpoint_every", "0"),
        ("montecarlo", "paths", "0"),
        ("run", "solver", '"fem"'),
    ],
)
def test_out_of_range(tmp_path, section, key, value):
    msg = config_error(tmp_path, f"[{section}]\n{key} = {value}\n")
    assert f"{section}.{key}" in msg


# ------------------------------------------------------------ inconsistent options
@pytest.mark.parametrize(
    "text, key",
    [
        ('[run]\nsolver = "mesh"\n[model]\nd = 4\n[initial]\nkind = "uniform"\n', "model.d"),
        ('[run]\nsolver = "mesh"\n[model]\nheads = "general"\n[solver]\nvelocity = "potential"\n', "solver.velocity"),
        ('[run]\nsolver = "mesh"\n[model]\nheads = "general"\n', "solver.velocity"),  # potential is the default
        ('[run]\nsolver = "particles"\n[initial]\nkind = "harmonic"\n', "initial.kind"),
        ('[run]\nsolver = "mesh"\n[initial]\nkind = "harmonic"\nl = 1\nm = 2\n', "initial.m"),
        ('[run]\nsolver = "particles"\n[solver]\nintegrator = "ssprk3"\n', "solver.integrator"),
        ('[run]\nsolver = "particles"\n[solver]\nintegrator = "implicit"\n', "solver.integrator"),
        ("[solver]\nT = 0.0123\n", "solver.T"),  # not a multiple of weights.dt = 0.005
        ("[solver]\nT = 0.001\n", "solver.T"),  # shorter than one weight step
        ("[solver]\nT = 1.0\n[weights]\ndt = 0.3\n", "solver.T"),
        ("[output]\nrecord_dt = 0.007\n", "output.record_dt"),
        ("[output]\nrecord_dt = 0.001\n", "output.record_dt"),
        ("[solver]\ndt = 0.0075\n", "solver.dt"),
        ("[solver]\ndt = 0.01\n[output]\nrecord_dt = 0.015\nsnapshot_dt = 0.03\n", "output.record_dt"),
        ("[solver]\ndt = 0.01\nT = 0.205\n[output]\nrecord_dt = 0.05\nsnapshot_dt = 0.05\n", "solver.T"),  # T off the particle step grid
        ("[output]\nsnapshot_dt = 0.03\n", "output.snapshot_dt"),
        ('[initial]\nkind = "vmf"\nmeans = [[0.0, 1.0]]\n', "initial.means"),
        ('[initial]\nkind = "vmf"\nmeans = [[0, 0, 1], [1, 0, 0]]\nkappas = [1.0, 2.0, 3.0]\n', "initial.kappas"),
        ('[initial]\nkind = "vmf"\nkappas = [-1.0]\n', "initial.kappas"),
        ('[initial]\nkind = "vmf"\nweights = [1.0, 2.0]\n', "initial.weights"),
        ('[weights]\nprocess = "ou"\nkappa = 0.0\nscheme = "exact"\n', "weights.scheme"),
    ],
)
def test_inconsistent_options(tmp_path, text, key):
    if "[run]" not in text:  # the particle-step checks need the particle solver (the default is the mesh)
        text = '[run]\nsolver = "particles"\n' + text
    msg = config_error(tmp_path, text)
    assert key in msg


def test_consistent_mesh_options_are_accepted(tmp_path):
    cfg = load_config(write(tmp_path, '[run]\nsolver = "mesh"\n[model]\nheads = "general"\n[solver]\nvelocity = "midpoint"\n[initial]\nkind = "harmonic"\nl = 2\nm = -2\n'))
    assert cfg.run.solver == "mesh" and cfg.integrator == "ssprk3"


# --------------------------------------------------------------------- missing files
@pytest.mark.parametrize(
    "text, key",
    [
        ('[weights]\ninit = "file"\n', "weights.init_file"),
        ('[weights]\ninit = "file"\ninit_file = "missing.npy"\n', "weights.init_file"),
        ('[initial]\nkind = "file"\n', "initial.file"),
        ('[initial]\nkind = "file"\nfile = "no/such/tokens.npy"\n', "initial.file"),
        ('[weights]\nprocess = "file"\npath_file = "nope.npz"\n', "weights.path_file"),
        ('[mesh]\nfile = "nope.vtp"\n', "mesh.file"),
    ],
)
def test_missing_files(tmp_path, text, key):
    msg = config_error(tmp_path, text)
    assert key in msg


def test_present_files_are_resolved_against_the_config_folder(tmp_path, monkeypatch):
    sub = tmp_path / "configs"
    sub.mkdir()
    np.save(sub / "D0.npy", np.eye(3))
    p = write(sub, '[weights]\ninit = "file"\ninit_file = "D0.npy"\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    cfg = load_config(p)
    assert Path(cfg.weights.init_file) == (sub / "D0.npy").resolve()
    # a path given with --set is relative to the working folder, and stored absolute
    np.save(elsewhere / "X.npy", np.eye(3))
    cfg = load_config(p, dict([parse_override("initial.kind=file"), parse_override("initial.file=X.npy")]))
    assert Path(cfg.initial.file) == (elsewhere / "X.npy").resolve()
    msg = config_error(tmp_path, '[initial]\nkind = "file"\n', overrides={"initial.file": "D0.npy"})  # not in the cwd
    assert "initial.file" in msg


def test_montecarlo_needs_a_generated_process(tmp_path):
    np.savez(tmp_path / "path.npz", D=np.zeros((3, 1, 3, 3)))
    msg = config_error(tmp_path, '[weights]\nprocess = "file"\npath_file = "path.npz"\n[montecarlo]\npaths = 2\n')
    assert "montecarlo.paths" in msg


# ---------------------------------------------------------------------- malformed TOML
@pytest.mark.parametrize("text", ["[solver\nT = 1\n", "[solver]\nT = \n", "[solver]\nT = 1\nT = 2\n", "T = 'unterminated\n"])
def test_malformed_toml(tmp_path, text):
    msg = config_error(tmp_path, text)
    assert "malformed TOML" in msg
    assert "cfg.toml" in msg  # names the file


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "absent.toml")


def test_config_from_dict_rejects_non_table():
    with pytest.raises(ConfigError):
        config_from_dict([1, 2])  # type: ignore[arg-type]


def test_values_are_never_evaluated(tmp_path):
    cfg = load_config(write(tmp_path, "[run]\nname = \"__import__('os').system('false')\"\n"))
    assert cfg.run.name == "__import__('os').system('false')"


# --------------------------------------------------------------------------- --set
@pytest.mark.parametrize(
    "text, key, value",
    [
        ("solver.T=0.1", "solver.T", 0.1),
        ("solver.T=2", "solver.T", 2),
        ("solver.T=1e-3", "solver.T", 1e-3),
        ("weights.seed=7", "weights.seed", 7),
        ("weights.mean=-1.5", "weights.mean", -1.5),
        (" model.H = 10 ", "model.H", 10),
        ("run.name=my-run", "run.name", "my-run"),  # bare word: a string
        ('run.name="quoted # text"', "run.name", "quoted # text"),
        ("run.name='single'", "run.name", "single"),
        ("run.out=runs/a b", "run.out", "runs/a b"),
        ("weights.process=ou", "weights.process", "ou"),
        ("output.vtk=false", "output.vtk", False),
        ("output.vtk=true", "output.vtk", True),
        ("initial.kappas=[1, 2.5]", "initial.kappas", [1, 2.5]),
        ("initial.means=[[0,0,1],[1,0,0]]", "initial.means", [[0, 0, 1], [1, 0, 0]]),
        ("initial.weights=[]", "initial.weights", []),
        ("run.name=a=b", "run.name", "a=b"),
    ],
)
def test_parse_override(text, key, value):
    k, v = parse_override(text)
    assert k == key
    assert v == value
    assert type(v) is type(value)


@pytest.mark.parametrize("text", ["solver.T", "solver.T 2", "T=1", "solver=1", "solver.dt.x=1", "=1", ".=1"])
def test_parse_override_bad_syntax(text):
    with pytest.raises(ConfigError) as info:
        parse_override(text)
    msg = str(info.value)
    assert "\n" not in msg and "section.key" in msg


def test_overrides_are_validated(tmp_path):
    p = write(tmp_path, "[solver]\nT = 1.0\n")
    cfg = load_config(p, dict(parse_override(s) for s in ["solver.T=0.1", "weights.seed=7", "output.vtk=false", "initial.kappas=[3.0]"]))
    assert (cfg.solver.T, cfg.weights.seed, cfg.output.vtk, cfg.initial.kappas) == (0.1, 7, False, [3.0])
    for bad, key in [
        ("solver.TT=1", "solver.TT"),
        ("solver.T=fast", "solver.T"),
        ("solver.T=-1", "solver.T"),
        ("initial.n=2.5", "initial.n"),
        ("nosuch.key=1", "nosuch"),
        ("model.sign=0", "model.sign"),
    ]:
        msg = config_error(tmp_path, "[solver]\nT = 1.0\n", overrides=dict([parse_override(bad)]))
        assert key in msg, (bad, msg)
    # with_overrides validates as well
    assert default_config().with_overrides({"model.H": 3}).model.H == 3
    with pytest.raises(ConfigError, match="model.H"):
        default_config().with_overrides({"model.H": 0})


def test_one_integrator_registry_names_heun_and_ssprk2_alike():
    """Heun's method is SSP-RK2: both names are one entry of the stepper registry, for both solvers."""
    from spherepde.solvers.integrators import STEPPERS, get_stepper, integrator_names

    assert get_stepper("heun", "mesh") is get_stepper("ssprk2", "mesh") is get_stepper("ssprk2", "particles") is STEPPERS.get("heun")
    assert set(integrator_names("particles")) == {"euler", "heun", "ssprk2", "rk23", "adaptive"}
    assert set(integrator_names("mesh")) == {"euler", "heun", "ssprk2", "ssprk3", "implicit"}
    cfg = default_config().with_overrides({"run.solver": "mesh", "solver.integrator": "heun"})
    assert cfg.integrator == "heun"
    with pytest.raises(ConfigError, match="not implemented for the particles solver"):
        default_config().with_overrides({"run.solver": "particles", "solver.integrator": "ssprk3"})
