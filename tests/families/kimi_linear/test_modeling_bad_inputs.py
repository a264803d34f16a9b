"""Bad input to the model API: configs, forward arguments, labels, a config.json's fields (the folders' own checks:
tests/folders/test_model_folder.py). Each row of a table is one case; see tests/bad_input_fixtures.py."""
from __future__ import annotations

import pytest
import torch

from hf_attnres import KimiLinearAttnResConfig, KimiLinearAttnResForCausalLM
from tests.helpers.bad_input_fixtures import damaged_copy, expect_refused
from tests.helpers.model_factory import random_ids, tiny_model

# --- configs: (fields, words the ValueError must contain) -------------------------------------------------------------
CONFIG_CASES = {
    "block_size_float": (dict(attn_res_block_size=2.5), ["attn_res_block_size", "integer"]),
    "block_size_bool": (dict(attn_res_block_size=True), ["attn_res_block_size", "integer"]),
    "block_size_string": (dict(attn_res_block_size="2"), ["attn_res_block_size", "integer"]),
    "block_size_negative": (dict(attn_res_block_size=-1), ["attn_res_block_size"]),
    "block_mode_size_zero": (dict(attn_res_mode="block", attn_res_block_size=0), ["attn_res_block_size"]),
    "zero_layers": (dict(num_hidden_layers=0), ["num_hidden_layers", ">= 1"]),
    "negative_layers": (dict(num_hidden_layers=-3), ["num_hidden_layers"]),
    "zero_heads": (dict(num_attention_heads=0), ["num_attention_heads", ">= 1"]),
    "zero_hidden_size": (dict(hidden_size=0), ["hidden_size"]),
    "zero_vocab": (dict(vocab_size=0), ["vocab_size"]),
    "two_phase_string": (dict(attn_res_two_phase="no"), ["attn_res_two_phase", "True, False or None"]),
    "fuse_norm_string": (dict(attn_res_fuse_norm="yes"), ["attn_res_fuse_norm"]),
    "recompute_int": (dict(attn_res_recompute=1), ["attn_res_recompute"]),
    "unknown_mode": (dict(attn_res_mode="blocks"), ["attn_res_mode"]),
    "mode_not_string": (dict(attn_res_mode=3), ["attn_res_mode"]),
    "unknown_backend": (dict(attn_res_backend="cuda"), ["attn_res_backend"]),
    "layer_types_length": (dict(num_hidden_layers=3, layer_types=["full_attention"] * 4), ["layer_types"]),
    # hostile or mistyped sizes, signs, values and dtype names: refused when the config is built
    "negative_head_dim": (dict(qk_nope_head_dim=-4), ["qk_nope_head_dim", ">= 1"]),
    "zero_value_head_dim": (dict(v_head_dim=0), ["v_head_dim", ">= 1"]),
    "zero_kda_heads": (dict(linear_num_heads=0), ["linear_num_heads"]),
    "eps_nan": (dict(rms_norm_eps=float("nan")), ["rms_norm_eps", "finite"]),
    "eps_negative": (dict(rms_norm_eps=-1e-6), ["rms_norm_eps", "> 0"]),
    "init_range_inf": (dict(initializer_range=float("inf")), ["initializer_range", "finite"]),
    "dropout_one": (dict(attention_dropout=1.0), ["attention_dropout", "< 1"]),
    "more_experts_per_token_than_experts": (dict(num_local_experts=4, num_experts_per_tok=5),
                                            ["num_experts_per_tok", "num_local_experts"]),
    "topk_group_over_groups": (dict(n_group=2, topk_group=3), ["topk_group", "n_group"]),
    "dtype_float8": (dict(dtype="float8_e4m3fn"), ["dtype", "float8", "storage format"]),
    "dtype_code": (dict(dtype="os.system"), ["dtype", "'os.system'"]),
    # nested objects transformers reads with .get: a typo silently built the default layout
    "linear_attn_config_typo": (dict(num_hidden_layers=4, linear_attn_config=dict(kda_layer=[1, 2, 3],
                                                                                  full_attn_layers=[4])),
                                ["linear_attn_config.kda_layer", "unknown field", "kda_layers"]),
    "linear_attn_config_not_object": (dict(linear_attn_config=[1, 2]), ["linear_attn_config", "object"]),
    "linear_attn_config_layer_zero": (dict(num_hidden_layers=4, linear_attn_config=dict(kda_layers=[0, 1, 2],
                                                                                        full_attn_layers=[3])),
                                      ["linear_attn_config.kda_layers", "[0]", "from 1"]),
    "linear_attn_config_layer_missing": (dict(num_hidden_layers=4, linear_attn_config=dict(kda_layers=[1, 2],
                                                                                           full_attn_layers=[4])),
                                         ["linear_attn_config", "missing: [3]"]),
    "linear_attn_config_one_list": (dict(num_hidden_layers=4, linear_attn_config=dict(kda_layers=[1, 2, 3, 4])),
                                    ["linear_attn_config.kda_layers", "full_attn_layers"]),
    "linear_attn_config_heads_zero": (dict(linear_attn_config=dict(num_heads=0)), ["linear_attn_config.num_heads"]),
}


# a valid config too large for this machine: refused with the number, before any allocation
HUGE_CASES = {
    "vocab_1e12": dict(vocab_size=10**12),
    "hidden_1e7": dict(hidden_size=10**7),
    "layers_100000": dict(num_layers=100_000, hidden_size=256, intermediate_size=512),
}


@pytest.mark.parametrize("fields", HUGE_CASES.values(), ids=HUGE_CASES.keys())
def test_model_larger_than_the_machine_refused_before_allocation(fields, monkeypatch):
    import time

    from hf_attnres.core.buildable import ALLOW_LARGE_ENV
    from hf_attnres.utils.tiny import tiny_config

    monkeypatch.delenv(ALLOW_LARGE_ENV, raising=False)
    config = tiny_config(**fields, family="kimi_linear")
    started = time.perf_counter()
    expect_refused(lambda: KimiLinearAttnResForCausalLM(config), ["GiB", "memory", ALLOW_LARGE_ENV])
    assert time.perf_counter() - started < 30  # refused from arithmetic, not after minutes of building


def test_huge_model_builds_on_the_meta_device():
    from hf_attnres.utils.tiny import tiny_config

    with torch.device("meta"):  # how from_pretrained and accelerate build: no memory, so no refusal
        model = KimiLinearAttnResForCausalLM(tiny_config(vocab_size=10**9, family="kimi_linear"))
    assert model.lm_head.weight.shape == (10**9, 64)


@pytest.mark.parametrize("fields, named", CONFIG_CASES.values(), ids=CONFIG_CASES.keys())
def test_config_refused(fields, named):
    expect_refused(lambda: KimiLinearAttnResConfig(**fields), named, errors=ValueError)


def test_linear_attn_config_typo_in_a_saved_folder_refused(saved_model, tmp_path):
    """The same typo in a config.json: from_pretrained names it (it loaded the default layout before)."""
    from tests.helpers.bad_input_fixtures import overwrite_json

    folder = damaged_copy(saved_model, tmp_path, lambda f: overwrite_json(
        f / "config.json", layer_types=None, linear_attn_config={"kda_layer": [1, 2, 3], "full_attn_layers": [4]}))
    expect_refused(lambda: KimiLinearAttnResForCausalLM.from_pretrained(folder), ["linear_attn_config.kda_layer"],
                   untouched=[folder])


def test_valid_linear_attn_config_builds_its_layout():
    config = KimiLinearAttnResConfig(num_hidden_layers=4, linear_attn_config=dict(
        kda_layers=[1, 3, 4], full_attn_layers=[2], num_heads=4, head_dim=16, short_conv_kernel_size=3))
    assert config.layer_types == ["linear_attention", "full_attention", "linear_attention", "linear_attention"]
    assert (config.linear_num_heads, config.linear_head_dim, config.linear_conv_kernel_dim) == (4, 16, 3)


K3_INNER = dict(num_hidden_layers=4, attn_res_block_size=2)
K3_CASES = {
    "stray_layer_count": (dict(text_config=K3_INNER, num_hidden_layers=8), ["num_hidden_layers", "text_config"]),
    "stray_block_size": (dict(text_config=K3_INNER, attn_res_block_size=3), ["attn_res_block_size", "text_config"]),
    "stray_hidden_size": (dict(text_config=K3_INNER, hidden_size=8), ["hidden_size"]),
    "text_config_not_object": (dict(text_config=[1]), ["text_config", "object"]),
}


@pytest.mark.parametrize("config_dict, named", K3_CASES.values(), ids=K3_CASES.keys())
def test_k3_config_with_stray_fields_refused(config_dict, named):
    expect_refused(lambda: KimiLinearAttnResConfig.from_dict(config_dict), named, errors=ValueError)


def test_k3_config_generic_top_level_fields_are_fine():
    config = KimiLinearAttnResConfig.from_dict(dict(text_config=K3_INNER, pad_token_id=0, model_type="kimi_k3",
                                                    num_hidden_layers=4))  # equal to text_config's: no conflict
    assert (config.num_hidden_layers, config.attn_res_block_size) == (4, 2)


# --- forward arguments: (make kwargs from (model, ids), words) ----------------------------------------------------
def _mask(values):
    return lambda m, ids: dict(input_ids=ids, attention_mask=torch.tensor(values).expand(ids.shape[0], -1).clone())


FORWARD_CASES = {
    "float_ids": (lambda m, ids: dict(input_ids=ids.float()), ["input_ids", "integer"]),
    "bool_ids": (lambda m, ids: dict(input_ids=ids > 5), ["input_ids", "integer"]),
    "ids_3d": (lambda m, ids: dict(input_ids=ids[..., None]), ["input_ids", "shape"]),
    "ids_over_vocab": (lambda m, ids: dict(input_ids=ids + 1000), ["input_ids", "vocab_size"]),
    "negative_ids": (lambda m, ids: dict(input_ids=-ids), ["input_ids", "vocab_size"]),
    "empty": (lambda m, ids: dict(input_ids=ids[:, :0]), ["empty input"]),
    "ids_and_embeds": (lambda m, ids: dict(input_ids=ids, inputs_embeds=m.get_input_embeddings()(ids)),
                       ["exactly one"]),
    "embeds_float64": (lambda m, ids: dict(inputs_embeds=m.get_input_embeddings()(ids).double()),
                       ["inputs_embeds", "float64"]),
    "embeds_integer": (lambda m, ids: dict(inputs_embeds=torch.ones(2, 6, 64, dtype=torch.long)),
                       ["inputs_embeds", "floating"]),
    "embeds_wrong_width": (lambda m, ids: dict(inputs_embeds=torch.ones(2, 6, 3)), ["inputs_embeds", "shape"]),
    "mask_value_2": (_mask([1, 1, 2, 1, 1, 1]), ["attention_mask", "2"]),
    "mask_value_minus_1": (_mask([1, 1, 1, -1, 1, 1]), ["attention_mask", "-1"]),
    "mask_value_half": (_mask([1.0, 0.5, 1, 1, 1, 1]), ["attention_mask", "0.5"]),
    "mask_wrong_batch": (lambda m, ids: dict(input_ids=ids, attention_mask=torch.ones(3, 6, dtype=torch.long)),
                         ["attention_mask", "shape"]),
    "mask_3d": (lambda m, ids: dict(input_ids=ids, attention_mask=torch.ones(2, 6, 1)), ["attention_mask", "3-D"]),
    "labels_wrong_shape": (lambda m, ids: dict(input_ids=ids, labels=ids[:, :3]), ["labels", "shape"]),
    "labels_over_vocab": (lambda m, ids: dict(input_ids=ids, labels=ids + 1000), ["labels", "vocab_size"]),
    "labels_negative": (lambda m, ids: dict(input_ids=ids, labels=-ids), ["labels", "-100"]),
    "labels_float": (lambda m, ids: dict(input_ids=ids, labels=ids.float()), ["labels", "integer"]),
}


@pytest.fixture(scope="module")
def model():
    return tiny_model("block", 2, num_layers=3)


@pytest.mark.parametrize("make, named", FORWARD_CASES.values(), ids=FORWARD_CASES.keys())
def test_forward_refused(model, make, named):
    ids = random_ids(batch=2, seq=6)
    expect_refused(lambda: model(**make(model, ids)), named, errors=ValueError)


def test_valid_masks_still_accepted(model):
    """An all-ones mask of each accepted dtype gives the logits of no mask; a padding mask gives the same logits in
    every dtype, and it is read (the padded row's kept positions change, the other row's do not)."""
    ids = random_ids(batch=2, seq=6)
    with torch.no_grad():
        plain = model(ids).logits
        padded = torch.ones(2, 6, dtype=torch.long)
        padded[0, :2] = 0  # left padding in row 0
        runs = {}
        for dtype in (torch.long, torch.bool, torch.float32):
            torch.testing.assert_close(model(ids, attention_mask=torch.ones(2, 6, dtype=dtype)).logits, plain,
                                       rtol=0, atol=0)
            runs[dtype] = model(ids, attention_mask=padded.to(dtype)).logits
    for dtype in (torch.bool, torch.float32):
        torch.testing.assert_close(runs[dtype], runs[torch.long], rtol=0, atol=0)
    torch.testing.assert_close(runs[torch.long][1], plain[1], rtol=1e-5, atol=1e-5)
    assert (runs[torch.long][0, 2:] - plain[0, 2:]).abs().max() > 1e-4


def test_labels_all_ignored_warn(model):
    ids = random_ids(batch=2, seq=6)
    with pytest.warns(UserWarning, match="every label is -100"):
        out = model(ids, labels=torch.full_like(ids, -100))
    assert torch.isnan(out.loss)  # documented: no token to predict, 0 / 0


def test_triton_backend_on_cpu_is_one_message(model, monkeypatch):
    monkeypatch.setenv("ATTNRES_BACKEND", "triton")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    expect_refused(lambda: model(random_ids(batch=1, seq=4)), ["triton", "CUDA"], errors=ValueError)
