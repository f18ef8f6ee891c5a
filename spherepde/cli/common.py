"""Helpers shared by the subcommands: one-line errors, shipped examples, loading a config."""

from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path

EXAMPLES_PACKAGE = "spherepde.runs.configs"


def fail(msg: str, code: int = 2) -> int:
    """Print ``spherepde: error: msg`` on stderr and return the exit status ``code``."""
    print(f"spherepde: error: {msg}", file=sys.stderr)
    return code


def examples() -> dict[str, str]:
    """The shipped example run configurations, name -> TOML text."""
    files = resources.files(EXAMPLES_PACKAGE)
    return {p.name[:-5]: p.read_text() for p in files.iterdir() if p.name.endswith(".toml") and not p.name.startswith("sweep-")}


def example_summary(text: str) -> str:
    """The first sentence of a shipped config's leading comment block, whole: a comment line
    continues on the next when that one starts in lower case or with a digit (a sentence broken
    across lines); the text ends at the first full stop outside parentheses or at the end of the
    title line."""
    lines = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    if not lines:
        return ""
    summary = lines[0]
    for nxt in lines[1:]:
        if not nxt or not (nxt[0].islower() or nxt[0].isdigit()):
            break
        summary += " " + nxt
    depth = 0
    for i, ch in enumerate(summary):
        depth += (ch == "(") - (ch == ")")
        if ch == "." and depth == 0 and (i + 1 == len(summary) or summary[i + 1] == " "):
            return summary[: i + 1]
    return summary


def examples_markdown() -> str:
    """The list of shipped examples in docs/guide/configuration.md (a test compares it): one
    bullet per example, its name and :func:`example_summary`."""
    return "\n".join(f"- `{name}`: {example_summary(text)}" for name, text in sorted(examples().items())) + "\n"


def example_path(name: str) -> Path:
    ex = examples()
    if name not in ex:
        raise SystemExit(fail(f"unknown example {name!r}; available: {', '.join(sorted(ex))}"))
    return Path(str(resources.files(EXAMPLES_PACKAGE) / f"{name}.toml"))


def check_one_source(args) -> None:
    """A configuration file and ``--example`` together are refused (one of them would be ignored)."""
    from spherepde.runs.config import ConfigError

    if getattr(args, "example", None) and getattr(args, "config", None):
        raise ConfigError(
            f"give a configuration file or --example, not both ({args.config} and --example {args.example}); "
            "add --set KEY=VALUE to change keys of either"
        )


def load_args_config(args):
    """The configuration named by ``args`` (a file, ``--example``, or the defaults) with ``--set`` applied."""
    from spherepde.runs.config import default_config, load_config, parse_override

    overrides = dict(parse_override(s) for s in (args.set or []))
    check_one_source(args)
    if getattr(args, "example", None):
        return load_config(example_path(args.example), overrides)
    if args.config:
        return load_config(args.config, overrides)
    return default_config().with_overrides(overrides) if overrides else default_config()
