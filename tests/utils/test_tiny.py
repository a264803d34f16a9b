"""Tiny configs and size presets of every family (hf_attnres.utils.tiny): built in the family asked for, typed so a
misspelt field fails where it is written."""
import dataclasses

import pytest

from hf_attnres.families.registry import SUPPORTED, family_classes
from hf_attnres.utils.tiny import (
    DEFAULT_FAMILY,
    K3_SMALL_PRESET,
    DenseShape,
    KimiLinearShape,
    SizePreset,
    tiny_config,
)


@pytest.mark.parametrize("family", sorted(SUPPORTED))
def test_tiny_config_builds_the_family_asked_for(family):
    config = tiny_config("block", 2, 4, family=family)
    assert type(config) is family_classes(family)[0]
    assert config.num_hidden_layers == 4 and config.attn_res_mode == "block" and config.attn_res_block_size == 2
    assert config.hidden_size == 64
    if hasattr(config, "head_dim") and family != "kimi_linear":  # hidden / heads, not Qwen3's 128 or Gemma's 256
        assert config.head_dim * config.num_attention_heads == config.hidden_size


def test_a_family_named_nowhere_is_not_kimi_linear():
    assert DEFAULT_FAMILY != "kimi_linear"
    assert type(tiny_config()) is family_classes(DEFAULT_FAMILY)[0]
    with pytest.raises(ValueError, match="'llama3' is not a supported family"):
        tiny_config(family="llama3")


def test_a_misspelt_preset_field_is_an_error_and_presets_are_frozen():
    with pytest.raises(TypeError, match="hiden_size"):
        DenseShape(hiden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=4)
    with pytest.raises(dataclasses.FrozenInstanceError):
        K3_SMALL_PRESET.num_layers = 2
    dense = DenseShape(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=4)
    with pytest.raises(ValueError, match="K3's pieces needs Kimi Linear's shape"):
        SizePreset(num_layers=2, block_size=1, dense=dense, k3=K3_SMALL_PRESET.k3)


def test_a_preset_is_built_only_in_the_families_it_declares():
    dense = DenseShape(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2)
    dense_only = SizePreset(num_layers=2, block_size=1, dense=dense)
    assert "kimi_linear" not in dense_only.families and "llama" in dense_only.families
    with pytest.raises(ValueError, match="'kimi_linear' has no such size preset"):
        dense_only.fields("kimi_linear")
    assert K3_SMALL_PRESET.families == ("kimi_linear",)
    with pytest.raises(ValueError, match="'qwen3' has no such size preset"):
        K3_SMALL_PRESET.fields("qwen3")
    kimi = dataclasses.replace(dense_only, kimi_linear=KimiLinearShape(
        moe_intermediate_size=8, num_local_experts=2, num_experts_per_tok=1, kv_lora_rank=8, qk_rope_head_dim=4,
        qk_nope_head_dim=4, v_head_dim=8, linear_num_heads=2, linear_head_dim=8, num_key_value_heads=4))
    fields = kimi.fields("kimi_linear")
    assert fields["num_key_value_heads"] == 4 and fields["kv_lora_rank"] == 8  # Kimi's own entries win
    assert "kv_lora_rank" not in kimi.fields("llama") and kimi.fields("llama")["num_key_value_heads"] == 2
    config = tiny_config("block", 1, 2, family="kimi_linear", **kimi.fields("kimi_linear"))
    assert config.kv_lora_rank == 8 and config.num_local_experts == 2
