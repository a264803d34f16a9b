"""The two silenced library notices: gone where they carry no information, still there where they do (the same
calls without the filter, and an undeclared alias), and every other record passes."""
from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest
import torch

from hf_attnres.utils.quiet_logs import declared_ties, tied_save_quiet
from tests.families.tiny import source_model


def save_state(model, folder, quiet: bool):
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    prepared = accelerator.prepare(model)
    if quiet:
        with tied_save_quiet(model):
            accelerator.save_state(str(folder))
    else:
        accelerator.save_state(str(folder))
    return prepared


def test_checkpoint_of_a_tied_model_does_not_warn(tmp_path, caplog):
    model = source_model("llama", tie_word_embeddings=True)
    assert declared_ties(model) == {"lm_head.weight"}
    with caplog.at_level(logging.WARNING, logger="accelerate.utils.other"):
        save_state(model, tmp_path / "loud", quiet=False)
    assert "Removed shared tensor {'lm_head.weight'}" in caplog.text  # the control: accelerate does warn
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="accelerate.utils.other"):
        save_state(model, tmp_path / "quiet", quiet=True)
    assert "Removed shared tensor" not in caplog.text


def test_an_undeclared_alias_still_warns(tmp_path, caplog):
    model = source_model("llama", tie_word_embeddings=False)
    with torch.no_grad():
        model.lm_head.weight = model.model.embed_tokens.weight  # shared at run time, not by the config
    assert declared_ties(model) == set()
    with caplog.at_level(logging.WARNING, logger="accelerate.utils.other"):
        save_state(model, tmp_path / "alias", quiet=True)
    assert "Removed shared tensor" in caplog.text


def auto_detecting_env() -> dict:
    """This process's environment without DS_ACCELERATOR: DeepSpeed prints its CPU notice only when it detects the
    accelerator itself, and a module that the suite imported earlier (hf_attnres.pipeline.ds) sets the variable."""
    return {key: value for key, value in os.environ.items() if key != "DS_ACCELERATOR"}


@pytest.mark.slow  # fresh Python processes: over 10 s (docs/TESTING.md)
@pytest.mark.parametrize("quiet", [True, False])
def test_deepspeed_cpu_notice(quiet):
    """A fresh process imports DeepSpeed (as accelerate does on every save): the notice is printed without the filter
    (the control) and absent with it; skipped where DeepSpeed is not installed or a GPU makes it choose CUDA."""
    pytest.importorskip("deepspeed")
    if torch.cuda.is_available():
        pytest.skip("DeepSpeed finds an accelerator here: it prints no CPU notice")
    code = ("from hf_attnres.utils.quiet_logs import quiet_deepspeed_cpu_notice; quiet_deepspeed_cpu_notice(); "
            if quiet else "") + "import deepspeed"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                            env=auto_detecting_env())
    assert result.returncode == 0, result.stderr
    assert ("Setting accelerator to CPU" in result.stdout + result.stderr) is not quiet


@pytest.mark.slow  # a fresh process that saves a model: over 10 s
def test_a_command_that_saves_prints_no_deepspeed_notice(tmp_path):
    """`attnres push-to-hub` (no arguments: it saves a tiny demo model, which imports DeepSpeed through accelerate):
    neither output stream carries the notice."""
    pytest.importorskip("deepspeed")
    if torch.cuda.is_available():
        pytest.skip("DeepSpeed finds an accelerator here: it prints no CPU notice")
    result = subprocess.run([sys.executable, "-m", "hf_attnres", "push-to-hub"], capture_output=True, text=True,
                            timeout=600, cwd=tmp_path, env=auto_detecting_env())
    assert result.returncode == 0, result.stderr
    assert "dry run" in result.stdout and "Setting accelerator" not in result.stdout + result.stderr
