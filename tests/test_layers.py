"""The folder layout is the architecture: imports run one way, without circles, and no module
takes another's private (``_name``) names.

Walks the source of the installed packages and the benchmarks with ``ast`` (every import,
function-level ones included: a lazy import that dodges a circle is still a circle) and checks:

* the layer order: the ground (``formats``, ``accelerator_models``, ``workloads``), then
  ``dse.output``, then ``dse.roofline`` and ``dse.accuracy``, ``dse.sim``, ``dse.measure``,
  ``dse.spmv``, ``dse.calibrate``, ``dse.explore``, ``search``, ``reports``, and ``dse.cli``
  on top; a unit imports only units below it (the ``dse`` package itself is the public facade
  over the engines);
* no circle between modules;
* no ``_name`` imported from, or read off, another module outside the tests.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("formats", "accelerator_models", "workloads", "dse", "search", "reports")

#: Each unit's layer; a unit may import only units of a lower layer (and itself).
LAYERS = {
    "formats": 0, "accelerator_models": 0, "workloads": 0,
    "dse.output": 1,
    "dse.roofline": 2, "dse.accuracy": 2,
    "dse.sim": 3,
    "dse.measure": 4,
    "dse.spmv": 5,  # the BeBOP SpMV benchmark: takes dse.measure's budget and errors
    "dse.calibrate": 6,
    "dse.explore": 7,
    "dse": 8,  # the facade: dse/__init__.py re-exports the engines' public API
    "search": 9,
    "reports": 10,
    "dse.cli": 11,
    "dse.__main__": 12,  # `python -m dse`: the command line
    "benchmarks": 13,
}


def unit_of(module: str) -> str:
    """The longest unit name that ``module`` is or lies inside."""
    best = ""
    for unit in LAYERS:
        if (module == unit or module.startswith(unit + ".")) and len(unit) > len(best):
            best = unit
    return best


def project_modules() -> dict[str, Path]:
    """Module name -> source file, for every module of the packages and the benchmarks."""
    found = {}
    folders = [Path(importlib.import_module(p).__file__).parent for p in PACKAGES]
    folders.append(ROOT / "benchmarks")
    for folder in folders:
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder.parent).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports(modules: dict[str, Path]) -> list[tuple[str, str, str, int]]:
    """(importer, imported module, name or "", line) for every import in the project."""
    edges = []
    for module, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                edges += [(module, a.name, "", node.lineno) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                target = _absolute(module, is_package, node)
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    if sub in modules:  # `from pkg import module`: an edge to the module
                        edges.append((module, sub, "", node.lineno))
                    else:
                        edges.append((module, target, alias.name, node.lineno))
    return [e for e in edges if unit_of(e[1])]


def private_attribute_reads(modules: dict[str, Path]) -> list[str]:
    """``alias._name`` where ``alias`` is another project module bound by an import."""
    found = []
    for module, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        aliases = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname and a.name in modules:
                        aliases[a.asname] = a.name
            elif isinstance(node, ast.ImportFrom):
                target = _absolute(module, path.name == "__init__.py", node)
                for a in node.names:
                    if f"{target}.{a.name}" in modules:
                        aliases[a.asname or a.name] = f"{target}.{a.name}"
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in aliases and node.attr.startswith("_")
                    and not node.attr.startswith("__") and aliases[node.value.id] != module):
                found.append(f"{path}:{node.lineno}: "
                             f"{node.value.id}.{node.attr}")
    return found


@pytest.fixture(scope="module")
def graph():
    modules = project_modules()
    return modules, imports(modules)


def test_the_walk_sees_the_whole_tree(graph):
    modules, edges = graph
    for expected in ("dse.roofline.evaluator", "dse.sim.engine", "dse.explore.grid",
                     "dse.cli.options", "search.study", "reports.charts", "formats.nm"):
        assert expected in modules
    assert any(e[0] == "dse.sim.plan" and e[1] == "dse.roofline.evaluator" for e in edges)
    assert all(unit_of(m) for m in modules), [m for m in modules if not unit_of(m)]


def test_imports_run_one_way(graph):
    modules, edges = graph
    wrong = []
    for importer, imported, _, line in edges:
        a, b = unit_of(importer), unit_of(imported)
        if a != b and LAYERS[b] >= LAYERS[a]:
            wrong.append(f"{modules[importer].relative_to(ROOT)}:{line}: {a} imports {b}")
    assert not wrong, "imports against the layer order:\n" + "\n".join(wrong)


def test_only_the_command_line_joins_search_and_reports(graph):
    modules, edges = graph
    wrong = [f"{importer} imports {imported}" for importer, imported, _, _ in edges
             if importer.startswith("dse") and unit_of(imported) in ("search", "reports")
             and unit_of(importer) != "dse.cli"]
    assert not wrong


def test_no_circles(graph):
    modules, edges = graph
    succ: dict[str, set[str]] = {m: set() for m in modules}
    for importer, imported, _, _ in edges:
        if imported in modules and imported != importer:
            succ[importer].add(imported)
    # Tarjan's strongly connected components; any component of two or more is a circle.
    index, low, stack, on, circles, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in succ[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in modules:
        if v not in index:
            visit(v)
    assert not circles, f"import circles: {circles}"


def test_no_private_name_crosses_a_module(graph):
    modules, edges = graph
    wrong = [f"{modules[importer].relative_to(ROOT)}:{line}: from {imported} import {name}"
             for importer, imported, name, line in edges
             if name.startswith("_") and not name.startswith("__") and imported != importer]
    wrong += private_attribute_reads(modules)
    assert not wrong, "private names used across modules:\n" + "\n".join(wrong)


def test_the_checks_catch_what_they_are_for(tmp_path):
    """The rules fire on a planted violation of each kind (so the tests above can fail)."""
    source = ("from dse.cli.options import Parser\nfrom dse.roofline.evaluator import _x\n"
              "import dse.roofline.kernels as K\nK._secret\n")
    path = tmp_path / "planted.py"
    path.write_text(source)
    modules = {"dse.roofline.planted": path, "dse.cli.options": path,
               "dse.roofline.evaluator": path, "dse.roofline.kernels": path}
    edges = imports({"dse.roofline.planted": path} | {k: path for k in modules})
    planted = [e for e in edges if e[0] == "dse.roofline.planted"]
    assert any(unit_of(e[1]) == "dse.cli" for e in planted)  # against the order
    assert any(e[2] == "_x" for e in planted)  # a private name
    assert any("K._secret" in r for r in private_attribute_reads({"dse.roofline.planted": path,
                                                                   "dse.roofline.kernels": path}))
