"""Nothing below hf_attnres/cli takes an argparse Namespace: the commands parse their flags into a dataclass in
hf_attnres/cli and pass that (or the few fields needed) down. Checked on the source (ast): no module outside
hf_attnres/cli names `Namespace` from argparse (import, `argparse.Namespace`, an annotation). Each command's parser is
built from its dataclass's `flag` fields: checked by what it does (its defaults parse into the dataclass, `--help`
lists each field, a required argument left out is refused)."""
from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
import re
from pathlib import Path

import pytest

import hf_attnres
from hf_attnres.utils.flags import field_default, flag_spec, option_strings

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
    "continued_curve": "hf_attnres.study.study_args:ContinuedCurveArgs",
    "export": "hf_attnres.conversion.export_args:ExportArgs",
    "plan_memory": "hf_attnres.training.tool_args:PlanMemoryArgs",
    "plot_diagnostics": "hf_attnres.training.tool_args:DiagnosticsPlotArgs",
    "caching_table": "hf_attnres.pipeline.caching_args:CachingArgs",
    "gpu_evidence": "hf_attnres.bench.args:EvidenceArgs",
    "repair_folder": "hf_attnres.cli.repair_folder:RepairArgs",
    "bench_inkling2": "hf_attnres.bench.args:BenchInkling2Args",
}


def typed_of(command: str):
    module, name = TYPED[command].split(":")
    return getattr(importlib.import_module(module), name)


def parser_of(command: str):
    return importlib.import_module(f"hf_attnres.cli.{command}").build_parser()


def fields_of(command: str) -> list[dataclasses.Field]:
    return [field for field in dataclasses.fields(typed_of(command)) if flag_spec(field) is not None]


def minimal_argv(command: str) -> list[str]:
    """The command's required arguments, each given a value its type and choices accept."""
    argv = []
    for field in fields_of(command):
        spec = flag_spec(field)
        if field_default(field) is not dataclasses.MISSING or spec["raw"] is not dataclasses.MISSING:
            continue
        choices = spec["kwargs"].get("choices")
        value = str(next(iter(choices))) if choices else "x"
        argv += [value] if spec["positional"] else [option_strings(field)[0], value]
    return argv


@pytest.mark.parametrize("command", TYPED)
def test_every_field_is_a_flag(command):
    """A command's dataclass holds its flags and nothing else: every field is declared a flag."""
    assert [f.name for f in dataclasses.fields(typed_of(command))] == [f.name for f in fields_of(command)]


@pytest.mark.parametrize("command", TYPED)
def test_the_defaults_parse_into_the_dataclass(command):
    """With its required arguments alone, every command parses into its dataclass, each field left out holding its
    declared default (a flag's own raw default where the command resolves the field later)."""
    typed = typed_of(command)
    args = typed(**vars(parser_of(command).parse_args(minimal_argv(command))))
    for field in fields_of(command):
        spec = flag_spec(field)
        expected = field_default(field) if spec["raw"] is dataclasses.MISSING else spec["raw"]
        if expected is not dataclasses.MISSING:
            assert getattr(args, field.name) == expected, field.name


@pytest.mark.parametrize("command", TYPED)
def test_help_lists_every_field(command):
    """`--help` names every flag (positional arguments by their name or metavar), except one declared hidden."""
    text = parser_of(command).format_help()
    for field in fields_of(command):
        spec = flag_spec(field)
        if spec["kwargs"].get("help") == argparse.SUPPRESS:
            assert option_strings(field)[0] not in text
            continue
        shown = spec["kwargs"].get("metavar", field.name) if spec["positional"] else option_strings(field)[0]
        assert shown in text, field.name


NUMBER_DEFAULT = re.compile(r"default:? (-?\d[\d.e+-]*)(?=[\s);,:]|$)")


def effective_default(command: str, action: argparse.Action):
    """The value a flag left out ends up with: its parser default, or for train's run settings (None until a resume
    or the defaults fill them) the default that `fill_settings` gives."""
    if command == "train" and action.default is None:
        from hf_attnres.training.args import CHECKPOINT_DEFAULTS, RUN_SETTINGS

        return {**RUN_SETTINGS, **CHECKPOINT_DEFAULTS}.get(action.dest)
    return action.default


@pytest.mark.parametrize("command", TYPED)
def test_a_number_help_names_as_the_default_is_the_default(command):
    """A help line that states a numeric default ("(default 2000)") states the one the flag has: the value is written
    in the field, the sentence beside it, and a changed default with a stale sentence fails here."""
    parser = parser_of(command)
    formatter = parser._get_formatter()
    stale = []
    for action in parser._actions:
        if not action.help or action.help == argparse.SUPPRESS:
            continue
        default = effective_default(command, action)
        if default is None:  # resolved at run time (per device, per model): the help says how, not one number
            continue
        for stated in NUMBER_DEFAULT.findall(formatter._expand_help(action)):
            if not isinstance(default, (int, float)) or isinstance(default, bool) or float(stated) != default:
                stale.append(f"{action.option_strings or action.dest}: help says {stated}, default {default!r}")
    assert stale == []


def test_the_default_check_reads_the_help():
    assert NUMBER_DEFAULT.findall("optimizer steps (default 2000)") == ["2000"]
    assert NUMBER_DEFAULT.findall("peak learning rate (default 3e-4); floor (default: 0.1)") == ["3e-4", "0.1"]
    assert NUMBER_DEFAULT.findall("(default: the preset's)") == []


@pytest.mark.parametrize("command", [c for c in TYPED if minimal_argv(c)])
def test_a_required_argument_left_out_is_refused(command, capsys):
    with pytest.raises(SystemExit) as stop:
        parser_of(command).parse_args([])
    assert stop.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_exclusive_flags_are_refused_together(capsys):
    """prepare-data's sources (--files, --hub, --chat) are one exclusive group, declared on its fields."""
    with pytest.raises(SystemExit) as stop:
        parser_of("prepare_data").parse_args(["--files", "a.txt", "--hub", "name"])
    assert stop.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


def test_no_command_module_adds_arguments_by_hand():
    """Flags are declared once, on the dataclass fields: no module of the package outside utils/flags.py (the
    builder) calls add_argument, except the development scripts' parsers (utils/modular.py, utils/families_doc.py),
    which have no dataclass."""
    calls = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        found = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Attribute)
                 and node.attr == "add_argument"]
        if found:
            calls[str(path.relative_to(PACKAGE))] = found
    assert set(calls) <= {"utils/flags.py", "utils/modular.py", "utils/families_doc.py"}, calls


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
