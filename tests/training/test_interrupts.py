"""Interrupting the train command: SIGKILL at every pause of the final/ swap leaves one complete model at final/ or
beside it (the next run, or `recover_interrupted`, settles it; nothing stray stays); SIGINT and SIGTERM stop a run
cleanly (one line, exit 130 / 143, the checkpoint being written removed, the last complete one intact) and the rerun
continues it bit for bit."""
from __future__ import annotations

import shutil
import signal

import pytest

from hf_attnres.folders.atomic_io import recover_interrupted
from hf_attnres.folders.checkpoint_files import check_safetensors
from hf_attnres.training.checkpoints import latest_checkpoint, read_state
from hf_attnres.training.logs import INFO_FILE, read_jsonl
from tests.helpers.processes import pause_line, signal_when_paused
from tests.helpers.train_fixtures import train_args

pytestmark = pytest.mark.slow

RUN = dict(max_steps=4, save_every=2, eval_every=2, diagnostics_every=0, keep_checkpoints=2)
OLD = "written-by-the-first-run"  # a file only the old final/ holds: tells the old model from the new one


@pytest.fixture(scope="module")
def finished(data, train, tmp_path_factory):
    out = tmp_path_factory.mktemp("finished")
    train(train_args(data, out, **RUN))
    (out / "final" / OLD).write_text("old")
    return out


def train_command(data, out) -> list[str]:
    import sys

    return [sys.executable, "-m", "hf_attnres.cli.train", *train_args(data, out, **RUN)]


def complete_model(folder) -> bool:
    names = {p.name for p in folder.iterdir()} if folder.is_dir() else set()
    if not {"config.json", "model.safetensors", "tokenizer.json", INFO_FILE} <= names:
        return False
    check_safetensors(folder / "model.safetensors")
    return True


def stray(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".") and p.name != ".lock")


# Where the rerun of a finished run pauses before a rename, in order: the metrics log rewritten for the resume, the
# model saved into the build folder (its files, then the folder itself), the provenance, then final/'s swap: before
# the old final/ steps aside, and between the two renames
KILL_POINTS = {
    "metrics_log": "metrics.jsonl written",
    "model_build": "attnres_weights.json written",
    "build_folder": ".tmp-final written",
    "provenance": f"{INFO_FILE} written",
    "before_step_aside": "/final written",
    "old_stepped_aside": ".final.replaced-",
}


@pytest.mark.parametrize("marker", KILL_POINTS.values(), ids=KILL_POINTS.keys())
def test_kill_during_final_swap(data, train, finished, tmp_path, marker):
    out = shutil.copytree(finished, tmp_path / "run")
    process, said = signal_when_paused(train_command(data, out), signal.SIGKILL, marker)
    assert process.returncode == -signal.SIGKILL, said[-2000:]
    replaced = [p for p in out.iterdir() if p.name.startswith(".final.replaced-")]
    assert complete_model(out / "final") or (len(replaced) == 1 and complete_model(replaced[0]))
    recovered = tmp_path / "recovered"
    shutil.copytree(out, recovered, symlinks=True)
    recover_interrupted(recovered / "final")  # what any later writer of final/ does first
    assert complete_model(recovered / "final")
    train(train_args(data, out, **RUN))  # the rerun settles everything
    assert complete_model(out / "final") and not (out / "final" / OLD).exists()
    assert stray(out) == [] and stray(out / "checkpoints") == []


def comparable(run_dir):
    return [{k: v for k, v in r.items() if k != "train/tokens_per_s"} for r in read_jsonl(run_dir / "metrics.jsonl")]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_while_writing_a_checkpoint(data, train, finished, tmp_path, sig):
    """The signal arrives while checkpoint 4 is about to be renamed into place: one line naming checkpoint 2, exit
    128 + signal, no half-written checkpoint; rerunning continues from step 2 and logs what the uninterrupted run
    logged."""
    out = tmp_path / "run"
    target = out / "checkpoints" / "step-00000004"
    process, said = signal_when_paused(train_command(data, out), sig, pause_line(target))
    assert process.returncode == 128 + sig and "Traceback" not in said, said[-2000:]
    expected = (f"interrupted ({sig.name}): the last complete checkpoint is {out / 'checkpoints' / 'step-00000002'} "
                "(step 2): rerun the same command to continue from it")
    assert [line for line in said.splitlines() if line.startswith("interrupted")] == [expected], said[-2000:]
    assert latest_checkpoint(out / "checkpoints").name == "step-00000002" and not target.exists()
    assert read_state(out / "checkpoints" / "step-00000002")["step"] == 2
    assert stray(out) == [] and stray(out / "checkpoints") == []
    summary = train(train_args(data, out, **RUN))
    assert summary["start_step"] == 2 and comparable(out) == comparable(finished)
