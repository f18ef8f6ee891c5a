"""Registries: the one mechanism by which a module makes a named thing available to the package.

A module that owns a kind of thing (weight processes, time steppers, geometries, summation
modes, attention kinds) creates one :class:`Registry` and registers its entries where they are
defined; everything else -- the config's allowed values, ``spherepde config --show``, the
reference pages, the builders that turn a config into objects -- reads that registry. Adding a
new thing is one module and one ``register`` call; no name -> class table exists anywhere else.

A registry is live: a name registered at run time (for example by a test or a user script
before calling :func:`spherepde.runs.runner.run`) is accepted by the config check at once,
because the config asks the registry (``name in registry``) instead of copying its names.

Examples
--------
>>> shapes = Registry("shape", key="model.shape", listed=False)
>>> @shapes.register("square", about="four equal sides")
... class Square:
...     pass
>>> shapes.get("square").__name__
'Square'
>>> "circle" in shapes
False
>>> shapes.get("circle")
Traceback (most recent call last):
...
ValueError: model.shape: unknown shape 'circle'; choose one of 'square'
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Entry", "Registry", "REGISTRIES"]

#: Every registry of the package by its kind, in the order they were created (for the reference pages and tests).
REGISTRIES: dict[str, Registry] = {}


@dataclass(frozen=True)
class Entry:
    """One registered thing: its name, the object, other accepted names, one line about it, and
    free-form facts the owner attaches (``info``: e.g. a stepper's order or the solvers it serves)."""

    name: str
    obj: Any
    aliases: tuple = ()
    about: str = ""
    info: dict = field(default_factory=dict)


class Registry:
    """Named entries of one kind, owned by the module that creates it.

    Parameters
    ----------
    kind : str
        What the entries are, for messages ("weight process").
    key : str
        The config key that names an entry, if any ("weights.process"), for messages.
    listed : bool
        Whether :data:`REGISTRIES` lists it (the package's registries are; a throw-away one is not).
    """

    def __init__(self, kind: str, *, key: str = "", listed: bool = True):
        self.kind, self.key = kind, key
        self._entries: dict[str, Entry] = {}
        if listed:
            if kind in REGISTRIES:
                raise ValueError(f"a registry of {kind!r} exists already ({REGISTRIES[kind]!r}); register into that one")
            REGISTRIES[kind] = self

    # ---------------------------------------------------------------- registering
    def register(self, name: str, obj: Any = None, *, aliases: tuple = (), about: str = "", replace: bool = False, **info) -> Any:
        """Register ``obj`` under ``name``; without ``obj``, a decorator that registers what it decorates.

        A name (or alias) already taken raises ValueError unless ``replace=True``.
        """
        if obj is None:
            return lambda o: self.register(name, o, aliases=aliases, about=about, replace=replace, **info)
        taken = {n for n in (name, *aliases) if n in self} - ({name, *self._entries[name].aliases} if replace and name in self._entries else set())
        if taken:
            raise ValueError(f"{self.kind} {sorted(taken)[0]!r} is registered already; pass replace=True to replace it")
        self._entries[name] = Entry(name, obj, tuple(aliases), about, dict(info))
        return obj

    def unregister(self, name: str) -> None:
        """Remove an entry (tests that register a toy entry remove it again)."""
        self._entries.pop(self.entry(name).name)

    # ---------------------------------------------------------------- reading
    def entry(self, name: str) -> Entry:
        """The entry called ``name`` (or an alias of it); ValueError listing the choices otherwise."""
        for e in self._entries.values():
            if name == e.name or name in e.aliases:
                return e
        where = f"{self.key}: " if self.key else ""
        raise ValueError(f"{where}unknown {self.kind} {name!r}; choose one of {', '.join(repr(n) for n in self.names())}")

    def get(self, name: str) -> Any:
        """The object registered as ``name`` (or an alias of it)."""
        return self.entry(name).obj

    def names(self, *, aliases: bool = False, where: Callable[[Entry], bool] | None = None) -> tuple[str, ...]:
        """The registered names in registration order (with their aliases if asked), optionally filtered."""
        es = [e for e in self._entries.values() if where is None or where(e)]
        return tuple(n for e in es for n in ((e.name, *e.aliases) if aliases else (e.name,)))

    def entries(self) -> tuple[Entry, ...]:
        return tuple(self._entries.values())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and any(name == e.name or name in e.aliases for e in self._entries.values())

    def __iter__(self) -> Iterator[str]:
        return iter(self.names(aliases=True))

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {', '.join(self.names())})"
