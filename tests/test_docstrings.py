"""Module docstrings state contracts (equations, shapes, references), not timings: measured
times live in reports, generated pages and CHANGELOG.md (issue 25)."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: A number followed by a unit of time: "8 s", "~4 min", "4,535 s", "0.8 ms", "1.5 h", "20s".
TIMING = re.compile(
    r"\d(?:[\d,.]*\d)?\s*(?:ms|msec|min|mins|minutes?|seconds?|secs?|hours?|hrs?)\b"
    r"|\d(?:[\d,.]*\d)?(?:\s+s|s)\b(?![-^(])"
    r"|\d(?:[\d,.]*\d)?\s+h\b(?![-^(])"
)


def module_docstring_timings(text: str) -> list[str]:
    """The timings in the module docstring of the Python source ``text``."""
    doc = ast.get_docstring(ast.parse(text), clean=False) or ""
    return [doc[max(0, m.start() - 30):m.end() + 10].replace("\n", " ") for m in TIMING.finditer(doc)]


def test_no_module_docstring_carries_a_timing():
    bad = {}
    for f in sorted((ROOT / "spherepde").rglob("*.py")):
        hits = module_docstring_timings(f.read_text())
        if hits:
            bad[f.relative_to(ROOT).as_posix()] = hits
    assert bad == {}, f"move timings to CHANGELOG.md or a report: {bad}"


@pytest.mark.parametrize("doc", [
    '"""Cost: smoke ~8 s."""', '"""quick ~8 min (468 s measured)."""', '"""full 4,535 s measured."""',
    '"""takes 0.8 ms."""', '"""about 1.5 h here."""', '"""20s on two cores."""', '"""2 minutes."""',
])
def test_the_timing_pattern_sees_timings(doc):
    assert module_docstring_timings(doc)


@pytest.mark.parametrize("doc", [
    '"""kappa = 1/(2h)^2, i = 1..s, s = -1, (u^(j), t_n + c_j dt), order 2 in h."""',
    '"""H = 100 heads, 20,480 cells, O(N^2 H), Runge-Kutta with s stages."""',
])
def test_the_timing_pattern_spares_mathematics(doc):
    assert module_docstring_timings(doc) == []


def test_changelog_exists():
    assert (ROOT / "CHANGELOG.md").is_file()
