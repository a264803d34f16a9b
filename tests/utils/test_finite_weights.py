"""The tools' numeric guard (`hf_attnres.utils.finite_weights`):
a NaN or infinite weight is named, tensor and file, by every
tool that reads weights (convert and export here; compare, push-to-hub, train --init-from and resume in their
bad-input suites); integer tensors and finite weights pass."""
from __future__ import annotations

import shutil

import pytest
import torch

from hf_attnres.utils.finite_weights import NonFiniteWeightsError, check_file, check_tensor
from tests.helpers.bad_input_fixtures import expect_script_refused, nan_weight


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_nonfinite_values_named_with_counts(dtype):
    tensor = torch.ones(6, dtype=dtype)
    tensor[1], tensor[4] = float("nan"), float("-inf")
    with pytest.raises(NonFiniteWeightsError, match=r"shard\.safetensors: tensor model\.w .*1 NaN, 1 inf of 6"):
        check_tensor("model.w", tensor, "shard.safetensors")


def test_finite_and_integer_tensors_pass(tmp_path):
    from safetensors.torch import save_file

    save_file({"w": torch.randn(3, 3), "ids": torch.arange(4), "mask": torch.ones(2, dtype=torch.bool)},
              str(tmp_path / "model.safetensors"))
    check_file(tmp_path / "model.safetensors")  # raises on failure


def test_convert_names_the_nan_tensor(moonshot_checkpoint, tmp_path, capsys):
    from hf_attnres.cli.convert import main as convert

    source = shutil.copytree(moonshot_checkpoint, tmp_path / "kimi")
    name = nan_weight(source)
    expect_script_refused(convert, capsys, [source, tmp_path / "out", "--no-progress"], [name, ".safetensors", "NaN"],
                          untouched=[source], absent=[tmp_path / "out"])


def test_export_names_the_nan_tensor(moonshot_checkpoint, tmp_path, capsys):
    from hf_attnres.cli.export import main as export

    source = shutil.copytree(moonshot_checkpoint, tmp_path / "kimi")
    name = nan_weight(source, float("inf"))
    out = tmp_path / "out"
    assert export([str(source), str(out), "--to", "kimi-linear", "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert name in err and ".safetensors" in err and "1 inf" in err and "Traceback" not in err, err
    assert not out.exists()
