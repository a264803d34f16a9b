"""Checkpoint folder names: `step-00000100` on disk; `--resume checkpoints/step-100` finds it (docs use both)."""
import json

import pytest

from hf_attnres.training.checkpoints import STATE_FILE, checkpoint_dir, resolve_checkpoint


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


def fsdp2_checkpoint(root):
    """The files an FSDP2 run's accelerate `save_state` writes (full state dict), with tiny contents."""
    import torch

    from hf_attnres.training.state import SCHEDULER_FILE

    folder = make_checkpoint(root, 2)
    for name in ("pytorch_model_fsdp.bin", "optimizer.bin", SCHEDULER_FILE, "random_states_0.pkl"):
        torch.save({"x": torch.zeros(1)}, folder / name)
    return folder


def test_fsdp2_checkpoint_is_complete_and_a_damaged_model_file_is_named(tmp_path):
    from hf_attnres.training.checkpoints import ResumeFileError
    from hf_attnres.training.state import check_accelerate_checkpoint

    folder = fsdp2_checkpoint(tmp_path)
    check_accelerate_checkpoint(folder)  # no model.safetensors: FSDP's model file stands for it
    (folder / "pytorch_model_fsdp.bin").write_bytes(b"truncated")
    with pytest.raises(ResumeFileError, match="pytorch_model_fsdp.bin: truncated"):
        check_accelerate_checkpoint(folder)
    (folder / "pytorch_model_fsdp.bin").unlink()
    with pytest.raises(ResumeFileError, match="no model.safetensors"):
        check_accelerate_checkpoint(folder)
