"""Write the reference pages of the documentation from the code (run by ``docs/conf.py``).

Nothing here is typed by hand: the configuration keys come from the field metadata of the
dataclasses in :mod:`spherepde.runs.config` (``doc``, ``choices``, ``min``, ``gt``,
``max``), the diagnostics columns from the registry :mod:`spherepde.model.columns`, the
command line from :func:`spherepde.cli.main.build_parser` and the Python API from
``spherepde.__all__``. ``python docs/_ext/spherepde_reference.py DIR`` writes the pages
into DIR (``tests/test_docs_reference.py`` compares them with the code).
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import MISSING, fields
from pathlib import Path

PAGES = ("config", "columns", "run-folder", "cli", "api")

_SPECIAL = set("\\`*_[]<>|$~#{}")


def _md(text) -> str:
    """``text`` as literal Markdown inline text (table cells included)."""
    return "".join("\\" + ch if ch in _SPECIAL else ch for ch in str(text)).replace("\n", " ")


def _code(text) -> str:
    """``text`` as an inline code span that is safe inside a table cell."""
    text = str(text).replace("|", "\\|")
    fence = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _toml(value) -> str:
    """A default value as it is written in a TOML file."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return repr(value)


def _range(meta) -> str:
    from spherepde.runs.config import choices_of

    parts = []
    if choices_of(meta) is not None:
        parts.append("one of " + ", ".join(_code(_toml(c)) for c in choices_of(meta)))
    if "min" in meta:
        parts.append(f"≥ {meta['min']}")
    if "gt" in meta:
        parts.append(f"> {meta['gt']}")
    if "max" in meta:
        parts.append(f"≤ {meta['max']}")
    return "; ".join(parts) if parts else "any"


def _type_name(value) -> str:
    return {bool: "bool", int: "int", float: "float", str: "string", list: "list"}.get(type(value), type(value).__name__)


def config_page() -> str:
    from spherepde.runs.config import SECTIONS

    out = [
        "# Configuration keys",
        "",
        "Every key of a run's TOML file, by section, generated from the field metadata of "
        "`spherepde/runs/config.py`. A key is set in the file (`[solver]` / `T = 4.0`) or on "
        "the command line (`--set solver.T=4.0`); `spherepde config --show` prints the same "
        "keys as a commented TOML file. A value outside the range is refused with one line "
        "naming the key (exit status 2).",
        "",
    ]
    for section, factory in SECTIONS.items():
        out += [f"## `[{section}]`", "", "| key | type | default | allowed | description |", "|---|---|---|---|---|"]
        instance = factory()
        for f in fields(instance):
            default = getattr(instance, f.name)
            assert f.default is not MISSING or f.default_factory is not MISSING
            out.append(
                f"| {_code(section + '.' + f.name)} | {_type_name(default)} | {_code(_toml(default))} | "
                f"{_range(f.metadata)} | {_md(f.metadata.get('doc', ''))} |"
            )
        out.append("")
    out += _registries_section()
    return "\n".join(out)


def _registries_section() -> list[str]:
    """Every registry of the package (``spherepde._registry.REGISTRIES``) with its names."""
    import spherepde.model.velocity  # noqa: F401  (the attention kinds; the runner imports the rest)
    import spherepde.runs.runner  # noqa: F401
    from spherepde._registry import REGISTRIES

    out = [
        "## Registered names",
        "",
        "Keys whose values are names take them from a registry owned by the module that defines "
        "the named things; a name registered at run time (`REGISTRY.register(name, obj)`) is accepted "
        "at once. The names registered by the package:",
        "",
    ]
    for reg in REGISTRIES.values():
        out += [f"### {_md(reg.kind)}" + (f" ({_code(reg.key)})" if reg.key else ""), ""]
        for e in reg.entries():
            also = f" (also {', '.join(_code(a) for a in e.aliases)})" if e.aliases else ""
            note = " -- not a configuration value" if e.info.get("config", True) is False else ""
            out.append(f"- {_code(e.name)}{also}: {_md(e.about)}{note}")
        out.append("")
    return out


def columns_page() -> str:
    from spherepde.model import columns as C

    out = [
        "# Diagnostics columns",
        "",
        "Every column `diagnostics.csv` may hold, generated from the registry "
        "`spherepde/model/columns.py`. Units are CF style (`1`: dimensionless model units); "
        "they and the long names are the attributes of the variables of "
        "`spherepde.open_run` and of `spherepde export --netcdf`. *NaN for general heads*: "
        "the column is NaN by definition when `model.heads = \"general\"` (no energy). "
        "*Compared*: `spherepde compare` compares the column between runs.",
        "",
        "| column | long name | units | written by | NaN for general heads | compared |",
        "|---|---|---|---|---|---|",
    ]
    for name, col in C.COLUMNS.items():
        writers = ", ".join(_code(s) for s in C.writers(name)) or "—"
        out.append(
            f"| {_code(name)} | {_md(col.long_name)} | {_code(col.units)} | {writers} | "
            f"{'yes' if col.energy else 'no'} | {'yes' if C.compared(name) else 'no'} |"
        )
    out += ["", "## Column order by solver", "", "The header of `diagnostics.csv`, in order, for each `run.solver`:", ""]
    for solver in C.SOLVERS:
        if solver == "both":
            for mode in C.DISTANCE_MODES:
                cols = C.solver_columns(solver, mode)
                out.append(f"- `both` with `output.distances = \"{mode}\"`: " + ", ".join(_code(c) for c in cols))
        else:
            out.append(f"- `{solver}`: " + ", ".join(_code(c) for c in C.solver_columns(solver)))
    out += [
        "",
        "## Columns of earlier releases",
        "",
        "Readers recognise these columns of coupled runs of earlier releases; no solver writes them "
        "and `spherepde compare` does not compare them: " + ", ".join(_code(c) for c in C.LEGACY_COLUMNS) + ".",
        "",
    ]
    return "\n".join(out)


def _subcommands(parser: argparse.ArgumentParser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield name, helps.get(name), sub


def run_folder_page() -> str:
    from spherepde.runs import runfolder as R

    out = [
        "# Run folders",
        "",
        "Every file and folder a run folder (or a Monte-Carlo folder) can hold, generated from "
        "`spherepde.runs.runfolder.LAYOUT`, the table the code itself uses to check a folder before a "
        "resume. *Written by*: the kinds of run that write it (`run.solver`, or `monte-carlo` for a "
        "folder of `montecarlo.paths` > 1); *when*: the condition under which it exists (empty: always). "
        "`NNN` stands for digits. Every file is written atomically (a temporary file, then a rename), "
        "so a file is either complete or absent; `spherepde run --force` replaces only folders that "
        f"hold the marker {_code(R.MARKER)}.",
        "",
        "| path | written by | when | content |",
        "|---|---|---|---|",
    ]
    for e in R.LAYOUT:
        out.append(f"| {_code(e.path)} | {', '.join(_code(k) for k in e.kinds)} | {_md(', '.join(e.when)) or '—'} | {_md(e.description)} |")
    out += ["", "Reading a run back: `spherepde.open_run` (an xarray dataset), `spherepde.runs.runfolder.RunFolder`, "
            "and `spherepde export RUN --netcdf FILE` (the NetCDF file goes where you name it, never into the run folder).", ""]
    return "\n".join(out)


def cli_page() -> str:
    from spherepde.cli.main import build_parser

    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"  # argparse wraps the help at the terminal width: a fixed width
    try:
        parser = build_parser()
        out = [
            "# Command line",
            "",
            "Generated from the argument parser (`spherepde.cli.main.build_parser`): what "
            "`spherepde --help` and `spherepde COMMAND --help` print. Exit status: 0 ok, 1 run "
            "failed, 2 bad input (nothing written), 130 interrupted (checkpoint written).",
            "",
            "| command | what it does |",
            "|---|---|",
        ]
        subs = list(_subcommands(parser))
        for name, help_, _ in subs:
            out.append(f"| [`spherepde {name}`](#spherepde-{name}) | {_md(help_ or '')} |")
        out += ["", "## `spherepde`", "", "```text", parser.format_help().rstrip(), "```", ""]

        def walk(items, level):
            for name, help_, sub in items:
                anchor = sub.prog.replace(" ", "-")
                out.extend([f"({anchor})=", f"{'#' * level} `{sub.prog}`", ""])
                if help_:
                    out.extend([_md(help_), ""])
                out.extend(["```text", sub.format_help().rstrip(), "```", ""])
                walk(list(_subcommands(sub)), min(level + 1, 6))

        walk(subs, 2)
        return "\n".join(out)
    finally:
        if saved is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = saved


def api_page() -> str:
    import spherepde

    names = [n for n in spherepde.__all__ if not n.startswith("__")]
    dunder = [n for n in spherepde.__all__ if n.startswith("__")]
    out = [
        "# Python API",
        "",
        "The curated public namespace `spherepde` (its `__all__`); everything else is internal "
        "and may change. The model and its conventions are in [the model](../model.md).",
        "",
    ]
    for n in dunder:
        out += [f"- `spherepde.{n}`: {_md(repr(getattr(spherepde, n)))}", ""]
    out += ["```{eval-rst}", ".. currentmodule:: spherepde", "", ".. autosummary::", "   :toctree: generated", ""]
    out += [f"   {n}" for n in names]
    out += ["```", ""]
    return "\n".join(out)


def write_reference(folder) -> list[Path]:
    """Write the reference pages into ``folder``; a page whose text is unchanged is not
    rewritten (Sphinx then does not rebuild it). Returns the pages' paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for page in PAGES:
        text = globals()[f"{page.replace('-', '_')}_page"]()
        path = folder / f"{page}.md"
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


if __name__ == "__main__":  # pragma: no cover
    for p in write_reference(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "reference"):
        print(p)
