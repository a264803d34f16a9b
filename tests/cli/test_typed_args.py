"""Nothing below hf_attnres/cli takes an argparse Namespace: the commands parse their flags into a dataclass in
hf_attnres/cli and pass that (or the few fields needed) down. Checked on the source (ast): no module outside
hf_attnres/cli
names `Namespace` from argparse (import, `argparse.Namespace`, an annotation). Each typed command's parser and
dataclass hold the same flags with the same defaults, so a flag added to one alone fails here."""
from __future__ import annotations

import ast
import dataclasses
import importlib
from pathlib import Path

import pytest

import hf_attnres

PACKAGE = Path(hf_attnres.__file__).parent


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


TYPED = {  # command module (hf_attnres/cli) -> its dataclass
    "train": "hf_attnres.training.args:TrainArgs",
    "train_pipeline": "hf_attnres.pipeline.args:PipelineArgs",
    "train_interleaved": "hf_attnres.pipeline.args:InterleavedArgs",
    "prepare_data": "hf_attnres.training.args:PrepareArgs",
    "main_job": "hf_attnres.study.job_args:MainJobArgs",
    "demo": "hf_attnres.bench.args:DemoArgs",
    "compare": "hf_attnres.evaluation.args:CompareArgs",
    "prepare_eval_data": "hf_attnres.evaluation.args:PrepareEvalArgs",
    "bench_model": "hf_attnres.bench.args:BenchModelArgs",
    "bench_kernels": "hf_attnres.bench.args:BenchKernelsArgs",
    "convert": "hf_attnres.conversion.args:ConvertArgs",
    "push_to_hub": "hf_attnres.conversion.args:PushArgs",
    "study": "hf_attnres.study.study_args:StudyArgs",
    "continued_study": "hf_attnres.study.study_args:ContinuedStudyArgs",
    "export": "hf_attnres.conversion.export_args:ExportArgs",
    "plan_memory": "hf_attnres.training.tool_args:PlanMemoryArgs",
    "plot_diagnostics": "hf_attnres.training.tool_args:DiagnosticsPlotArgs",
    "caching_table": "hf_attnres.pipeline.caching_args:CachingArgs",
    "gpu_evidence": "hf_attnres.bench.args:EvidenceArgs",
    "repair_folder": "hf_attnres.folders.repair:RepairArgs",
    "bench_inkling2": "hf_attnres.bench.args:BenchInkling2Args",
}
RESOLVED = {"bench_model", "bench_kernels"}  # their parsers resolve the defaults against the device: names only


def required(action) -> bool:
    """An argument that must be given (its dataclass field has no default): a positional one, or a required option."""
    return action.required or not action.option_strings and action.nargs not in ("?", "*")


def default_of(field: dataclasses.Field):
    if field.default is dataclasses.MISSING and field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return field.default


@pytest.mark.parametrize("command", TYPED)
def test_every_flag_is_a_field_with_its_default(command):
    module, name = TYPED[command].split(":")
    typed = getattr(importlib.import_module(module), name)
    fields = {field.name: default_of(field) for field in dataclasses.fields(typed)}
    parser = importlib.import_module(f"hf_attnres.cli.{command}").build_parser()
    flags = {action.dest: dataclasses.MISSING if required(action) else action.default
             for action in parser._actions if action.dest != "help"}
    if command in RESOLVED:
        assert set(flags) == set(fields)
    else:
        assert flags == fields


def test_every_command_line_in_cli_is_typed():
    """A module of hf_attnres/cli with a parser (`build_parser`) is a command line: it has its dataclass in TYPED."""
    parsers = {path.stem for path in (PACKAGE / "cli").glob("*.py")
               if any(isinstance(node, ast.FunctionDef) and node.name == "build_parser"
                      for node in ast.parse(path.read_text()).body)}
    assert parsers == set(TYPED)


def outside_cli_names(tree: ast.AST) -> set[str]:
    """The names a cli module imports from hf_attnres modules outside hf_attnres/cli (`from ..x import f`)."""
    return {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
            and (node.level >= 2 or (node.level == 0 and (node.module or "").startswith("hf_attnres.")
                                     and not (node.module or "").startswith("hf_attnres.cli")))
            for alias in node.names}


def namespaces_passed_down(tree: ast.AST) -> list[str]:
    """Calls, in a cli function, of a function from outside cli with a raw `parser.parse_args(...)` result (or
    that of a local parser function annotated to return the Namespace)."""
    outside, found = outside_cli_names(tree), []
    parsers = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.returns is not None
               and ast.unparse(n.returns).endswith("Namespace")}  # a local parse_args returning the Namespace

    def parses(call: ast.AST) -> bool:
        return isinstance(call, ast.Call) and (
            isinstance(call.func, ast.Attribute) and call.func.attr == "parse_args"
            or isinstance(call.func, ast.Name) and call.func.id in parsers)

    for function in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
        raw = {target.id for node in ast.walk(function) if isinstance(node, ast.Assign) and parses(node.value)
               for target in node.targets if isinstance(target, ast.Name)}
        for call in (n for n in ast.walk(function) if isinstance(n, ast.Call)):
            if isinstance(call.func, ast.Name) and call.func.id in outside and \
                    any(isinstance(arg, ast.Name) and arg.id in raw for arg in call.args):
                found.append(f"{function.name} -> {call.func.id}")
    return found


def test_no_cli_command_passes_its_namespace_down():
    found = []
    for path in sorted((PACKAGE / "cli").glob("*.py")):
        found += [f"cli/{path.name}: {call}" for call in namespaces_passed_down(ast.parse(path.read_text()))]
    assert found == []


def test_the_pass_down_check_sees_a_namespace():
    source = "from ..x import run\ndef main(argv):\n    args = parser.parse_args(argv)\n    run(args)\n"
    assert namespaces_passed_down(ast.parse(source)) == ["main -> run"]
    typed = "from ..x import run, T\ndef main(argv):\n    args = T(**vars(parser.parse_args(argv)))\n    run(args)\n"
    assert namespaces_passed_down(ast.parse(typed)) == []
