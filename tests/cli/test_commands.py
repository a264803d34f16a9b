"""The commands: one table, one module each, installed as console scripts, and usable on a base install (no
extras): every `--help` works, and a command that needs an extra says which one in one line."""
import json
import sys
from pathlib import Path

import pytest
import tomllib

from hf_attnres.cli import COMMANDS, main
from tests.helpers.base_install import run_on_base_install

REPO = Path(__file__).resolve().parents[2]


def test_every_command_is_a_module_and_a_console_script():
    import importlib

    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts.pop("attnres") == "hf_attnres.cli:main"
    assert scripts == {f"attnres-{name}": f"hf_attnres.cli.{module}:run" for name, (module, _) in COMMANDS.items()}
    for name, (module, _) in COMMANDS.items():
        command = importlib.import_module(f"hf_attnres.cli.{module}")
        assert callable(command.build_parser) and callable(command.main) and callable(command.run), name


def test_dispatcher_lists_commands_and_refuses_unknown_ones(capsys):
    assert main([]) == 0
    listing = capsys.readouterr().out
    assert all(f"  {name} " in listing for name in COMMANDS)
    assert main(["no-such-command"]) == 2 and "unknown command 'no-such-command'" in capsys.readouterr().err


HELP_ALL = """
import contextlib, io, json, sys
from hf_attnres.cli import COMMANDS, command_main
codes = {}
for name in COMMANDS:
    with contextlib.redirect_stdout(io.StringIO()) as out:
        try:
            codes[name] = command_main(name, ["--help"])
        except SystemExit as stop:
            codes[name] = stop.code
    codes[name] = (codes[name], "usage: attnres " + name in out.getvalue())
print(json.dumps(codes))
"""


@pytest.mark.slow
def test_every_help_works_on_a_base_install():
    result = run_on_base_install(HELP_ALL, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    codes = json.loads(result.stdout.strip().splitlines()[-1])
    assert codes == {name: [0, True] for name in COMMANDS}, codes


NEEDS_EXTRA = {  # command line -> the extra its one-line message must name
    ("train", "--max-steps", "1"): "train",
    ("prepare-data",): "train",
    ("compare", "{models}/standard", "{models}/block", "--output-dir", "{models}/report"): "eval",
}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from tests.helpers.model_factory import tiny_model

    folder = tmp_path_factory.mktemp("models")
    for mode in ("standard", "block"):
        tiny_model(mode, 2, num_layers=2).save_pretrained(folder / mode)
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("argv, extra", NEEDS_EXTRA.items(), ids=[a[0] for a in NEEDS_EXTRA])
def test_a_missing_extra_is_one_line_naming_it(argv, extra, models):
    argv = [arg.format(models=models) for arg in argv]
    code = f"import sys; from hf_attnres.cli import main; sys.exit(main({argv!r}))"
    result = run_on_base_install(code)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr[-3000:]
    assert lines[0].startswith(f"attnres {argv[0]}: needs ") and f'pip install "hf-attnres[{extra}]"' in lines[0]


def test_python_dash_m_attnres_runs_the_dispatcher():
    import subprocess

    result = subprocess.run([sys.executable, "-m", "hf_attnres", "--help"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and "plan-memory" in result.stdout


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(prepared data, standard model, block model): what `train` and `compare` need to reach a model forward."""
    from tests.helpers.eval_fixtures import tiny_pair

    return tiny_pair(tmp_path_factory.mktemp("pair"))


BAD_BACKEND_RUNS = {  # command -> its argv given (data, standard, block, output folder): each reaches a forward
    "train": lambda data, a, b, out: ["train", "--data", str(data), "--output-dir", str(out), "--model-size", "tiny",
                                      "--max-steps", "1", "--micro-batch-size", "2", "--eval-every", "0",
                                      "--diagnostics-every", "0", "--no-tensorboard"],
    "compare": lambda data, a, b, out: ["compare", str(a), str(b), "--tasks", "heldout", "--data", str(data),
                                        "--limit", "1", "--device", "cpu", "--output-dir", str(out)],
}


@pytest.mark.parametrize("command", BAD_BACKEND_RUNS)
def test_a_bad_backend_variable_is_one_line_before_any_work(command, pair, tmp_path, monkeypatch, capsys):
    """ATTNRES_BACKEND=foo reached the model's first forward and ended in a traceback; now the dispatcher names the
    variable and its values, exit 2, nothing written. `--help` still works."""
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # command_main sets it
    monkeypatch.setenv("ATTNRES_BACKEND", "foo")
    out = tmp_path / "out"
    assert main(BAD_BACKEND_RUNS[command](*pair, out)) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"attnres {command}: ATTNRES_BACKEND='foo'"), lines
    assert all(name in lines[0] for name in ("auto", "torch", "triton", "cpp"))
    assert not out.exists()
    with pytest.raises(SystemExit) as stop:
        main([command, "--help"])
    assert stop.value.code == 0
def test_help_examples_use_the_installed_commands():
    """A pip install has no scripts/ or eval/ folder; every --help example runs the installed command
    (`attnres <command>`, or `-m hf_attnres.cli.<module>` under a launcher)."""
    import re

    checkout_only = re.compile(r"(python3? |launch\S* .*|torchrun .*|deepspeed .*)\b(scripts|eval)/\w+\.py")
    problems = []
    for name, (module, _) in COMMANDS.items():
        help_text = __import__(f"hf_attnres.cli.{module}", fromlist=["build_parser"]).build_parser().format_help()
        problems += [f"{name}: {line.strip()}" for line in help_text.splitlines() if checkout_only.search(line)]
    assert problems == []
    assert checkout_only.search("  torchrun --nproc_per_node 2 scripts/train_pipeline.py")  # the check can fail
