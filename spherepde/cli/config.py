"""``spherepde config``: the commented default configuration, the shipped examples, checking a file."""

from __future__ import annotations

from spherepde.cli.common import check_one_source, example_path, example_summary, examples, fail, load_args_config


def cmd_config(args) -> int:
    from spherepde.runs.config import ConfigError, config_to_toml, default_config

    if args.list_examples:
        for name, text in sorted(examples().items()):
            print(f"{name:32s} {example_summary(text)}")
        return 0
    try:
        check_one_source(args)
        if args.example and not args.check and not args.set:
            print(example_path(args.example).read_text(), end="")
            return 0
        cfg = load_args_config(args) if (args.config or args.set or args.example) else default_config()
    except (ConfigError, ValueError) as exc:
        return fail(" ".join(str(exc).split()))
    if args.check:
        print("configuration is valid")
        return 0
    print(config_to_toml(cfg, comments=True), end="")
    return 0


def register(sub, common) -> None:
    c = sub.add_parser("config", help="show the commented default configuration, examples, or check a file")
    c.add_argument("config", nargs="?", help="a TOML file to show resolved (or check with --check)")
    c.add_argument("--show", action="store_true", help="print the fully commented configuration (default action)")
    c.add_argument("--example", help="print a shipped example config")
    c.add_argument("--list-examples", action="store_true", help="list the shipped example configs")
    c.add_argument("--check", action="store_true", help="validate only")
    c.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a key")
    common(c)
    c.set_defaults(func=cmd_config)
