"""The registries of weight processes, summation modes and attention kinds are the one place
their names live: the config's choices come from them, an entry registered at run time is used
at once, and no other module of the package maps those names to objects."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest

from spherepde.attention import SUMMATION_MODES, attention_moments
from spherepde.attention.sums import SummationMode
from spherepde.model.velocity import ATTENTION_KINDS, head_fields, velocity_from_fields
from spherepde.model.weights import PROCESSES, configurable_processes
from spherepde.runs.config import ModelSection, SolverSection, WeightsSection, choices_of, default_config

PACKAGE = Path(__file__).resolve().parents[2] / "spherepde"


def _choices(section, key):
    return choices_of(next(f for f in fields(section) if f.name == key).metadata)


def test_config_choices_are_the_registered_names():
    assert _choices(WeightsSection, "process") == configurable_processes()
    assert set(configurable_processes()) == {"ou", "oscillating", "frozen", "file"} <= set(PROCESSES.names())
    assert "drift" in PROCESSES and "drift" not in configurable_processes()  # a Python callable is no config value
    assert _choices(SolverSection, "summation") == SUMMATION_MODES.names(aliases=True) == ("direct", "fast", "auto")
    assert ATTENTION_KINDS.names() == ("softmax", "unnormalised")
    assert _choices(ModelSection, "attention") == ATTENTION_KINDS.names(aliases=True)


@pytest.fixture
def never_fast():
    SUMMATION_MODES.register("never-fast", SummationMode(lambda m, n, H: False), about="test only")
    yield "never-fast"
    SUMMATION_MODES.unregister("never-fast")


def test_a_registered_summation_mode_is_accepted_and_used(never_fast):
    rng = np.random.default_rng(0)
    assert default_config().with_overrides({"solver.summation": never_fast}).solver.summation == never_fast
    X = rng.standard_normal((40, 3))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    w, A = np.full(40, 1 / 40), np.eye(3)[None] * 2.0
    for a, b in zip(attention_moments(X, X, w, A, summation=never_fast), attention_moments(X, X, w, A, summation="direct")):
        np.testing.assert_array_equal(a, b)


@pytest.fixture
def doubled():
    ATTENTION_KINDS.register("doubled", lambda fields, V: 2.0 * ATTENTION_KINDS.get("softmax")(fields, V), about="test only")
    yield "doubled"
    ATTENTION_KINDS.unregister("doubled")


def test_a_registered_attention_kind_drives_the_velocity(doubled):
    rng = np.random.default_rng(1)
    X = rng.standard_normal((30, 3))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    D = np.eye(3)[None] * 1.5
    F = head_fields(X, np.full(30, 1 / 30), D)
    np.testing.assert_allclose(velocity_from_fields(X, F, -D, kind=doubled), 2.0 * velocity_from_fields(X, F, -D), rtol=1e-14, atol=1e-15)


#: A name compared with a config value, or mapped to a process class, outside the registries' owners.
_NAME_TABLES = (
    re.compile(r"""["'][\w-]+["']\s*:\s*\w*Process\b"""),
    re.compile(r"""\.(process|summation)\s*(==|!=|in\b|not in\b)\s*[("']"""),
)


def test_no_other_name_table():
    owners = {PACKAGE / "model" / "weights.py", PACKAGE / "attention" / "sums.py"}
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{i}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py")) if path not in owners
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if any(p.search(line) for p in _NAME_TABLES)
    ]
    assert not found, "\n".join(found)
