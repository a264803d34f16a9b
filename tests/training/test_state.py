"""Checkpoint folder names: `step-00000100` on disk; `--resume checkpoints/step-100` finds it (docs use both)."""
import json

import pytest

from attnres.training.state import STATE_FILE, checkpoint_dir, resolve_checkpoint


def make_checkpoint(root, step):
    folder = checkpoint_dir(root, step)
    folder.mkdir(parents=True)
    (folder / STATE_FILE).write_text(json.dumps({"step": step}))
    return folder


def test_folder_name_is_zero_padded(tmp_path):
    assert checkpoint_dir(tmp_path, 100).name == "step-00000100"


def test_resume_accepts_the_folder_and_the_short_alias(tmp_path):
    folder = make_checkpoint(tmp_path / "checkpoints", 100)
    assert resolve_checkpoint(folder) == folder
    assert resolve_checkpoint(tmp_path / "checkpoints" / "step-100") == folder
    assert resolve_checkpoint(str(tmp_path / "checkpoints" / "step-0100")) == folder


@pytest.mark.parametrize("name, message", [
    ("step-200", "no such checkpoint folder; checkpoints there: step-00000100"),
    ("other", "no such checkpoint folder"),
])
def test_missing_checkpoint_is_named_with_what_exists(tmp_path, name, message):
    make_checkpoint(tmp_path / "checkpoints", 100)
    with pytest.raises(ValueError, match=f"--resume .*{name}: {message}"):
        resolve_checkpoint(tmp_path / "checkpoints" / name)


def test_folder_without_state_is_not_a_checkpoint(tmp_path):
    (tmp_path / "step-00000005").mkdir()
    with pytest.raises(ValueError, match=f"not a checkpoint \\(no {STATE_FILE}\\)"):
        resolve_checkpoint(tmp_path / "step-00000005")
