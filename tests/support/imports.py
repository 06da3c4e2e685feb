"""A static import graph of the repository's packages, read from the AST (nothing is imported), and the
circles in it. Every import counts: at module level, inside functions (a lazy import is still a
dependency) and under ``TYPE_CHECKING`` (the type still ties the two modules).

Written to grow: ``import_graph`` takes any set of package roots, so contracts between the members
(edge and cloud never import each other, only public names cross a member) read the same graph.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

__all__ = ["cross_member_problems", "cycles", "import_graph", "module_files"]


def module_files(package: str, root: Path) -> dict[str, Path]:
    """``{dotted module name: file}`` for every .py file under ``root``, the folder of ``package``."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join([package, *parts])] = path
    return out


def _targets(node: ast.AST, module: str, is_package: bool, known: Mapping[str, Path]) -> Iterable[str]:
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            base = module.split(".") if is_package else module.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)]
            target = ".".join([*base, node.module] if node.module else base)
        else:
            target = node.module or ""
        for alias in node.names:
            sub = f"{target}.{alias.name}"
            yield sub if sub in known else target  # ``from . import _runner`` names a module


def import_graph(packages: Mapping[str, Path]) -> dict[str, set[str]]:
    """``{module: modules of the given packages it imports}``."""
    known: dict[str, Path] = {}
    for package, root in packages.items():
        known |= module_files(package, root)
    graph: dict[str, set[str]] = {}
    for module, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        edges = graph.setdefault(module, set())
        for node in ast.walk(tree):
            for named in _targets(node, module, path.name == "__init__.py", known):
                target = named
                while target and target not in known:  # ``import a.b.c`` where c is a name in a.b
                    target = target.rpartition(".")[0]
                if target and target != module:
                    edges.add(target)
    return graph


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Every set of modules that import each other in a loop (Tarjan's strongly connected components)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _member(module: str, members: Iterable[str]) -> str | None:
    return next((m for m in members if module == m or module.startswith(m + ".")), None)


def cross_member_problems(
    graph: Mapping[str, set[str]], members: Mapping[str, Path], apart: Iterable[tuple[str, str]] = ()
) -> list[str]:
    """Imports that cross a member's boundary wrongly: into a private module of another member (a part of
    the path after the member's package that starts with ``_``), or between two members listed in
    ``apart`` (either direction). One line per import, sorted."""
    forbidden = {frozenset(pair) for pair in apart}
    found = []
    for module, targets in graph.items():
        own = _member(module, members)
        for target in sorted(targets):
            other = _member(target, members)
            if own is None or other is None or other == own:
                continue
            if frozenset((own, other)) in forbidden:
                found.append(f"{module} imports {target}: {own} and {other} never import each other")
            elif any(part.startswith("_") for part in target[len(other) + 1 :].split(".") if part):
                found.append(f"{module} imports {target}, a private module of {other}")
    return sorted(found)
