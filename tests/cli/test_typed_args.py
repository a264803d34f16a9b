"""Nothing below attnres/cli takes an argparse Namespace: the commands parse their flags into a dataclass in
attnres/cli and pass that (or the few fields needed) down. Checked on the source (ast): no module outside attnres/cli
names `Namespace` from argparse (import, `argparse.Namespace`, an annotation)."""
from __future__ import annotations

import ast
from pathlib import Path

import attnres

PACKAGE = Path(attnres.__file__).parent


def namespace_uses(tree: ast.AST) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "argparse" and \
                any(alias.name == "Namespace" for alias in node.names):
            lines.append(node.lineno)
        elif isinstance(node, ast.Attribute) and node.attr == "Namespace" and \
                isinstance(node.value, ast.Name) and node.value.id == "argparse":
            lines.append(node.lineno)
    return lines


def test_no_namespace_below_cli():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] == "cli":
            continue
        found += [f"{relative}:{line}" for line in namespace_uses(ast.parse(path.read_text()))]
    assert found == []


def test_the_check_sees_a_namespace():
    assert namespace_uses(ast.parse("import argparse\ndef f(a: argparse.Namespace): pass")) == [2]
    assert namespace_uses(ast.parse("from argparse import Namespace")) == [1]
