"""Tiny Kimi Linear AttnRes configs: for the demo, the tests and CPU benchmarks (no Hub download needed)."""
from __future__ import annotations

from ..families.kimi_linear.configuration_kimi_linear_attnres import KimiLinearAttnResConfig

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

# Kimi K3's text architecture on top of the hybrid: SiTU, NoPE MLA with an output gate, latent MoE (with its norm),
# full-rank KDA gate with a lower bound; what every K3 runtime (llama.cpp, SGLang, TensorRT-LLM, MLX) computes
K3_PIECES = dict(
    hidden_act="situ", activation_situ_beta=4.0, activation_situ_linear_beta=25.0, mla_use_output_gate=True,
    latent_moe_use_norm=True, linear_use_full_rank_gate=True, linear_gate_lower_bound=-5.0, routed_scaling_factor=1.0,
)
# A small K3-text model for `train.py --model-size k3-small` (a `tiny_config` preset): Block AttnRes, KDA with an MLA
# layer every third and the last position, a dense first MLP then latent MoE; exports with `attnres export --to k3`
K3_SMALL_PRESET = dict(
    num_layers=6, block_size=2, hidden_size=128, intermediate_size=384, moe_intermediate_size=64,
    routed_expert_hidden_size=64, num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=32, qk_rope_head_dim=16,
    qk_nope_head_dim=16, v_head_dim=32, num_local_experts=4, num_experts_per_tok=2, n_shared_experts=1,
    linear_num_heads=4, linear_head_dim=32, **K3_PIECES,  # KDA heads = MLA heads, as K3 (llama.cpp needs it)
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
