"""Helpers shared by the validation studies: tables, JSON, checks and claims (fits and
time averages: :mod:`spherepde.model.statistics`)."""

from __future__ import annotations

import copy
import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from spherepde._base import atomic_write_text
from spherepde.runs.files import jsonable
from spherepde.solvers.integrators import integrator_names
from spherepde.studies import SIZES

__all__ = [
    "Range",
    "StudyPreconditionError",
    "check_passed",
    "checks_line",
    "claim_sentence",
    "figure_path",
    "format_number",
    "frozen_beta_path",
    "markdown_table",
    "per_size",
    "sizes_table",
    "paper_claim",
    "require",
    "require_finite",
    "save_figure",
    "save_json",
    "solver_check",
    "to_jsonable",
    "weight_process",
]


def weight_process(process: str, **keys):
    """The weight process a run's ``[weights]`` section with ``process`` and ``keys`` set (the
    run's defaults otherwise) builds, through the registry
    (:func:`spherepde.model.weights.process_from_config`): the studies name processes as a
    config does."""
    from dataclasses import replace

    from spherepde.model.weights import process_from_config
    from spherepde.runs.config import WeightsSection

    return process_from_config(replace(WeightsSection(), process=process, **keys))


def markdown_table(headers, rows, fmt: str = "{:.4g}") -> str:
    """A Markdown table; floats formatted with ``fmt``."""
    def cell(v):
        if isinstance(v, float):
            return "nan" if not math.isfinite(v) else fmt.format(v)
        return str(v)

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def to_jsonable(obj):
    """Recursively convert numpy scalars/arrays (and non-finite floats -> None) for JSON
    (:func:`spherepde.runs.files.jsonable`)."""
    return jsonable(obj)


def save_json(obj, path) -> None:
    """``obj`` as indented JSON in ``path`` (:func:`to_jsonable`; written atomically)."""
    atomic_write_text(path, json.dumps(to_jsonable(obj), indent=2))


def figure_path(out_dir, name: str) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    return out / name


def save_figure(fig, out_dir, name: str, dpi: int = 120) -> Path:
    """Save a Matplotlib figure (made without pyplot, :func:`spherepde.viz.figstyle.subplots`) as ``out_dir/name`` and return the path."""
    path = figure_path(out_dir, name)
    fig.savefig(path, dpi=dpi)
    return path


def progress_logger(verbose: bool):
    """A ``log(msg)`` that prints one progress line to stderr (flushed) when ``verbose``, else does nothing.

    Studies take ``verbose=True`` from ``spherepde validate -v`` so that hour-long ``--full``
    runs say which run they are on.
    """
    if not verbose:
        return lambda *_a, **_k: None

    def log(*args, **kwargs) -> None:
        print(*args, file=sys.stderr, flush=True, **kwargs)

    return log



class per_size(tuple):
    """A study parameter that changes with the size: its values at (smoke, quick, full)."""

    def __new__(cls, smoke, quick, full):
        return super().__new__(cls, (smoke, quick, full))


def sizes_table(params: dict) -> dict:
    """A study's ``SIZES`` ({size: {name: value}} over :data:`spherepde.studies.SIZES`) from one table
    of its parameters, in their order:
    a :class:`per_size` value gives each size its own, any other value is the same at every size
    (each size gets its own copy)."""
    return {size: {k: copy.deepcopy(v[i] if isinstance(v, per_size) else v) for k, v in params.items()}
            for i, size in enumerate(SIZES)}


def study_params(sizes: dict, size: str, overrides: dict, *, strict: bool = False):
    """The parameters of a study's ``run(size, **overrides)`` and its progress ``log``.

    ``sizes[size]`` is copied and updated with ``overrides``; ``verbose`` is taken out of
    the overrides (see :func:`progress_logger`). ``strict`` rejects override keys that the
    size does not define. Raises ValueError on an unknown size or (strict) key.
    """
    if size not in sizes:
        raise ValueError(f"unknown size {size!r}; use one of {sorted(sizes)}")
    overrides = dict(overrides)
    verbose = bool(overrides.pop("verbose", False))
    p = dict(sizes[size])
    bad = set(overrides) - set(p)
    if strict and bad:
        raise ValueError(f"unknown parameter(s) {sorted(bad)}; valid: {sorted(p)}")
    p.update(overrides)
    return p, progress_logger(verbose)


# ------------------------------------------------------------ checks, claims, preconditions
class StudyPreconditionError(RuntimeError):
    """A finiteness or sanity condition of a study failed: its numbers cannot be interpreted.

    Raised (with a one-line message) instead of counting a check; ``spherepde validate``
    reports the study as an error and exits 1.
    """


def frozen_beta_path(beta: float, sign: float, T: float, dt: float, H: int = 1):
    """Frozen weights D_h = beta I for H heads on S^2 (``sign`` s), on the grid 0, dt, ..., T
    (:class:`spherepde.model.weights.FrozenProcess`)."""
    from spherepde.model.weights import FrozenProcess, generate_weight_path

    return generate_weight_path(FrozenProcess(), H=H, d=3, T=T, dt=dt, init="beta", beta=beta, sign=sign)


def require(condition, message: str) -> None:
    """Raise :class:`StudyPreconditionError` with ``message`` unless ``condition`` holds."""
    if not bool(condition):
        raise StudyPreconditionError(message)


def require_finite(what: str, *values) -> None:
    """Precondition: every number in ``values`` (scalars or nested sequences) is finite."""
    flat: list = []

    def walk(x):
        if isinstance(x, dict):
            for y in x.values():
                walk(y)
        elif isinstance(x, (list, tuple)) or (isinstance(x, np.ndarray) and x.dtype == object):
            for y in x:
                walk(y)
        else:
            flat.append(np.ravel(np.asarray(x if x is not None else np.nan, dtype=float)))

    walk(values)
    a = np.concatenate(flat) if flat else np.zeros(0)
    if a.size and not np.all(np.isfinite(a)):
        bad = int(np.sum(~np.isfinite(a)))
        raise StudyPreconditionError(f"{what}: {bad} of {a.size} values are not finite")


def _num(x):
    if x is None:
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return x
    return v


def format_number(x, f: str = "{:.3g}") -> str:
    """``x`` formatted by the format string ``f``; "nan" when ``x`` is None or not finite."""
    return "nan" if x is None or not np.isfinite(x) else f.format(x)


def solver_check(measured, *, lo=None, hi=None, expected=None, tolerance: str | None = None) -> dict:
    """A solver check: ``measured`` must lie in ``[lo, hi]`` (either end may be open).

    ``expected`` is the value the measurement estimates (an analytic value, a reference or
    an expected order; a number or a short text) and ``tolerance`` says in words how far from
    it the measurement may be (default: the interval). A non-finite measurement fails.
    Returns ``{"passed", "measured", "expected", "lo", "hi", "tolerance"}`` -- what the report
    prints, and the only thing the headline counts.
    """
    m = _num(measured)
    finite = isinstance(m, float) and math.isfinite(m)
    passed = finite and (lo is None or m >= lo) and (hi is None or m <= hi)
    if tolerance is None:
        if lo is not None and hi is not None:
            tolerance = f"in [{lo:g}, {hi:g}]"
        elif hi is not None:
            tolerance = f"<= {hi:g}"
        elif lo is not None:
            tolerance = f">= {lo:g}"
        else:
            tolerance = "-"
    return {"passed": bool(passed), "measured": m, "expected": _num(expected), "lo": _num(lo), "hi": _num(hi), "tolerance": tolerance}


def check_passed(check) -> bool:
    """Whether a check passed: a :func:`solver_check` dict, or a bare bool (older studies)."""
    return bool(check["passed"]) if isinstance(check, dict) else bool(check)


def paper_claim(value, interval, paper_value: float, *, statement: str, quantity: str = "b") -> dict:
    """A claim of the paper, reproduced only when the 95% ``interval`` contains ``paper_value``.

    ``value`` is the point estimate (reported, never used for the verdict); an interval
    with a non-finite end (e.g. one path per H, no bootstrap) does not reproduce anything.
    """
    lo, hi = (_num(x) for x in interval)
    ok = all(isinstance(x, float) and math.isfinite(x) for x in (lo, hi)) and lo <= paper_value <= hi
    return {
        "reproduced": bool(ok),
        "value": _num(value),
        "interval": [lo, hi],
        "paper_value": float(paper_value),
        "quantity": quantity,
        "statement": statement,
    }


def claim_sentence(claim: dict) -> str:
    """``<q> = v, 95% interval [lo, hi]: the paper's <q> = p is REPRODUCED / NOT reproduced (...)``."""
    q, (lo, hi), pv = claim.get("quantity", "b"), claim["interval"], claim["paper_value"]
    head = f"{q} = {format_number(claim['value'])}, 95% interval [{format_number(lo)}, {format_number(hi)}]: the paper's {q} = {pv:g} is "
    if claim["reproduced"]:
        return head + "REPRODUCED (the interval contains it)"
    finite = all(x is not None and math.isfinite(x) for x in (lo, hi))
    return head + ("NOT reproduced (the interval excludes it)" if finite else "NOT reproduced (no interval: fewer than two paths per H)")


def checks_line(checks: dict, claims: dict | None = None) -> str:
    """The closing sentence of a study summary, from the same booleans the report counts."""
    ok = [k for k, v in checks.items() if check_passed(v)]
    bad = [k for k, v in checks.items() if not check_passed(v)]
    line = f"\nSolver checks: {len(ok)}/{len(checks)} pass" + (f"; failed: {', '.join(bad)}." if bad else ".")
    if claims:
        rep = [k for k, v in claims.items() if v["reproduced"]]
        nrep = [k for k, v in claims.items() if not v["reproduced"]]
        line += f" Paper claims: {len(rep)}/{len(claims)} reproduced" + (f"; not reproduced: {', '.join(nrep)}." if nrep else ".")
    return line


def print_study(res: dict) -> None:
    """Print a study's tables (if any) and summary: the ``python -m validation.NAME`` output."""
    for t in res.get("tables", []):
        print(t["title"])
        print(markdown_table(t["headers"], t["rows"]))
    if "wall_s" in res:  # seconds, or seconds per part
        print("wall time (s):", res["wall_s"])
    print(res["summary"])


# ------------------------------------------------------------ ranges of the size parameters
@dataclass(frozen=True)
class Range:
    """What one size parameter of a study may be (``spherepde validate --set`` checks it
    before anything runs): every number in the value (a number, or a list / table of them)
    must be of ``kind`` (``int``: whole numbers only; ``float``: any number), lie in
    ``[lo, hi]`` (``lo`` excluded when ``open_lo``), be one of ``choices`` (also strings),
    and need at most the available memory by ``memory(value)`` (bytes). ``kind=None``
    checks only the choices (strings, booleans, tables of names).
    """

    kind: type | None = None
    lo: float = -math.inf
    hi: float = math.inf
    open_lo: bool = False
    choices: tuple | Callable[[], tuple] = ()
    memory: Callable[[float], float] | None = None
    what: str = ""

    def problem(self, v) -> str | None:
        """Why the single value ``v`` is out of range (None when it fits)."""
        choices = self.choices() if callable(self.choices) else self.choices  # a registry's names, asked live
        if choices and v not in choices:
            return f"{v!r} is not one of {', '.join(map(repr, choices))}"
        if self.kind is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return f"{v!r} is not a number"
        if self.kind is int and not isinstance(v, int):
            return f"{v!r} is not a whole number"
        need = self.memory(v) if self.memory is not None else 0.0
        if v > self.hi or v < self.lo or (self.open_lo and v == self.lo):
            lo = "above " if self.open_lo else "at least "
            bounds = f"{lo}{self.lo:g}" + (f" and at most {self.hi:g}" if math.isfinite(self.hi) else "")
            if not math.isfinite(self.lo):
                bounds = f"at most {self.hi:g}"
            mem = f" (it would need about {_format_bytes(need)} of memory)" if v > self.hi and need else ""
            return f"{v!r} is out of range: {self.what or 'it'} must be {bounds}{mem}"
        if need:
            from spherepde._base import available_memory

            limit, source = available_memory()
            if need > limit:
                return f"{v!r} would need about {_format_bytes(need)} of memory ({self.what or 'its size'}), but {_format_bytes(limit)} is {source}"
        return None


def _format_bytes(n: float) -> str:
    from spherepde._base import format_bytes

    return format_bytes(n)


def _mesh_bytes(level: float, heads: float = 4) -> float:
    """Memory of a mesh solver on the icosphere of ``level`` (20 level^2 cells)."""
    from spherepde.runs.config import MESH_BYTES_PER_CELL

    return 20.0 * float(level) ** 2 * (MESH_BYTES_PER_CELL[0] + MESH_BYTES_PER_CELL[1] * heads)


def _token_bytes(n: float, heads: float = 100, d: float = 3) -> float:
    """Memory of ``n`` tokens with their attention sums (up to 100 heads)."""
    from spherepde.runs.config import TOKEN_BYTES

    return float(n) * d * (TOKEN_BYTES[0] + TOKEN_BYTES[1] * heads)


#: The ranges most size parameters share (a study declares each parameter's range in its ``RANGES``).
LEVEL = Range(int, 1, 256, memory=_mesh_bytes, what="an icosphere level (20 level^2 cells)")
TOKENS = Range(int, 1, 10**7, memory=_token_bytes, what="a number of tokens")
COUNT = Range(int, 1, 10**6, what="a count")
SEEDS = Range(int, 1, 10**5, what="a number of paths or seeds")
STEPS = Range(int, 1, 10**8, what="a number of steps")
HEADS = Range(int, 1, 10**4, what="a number of heads")
TIME = Range(float, 0.0, 1e5, open_lo=True, what="a time")
TIME0 = Range(float, 0.0, 1e5, what="a time")
STEP = Range(float, 0.0, 10.0, open_lo=True, what="a time step")
POSITIVE = Range(float, 0.0, 1e6, open_lo=True, what="a positive number")
FRACTION = Range(float, 0.0, 1.0, open_lo=True, what="a number in (0, 1]")
ANY = Range(float, -1e6, 1e6, what="a number")
ORDER = Range(int, choices=(1, 2), what="a scheme order")
BOOL = Range(None, choices=(True, False))
BETA = Range(float, 0.0, 500.0, open_lo=True, what="an inverse temperature beta (exp(beta) must stay finite)")
MESH_INTEGRATOR = Range(None, choices=lambda: integrator_names("mesh"))
PARTICLE_INTEGRATOR = Range(None, choices=lambda: integrator_names("particles"))


def path_bytes(steps: float, heads: float = 1, d: float = 3) -> float:
    """Memory of a weight path of ``steps`` grid steps (A, V, drift and increments; doubles)."""
    return (float(steps) + 1) * heads * d * d * 8 * 4


def _leaves(v, where: str):
    """(where, number or string) for every value in a number, a list or a table."""
    if isinstance(v, dict):
        for k, x in v.items():
            yield from _leaves(x, f"{where}[{k!r}]")
    elif isinstance(v, (list, tuple)):
        for x in v:
            yield from _leaves(x, where)
    else:
        yield where, v


def range_problem(name: str, rng: Range, value) -> str | None:
    """The first value in ``value`` (a number, or a list / table of them) outside ``rng``,
    as one line starting with ``name`` (None when every value fits)."""
    if isinstance(value, (list, tuple)) and not value:
        return f"{name}: {value!r} is empty; give at least one value"
    for where, v in _leaves(value, name):
        problem = rng.problem(v)
        if problem:
            return f"{where}: {problem}"
    return None
