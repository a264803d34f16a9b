"""Bad input of Kimi K3-format folders (hf_attnres/families/kimi_linear/k3/) to
scripts/convert_checkpoint.py (exit code and message) and
from_pretrained: the file-level damage every model folder gets (config, safetensors, index), and K3-only damage not in
tests/test_k3_model.py (its wrapper config, MXFP4 tensors of the wrong dtype, an unknown quantization format).
Every case: one message naming the file or field, the folder untouched, no output written."""
from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

import hf_attnres
from hf_attnres import KimiLinearAttnResForCausalLM
from hf_attnres.conversion.kimi_linear.fixtures import random_model
from hf_attnres.conversion.kimi_linear.k3_fixtures import tiny_k3_config, write_k3_checkpoint
from tests.helpers.bad_input_fixtures import (
    INDEX_DAMAGE,
    MODEL_FOLDER_DAMAGE,
    damaged_copy,
    expect_refused,
    expect_script_refused,
)

EXPERT = "language_model.model.layers.2.block_sparse_moe.experts.1.w3"


@pytest.fixture(scope="module")
def k3_folder(tmp_path_factory):
    """A tiny K3 checkpoint in several shards with an index (MXFP4 experts, vision tower): do not modify, copy it."""
    folder = write_k3_checkpoint(tmp_path_factory.mktemp("bad_k3") / "k3", random_model(tiny_k3_config()),
                                 max_shard_size="100KB")
    assert (folder / "model.safetensors.index.json").is_file()
    return folder


@pytest.fixture(scope="module")
def convert():
    from hf_attnres.cli.convert import main

    return main


def edit_config(edit):
    def damage(folder):
        config = json.loads((folder / "config.json").read_text())
        edit(config)
        (folder / "config.json").write_text(json.dumps(config))
    return damage


def edit_tensors(edit):
    """Rewrite the folder's tensors as one file after `edit(tensors)` (the index goes: a single-file checkpoint)."""
    def damage(folder):
        tensors = {}
        for path in folder.glob("*.safetensors"):
            with safe_open(path, "pt") as handle:
                tensors.update({name: handle.get_tensor(name) for name in handle.keys()})
            path.unlink()
        (folder / "model.safetensors.index.json").unlink()
        edit(tensors)
        save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    return damage


def retype(name, dtype):
    return lambda t: t.update({name: t[name].to(dtype)})


K3_DAMAGE = {
    "text_config_layers_a_word": (edit_config(lambda c: c["text_config"].update(num_hidden_layers="four")),
                                   ["num_hidden_layers"]),
    "text_config_a_string": (edit_config(lambda c: c.update(text_config="kimi")), ["text_config"]),
    "quantization_not_mxfp4": (edit_config(lambda c: c["text_config"]["quantization_config"].update(format="fp8")),
                               ["quantization_config", "fp8"]),
    "scale_wrong_dtype": (edit_tensors(retype(f"{EXPERT}.weight_scale", torch.float32)),
                          ["experts.1.w3", "weight_scale"]),
    "packed_wrong_dtype": (edit_tensors(retype(f"{EXPERT}.weight_packed", torch.int32)),
                           ["experts.1.w3", "weight_packed"]),
}
CONVERT_CASES = {**MODEL_FOLDER_DAMAGE, **INDEX_DAMAGE, **K3_DAMAGE}


@pytest.mark.parametrize("damage, named", CONVERT_CASES.values(), ids=CONVERT_CASES.keys())
def test_convert_damaged_k3_folder_refused(convert, capsys, k3_folder, tmp_path, damage, named):
    src = damaged_copy(k3_folder, tmp_path, damage)
    out = tmp_path / "out"
    expect_script_refused(convert, capsys, [src, out, "--no-progress"], named, untouched=[src], absent=[out])


LOAD_CASES = {name: CONVERT_CASES[name] for name in ("no_config", "config_invalid_json", "truncated_weights",
                                                        "index_lists_missing_shard", "text_config_a_string",
                                                        "quantization_not_mxfp4")}
# (scale_wrong_dtype is not in LOAD_CASES: transformers' loader casts every tensor to its parameter's dtype before the
# K3 conversion runs, and float scales holding the uint8 codes load to the same weights; the converter refuses them)


@pytest.mark.parametrize("damage, named", LOAD_CASES.values(), ids=LOAD_CASES.keys())
def test_load_damaged_k3_folder_refused(k3_folder, tmp_path, damage, named):
    """The tools' load (`hf_attnres.load`) names the damage before transformers reads a file."""
    folder = damaged_copy(k3_folder, tmp_path, damage)
    expect_refused(lambda: hf_attnres.load(folder, model_class=KimiLinearAttnResForCausalLM, dtype=torch.float32),
                   named, untouched=[folder], errors=(ValueError, OSError, RuntimeError))


def test_intact_k3_copy_converts(convert, capsys, k3_folder, tmp_path):
    """The cases above start from a valid folder: a plain copy converts (so each refusal comes from its damage)."""
    src = shutil.copytree(k3_folder, tmp_path / "k3")
    assert convert([str(src), str(tmp_path / "out"), "--no-progress"]) in (0, None)
    assert (tmp_path / "out" / "config.json").is_file()
