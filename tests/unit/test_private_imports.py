"""No subnetlab module uses another module's underscore names.

A leading underscore says "only this module relies on me", so the module can change it freely. Every
module under ``src/subnetlab`` is parsed (``ast``, every import statement anywhere in it, functions and
``if TYPE_CHECKING:`` included) and these count as reaching into another module:

* ``from subnetlab.a import _name`` (absolute or relative), including a name a package ``__init__``
  re-exports: the package is another module too;
* ``mod._name`` where ``mod`` was bound by ``import subnetlab.a as mod``, ``from subnetlab import a``
  (``a`` a module) or ``import subnetlab.a`` (then ``subnetlab.a._name``).

Dunder names (``__version__``) are public. A module named with an underscore (``cli/commands/_options.py``)
is private to its package's siblings by convention; its public names may be imported. A helper two
modules share is public in the one module that owns the concept.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path


def _package_root() -> Path:
    spec = importlib.util.find_spec("subnetlab")
    assert spec is not None and spec.submodule_search_locations, "subnetlab is not importable"
    return Path(next(iter(spec.submodule_search_locations)))


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _module_name(root: Path, path: Path) -> tuple[str, bool]:
    """Dotted name of ``path`` and whether it is a package ``__init__``."""
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    return ".".join(parts[:-1] if is_package else parts), is_package


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module.split(".") if is_package else module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _is_module(root: Path, dotted: str) -> bool:
    relative = Path(*dotted.split(".")[1:]) if "." in dotted else Path()
    return (root / relative).with_suffix(".py").is_file() or (root / relative / "__init__.py").is_file()


def _dotted(node: ast.expr) -> str | None:
    """``a.b.c`` of an attribute chain on a plain name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def private_uses(root: Path, path: Path) -> list[str]:
    """``file:line: what`` for every use in ``path`` of an underscore name of another subnetlab module."""
    module, is_package = _module_name(root, path)
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found: list[tuple[int, str]] = []
    modules: dict[str, str] = {}  # local name -> the subnetlab module (or package prefix) it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source = _absolute(module, is_package, node)
            if source != "subnetlab" and not source.startswith("subnetlab."):
                continue
            for alias in node.names:
                if _private(alias.name):
                    found.append((node.lineno, f"from {source} import {alias.name}"))
                elif _is_module(root, f"{source}.{alias.name}"):
                    modules[alias.asname or alias.name] = f"{source}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "subnetlab" or alias.name.startswith("subnetlab."):
                    if alias.asname:
                        modules[alias.asname] = alias.name
                    else:
                        modules["subnetlab"] = "subnetlab"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            chain = _dotted(node.value)
            if chain is None:
                continue
            head, _, rest = chain.partition(".")
            if head in modules:
                target = ".".join(filter(None, [modules[head], rest]))
                if _is_module(root, target) and target != module:
                    found.append((node.lineno, f"{target}.{node.attr}"))
    shown = path.relative_to(root.parent.parent) if root.parent.name == "src" else path
    return [f"{shown}:{line}: {what}" for line, what in sorted(set(found))]


def test_no_module_uses_another_modules_underscore_names():
    root = _package_root()
    uses = [use for path in sorted(root.rglob("*.py")) for use in private_uses(root, path)]
    assert not uses, ("underscore names used outside their module (make the helper public in the module that owns "
                      "the concept):\n" + "\n".join(uses))


def _write(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "src" / "subnetlab"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    return root


def test_the_checker_finds_each_form_and_passes_public_and_dunder_names(tmp_path):
    root = _write(tmp_path, {
        "__init__.py": "__version__ = '1'\n",
        "pkg/__init__.py": "from subnetlab.pkg.a import _helper\n",  # the package's own re-export still counts
        "pkg/a.py": "def _helper(): pass\ndef public(): _helper()\nclass _Thing: pass\n",
        "pkg/b.py": ("from subnetlab.pkg.a import public, _Thing\n"
                     "from subnetlab import __version__\n"
                     "def f():\n    from .a import _helper\n"),
        "pkg/c.py": ("import subnetlab.pkg.a\nimport subnetlab.pkg.a as a_mod\nfrom subnetlab.pkg import a\n"
                     "x = subnetlab.pkg.a._helper\ny = a_mod._Thing\nz = a._helper, a.public, a.__name__\n"),
        "pkg/_private_module.py": "VALUE = 1\n",
        "pkg/d.py": "from subnetlab.pkg._private_module import VALUE\nfrom subnetlab.pkg import _private_module\n",
        "pkg/e.py": "import os\nx = os._exit\nclass A:\n    def f(self):\n        return self._x\n",
    })

    def uses(name: str) -> list[str]:
        return private_uses(root, root / name)

    assert uses("__init__.py") == uses("pkg/a.py") == uses("pkg/e.py") == []
    assert uses("pkg/__init__.py") == ["src/subnetlab/pkg/__init__.py:1: from subnetlab.pkg.a import _helper"]
    assert uses("pkg/b.py") == ["src/subnetlab/pkg/b.py:1: from subnetlab.pkg.a import _Thing",
                                "src/subnetlab/pkg/b.py:4: from subnetlab.pkg.a import _helper"]
    assert uses("pkg/c.py") == ["src/subnetlab/pkg/c.py:4: subnetlab.pkg.a._helper",
                                "src/subnetlab/pkg/c.py:5: subnetlab.pkg.a._Thing",
                                "src/subnetlab/pkg/c.py:6: subnetlab.pkg.a._helper"]
    assert uses("pkg/d.py") == ["src/subnetlab/pkg/d.py:2: from subnetlab.pkg import _private_module"]
