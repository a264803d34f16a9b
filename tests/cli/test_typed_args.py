"""Nothing below attnres/cli takes an argparse Namespace: the commands parse their flags into a dataclass in
attnres/cli and pass that (or the few fields needed) down. Checked on the source (ast): no module outside attnres/cli
names `Namespace` from argparse (import, `argparse.Namespace`, an annotation). Each typed command's parser and
dataclass hold the same flags with the same defaults, so a flag added to one alone fails here."""
from __future__ import annotations

import ast
import dataclasses
import importlib
from pathlib import Path

import pytest

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


TYPED = {  # command module (attnres/cli) -> its dataclass
    "train": "attnres.training.args:TrainArgs",
    "train_pipeline": "attnres.pipeline.args:PipelineArgs",
    "train_interleaved": "attnres.pipeline.args:InterleavedArgs",
    "prepare_data": "attnres.training.args:PrepareArgs",
    "main_job": "attnres.study.job_args:MainJobArgs",
    "demo": "attnres.bench.args:DemoArgs",
    "bench_model": "attnres.bench.args:BenchModelArgs",
    "bench_kernels": "attnres.bench.args:BenchKernelsArgs",
}
RESOLVED = {"bench_model", "bench_kernels"}  # their parsers resolve the defaults against the device: names only


def default_of(field: dataclasses.Field):
    if field.default is dataclasses.MISSING and field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return field.default


@pytest.mark.parametrize("command", TYPED)
def test_every_flag_is_a_field_with_its_default(command):
    module, name = TYPED[command].split(":")
    typed = getattr(importlib.import_module(module), name)
    fields = {field.name: default_of(field) for field in dataclasses.fields(typed)}
    parser = importlib.import_module(f"attnres.cli.{command}").build_parser()
    flags = {action.dest: action.default for action in parser._actions if action.dest != "help"}
    if command in RESOLVED:
        assert set(flags) == set(fields)
    else:
        assert flags == fields
