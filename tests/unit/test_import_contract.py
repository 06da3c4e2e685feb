"""The import contract, read statically from the source (tests/support/imports.py): no circles of imports
inside a member. Lazy imports inside functions and ``TYPE_CHECKING`` imports count."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.imports import cycles, import_graph

REPO = Path(__file__).resolve().parents[2]
MEMBERS = {
    "edgefleet.sdk": REPO / "sdk/src/edgefleet/sdk",
    "edgefleet.edge": REPO / "edge/src/edgefleet/edge",
    "edgefleet.cloud": REPO / "cloud/src/edgefleet/cloud",
}


@pytest.mark.parametrize("package", sorted(MEMBERS))
def test_no_import_circles_inside_a_member(package: str) -> None:
    graph = import_graph({package: MEMBERS[package]})
    assert len(graph) > 10, "the member's modules were not found"
    assert cycles(graph) == []


def test_the_checker_finds_a_circle_through_a_lazy_or_type_only_import(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .sub import b\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("def f():\n    from ..c import g\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import a\ng = 1\n")
    (pkg / "d.py").write_text("import pkg.a\n")
    graph = import_graph({"pkg": pkg})
    assert graph["pkg.a"] == {"pkg.sub.b"} and graph["pkg.sub.b"] == {"pkg.c"} and graph["pkg.c"] == {"pkg.a"}
    assert cycles(graph) == [["pkg.a", "pkg.c", "pkg.sub.b"]]
