"""Tiny Kimi Linear AttnRes configs: for the demo, the tests and CPU benchmarks (no Hub download needed)."""
from __future__ import annotations

from .configuration_attnres import KimiLinearAttnResConfig

# A hybrid like Kimi Linear: KDA layers with an MLA layer every few, a dense first MLP, MoE after it
TINY_DEFAULTS = dict(
    vocab_size=256,
    hidden_size=64,
    intermediate_size=128,
    moe_intermediate_size=32,
    num_attention_heads=4,
    num_key_value_heads=4,
    kv_lora_rank=16,
    qk_rope_head_dim=8,
    qk_nope_head_dim=8,
    v_head_dim=16,
    num_local_experts=4,
    num_experts_per_tok=2,
    linear_num_heads=2,
    linear_head_dim=16,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
)


def hybrid_layer_types(num_layers: int, mla_every: int = 3) -> list[str]:
    """KDA everywhere except an MLA layer at every `mla_every`-th position (1-indexed), and always the last one."""
    return [
        "full_attention" if (i + 1) % mla_every == 0 or i == num_layers - 1 else "linear_attention"
        for i in range(num_layers)
    ]


def tiny_config(mode: str = "block", block_size: int = 2, num_layers: int = 5, **overrides) -> KimiLinearAttnResConfig:
    """A few-layer config that runs in milliseconds on CPU. `overrides` replace any field."""
    fields = dict(TINY_DEFAULTS, num_hidden_layers=num_layers, layer_types=hybrid_layer_types(num_layers))
    fields.update(attn_res_mode=mode, attn_res_block_size=block_size if mode == "block" else 0)
    fields.update(overrides)
    return KimiLinearAttnResConfig(**fields)
