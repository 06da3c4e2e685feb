"""Module attributes loaded on first use (PEP 562), for the packages' light ``__init__`` facades.

:func:`attach_stub` takes the facade's names from its ``__init__.pyi``, the one list: type checkers read
the stub's imports, and the package imports each name from the module the stub names on first access
(the scientific-Python "lazy loading" convention, SPEC 1).
"""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["attach_stub", "lazy_getattr"]


def lazy_getattr(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: ``exports`` maps a name to the relative module defining
    it; the name is imported on first access and then cached in the package's namespace."""

    def load(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        setattr(sys.modules[package], name, value)
        return value

    return load


def stub_exports(stub: Path) -> dict[str, str]:
    """``{name: relative module}`` for every ``from .module import name`` (or ``from ..module``) in a stub
    file."""
    exports: dict[str, str] = {}
    for node in ast.parse(stub.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ImportFrom) and node.level >= 1 and node.module:
            for alias in node.names:
                exports[alias.asname or alias.name] = "." * node.level + node.module
    return exports


def attach_stub(package: str, init_file: str) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """``__getattr__, __dir__, __all__`` for ``package`` from the ``__init__.pyi`` beside ``init_file``.
    ``__all__`` holds the stub's imported names and every public name ``__init__.py`` defines itself."""
    exports = stub_exports(Path(init_file).with_suffix(".pyi"))
    own = [n for n in vars(sys.modules[package]) if n == "__version__"]
    names = sorted({*exports, *own})
    return lazy_getattr(package, exports), lambda: list(names), names
