"""Every family's folder saved by a plain `save_pretrained`, as a Hub user gets it: the config, the weights, the
generation config and the generated code files (the weights record is the tools' `hf_attnres.save`); in a fresh
process where attnres and triton cannot be imported it loads with `trust_remote_code=True` and gives the package
model's logits, and greedy generation from it gives the same tokens.

The package mixes depth with its fused C++ CPU kernel, the folder with its plain-PyTorch path: two reduction orders, so
the logits agree to `tests.helpers.tolerance.assert_logits_close` (eps(dtype) x depth x max|logits|), not bit for bit;
the negative control shows that tolerance still catches one flipped bit in one weight and a dropped depth source."""
import json

import pytest
import torch

import hf_attnres  # noqa: F401  (registers the Auto classes)
from hf_attnres.utils.trust import folder_code
from tests.families.tiny import FAMILIES, attn_res_model, random_ids
from tests.helpers.model_factory import perturb_attn_res
from tests.helpers.remote_loading import code_files, fake_hub_repo, load_all_in_clean_process
from tests.helpers.tolerance import assert_caught, assert_logits_close, dropped_depth_source, flipped_bit

DATA_FILES = {"config.json", "model.safetensors", "generation_config.json"}


def folder_model(family: str):
    return perturb_attn_res(attn_res_model(family, "block", 2))  # queries off zero: the mix is not an average


def test_every_family_folder_loads_without_the_package(tmp_path):
    ids = random_ids()
    folders, expected, configs = [], [], []
    for family in sorted(FAMILIES):
        model = folder_model(family)
        folder = tmp_path / family
        model.save_pretrained(folder)
        want = code_files(family)
        assert {p.name for p in folder.iterdir()} == DATA_FILES | want["files"], family
        auto_map = json.loads((folder / "config.json").read_text())["auto_map"]
        assert auto_map == {key: want[key] for key in ("AutoConfig", "AutoModelForCausalLM")}, family
        assert folder_code(folder) == [], family  # here the registered classes replace the folder's code: no flag
        with torch.no_grad():
            expected.append((model(ids).logits, model.generate(ids, max_new_tokens=4, do_sample=False)))
        folders.append(folder)
        configs.append(model.config)
    # one Hub-style repository too: files fetched one by one, each one's imports checked by transformers
    folders.append(fake_hub_repo(folders[0], tmp_path / "hf" / "hub"))
    expected.append(expected[0])
    configs.append(configs[0])
    results = load_all_in_clean_process(folders, ids, tmp_path / "run", tmp_path / "hf", generate=4)
    for folder, result, (logits, generated), config in zip(folders, results, expected, configs):
        assert_logits_close(result["logits"], logits, config, msg=lambda m, f=folder: f"{f}: {m}")
        assert torch.equal(result["generated"], generated), folder


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_folder_tolerance_catches_a_flipped_bit_and_a_dropped_source(family):
    """The tolerance above is no blanket: the package model with one bit of one weight flipped, or with its output
    mix missing a depth source, misses its own logits by many times that tolerance."""
    model, ids = folder_model(family), random_ids()
    with torch.no_grad():
        expected = model(ids).logits
        with flipped_bit(model):
            assert_caught(model(ids).logits, expected, model.config, f"{family}: a flipped bit")
        with dropped_depth_source():
            assert_caught(model(ids).logits, expected, model.config, f"{family}: a dropped source")
        assert torch.equal(model(ids).logits, expected)  # both changes undone: the same kernel, bit for bit
