"""The package layout promised in README ("Development"): data-flow subpackages, no heavy
imports at module level outside the pictures and the CLI, no top-level ``validation``."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "spherepde"
HEAVY = ("pyvista", "matplotlib", "vtk")


def _module_level_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in tree.body:  # module level only; imports inside functions are lazy
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_no_pyvista_or_matplotlib_at_module_level_outside_viz_and_cli():
    offenders = []
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG)
        if rel.parts[0] in ("viz", "cli"):
            continue
        bad = _module_level_imports(path) & set(HEAVY)
        if bad:
            offenders.append(f"{rel}: {sorted(bad)}")
    assert not offenders, offenders


def test_importing_the_package_and_solvers_loads_no_graphics():
    code = (
        "import sys, spherepde, spherepde.solvers.mesh, spherepde.runs.runner, spherepde.runs.sweep, "
        "spherepde.validation.report, spherepde.cli.main; "
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"


def test_subpackages_in_data_flow_order_and_no_flat_modules():
    subpackages = {p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert {"geometry", "model", "attention", "solvers", "runs", "viz", "validation", "cli"} <= subpackages
    flat = {p.name for p in PKG.glob("*.py")}
    assert flat == {"__init__.py", "__main__.py"}, flat


def test_attention_modules_have_no_import_cycle():
    # direct <- harmonic <- sums: each imports only what comes before it
    direct = _module_level_imports(PKG / "attention" / "direct.py")
    src = (PKG / "attention" / "direct.py").read_text()
    assert "harmonic" not in src.split('"""', 2)[-1] and "sums" not in direct
    harmonic_src = (PKG / "attention" / "harmonic.py").read_text()
    assert "spherepde.attention.sums" not in harmonic_src


def test_validation_is_not_a_top_level_package():
    import spherepde.validation

    assert spherepde.validation.__name__ == "spherepde.validation"
    top = Path(__file__).resolve().parents[1] / "validation"
    assert not (top / "__init__.py").exists(), "the evidence folder validation/ must not be importable"
