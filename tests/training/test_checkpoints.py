"""The checkpoint rules every resuming trainer shares (hf_attnres/training/checkpoints.py): a half-written checkpoint is
never chosen, the latest complete one wins, a checkpoint of another run is refused naming what differs, pruning keeps
the run's own newest and never a newer one, NaN weights never take a checkpoint's name, and a folder written in the
layout of earlier versions resumes."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from hf_attnres.folders.checkpoint_files import CheckpointFileError
from hf_attnres.training.checkpoints import (
    STATE_FILE,
    check_signature,
    checkpoint_dir,
    choose_checkpoint,
    resume_training,
    save_checkpoint,
)

SIGNATURE = {"layers": 4, "recipe": {"lr": 1e-3, "max_steps": 8}}


class FakeTrainer:
    """A single-process `TrainingState`: writes `share.pt` (its step counter), loads it back."""

    is_main = True

    def __init__(self, value: float = 0.0):
        self.value = value

    def barrier(self) -> None:
        pass

    def save(self, folder: Path) -> None:
        torch.save({"value": torch.tensor(self.value)}, folder / "share.pt")

    def load(self, folder: Path) -> None:
        self.value = float(torch.load(folder / "share.pt", weights_only=True)["value"])


def save(root: Path, step: int, keep: int = 5, trainer=None, signature=SIGNATURE) -> Path:
    return save_checkpoint(root, step, {"signature": signature}, trainer or FakeTrainer(step), keep)


def matches(folder, state):
    check_signature(folder, state, SIGNATURE)


def test_the_latest_complete_checkpoint_wins_and_restores_the_trainer(tmp_path):
    root = tmp_path / "checkpoints"
    for step in (2, 4, 6):
        save(root, step)
    folder, state = choose_checkpoint("auto", tmp_path, matches)
    assert folder == checkpoint_dir(root, 6) and state["step"] == 6 and state["signature"] == SIGNATURE
    trainer = FakeTrainer()
    assert resume_training(trainer, folder, state) == 6 and trainer.value == 6.0


def test_a_half_written_checkpoint_is_never_chosen(tmp_path):
    """A run killed while writing step 6 leaves `.tmp-step-00000006/` (all its files but trainer_state.json), or a
    `step-N` folder without the state file: neither is chosen, step 4 is."""
    root = tmp_path / "checkpoints"
    save(root, 4)
    complete = save(root, 6)
    shutil.copytree(complete, root / ".tmp-step-00000008")
    (root / ".tmp-step-00000008" / STATE_FILE).unlink()
    shutil.copytree(complete, checkpoint_dir(root, 10))
    (checkpoint_dir(root, 10) / STATE_FILE).unlink()
    shutil.rmtree(complete)
    folder, state = choose_checkpoint("auto", tmp_path, matches)
    assert folder == checkpoint_dir(root, 4) and state["step"] == 4


def test_a_checkpoint_of_another_run_is_named_with_both_values(tmp_path):
    save(tmp_path / "checkpoints", 2, signature={"layers": 4, "recipe": {"lr": 3e-3, "max_steps": 8}})
    with pytest.raises(ValueError, match=r"step-00000002: checkpoint was made with other settings "
                                         r"\{'recipe.lr': \(0.003, 0.001\)\}") as info:
        choose_checkpoint("auto", tmp_path, matches)
    assert "layers" not in str(info.value)  # only what differs
    save(tmp_path / "checkpoints", 4)
    with pytest.raises(ValueError, match="step-00000002: checkpoint was made with other settings"):
        choose_checkpoint(str(checkpoint_dir(tmp_path / "checkpoints", 2)), tmp_path, matches)  # older, too: the
        # settings that differ are named first (they answer a changed command)


def test_fresh_start_and_refusals_of_a_newer_state(tmp_path):
    assert choose_checkpoint("auto", tmp_path, matches) == (None, None)  # nothing there: a fresh start
    root = tmp_path / "checkpoints"
    older, _ = save(root, 2), save(root, 4)
    with pytest.raises(ValueError, match="holds another run \\(checkpoints up to step-00000004\\)"):
        choose_checkpoint("never", tmp_path, matches)
    with pytest.raises(ValueError, match="holds the newer checkpoint step-00000004"):
        choose_checkpoint(str(older), tmp_path, matches)
    elsewhere = save(tmp_path / "other" / "checkpoints", 4)
    with pytest.raises(ValueError, match="a checkpoint of another folder"):
        choose_checkpoint(str(elsewhere), tmp_path, matches)


def test_a_damaged_state_file_is_named(tmp_path):
    folder = save(tmp_path / "checkpoints", 2)
    (folder / STATE_FILE).write_text("[1, 2]")
    with pytest.raises(CheckpointFileError, match=f"{STATE_FILE}: expected a JSON object"):
        choose_checkpoint("auto", tmp_path, matches)
    (folder / STATE_FILE).write_text("{")
    with pytest.raises(CheckpointFileError, match=f"{STATE_FILE}: invalid JSON"):
        choose_checkpoint("auto", tmp_path, matches)


def test_pruning_keeps_the_newest_of_its_own_line_never_a_newer_checkpoint(tmp_path):
    """A save keeps the newest of its own line of checkpoints; one at a later step (another run's) is not its own."""
    root = tmp_path / "checkpoints"
    newer = save(root, 10, keep=1)
    save(root, 1, keep=1)
    mine = save(root, 2, keep=1)
    assert newer.is_dir() and mine.is_dir() and not checkpoint_dir(root, 1).exists()
    assert sorted(p.name for p in root.iterdir()) == ["step-00000002", "step-00000010"]


def test_nan_weights_are_never_saved_over_a_finite_checkpoint(tmp_path):
    """A checkpoint whose written weights are not finite never takes its name; the finite one before it stays."""
    from safetensors.torch import save_file

    from hf_attnres.training.guard import NonFiniteError

    class Weights(FakeTrainer):
        def save(self, folder):
            save_file({"w": torch.full((2,), self.value)}, str(folder / "model.safetensors"))

    root = tmp_path / "checkpoints"
    good = save(root, 1, keep=2, trainer=Weights(1.0))
    with pytest.raises(NonFiniteError, match="tensor w .*step-00000002 was not written"):
        save(root, 2, keep=2, trainer=Weights(float("nan")))
    assert [p.name for p in root.iterdir()] == [good.name]


def test_a_failed_share_leaves_no_build_folder(tmp_path):
    class Failing(FakeTrainer):
        def save(self, folder):
            (folder / "part").write_text("half")
            raise RuntimeError("gather failed")

    root = tmp_path / "checkpoints"
    save(root, 1)
    with pytest.raises(RuntimeError, match="gather failed"):
        save(root, 2, trainer=Failing())
    assert sorted(p.name for p in root.iterdir()) == ["step-00000001"]


def test_a_checkpoint_in_the_existing_layout_resumes(tmp_path):
    """The layout checkpoints have on disk (`checkpoints/step-0000000N/trainer_state.json` beside the trainer's
    files), written by hand as an earlier version wrote it, is chosen and restores the trainer."""
    folder = tmp_path / "checkpoints" / "step-00000003"
    folder.mkdir(parents=True)
    torch.save({"value": torch.tensor(3.0)}, folder / "share.pt")
    (folder / STATE_FILE).write_text(json.dumps({"signature": SIGNATURE, "step": 3}, indent=2))
    chosen, state = choose_checkpoint("auto", tmp_path, matches)
    trainer = FakeTrainer()
    assert chosen == folder and resume_training(trainer, chosen, state) == 3 and trainer.value == 3.0


@pytest.mark.parametrize("edit, named", [(dict(signature="x"), "checkpoint was made with other settings"),
                                         (dict(step=3), "step 3 is not an integer in \\[0, 8\\]"),
                                         (dict(step=9), "step 9 is not an integer in \\[0, 8\\]")],
                         ids=["signature_not_an_object", "step_not_the_folders", "step_past_the_end"])
def test_signature_rule_refuses_an_edited_state_by_name(tmp_path, edit, named):
    from hf_attnres.training.checkpoints import signature_rule

    folder = save(tmp_path / "checkpoints", 2)
    state = json.loads((folder / STATE_FILE).read_text())
    (folder / STATE_FILE).write_text(json.dumps(dict(state, **edit)))
    rule = signature_rule(SIGNATURE, SIGNATURE["recipe"]["max_steps"])
    with pytest.raises(ValueError, match=named):
        choose_checkpoint("auto", tmp_path, rule)
    assert choose_checkpoint("never", tmp_path / "fresh", rule) == (None, None)
