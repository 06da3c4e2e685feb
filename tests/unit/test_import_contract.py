"""The import contract, read statically from the source (tests/support/imports.py): no circles of imports
inside a member; edge and cloud never import each other; a member imports only the public names of
another (``edgefleet.sdk``, ``edgefleet.sdk.kit``, never ``edgefleet.sdk._*``). Lazy imports inside
functions and ``TYPE_CHECKING`` imports count. And the files are named for their role: no two modules of
the members share a basename that named different things (``_store.py``, ``_client.py``...)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.imports import cross_member_problems, cycles, import_graph, module_files

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


def test_members_import_only_each_others_public_names_and_edge_and_cloud_never_meet() -> None:
    assert cross_member_problems(import_graph(MEMBERS), MEMBERS, apart=[("edgefleet.edge", "edgefleet.cloud")]) == []


def test_the_cross_member_checker_finds_a_private_import_and_a_forbidden_pair(tmp_path: Path) -> None:
    roots = {}
    for name, body in {"a": "from b._impl import f\nfrom b import g\n", "b": "", "c": "import a\n"}.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(body)
        roots[name] = tmp_path / name
    (tmp_path / "b" / "_impl.py").write_text("def f(): ...\n")
    problems = cross_member_problems(import_graph(roots), roots, apart=[("a", "c")])
    assert problems == ["a imports b._impl, a private module of b", "c imports a: c and a never import each other"]


# Basenames that once named different things (the controller's state store and its telemetry store were
# both _store.py; _client.py a gRPC client and an MQTT client; _runtime.py the agent's pipeline host and
# the CUDA bindings...). ``_cli`` (the sdk's and the cloud's command packages) and ``_registry`` (the
# generic registry and the source kind's) name one role each and may repeat.
ROLE_NAMES = ("_agent", "_store", "_runtime", "_client", "_broker")


def test_role_names_are_not_reused_across_the_members() -> None:
    seen: dict[str, list[str]] = {}
    for package, root in MEMBERS.items():
        for module in module_files(package, root):
            seen.setdefault(module.rsplit(".", 1)[-1], []).append(module)
    reused = {name: mods for name, mods in seen.items() if name in ROLE_NAMES and len(mods) > 1}
    assert reused == {}


def test_no_runtime_member_uses_the_dev_broker() -> None:
    """The MQTT broker of the demo and the tests (tools/devbroker, distribution edgefleet-devbroker) is in
    no runtime distribution: no member imports it, none depends on it."""
    users = []
    for package, root in MEMBERS.items():
        for module, path in module_files(package, root).items():
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                if isinstance(node, ast.ImportFrom):
                    names = [node.module or ""]
                if any(n.split(".")[0] == "edgefleet_devbroker" for n in names):
                    users.append(module)
    assert users == []
    for member in ("sdk", "proto", "edge", "cloud"):
        assert "devbroker" not in (REPO / member / "pyproject.toml").read_text(encoding="utf-8")
    assert not list(REPO.glob("*/src/edgefleet/*/_telemetry/_embedded_broker.py"))


# The MQTT topic scheme is the kit's (edgefleet.sdk.kit: device_topic, topic_filters, acl_topics,
# parse_topic): edge and cloud build and parse topics with it and never spell them again, so the agent, the
# controller and the broker ACL cannot drift apart. Comments and docstrings may quote the scheme.
TOPIC_SPELLINGS = ("edgefleet/v1", "$share/")


def spelled_in_code(source: str, needles: tuple[str, ...]) -> list[int]:
    """Lines of the string (or bytes) literals in ``source`` that hold one of ``needles``, docstrings and
    other bare string statements left out (f-strings count: their literal parts are constants)."""
    tree = ast.parse(source)
    prose = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)) and id(node) not in prose:
            text = node.value.decode("latin-1") if isinstance(node.value, bytes) else node.value
            if any(needle in text for needle in needles):
                lines.append(node.lineno)
    return sorted(lines)


def test_the_topic_scheme_is_spelled_only_in_the_kit() -> None:
    found = []
    for package in ("edgefleet.edge", "edgefleet.cloud"):
        for module, path in module_files(package, MEMBERS[package]).items():
            found += [f"{module}:{line}" for line in spelled_in_code(path.read_text(encoding="utf-8"), TOPIC_SPELLINGS)]
    assert found == [], "build or parse topics with edgefleet.sdk.kit (device_topic, topic_filters, parse_topic)"


def test_the_spelling_checker_skips_prose_and_finds_code() -> None:
    source = '''"""Topics: ``edgefleet/v1/<fleet>/<device>/<kind>``."""
# edgefleet/v1 in a comment
def f(fleet):
    """edgefleet/v1 in a docstring."""
    root = "edgefleet/v1"
    return f"$share/g/{root}/{fleet}", b"edgefleet/v1/x", "other/v1"
'''
    assert spelled_in_code(source, TOPIC_SPELLINGS) == [5, 6, 6]
