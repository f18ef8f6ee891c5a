"""The package layout promised in README ("Development"): data-flow subpackages, no heavy
imports at module level outside the pictures and the CLI, no top-level ``validation``, and
the layering rule (:data:`LAYERS`): every import, lazy ones included, points down the layers
and no import cycle joins two subpackages or two modules."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

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
        "spherepde.studies.report, spherepde.cli.main; "
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"


def test_subpackages_in_data_flow_order_and_no_flat_modules():
    subpackages = {p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert {"geometry", "model", "attention", "solvers", "runs", "viz", "studies", "cli"} <= subpackages
    flat = {p.name for p in PKG.glob("*.py")}
    assert flat == {"__init__.py", "__main__.py", "_base.py", "_numba.py", "_registry.py"}, flat  # each with its role in LAYERS


def test_attention_modules_have_no_import_cycle():
    # direct <- harmonic <- sums: each imports only what comes before it (every import, lazy ones too)
    mods = _modules(PKG)
    imported = {name: {t for _, t in _imports(f"spherepde.attention.{name}", PKG / "attention" / f"{name}.py", False, mods)}
                for name in ("direct", "harmonic")}
    assert not imported["direct"] & {"spherepde.attention.harmonic", "spherepde.attention.sums", "spherepde.attention"}
    assert not imported["harmonic"] & {"spherepde.attention.sums", "spherepde.attention"}


def test_evidence_folder_is_not_a_package():
    import spherepde.studies

    assert spherepde.studies.__name__ == "spherepde.studies"
    top = Path(__file__).resolve().parents[1] / "validation"
    assert not (top / "__init__.py").exists(), "the evidence folder validation/ must not be importable"


# ------------------------------------------------------------------------- the layering rule
#: The layers of the package, lowest first (README "Development"). A module may import
#: modules of its own unit and of units in lower layers, never a unit of its own layer or
#: of a higher one; imports inside functions count the same (a lazy import is for the cost
#: of loading, never to hide a cycle), and no import cycle may join two modules.
LAYERS = (
    ("_base", "_numba", "_registry"),  # spherepde/_base.py: the version, ConfigError, the memory a run may use; _numba.py: the Numba flags; _registry.py: the Registry class every owner of named things uses; import nothing of spherepde
    ("attention", "geometry"),  # attention sums; the sphere mesh, densities, VTK
    ("model",),  # weight paths, velocity, energy, diagnostics columns, statistics
    ("solvers",),  # particles, finite volumes, the mesh solver, coupled solver, distances
    ("runs",),  # configuration, run folders (writing and reading), runner, Monte-Carlo, compare, sweeps
    ("viz",),  # figures and renderings of what runs/ reads
    ("studies",),  # the validation studies and their report
    ("cli",),  # one module per subcommand
    ("__init__", "__main__"),  # the public namespace (imported by no module of the package) and python -m spherepde
)


def _modules(pkg: Path) -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is a package __init__) for every module under pkg."""
    out = {}
    for path in sorted(pkg.rglob("*.py")):
        parts = [pkg.name, *path.relative_to(pkg).with_suffix("").parts]
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return out


def _unit(module: str, root: str) -> str:
    """The layer unit of a module: its subpackage, or the name of a top-level module."""
    parts = module.split(".")
    return "__init__" if parts == [root] else parts[1]


def _imports(module: str, path: Path, is_pkg: bool, known) -> list[tuple[int, str]]:
    """(line, imported module of the package) for EVERY import in the file: module level,
    inside functions and classes, ``import a.b``, ``from a import b``, relative imports and
    ``importlib.import_module`` of a literal name (an f-string: its literal package).
    ``from pkg import name`` is the submodule ``pkg.name`` when that exists, else ``pkg``."""
    root = module.split(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_pkg else module.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in known else mod for a in node.names]
        elif isinstance(node, ast.Call) and (getattr(node.func, "attr", None) or getattr(node.func, "id", None)) in ("import_module", "__import__") and node.args:
            arg = node.args[0]  # importlib.import_module("a.b") or f"a.b.{name}": the literal part
            text = arg.value if isinstance(arg, ast.Constant) else arg.values[0].value if isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant) else ""
            targets = [text if isinstance(arg, ast.Constant) else text.rpartition(".")[0]] if isinstance(text, str) and text else []
        else:
            continue
        for t in targets:
            if t == root or t.startswith(root + "."):
                while t not in known and "." in t:  # import a.b.c where c is a name: the module a.b
                    t = t.rsplit(".", 1)[0]
                found.append((node.lineno, t))
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan, iterative)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def layering_violations(pkg: Path, layers=LAYERS) -> list[str]:
    """Every import of the package under ``pkg`` that breaks the layering rule: an import of
    a unit of the same or a higher layer, a unit missing from ``layers``, an import cycle
    between units or between modules. Empty when the package keeps the rule."""
    rank = {unit: i for i, names in enumerate(layers) for unit in names}
    mods = _modules(pkg)
    root = pkg.name
    problems, graph, unit_graph = [], {m: set() for m in mods}, {}
    for m, (path, is_pkg) in mods.items():
        src = _unit(m, root)
        if src not in rank:
            problems.append(f"{path.relative_to(pkg.parent)}: unit {src!r} is in no layer; add it to LAYERS")
            continue
        for line, t in sorted(set(_imports(m, path, is_pkg, mods))):
            if t == m:
                continue
            graph[m].add(t)
            dst = _unit(t, root)
            if dst == src:
                continue
            unit_graph.setdefault(src, set()).add(dst)
            if rank.get(dst, len(layers)) >= rank[src]:
                problems.append(f"{path.relative_to(pkg.parent)}:{line}: {src} imports {t} ({dst} is not in a layer below {src})")
    for comp in _cycles({u: unit_graph.get(u, set()) for u in rank} | unit_graph):
        problems.append(f"import cycle between subpackages: {' <-> '.join(comp)}")
    for comp in _cycles(graph):
        problems.append(f"import cycle between modules: {' <-> '.join(comp)}")
    return problems


def test_every_import_points_down_the_layers_and_no_cycle():
    assert layering_violations(PKG) == []


def test_every_unit_of_the_package_has_a_layer():
    units = {p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").is_file()} | {p.stem for p in PKG.glob("*.py")}
    assert units == {u for names in LAYERS for u in names}


def _tree(tmp_path, files: dict[str, str]) -> Path:
    pkg = tmp_path / "spherepde"
    base = {"__init__.py": "from spherepde.runs import runner\n", "_base.py": "VERSION = '1'\n", "model/__init__.py": "",
            "model/energy.py": "from spherepde._base import VERSION\n", "runs/__init__.py": "",
            "runs/runner.py": "from spherepde.model import energy\n", "viz/__init__.py": "",
            "viz/plots.py": "from ..runs.runner import x\n", "cli/__init__.py": "", "cli/main.py": "import spherepde.viz.plots\n"}
    for rel, text in {**base, **files}.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    return pkg


def test_the_checker_passes_a_layered_tree(tmp_path):
    assert layering_violations(_tree(tmp_path, {})) == []


@pytest.mark.parametrize("where, source", [
    ("model/energy.py", "from spherepde.runs.runner import run\n"),  # module level
    ("model/energy.py", "def f():\n    from spherepde.viz import plots\n    return plots\n"),  # lazy, inside a function
    ("model/energy.py", "class A:\n    def f(self):\n        import spherepde.cli.main\n"),  # import a.b.c in a method
    ("runs/runner.py", "from ..viz.plots import draw\n"),  # relative
    ("runs/runner.py", "from spherepde import __version__\n"),  # the public namespace from inside
    ("_base.py", "from spherepde.model import energy\n"),  # the bottom imports nothing
    ("model/energy.py", "import importlib\n\ndef f(name):\n    return importlib.import_module(f'spherepde.viz.{name}')\n"),  # dynamic
])
def test_the_checker_fails_on_a_planted_upward_import(tmp_path, where, source):
    problems = layering_violations(_tree(tmp_path, {where: source}))
    assert any("is not in a layer below" in p and where in p for p in problems), problems


def test_the_checker_fails_on_a_planted_cycle(tmp_path):
    # two modules of one subpackage importing each other, one of them lazily
    pkg = _tree(tmp_path, {"runs/montecarlo.py": "from spherepde.runs.runner import run\n",
                           "runs/runner.py": "from spherepde.model import energy\n\ndef mc():\n    from spherepde.runs import montecarlo\n"})
    assert any("import cycle between modules" in p and "spherepde.runs.montecarlo" in p and "spherepde.runs.runner" in p
               for p in layering_violations(pkg))
    # two subpackages importing each other: an upward import and a cycle
    pkg = _tree(tmp_path, {"model/energy.py": "def f():\n    from spherepde.runs import runner\n"})
    problems = layering_violations(pkg)
    assert any("import cycle between subpackages: model <-> runs" in p for p in problems), problems


def test_the_checker_fails_on_a_unit_in_no_layer(tmp_path):
    problems = layering_violations(_tree(tmp_path, {"extras/__init__.py": ""}))
    assert any("'extras' is in no layer" in p for p in problems), problems


def test_no_matplotlib_use_in_library_code():
    # the backend is the caller's choice (MPLBACKEND, a script, the tests); figures are made without pyplot's state
    offenders = []
    for path in PKG.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("use", "switch_backend"):
                owner = node.func.value
                if isinstance(owner, ast.Name) and owner.id in ("matplotlib", "mpl", "plt", "pyplot"):
                    offenders.append(f"{path.relative_to(PKG)}:{node.lineno}")
    assert not offenders, offenders


def test_reference_kernels_are_private_to_the_tests():
    # NumPy reference kernels live in private ``_reference`` modules: no production module
    # defines or exports a public ``*_reference`` function, and no module of the package imports them
    mods = _modules(PKG)
    offenders = []
    for m, (path, is_pkg) in mods.items():
        if m.rsplit(".", 1)[-1] == "_reference":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        offenders += [f"{m}: defines {n.name}" for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.endswith("_reference") and not n.name.startswith("_")]
        offenders += [f"{m}:{line}: imports {t}" for line, t in _imports(m, path, is_pkg, mods) if t.rsplit(".", 1)[-1] == "_reference"]
        for n in tree.body:  # __all__ read from the source (importing __main__ would run the CLI)
            if isinstance(n, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in n.targets):
                offenders += [f"{m}.__all__: {x}" for x in ast.literal_eval(n.value) if x.endswith("_reference")]
    assert not offenders, offenders


def test_no_private_name_crosses_a_module_boundary_of_another_unit():
    """A module uses another subpackage's public names only: no ``from spherepde.X.y import _name``
    from a module of a different unit (subpackage), lazy imports included."""
    offenders = []
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG)
        unit = rel.parts[0] if len(rel.parts) > 1 else rel.stem
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("spherepde.") and node.level == 0:
                target = node.module.split(".")[1]
                private = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
                if target != unit and private:
                    offenders.append(f"{rel}: from {node.module} import {', '.join(private)}")
    assert not offenders, offenders
