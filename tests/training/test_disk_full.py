"""Disk full while training writes a checkpoint or final/, and while prepare-data writes its folder: one message
naming ENOSPC and the output, nothing half-written (no `.tmp-step`, no build folder), the previous checkpoint
intact, and nothing left over once the next run succeeds. On a real full filesystem (a small tmpfs; mounting one
needs root) and with a writer made to fail (any machine)."""
from __future__ import annotations

import errno
import shutil
import subprocess

import pytest

from hf_attnres.training import engines
from hf_attnres.training.args import SetupError
from hf_attnres.training.checkpoints import latest_checkpoint, read_state
from tests.helpers.bad_input_fixtures import snapshot
from tests.helpers.train_fixtures import train_args, write_documents

RUN = dict(max_steps=4, save_every=2, eval_every=0, diagnostics_every=0, keep_checkpoints=1)


@pytest.fixture
def small_disk(tmp_path):
    """A 8 MiB tmpfs: room for one tiny run (a 2.5 MB checkpoint, a 1 MB final model), not for much more."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)], capture_output=True).returncode:
        pytest.skip("mounting a tmpfs needs root; the fault-injection tests cover the same paths")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def fill(disk, keep_bytes: int):
    """Leave only `keep_bytes` free on `disk`; returns the filler file (delete it to free the space)."""
    filler = disk / "filler"
    filler.write_bytes(b"\0" * max(0, shutil.disk_usage(disk).free - keep_bytes))
    return filler


def hidden_leftovers(folder) -> list[str]:
    """Build folders and swap leftovers anywhere under `folder` (`.tmp-*`, `.NAME.partial-PID`, `.replaced-PID`)."""
    return sorted(str(p) for p in folder.rglob(".*") if p.name != ".lock")


def test_checkpoint_on_a_full_disk(data, train, small_disk):
    run = small_disk / "run"
    filler = fill(small_disk, 1 * 2**20)  # the run starts; its first checkpoint does not fit
    with pytest.raises(SetupError, match=r"writing .*checkpoints/step-00000002 failed.*\(ENOSPC\)") as error:
        train(train_args(data, run, **RUN))
    assert "Traceback" not in str(error.value) and not hidden_leftovers(run)
    assert latest_checkpoint(run / "checkpoints") is None
    filler.unlink()
    summary = train(train_args(data, run, **RUN))
    assert summary["step"] == 4 and (run / "final" / "model.safetensors").is_file() and not hidden_leftovers(run)


def test_second_checkpoint_on_a_full_disk_keeps_the_first(data, train, small_disk, monkeypatch):
    run = small_disk / "run"
    save = engines.AccelerateEngine.save

    def fill_after_first(self, folder):  # the disk fills up while the run trains past its first checkpoint
        if "00000004" in str(folder):
            fill(small_disk, 256 * 2**10)
        save(self, folder)

    monkeypatch.setattr(engines.AccelerateEngine, "save", fill_after_first)
    with pytest.raises(SetupError, match=r"step-00000004 failed.*No space left on device \(ENOSPC\)"):
        train(train_args(data, run, **RUN))
    first = latest_checkpoint(run / "checkpoints")
    assert first.name == "step-00000002" and read_state(first)["step"] == 2 and not hidden_leftovers(run)
    monkeypatch.undo()
    (small_disk / "filler").unlink()
    summary = train(train_args(data, run, **RUN))
    assert summary["start_step"] == 2 and summary["step"] == 4 and not hidden_leftovers(run)


def test_final_model_on_a_full_disk(data, train, tmp_path, monkeypatch):
    """Fault injection: saving final/ fails with ENOSPC; no build folder stays, an older final/ is kept."""
    run = tmp_path / "run"
    train(train_args(data, run, **RUN))
    before = snapshot(run / "final")

    def disk_full(self, folder):
        (folder / "model.safetensors").parent.mkdir(parents=True, exist_ok=True)
        (folder / "model.safetensors").write_bytes(b"half")
        raise OSError(errno.ENOSPC, "No space left on device", str(folder / "model.safetensors"))

    monkeypatch.setattr(engines.AccelerateEngine, "save_model", disk_full)
    with pytest.raises(SetupError, match=r"writing .*final failed.*\(ENOSPC\)"):
        train(train_args(data, run, **RUN))  # resumes at step 4, then saves final/ again
    assert snapshot(run / "final") == before and not hidden_leftovers(run)


def test_checkpoint_write_error_injected(data, train, tmp_path, monkeypatch):
    """Fault injection: the checkpoint writer raises ENOSPC after writing part of the files."""
    run = tmp_path / "run"

    def disk_full(self, folder):
        (folder / "model.safetensors").write_bytes(b"half")
        raise OSError(errno.ENOSPC, "No space left on device", str(folder / "optimizer.bin"))

    monkeypatch.setattr(engines.AccelerateEngine, "save", disk_full)
    named = r"step-00000002 failed at .*optimizer.bin: No space left on device \(ENOSPC\)"
    with pytest.raises(SetupError, match=named):
        train(train_args(data, run, **RUN))
    assert not hidden_leftovers(run) and latest_checkpoint(run / "checkpoints") is None


PREPARE = ["--tokenizer", "bpe", "--vocab-size", "300", "--seq-len", "32", "--validation-fraction", "0.2"]


def test_prepare_data_on_a_full_disk(prepare, tmp_path):
    mount = tmp_path / "disk"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount)], capture_output=True).returncode:
        pytest.skip("mounting a tmpfs needs root; test_prepare_data_write_error_injected covers the same path")
    try:
        files = write_documents(tmp_path / "text")
        out = mount / "data"
        filler = fill(mount, 16 * 2**10)
        with pytest.raises(SystemExit, match=rf"error: writing {out} failed.*\(ENOSPC\).*nothing was written"):
            prepare(["--files", *map(str, files), *PREPARE, "--output-dir", str(out)])
        assert sorted(p.name for p in mount.iterdir()) == ["filler"]  # no half-written folder
        filler.unlink()
        prepare(["--files", *map(str, files), *PREPARE, "--output-dir", str(out)])
        assert sorted(p.name for p in mount.iterdir()) == ["data"] and (out / "meta.json").is_file()
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def test_prepare_data_write_error_injected(prepare, tmp_path, monkeypatch):
    from datasets import DatasetDict

    def disk_full(self, path, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(DatasetDict, "save_to_disk", disk_full)
    files = write_documents(tmp_path / "text")
    out = tmp_path / "data"
    with pytest.raises(SystemExit, match=rf"error: writing {out} failed: No space left on device \(ENOSPC\)"):
        prepare(["--files", *map(str, files), *PREPARE, "--output-dir", str(out)])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["text"]
