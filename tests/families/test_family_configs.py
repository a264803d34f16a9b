"""Every family's config refuses a bad base field at construction with one ValueError naming the field (the shared
checks of `hf_attnres.core.config.AttnResConfigMixin`; Kimi Linear's own tables add its MoE / KDA fields): each size
field at 0, negative, NaN, a fraction, a string, a bool and None where it is required; `rms_norm_eps` NaN, negative,
infinite, zero or a string; an unknown `hidden_act`; a dtype name that is not a float type. A config too large for
this machine's memory is refused when the model is built, before allocation."""
import math

import pytest
import torch

import hf_attnres  # noqa: F401  (registers the Auto classes)
from hf_attnres.families.registry import SUPPORTED, family_classes
from hf_attnres.utils.tiny import tiny_config
from tests.families.tiny import FAMILIES, attn_res_config

FAMILY_NAMES = sorted(SUPPORTED)
SIZES = ["num_hidden_layers", "vocab_size", "hidden_size", "num_attention_heads", "intermediate_size",
         "max_position_embeddings"]
BAD_SIZES = [0, -64, math.nan, 2.5, "4", True, None]
BAD_EPS = [math.nan, -1e-6, math.inf, 0.0, "1e-6", None]


def config(family, **fields):
    if family == "kimi_linear":
        return tiny_config("block", **fields, family="kimi_linear")
    return attn_res_config(family, **fields)


def test_every_family_is_covered():
    assert set(FAMILIES) | {"kimi_linear"} == set(SUPPORTED)


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_the_tiny_configs_are_valid(family):
    assert config(family).attn_res_mode == "block"


@pytest.mark.parametrize("family", FAMILY_NAMES)
@pytest.mark.parametrize("field", SIZES)
@pytest.mark.parametrize("value", BAD_SIZES, ids=repr)
def test_a_bad_size_is_refused_by_name(family, field, value):
    with pytest.raises(ValueError, match=f"^{field} must be"):
        config(family, **{field: value})


@pytest.mark.parametrize("family", FAMILY_NAMES)
@pytest.mark.parametrize("value", [0, -2, math.nan, "2"], ids=repr)
def test_a_bad_key_value_head_count_is_refused_by_name(family, value):
    with pytest.raises(ValueError, match="^num_key_value_heads must be"):
        config(family, num_key_value_heads=value)


@pytest.mark.parametrize("family", FAMILY_NAMES)
@pytest.mark.parametrize("value", BAD_EPS, ids=repr)
def test_a_bad_rms_norm_eps_is_refused_by_name(family, value):
    with pytest.raises(ValueError, match="^rms_norm_eps must be"):
        config(family, rms_norm_eps=value)


@pytest.mark.parametrize("family", FAMILY_NAMES)
@pytest.mark.parametrize("value", ["gelu_typo", 3, ""], ids=repr)
def test_an_unknown_activation_is_refused_by_name(family, value):
    field = "hidden_activation" if family == "gemma3_text" else "hidden_act"  # Gemma's name for it
    with pytest.raises(ValueError, match=f"^{field} must be"):
        config(family, **{field: value})


@pytest.mark.parametrize("family", FAMILY_NAMES)
@pytest.mark.parametrize(("fields", "named"), [(dict(dtype="os.system"), "dtype"),
                                               (dict(torch_dtype="float8_e4m3fn"), "torch_dtype"),
                                               (dict(attention_dropout=1.5), "attention_dropout"),
                                               (dict(initializer_range=-0.02), "initializer_range")])
def test_other_bad_fields_are_refused_by_name(family, fields, named):
    with pytest.raises(ValueError, match=f"^{named} must be"):
        config(family, **fields)


def test_the_examples_of_the_issue():
    llama, _ = family_classes("llama")
    for fields, named in [(dict(num_hidden_layers=0), "num_hidden_layers"), (dict(vocab_size=0), "vocab_size"),
                          (dict(hidden_size=-64), "hidden_size"), (dict(num_attention_heads=0), "num_attention_heads"),
                          (dict(num_hidden_layers="4"), "num_hidden_layers"), (dict(num_hidden_layers=None),
                                                                                "num_hidden_layers"),
                          (dict(rms_norm_eps=float("nan")), "rms_norm_eps"), (dict(hidden_act="swishy"), "hidden_act")]:
        with pytest.raises(ValueError, match=f"^{named} must be"):
            llama(**fields)


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_a_huge_config_is_refused_before_allocation(family, monkeypatch):
    monkeypatch.delenv("ATTNRES_ALLOW_LARGE_MODEL", raising=False)
    huge = config(family, vocab_size=10**12)  # a valid config: 10^12 x hidden weights in the embedding alone
    _, model_class = family_classes(family)
    with pytest.raises(ValueError, match="GiB of .* weights, more than the"):
        model_class(huge)
    with torch.device("meta"):  # a meta-device build allocates nothing: allowed
        model_class(config(family, vocab_size=10**9))
