"""Run folder names that say what was changed.

A shipped example has a fixed ``run.name`` (``paper-ou-particles``); run twice with other
``--set`` values it would collide with itself. :func:`run_name` appends the overridden
keys, so ``spherepde run --example paper-ou-particles --set model.H=100`` writes
``runs/paper-ou-particles-H100`` and every README block runs as written, in order, in
one folder.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

__all__ = ["run_name", "override_suffix", "default_run_name"]

#: Keys that name the folder itself, never part of the suffix.
_FOLDER_KEYS = ("run.name", "run.out")
#: Keys already spelled out by :func:`default_run_name`.
_DEFAULT_NAME_KEYS = ("run.solver", "weights.process", "model.H", "weights.seed")
_FILE_KEYS = ("weights.init_file", "weights.path_file", "initial.file", "initial.run", "mesh.file")


def default_run_name(cfg) -> str:
    """``<solver>-<process>-H<H>-seed<seed>``: the name of a run whose ``run.name`` is empty."""
    return f"{cfg.run.solver}-{cfg.weights.process}-H{cfg.model.H}-seed{cfg.weights.seed}"


def _value(key: str, value) -> str:
    if key in _FILE_KEYS and isinstance(value, str):
        value = Path(value).stem or "none"
    if isinstance(value, bool):
        s = str(value).lower()
    elif isinstance(value, float):
        s = f"{value:g}"
    elif isinstance(value, (list, dict)):
        s = json.dumps(value, separators=(",", ":")).replace("[", "").replace("]", "").replace('"', "")
    else:
        s = str(value)
    return re.sub(r"[^A-Za-z0-9.,+-]", "_", s)[:40]


def override_suffix(overrides: dict, *, skip=()) -> str:
    """``-H100-phase-in-phase``: one part per overridden key (its last component and value;
    numbers follow the key directly, words after a dash), in the order given."""
    parts = []
    for key, value in overrides.items():
        if key in _FOLDER_KEYS or key in skip:
            continue
        leaf = key.rsplit(".", 1)[-1]
        v = _value(key, value)
        parts.append(f"{leaf}{v}" if re.match(r"^[-+]?[0-9.]", v) else f"{leaf}-{v}")
    return "".join("-" + p for p in parts)


def run_name(cfg, overrides: dict | None = None) -> str:
    """The folder name of a run: ``run.name`` (or :func:`default_run_name`) plus
    :func:`override_suffix` of the command-line overrides; an explicit ``run.name`` override
    is taken as it is."""
    overrides = dict(overrides or {})
    if "run.name" in overrides:
        return cfg.run.name or default_run_name(cfg)
    if cfg.run.name:
        return (cfg.run.name + override_suffix(overrides))[:150]
    return (default_run_name(cfg) + override_suffix(overrides, skip=_DEFAULT_NAME_KEYS))[:150]
