"""One writer per output (`hf_attnres.folders.atomic_io.claim_output`, `move_into_place(replace=...)`): a second writer
of
the same output, in another process, stops with one error naming the output and writes nothing; an output that appeared
while a command was writing it is never silently replaced without --force. Every command that writes an output
folder goes through it."""
from __future__ import annotations

import signal

import pytest

from hf_attnres.folders.atomic_io import (
    OutputConflictError,
    lock_path,
    move_into_place,
    pause_before_rename,
    temporary_folder,
)
from tests.helpers.bad_input_fixtures import SENTINEL, snapshot
from tests.helpers.processes import (
    attnres_command,
    leftovers,
    output_held,
    pause_line,
    start_paused_writer,
    wait_for_pause,
)
from tests.helpers.train_fixtures import write_documents


def test_an_output_that_appeared_meanwhile_is_kept(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(OutputConflictError, match="appeared"):
        with temporary_folder(out) as folder:
            (folder / "mine.txt").write_text("new")
            out.mkdir()  # another writer finished first
            (out / "theirs.txt").write_text(SENTINEL)
            move_into_place(folder, out, replace=False)
    assert sorted(p.name for p in out.iterdir()) == ["theirs.txt"]
    assert not leftovers(tmp_path) and not lock_path(out).exists()


def test_a_held_output_is_refused_then_free_again(tmp_path):
    out = tmp_path / "out"
    with output_held(out):
        with pytest.raises(OutputConflictError, match="another process"):
            with temporary_folder(out):
                pass
        assert not out.exists() and not leftovers(tmp_path)
    with temporary_folder(out) as folder:  # the holder is gone: its lock with it
        move_into_place(folder, out, replace=False)
    assert out.is_dir() and not lock_path(out).exists()


def _writers(tmp_path, moonshot_checkpoint, saved_model, out):
    """Every command that writes an output folder: (main, argv) writing `out`."""
    from hf_attnres.cli import convert, export, prepare_data, prepare_eval_data, push_to_hub

    docs = write_documents(tmp_path / "docs", count=4)
    return {
        "convert": (convert.main, [moonshot_checkpoint, out, "--no-progress"]),
        "export": (export.main, [moonshot_checkpoint, out, "--to", "kimi-linear", "--no-progress"]),
        "push-to-hub": (push_to_hub.main, ["--model", saved_model, "--output", out, "--dry-run"]),
        "prepare-data": (prepare_data.main, ["--files", *docs, "--tokenizer", "bpe", "--vocab-size", "260",
                                             "--seq-len", "8", "--validation-fraction", "0.5", "--output-dir", out]),
        "prepare-eval-data": (prepare_eval_data.main, ["--output-dir", out, "--benchmarks", "gpqa"]),
    }


def _error_of(main, argv, capsys) -> str:
    """The one error a command (in-process main) reports: its SystemExit message or its stderr with exit code != 0."""
    try:
        code = main([str(a) for a in argv])
    except SystemExit as stop:
        return str(stop.code)
    assert isinstance(code, int) and code != 0, f"the command did not fail: {code!r}"
    return capsys.readouterr().err


@pytest.mark.parametrize("command", ["convert", "export", "push-to-hub", "prepare-data", "prepare-eval-data"])
def test_every_writer_refuses_an_output_another_process_writes(command, tmp_path, moonshot_checkpoint, saved_model,
                                                                capsys):
    out = tmp_path / "out"
    main, argv = _writers(tmp_path, moonshot_checkpoint, saved_model, out)[command]
    before = snapshot(moonshot_checkpoint, saved_model)
    with output_held(out):
        error = _error_of(main, argv, capsys)
    assert str(out) in error and "another process" in error and "Traceback" not in error, error
    assert not out.exists() and not leftovers(tmp_path)
    assert snapshot(moonshot_checkpoint, saved_model) == before


@pytest.mark.slow  # fresh Python processes: over 10 s (docs/TESTING.md)
def test_two_converts_racing_into_one_new_output(moonshot_checkpoint, tmp_path, capsys):
    """A first convert, paused just before its rename, holds the output: a second one started meanwhile is refused
    by name (it used to finish too, and one output silently replaced the other)."""
    from hf_attnres.cli.convert import main as convert

    out = tmp_path / "out"
    first = start_paused_writer([*attnres_command("convert"), str(moonshot_checkpoint), str(out), "--no-progress"],
                                pause_line(out))
    try:
        wait_for_pause(first, pause_line(out))
        assert convert([str(moonshot_checkpoint), str(out), "--no-progress"]) == 1
        error = capsys.readouterr().err
        assert str(out) in error and "another process" in error, error
    finally:
        first.send_signal(signal.SIGTERM)  # it stops cleanly: its half-built output goes
        first.wait(timeout=60)
        first.stderr.close()
    assert not out.exists() and not leftovers(tmp_path)


def test_convert_never_replaces_an_output_that_appeared_meanwhile(moonshot_checkpoint, tmp_path, capsys,
                                                                  monkeypatch):
    """Another writer finished the same output between this command's check and its rename: it stays, this one
    reports it by name (no --force)."""
    from hf_attnres.cli.convert import main as convert
    from hf_attnres.folders import atomic_io

    out = tmp_path / "out"

    def another_writer_finishes(target):
        if target == out:
            out.mkdir()
            (out / "config.json").write_text(SENTINEL)
        pause_before_rename(target)

    monkeypatch.setattr(atomic_io, "pause_before_rename", another_writer_finishes)
    assert convert([str(moonshot_checkpoint), str(out), "--no-progress"]) == 1
    error = capsys.readouterr().err
    assert str(out) in error and "appeared" in error and "--force" in error, error
    assert (out / "config.json").read_text() == SENTINEL and not leftovers(tmp_path)
