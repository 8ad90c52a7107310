"""No import cycles between subnetlab modules, and no import pointing down the layer list of CONTRIBUTING.md.

Every ``import`` / ``from ... import`` statement anywhere in a module counts:
at top level, inside functions (start-up-speed imports) and under
``if TYPE_CHECKING:``. Edges are resolved as Python resolves them:

* ``import subnetlab.a.b`` -> ``subnetlab.a.b``;
* ``from subnetlab.a import b`` -> ``subnetlab.a.b`` when that is a module,
  otherwise ``subnetlab.a`` (a name defined in, or re-exported by, its
  ``__init__``);
* importing a package means importing its ``__init__``.

The parent packages Python initialises on the way to a submodule are not
edges: otherwise every submodule a package ``__init__`` re-exports would sit
on a cycle with it. A submodule that imports a sibling *through* the package
(``from subnetlab.tasks import Task`` inside ``subnetlab/tasks/spec.py``) does
depend on the ``__init__``, and when that ``__init__`` re-exports the
submodule it is a real cycle: import from the defining module instead.

The layers are read from CONTRIBUTING.md (the backquoted ``a / b → c → ...`` list after "imports point up
the list"), so the rule and its statement cannot drift apart. A module belongs to the floor of its top-level
package (``subnetlab.tasks.splits`` to ``tasks``) or, at the top of ``subnetlab``, to its own name; the
``subnetlab`` package itself to the first floor. A module may import from its own floor or those before it.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

import pytest


def _package_root() -> Path:
    spec = importlib.util.find_spec("subnetlab")
    assert spec is not None and spec.submodule_search_locations, "subnetlab is not importable"
    return Path(next(iter(spec.submodule_search_locations)))


def _modules(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` under the package (``__init__`` is the package)."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _resolve_relative(module: str, is_package: bool, level: int, target: str | None) -> str:
    package = module.split(".") if is_package else module.split(".")[:-1]
    base = package[: len(package) - (level - 1)] if level > 1 else package
    return ".".join([*base, target] if target else base)


def _imports(module: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, int]]:
    """``(imported subnetlab module, line)`` for every import statement in ``path``."""

    def known(name: str) -> str | None:
        # the longest prefix that is a module: "subnetlab.a.b.attr" -> "subnetlab.a.b"
        parts = name.split(".")
        while parts:
            candidate = ".".join(parts)
            if candidate in modules:
                return candidate
            parts.pop()
        return None

    edges = []
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "subnetlab" and (target := known(alias.name)):
                    edges.append((target, node.lineno))
        elif isinstance(node, ast.ImportFrom):
            source = node.module or ""
            if node.level:
                source = _resolve_relative(module, is_package, node.level, node.module)
            if source.split(".")[0] != "subnetlab":
                continue
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                target = sub if sub in modules else known(source)
                if target:
                    edges.append((target, node.lineno))
    return edges


def import_graph(root: Path | None = None) -> tuple[dict[str, set[str]], dict[tuple[str, str], int]]:
    """The module import graph (``module -> imported modules``) and the first line of each edge."""
    modules = _modules(root or _package_root())
    graph: dict[str, set[str]] = {name: set() for name in modules}
    lines: dict[tuple[str, str], int] = {}
    for name, path in modules.items():
        for target, line in _imports(name, path, modules):
            if target != name:
                graph[name].add(target)
                lines.setdefault((name, target), line)
    return graph, lines


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components (iterative: no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return components


def _shortest_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """One shortest cycle through the component's first module, as a list of modules (first == last)."""
    members = set(component)
    start = component[0]
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph[node] & members):
                if child == start:
                    path = [start, node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return path[::-1]
                if child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    return component  # unreachable for a real component


def _describe(graph: dict[str, set[str]], lines: dict[tuple[str, str], int], component: list[str]) -> str:
    cycle = _shortest_cycle(graph, component)
    steps = "\n".join(f"    {a} -> {b}  (line {lines[(a, b)]})" for a, b in zip(cycle, cycle[1:]))
    return f"  {len(component)} modules: {', '.join(component)}\n  e.g.\n{steps}"


def test_no_import_cycles():
    graph, lines = import_graph()
    assert "subnetlab.tasks.base" in graph and "subnetlab.models.adapters" in graph
    cycles = [c for c in strongly_connected(graph) if len(c) > 1]
    assert not cycles, "import cycles between subnetlab modules:\n" + "\n".join(
        _describe(graph, lines, c) for c in cycles
    )


CONTRIBUTING = Path(__file__).resolve().parents[2] / "CONTRIBUTING.md"

# Imports allowed to point down the list, each with its reason (keep this short).
EXCEPTIONS = {
    ("subnetlab.models.loading", "subnetlab.export.save"):
        "load_model opens a directory written by export through export's own reader of that format, imported "
        "inside the function that needs it (the format has one home, export/)",
    ("subnetlab.runs.circuit", "subnetlab.report.circuit_figure"):
        "a circuit run draws circuit.png before its metrics.json marks it finished; plotting has one home, report/ "
        "(imported inside the function that draws)",
}


def layers(text: str | None = None) -> list[set[str]]:
    """The floors CONTRIBUTING.md states, first (lowest) first: ``[{"errors", "io", ...}, {"models"}, ...]``."""
    text = CONTRIBUTING.read_text(encoding="utf-8") if text is None else text
    match = re.search(r"imports point up\s+the\s+list\s+`([^`]+)`", text)
    assert match, "CONTRIBUTING.md no longer states the layer list after 'imports point up the list'"
    return [{name.strip() for name in floor.split("/")} for floor in re.sub(r"\s+", " ", match.group(1)).split("→")]


def floor_of(module: str, floors: list[set[str]]) -> int | None:
    parts = module.split(".")
    name = parts[1] if len(parts) > 1 else None
    if name is None:
        return 0
    return next((i for i, floor in enumerate(floors) if name in floor), None)


def downward_imports(graph: dict[str, set[str]], floors: list[set[str]]) -> tuple[list[tuple[str, str]], list[str]]:
    """``(edges importing from a later floor, modules on no floor)``."""
    down, unplaced = [], sorted({m for m in graph if floor_of(m, floors) is None})
    for module, targets in graph.items():
        for target in targets:
            a, b = floor_of(module, floors), floor_of(target, floors)
            if a is not None and b is not None and b > a:
                down.append((module, target))
    return sorted(down), unplaced


def test_imports_follow_the_layer_order_contributing_states():
    graph, lines = import_graph()
    floors = layers()
    assert {"models", "runs", "executor", "cli"} <= set().union(*floors)
    down, unplaced = downward_imports(graph, floors)
    assert not unplaced, f"modules on no floor of CONTRIBUTING.md's layer list: {', '.join(unplaced)}"
    wrong = [(a, b) for a, b in down if (a, b) not in EXCEPTIONS]
    assert not wrong, "imports pointing down the layer list (CONTRIBUTING.md):\n" + "\n".join(
        f"  {a} -> {b}  (line {lines[(a, b)]})" for a, b in wrong)
    assert all(edge in down for edge in EXCEPTIONS), "an exception no longer needed: remove it from EXCEPTIONS"


def test_other_engineers_new_modules_have_a_floor():
    """Modules being added beside this one (edge circuits, attribution, health, splits) fall on their package's floor."""
    floors = layers()
    for module in ("subnetlab.models.graph", "subnetlab.intervene.edges", "subnetlab.methods.edge_pruning.train",
                   "subnetlab.methods.attribution", "subnetlab.tasks.circuits.ioi", "subnetlab.analysis.faithfulness",
                   "subnetlab.runs.health", "subnetlab.tasks.splits", "subnetlab.runs.splits",
                   "subnetlab.experiments.circuits.reproduce"):
        assert floor_of(module, floors) is not None, module
    assert floor_of("subnetlab.tasks.splits", floors) < floor_of("subnetlab.runs.splits", floors)


# -- the checker itself ------------------------------------------------------------------------------
def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / "subnetlab" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "subnetlab"


def _cycles(root: Path) -> list[list[str]]:
    graph, _ = import_graph(root)
    return [c for c in strongly_connected(graph) if len(c) > 1]


def test_checker_finds_function_level_and_type_checking_cycles(tmp_path):
    root = _write(tmp_path, {
        "__init__.py": "",
        "a.py": "def f():\n    from subnetlab.b import g\n",
        "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import subnetlab.a\n",
    })
    assert _cycles(root) == [["subnetlab.a", "subnetlab.b"]]


def test_checker_resolves_from_package_import(tmp_path):
    # "from subnetlab.pkg import mod" is the submodule; "from subnetlab.pkg import name" is the __init__
    root = _write(tmp_path, {
        "__init__.py": "",
        "pkg/__init__.py": "from subnetlab.pkg.mod import Thing\n",
        "pkg/mod.py": "X = 1\n",
        "pkg/other.py": "from subnetlab.pkg import mod\n",
        "user.py": "from subnetlab.pkg import Thing\n",
    })
    graph, _ = import_graph(root)
    assert graph["subnetlab.pkg.other"] == {"subnetlab.pkg.mod"}
    assert graph["subnetlab.user"] == {"subnetlab.pkg"}
    assert _cycles(root) == []


def test_checker_counts_sibling_through_reexporting_package(tmp_path):
    root = _write(tmp_path, {
        "__init__.py": "",
        "pkg/__init__.py": "from subnetlab.pkg.a import A\nfrom subnetlab.pkg.b import B\n",
        "pkg/a.py": "A = 1\n",
        "pkg/b.py": "from subnetlab.pkg import A\nB = A\n",
    })
    assert _cycles(root) == [["subnetlab.pkg", "subnetlab.pkg.b"]]


@pytest.mark.parametrize("statement", ["from .a import A", "from . import a", "from ..pkg.a import A"])
def test_checker_resolves_relative_imports(tmp_path, statement):
    root = _write(tmp_path, {
        "__init__.py": "",
        "pkg/__init__.py": "",
        "pkg/a.py": "from subnetlab.pkg.b import B\nA = 1\n",
        "pkg/b.py": f"{statement}\nB = 1\n",
    })
    assert _cycles(root) == [["subnetlab.pkg.a", "subnetlab.pkg.b"]]


def test_layer_checker_reads_the_floors_and_finds_a_downward_import(tmp_path):
    floors = layers("imports point up\nthe list `errors / io → models → runs → cli`, never down")
    assert floors == [{"errors", "io"}, {"models"}, {"runs"}, {"cli"}]
    root = _write(tmp_path, {
        "__init__.py": "from subnetlab.errors import E\n",
        "errors.py": "E = 1\n",
        "models/__init__.py": "",
        "models/a.py": "def f():\n    from subnetlab.runs import b\n",  # inside a function still counts
        "runs/__init__.py": "",
        "runs/b.py": "from subnetlab.models import a\n",
        "cli.py": "import subnetlab.runs.b\n",
        "stray.py": "",
    })
    graph, _ = import_graph(root)
    down, unplaced = downward_imports(graph, floors)
    assert down == [("subnetlab.models.a", "subnetlab.runs.b")] and unplaced == ["subnetlab.stray"]
