"""Bad input to `attnres convert` (attnres.cli.convert, run in-process through main(), exit code and message
checked): output folders that overlap the input, damaged checkpoints, bad flags; stale temporary folders recovered."""
from __future__ import annotations

import shutil

import pytest

from attnres.cli import convert as convert_cli
from attnres.folders.atomic_io import recover_interrupted
from tests.helpers.bad_input_fixtures import (
    CONFIG_DTYPE_DAMAGE,
    INDEX_DAMAGE,
    MODEL_FOLDER_DAMAGE,
    NONFINITE_DAMAGE,
    SENTINEL,
    damaged_copy,
    expect_script_refused,
)
from tests.helpers.processes import dead_pid


@pytest.fixture(scope="module")
def convert():
    return convert_cli.main


def run_refused(convert, capsys, argv, named, untouched=(), absent=()):
    return expect_script_refused(convert, capsys, [*argv, "--no-progress"], named, untouched, absent)


# (argv builder (input, tmp) -> argv, words, extra paths that must not appear)
OVERLAP_CASES = {
    "output_is_input": (lambda src, tmp: [src, src, "--force"], ["is the input"]),
    "output_is_parent_of_input": (lambda src, tmp: [src, src.parent, "--force"], ["contains the input"]),
    "output_inside_input": (lambda src, tmp: [src, src / "converted"], ["lies inside the input"]),
    "output_is_a_file": (lambda src, tmp: [src, src / "notes.txt", "--force"], ["notes.txt"]),
    "output_exists_without_force": (lambda src, tmp: [src, src.parent / "prev"], ["already exists", "--force"]),
    "output_under_a_file": (lambda src, tmp: [src, src / "notes.txt" / "out"], ["notes.txt"]),
}


@pytest.mark.parametrize("argv, named", OVERLAP_CASES.values(), ids=OVERLAP_CASES.keys())
def test_output_overlapping_input_refused(convert, capsys, moonshot_checkpoint, tmp_path, monkeypatch, argv, named):
    src = shutil.copytree(moonshot_checkpoint, tmp_path / "models" / "kimi")
    (tmp_path / "models" / "sibling.txt").write_text(SENTINEL)
    (tmp_path / "models" / "prev").mkdir()
    monkeypatch.chdir(tmp_path / "models")
    run_refused(convert, capsys, argv(src, tmp_path), named, untouched=[tmp_path / "models"])


FLAG_CASES = {
    "max_shard_size_banana": (["--max-shard-size", "banana"], ["--max-shard-size", "banana"]),
    "max_shard_size_zero": (["--max-shard-size", "0GB"], ["--max-shard-size"]),
    "max_shard_size_negative": (["--max-shard-size=-1GB"], ["--max-shard-size"]),
    "block_size_without_upcycle": (["--block-size", "2"], ["--block-size", "--upcycle"]),
    "block_size_with_full": (["--upcycle", "full", "--block-size", "2"], ["--block-size"]),
    "block_size_zero": (["--upcycle", "block", "--block-size", "0"], ["--block-size"]),
}


@pytest.mark.parametrize("flags, named", FLAG_CASES.values(), ids=FLAG_CASES.keys())
def test_bad_flags_refused(convert, capsys, moonshot_checkpoint, tmp_path, flags, named):
    out = tmp_path / "out"
    run_refused(convert, capsys, [moonshot_checkpoint, out, *flags], named, untouched=[moonshot_checkpoint],
                absent=[out])


INPUT_CASES = {**MODEL_FOLDER_DAMAGE, **INDEX_DAMAGE, **CONFIG_DTYPE_DAMAGE, **NONFINITE_DAMAGE}


@pytest.mark.parametrize("damage, named", INPUT_CASES.values(), ids=INPUT_CASES.keys())
def test_damaged_input_refused(convert, capsys, moonshot_checkpoint, tmp_path, damage, named):
    src = damaged_copy(moonshot_checkpoint, tmp_path, damage)
    out = tmp_path / "out"
    run_refused(convert, capsys, [src, out], named, untouched=[src], absent=[out])


def test_output_is_the_current_folder(convert, capsys, moonshot_checkpoint, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.txt").write_text(SENTINEL)
    run_refused(convert, capsys, [moonshot_checkpoint, ".", "--force"], ["current folder"], untouched=[tmp_path])


def test_missing_input_folder(convert, capsys, tmp_path):
    run_refused(convert, capsys, [tmp_path / "nowhere", tmp_path / "out"], ["nowhere"], absent=[tmp_path / "out"])


def test_stale_partial_of_a_killed_run_is_cleaned(convert, capsys, moonshot_checkpoint, tmp_path):
    dead = dead_pid()
    stale = tmp_path / f".out.partial-{dead}"
    stale.mkdir()
    (stale / "model.safetensors").write_text("half")
    assert convert([str(moonshot_checkpoint), str(tmp_path / "out"), "--no-progress"]) == 0
    assert not stale.exists() and (tmp_path / "out" / "config.json").is_file()


def test_replaced_output_of_a_killed_run_is_restored(tmp_path):
    """Killed between 'old output steps aside' and 'new output renamed': the old output comes back."""
    old = tmp_path / f".out.replaced-{dead_pid()}"
    old.mkdir()
    (old / "config.json").write_text("{}")
    recover_interrupted(tmp_path / "out")
    assert (tmp_path / "out" / "config.json").read_text() == "{}" and not old.exists()
