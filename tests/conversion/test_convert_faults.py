"""Faults while `attnres convert` (and push-to-hub's build) writes: a full disk (a small tmpfs where this runs as root,
and always a fault-injecting shard writer) and SIGINT / SIGTERM. Each is one line naming what happened, nothing
half-written, the input unchanged, an output being replaced left as it was, and no hidden `.partial-PID` behind."""
from __future__ import annotations

import errno
import os
import signal
import subprocess
from pathlib import Path

import pytest
from safetensors import SafetensorError
from safetensors.torch import save_file

from hf_attnres.cli import convert as convert_cli
from hf_attnres.cli import push_to_hub as push_cli
from hf_attnres.conversion.kimi_linear import writer
from hf_attnres.folders.atomic_io import PAUSE_ENV
from hf_attnres.utils.safe_paths import literal_path
from tests.helpers.bad_input_fixtures import (
    expect_script_refused,
    snapshot,
)
from tests.helpers.processes import aside_pause_line, attnres_command, leftovers, pause_line, signal_when_paused

SHARDS = "60KB"  # the tiny checkpoint (0.6 MiB) in about ten output shards: a failure can come midway


def no_space(path) -> Exception:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))


def safetensors_no_space(path) -> Exception:
    """What safetensors' Rust writer raises on a full disk (seen on a full tmpfs): its own type, the code as text."""
    return SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")


@pytest.mark.parametrize("error", [no_space, safetensors_no_space], ids=["OSError", "SafetensorError"])
def test_disk_full_midway_is_one_message_and_leaves_nothing(moonshot_checkpoint, tmp_path, capsys, monkeypatch,
                                                            error):
    saved = []

    def fill_the_disk(tensors, path, metadata=None):  # two shards fit, the third is cut off as a full disk does
        saved.append(path)
        if len(saved) < 3:
            return save_file(tensors, path, metadata=metadata)
        Path(path).write_bytes(b"\0" * 1000)
        raise error(path)

    monkeypatch.setattr(writer, "save_file", fill_the_disk)
    out = tmp_path / "out"
    argv = [moonshot_checkpoint, out, "--no-progress", "--max-shard-size", SHARDS]
    err = expect_script_refused(convert_cli.main, capsys, argv, ["ENOSPC", "No space left on device", str(out)],
                                untouched=[moonshot_checkpoint], absent=[out])
    assert len(saved) == 3 and err.count("error:") == 1 and not leftovers(tmp_path)
    monkeypatch.setattr(writer, "save_file", save_file)  # space freed: the next run writes it, nothing stray
    assert convert_cli.main([*map(str, argv)]) == 0
    assert (out / "config.json").is_file() and not leftovers(tmp_path)


def test_push_to_hub_disk_full_is_one_message(saved_model, tmp_path, capsys, monkeypatch):
    from huggingface_hub import ModelCard

    def full(self, path):
        Path(path).write_text("half a card")
        raise no_space(path)

    monkeypatch.setattr(ModelCard, "save", full)
    out = tmp_path / "hub"
    expect_script_refused(push_cli.main, capsys, ["--model", saved_model, "--output", out, "--dry-run"],
                          ["ENOSPC", str(out)], untouched=[saved_model], absent=[out])
    assert not leftovers(tmp_path)


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 300 KB tmpfs (the tiny conversion needs about 0.7 MB); `grow()` makes room. Needs root (mount)."""
    mount = tmp_path / "small"
    mount.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=300k", "tmpfs", str(mount)], capture_output=True,
                            text=True)
    if result.returncode != 0:  # the fault-injection tests above cover the same path
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def grow(mount: Path) -> None:
    subprocess.run(["mount", "-o", "remount,size=3m", str(mount)], check=True)


@pytest.mark.parametrize("command", ["convert", "push-to-hub"])
def test_disk_full_on_a_small_tmpfs(moonshot_checkpoint, saved_model, small_tmpfs, capsys, command):
    out = small_tmpfs / "out"
    main, source, argv = {
        "convert": (convert_cli.main, moonshot_checkpoint, [moonshot_checkpoint, out, "--no-progress",
                                                            "--max-shard-size", SHARDS]),
        "push-to-hub": (push_cli.main, saved_model, ["--model", saved_model, "--output", out, "--dry-run"]),
    }[command]
    expect_script_refused(main, capsys, argv, ["ENOSPC", str(out)], untouched=[source], absent=[out])
    assert os.listdir(small_tmpfs) == []  # nothing half-written, no hidden build folder
    grow(small_tmpfs)
    assert main([*map(str, argv)]) == 0
    assert os.listdir(small_tmpfs) == ["out"]


# --- SIGINT / SIGTERM: `python -m hf_attnres convert` stopped at each step -------------------------------------------

SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM}


def convert_command(source, out, *flags) -> list[str]:
    return [*attnres_command("convert"), str(source), str(out), "--no-progress", *flags]


def expect_interrupted(process, err: str, sig) -> None:
    assert process.returncode == 128 + sig, err  # 130 for SIGINT, 143 for SIGTERM, as a shell reports them
    assert err.strip().splitlines()[-1] == "interrupted: nothing written" and "Traceback" not in err, err


@pytest.mark.parametrize("sig", SIGNALS.values(), ids=SIGNALS)
@pytest.mark.parametrize("step", ["building", "before_rename"])
def test_signal_during_conversion_writes_nothing(moonshot_checkpoint, tmp_path, sig, step):
    before = snapshot(moonshot_checkpoint)
    out = tmp_path / "out"
    # building: the first pause, a file inside the hidden build folder; before_rename: the build is complete
    marker = pause_line(literal_path(out)) if step == "before_rename" else PAUSE_ENV
    process, err = signal_when_paused(convert_command(moonshot_checkpoint, out), sig, marker)
    expect_interrupted(process, err, sig)
    assert not os.path.lexists(out) and not leftovers(tmp_path) and snapshot(moonshot_checkpoint) == before


@pytest.mark.parametrize("sig", SIGNALS.values(), ids=SIGNALS)
@pytest.mark.parametrize("step", ["before_old_steps_aside", "old_aside"])
def test_signal_while_replacing_keeps_the_old_output(moonshot_checkpoint, tmp_path, sig, step):
    """--force over an existing output: stopped before the old one steps aside, or between the two renames (the old
    one is `.out.replaced-PID`): the old output is back at its name, complete, and nothing else is left."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "config.json").write_text('{"old": true}')
    before = snapshot(out)
    marker = pause_line(literal_path(out)) if step == "before_old_steps_aside" else aside_pause_line(literal_path(out))
    process, err = signal_when_paused(convert_command(moonshot_checkpoint, out, "--force"), sig, marker)
    expect_interrupted(process, err, sig)
    assert snapshot(out) == before and not leftovers(tmp_path)
