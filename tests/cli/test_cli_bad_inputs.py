"""Bad input every command shares, refused as one line naming the flag or path, with nothing written:
seeds numpy cannot take, a path no file system accepts, benchmark sizes the kernels cannot use, a results file that
is a folder. Flags are checked by argparse (exit 2, `argument --flag: ...`); a path too long is the dispatcher's one
line (`hf_attnres.cli.command_main`)."""
from __future__ import annotations

import importlib

import pytest

from hf_attnres.cli import command_main

# command -> the smallest argument list its parser accepts
SEED_COMMANDS = {
    "train": [],
    "prepare-data": [],
    "main-job": [],
    "compare": ["a", "b"],
    "demo": [],
    "train-pipeline": [],
    "train-interleaved": [],
    "continued-study": ["--only", "block", "--lr", "1e-4"],
}


def parser_of(command: str):
    from hf_attnres.cli import COMMANDS

    return importlib.import_module(f"hf_attnres.cli.{COMMANDS[command][0]}").build_parser()


def refused_by_argparse(parse, capsys, *named) -> str:
    with pytest.raises(SystemExit) as info:
        parse()
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "error:" in err, err
    for word in named:
        assert word in err, f"{word!r} not in {err!r}"
    return err


@pytest.mark.parametrize("seed", ["-1", str(2**70)])
@pytest.mark.parametrize("command", SEED_COMMANDS)
def test_seed_out_of_numpys_range_refused(command, seed, capsys):
    parser = parser_of(command)
    refused_by_argparse(lambda: parser.parse_args([*SEED_COMMANDS[command], "--seed", seed]), capsys,
                        "argument --seed", seed)


def test_seed_range_edges_accepted():
    parser = parser_of("demo")
    assert parser.parse_args(["--seed", "0"]).seed == 0
    assert parser.parse_args(["--seed", str(2**32 - 1)]).seed == 2**32 - 1


@pytest.mark.parametrize("hidden", ["-64", "33", "0"])
def test_bench_model_hidden_the_kernels_cannot_use(hidden, capsys, tmp_path):
    from hf_attnres.cli.bench_model import parse_args

    refused_by_argparse(lambda: parse_args(["--hidden", hidden, "--output", str(tmp_path / "b.json")]), capsys,
                        "argument --hidden", hidden, "multiple of 8")


@pytest.mark.parametrize("module", ["bench_model", "bench_kernels"])
def test_bench_output_that_is_a_folder_refused_before_any_work(module, capsys, tmp_path):
    parse_args = importlib.import_module(f"hf_attnres.cli.{module}").parse_args
    refused_by_argparse(lambda: parse_args(["--output", str(tmp_path), "--device", "cpu"]), capsys,
                        "--output", str(tmp_path), "is a folder")
    assert list(tmp_path.iterdir()) == []


LONG = "x/" * 2100 + "end"  # 4,203 bytes: over PATH_MAX (4,096)
# command -> argv with {long} (a path over 4,096 bytes) and {tmp}
LONG_PATH_CASES = {
    "convert_input": ("convert", ["{long}", "{tmp}/out"]),
    "convert_output": ("convert", ["{tmp}", "{tmp}/{long}"]),
    "prepare_data_file": ("prepare-data", ["--files", "{tmp}/{long}.txt", "--output-dir", "{tmp}/out"]),
    "study_grid": ("study", ["--grid", "{tmp}/{long}.json", "--dry-run"]),
    "name_over_255": ("convert", ["{tmp}/" + "n" * 300, "{tmp}/out"]),
}


@pytest.mark.parametrize("command, argv", LONG_PATH_CASES.values(), ids=LONG_PATH_CASES.keys())
def test_path_too_long_is_one_line(command, argv, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.json").write_text("{}")
    before = sorted(p.name for p in tmp_path.iterdir())
    code = command_main(command, [a.format(long=LONG, tmp=tmp_path) for a in argv])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and "path too long" in err, err
    assert len(err.strip().splitlines()) == 1 and len(err) < 400, err
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written
