"""Greedy generation with the cache equals generation that recomputes the whole sequence at every step, for every
family, through the package and through a saved folder loaded without it, under whichever transformers of the
supported range is installed (CI runs this file under the oldest and the newest: docs/TESTING.md).

transformers 5.24 renamed the cache argument and output field (`hf_attnres.core.cache_arg`): a model that misses the
cache under one name decodes every step from an empty cache, which neither raises nor changes the prompt's logits,
only the continuation. So the comparison is the generated tokens, with mixes that are not plain averages (queries off
zero), and a negative control shows that a model losing its cache is caught.
"""
import pytest
import torch

import hf_attnres  # noqa: F401  (registers the Auto classes)
from hf_attnres.core import decoder_layer
from hf_attnres.families.kimi_linear.modeling_kimi_linear_attnres import KimiLinearAttnResForCausalLM
from hf_attnres.utils.tiny import tiny_config
from tests.families.tiny import FAMILIES, attn_res_model, random_ids
from tests.helpers.model_factory import perturb_attn_res
from tests.helpers.remote_loading import load_all_in_clean_process

NEW_TOKENS = 6


def family_model(family: str, mode: str):
    # "gated": the upcycle mode of that name, Block's layout with the gated read (hf_attnres.core.gated_read)
    mode, fields = ("block", dict(attn_res_gated_read=True)) if mode == "gated" else (mode, {})
    if family == "kimi_linear":  # KDA and MLA layers, MoE (its tiny layout: hf_attnres.utils.tiny)
        torch.manual_seed(0)
        model = KimiLinearAttnResForCausalLM(tiny_config(mode, 2, 4, vocab_size=96, family="kimi_linear",
                                                         **fields)).eval()
    else:
        model = attn_res_model(family, mode, 2, **fields)
    return perturb_attn_res(model)


def greedy(model, ids, use_cache: bool) -> torch.Tensor:
    with torch.no_grad():
        return model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False, use_cache=use_cache,
                              pad_token_id=0)


@pytest.mark.parametrize("mode", ["block", "full", "gated"])
@pytest.mark.parametrize("family", [*sorted(FAMILIES), "kimi_linear"])
def test_cached_generation_equals_recomputation(family, mode):
    model, ids = family_model(family, mode), random_ids()
    assert torch.equal(greedy(model, ids, use_cache=True), greedy(model, ids, use_cache=False))


def test_a_model_that_loses_its_cache_is_caught(monkeypatch):
    """The negative control: a layer that drops the cache it is given (what a forward taking only the other name
    does) generates other tokens than recomputation, so the test above can fail."""
    model, ids = family_model("llama", "block"), random_ids()
    recomputed = greedy(model, ids, use_cache=False)
    monkeypatch.setattr(decoder_layer, "given_cache", lambda cache, past_key_values: None)
    assert not torch.equal(greedy(model, ids, use_cache=True), recomputed)


def test_every_saved_folder_generates_with_its_cache_as_without_it(tmp_path):
    """The folder's own generated code, in a fresh process where hf_attnres and triton cannot be imported."""
    ids, folders = random_ids(), []
    for family in [*sorted(FAMILIES), "kimi_linear"]:
        folder = tmp_path / family
        family_model(family, "block").save_pretrained(folder)
        folders.append(folder)
    results = load_all_in_clean_process(folders, ids, tmp_path / "run", tmp_path / "hf", generate=NEW_TOKENS,
                                        recompute=True)
    for folder, result in zip(folders, results):
        assert result["generated"].shape[1] == ids.shape[1] + NEW_TOKENS, folder.name
        assert torch.equal(result["generated"], result["recomputed"]), folder.name
