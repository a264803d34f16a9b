"""Kimi Linear's config checks: every size, sign, finite value and dtype name of a `KimiLinearAttnResConfig` (its MoE,
MLA and KDA fields beside the shared ones) checked at construction, before anything is allocated, with one ValueError
naming the field (the checkers are `hf_attnres.core.config`'s). Hostile or mistyped configs
(negative head sizes, `rms_norm_eps` NaN, more experts per token than experts, `dtype: "os.system"`) stop here
instead of as a raw error in a constructor, all-NaN logits, or a folder that will not load. The memory a config would
allocate is checked when a model is built (the installed package's memory check, `hf_attnres.core.installed`).
"""
from __future__ import annotations

import math

from hf_attnres.core.config_checks import DTYPES, check_counts, check_dtype, check_floats

# Integer fields and their smallest valid value; optional ones may also be None
COUNT_FIELDS = dict(
    attn_res_block_size=0, num_hidden_layers=1, num_attention_heads=1, num_key_value_heads=1, hidden_size=1,
    intermediate_size=1, vocab_size=1, moe_intermediate_size=1, num_local_experts=1, num_experts_per_tok=1,
    n_shared_experts=0, n_group=1, topk_group=1, kv_lora_rank=1, q_lora_rank=1, qk_rope_head_dim=0, qk_nope_head_dim=1,
    v_head_dim=1, linear_head_dim=1, linear_num_heads=1, linear_conv_kernel_dim=1, max_position_embeddings=1,
    routed_expert_hidden_size=1,
)
OPTIONAL_COUNTS = ("num_key_value_heads", "intermediate_size", "q_lora_rank", "routed_expert_hidden_size")
# Float fields: (smallest valid value, whether the smallest itself is allowed, optional)
FLOAT_FIELDS = dict(
    rms_norm_eps=(0.0, False, False), initializer_range=(0.0, True, False), routed_scaling_factor=(0.0, True, False),
    attention_dropout=(0.0, True, False), activation_situ_beta=(0.0, False, True),
    activation_situ_linear_beta=(0.0, False, True), linear_gate_lower_bound=(-math.inf, False, True),
    attn_res_query_init_std=(0.0, True, False), attn_res_key_norm_init=(0.0, False, False),
)
# Switches: True/False, or also None where optional
SWITCH_FIELDS = dict(attn_res_two_phase=True, attn_res_fuse_norm=False, attn_res_recompute=False)


def check_switches(config) -> None:
    for field, optional in SWITCH_FIELDS.items():
        value = getattr(config, field, None)
        if not isinstance(value, bool) and not (optional and value is None):
            allowed = "True, False or None" if optional else "True or False"
            raise ValueError(f"{field} must be {allowed}, got {value!r} ({type(value).__name__})")


def check_routing(config) -> None:
    """The MoE router's choices must exist: k of E experts, groups that divide the experts."""
    if config.num_experts_per_tok > config.num_local_experts:
        raise ValueError(f"num_experts_per_tok ({config.num_experts_per_tok}) must be <= num_local_experts "
                         f"({config.num_local_experts}): a token cannot choose more experts than there are")
    if config.topk_group > config.n_group:
        raise ValueError(f"topk_group ({config.topk_group}) must be <= n_group ({config.n_group})")
    if config.num_local_experts % config.n_group:
        raise ValueError(f"n_group ({config.n_group}) must divide num_local_experts ({config.num_local_experts})")


def check_linear_attn_config(value, num_layers: int, layer_types) -> None:
    """`linear_attn_config` (Moonshot's layout, read by transformers' KimiLinearConfig with `.get`): every key known,
    sizes positive, and its layer lists (1-indexed) covering each layer once. transformers reads the keys it knows and
    ignores the rest, so a typo (`kda_layer`) silently built the default layout instead of the one written."""
    from difflib import get_close_matches

    from hf_attnres.families.kimi_linear.k3.config import LINEAR_ATTN_K3_KEYS, LINEAR_ATTN_KEYS

    if value is None:
        return
    if not isinstance(value, dict):
        raise ValueError(f"linear_attn_config must be an object, got {value!r} ({type(value).__name__})")
    known = sorted(LINEAR_ATTN_KEYS | set(LINEAR_ATTN_K3_KEYS))
    for key in value:
        if key not in known:
            close = get_close_matches(str(key), known, n=1)
            raise ValueError(f"linear_attn_config.{key}: unknown field" + (f" (did you mean {close[0]!r}?)" if close
                                                                          else f" (known: {known})"))
    for key in ("head_dim", "num_heads", "short_conv_kernel_size"):
        size = value.get(key, 1)
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"linear_attn_config.{key} must be an integer >= 1, got {size!r}")
    lists = [key for key in ("kda_layers", "full_attn_layers") if key in value]
    if layer_types is None and lists:  # transformers builds layer_types from them only when none is given
        _check_layer_lists(value, lists, num_layers)


def _check_layer_lists(value: dict, lists: list[str], num_layers: int) -> None:
    if len(lists) == 1:
        raise ValueError(f"linear_attn_config.{lists[0]} without "
                         f"{({'kda_layers', 'full_attn_layers'} - set(lists)).pop()}: both are needed, or the layout "
                         "silently falls back to the default")
    seen = []
    for key in lists:
        layers = value[key]
        if not isinstance(layers, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in layers):
            raise ValueError(f"linear_attn_config.{key} must be a list of layer numbers, got {layers!r}")
        outside = [x for x in layers if not 1 <= x <= num_layers]
        if outside:
            raise ValueError(f"linear_attn_config.{key}: layer(s) {outside} outside 1..{num_layers} (layers are "
                             "numbered from 1)")
        seen += layers
    if sorted(seen) != list(range(1, num_layers + 1)):
        twice = sorted({x for x in seen if seen.count(x) > 1})
        missing = sorted(set(range(1, num_layers + 1)) - set(seen))
        raise ValueError(f"linear_attn_config: kda_layers and full_attn_layers must list each of the "
                         f"{num_layers} layers once (listed twice: {twice}, missing: {missing})")


def check_nested(config, kwargs: dict) -> None:
    """The nested config objects transformers reads without checking (validated against their known fields)."""
    check_linear_attn_config(kwargs.get("linear_attn_config"), config.num_hidden_layers, config.layer_types)


def check_fields(config) -> None:
    """Types, sizes, signs, finite values and the dtype name: checked first, so nothing later compares a string with
    a number or allocates from a negative size."""
    check_counts(config, COUNT_FIELDS, OPTIONAL_COUNTS)
    check_floats(config, FLOAT_FIELDS)
    check_switches(config)
    check_dtype(getattr(config, "dtype", None))


__all__ = ["check_fields", "check_routing", "check_dtype", "check_nested", "COUNT_FIELDS", "FLOAT_FIELDS", "DTYPES"]
