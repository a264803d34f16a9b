"""How many parameters a config builds, in closed form (the shapes `KimiLinearAttnResForCausalLM` builds; tests check
them against instantiated models): the count the installed package's memory check refuses a model by.

Buffers (the routers' `e_score_correction_bias`, E floats a layer) are not parameters and are left out.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ParameterCounts:
    embedding: int = 0
    lm_head: int = 0
    attention: int = 0  # MLA + KDA, gates included
    dense_mlp: int = 0
    routed_experts: int = 0  # the part K3 stores in MXFP4
    moe_other: int = 0  # routers, shared experts, latent projections and norm
    norms: int = 0  # layer norms and the final norm
    attn_res: int = 0  # pseudo-queries and key norms
    per_layer: list[int] = field(default_factory=list)

    @property
    def total(self) -> int:
        return (self.embedding + self.lm_head + self.attention + self.dense_mlp + self.routed_experts + self.moe_other
                + self.norms + self.attn_res)


def mla_params(c) -> int:
    heads, qk = c.num_attention_heads, c.qk_nope_head_dim + c.qk_rope_head_dim
    bias = c.hidden_size if c.attention_bias else 0
    q = c.hidden_size * heads * qk if c.q_lora_rank is None else (
        c.hidden_size * c.q_lora_rank + (c.q_lora_rank if c.attention_bias else 0) + c.q_lora_rank
        + c.q_lora_rank * heads * qk)
    kv = (c.hidden_size * (c.kv_lora_rank + c.qk_rope_head_dim)
          + (c.kv_lora_rank + c.qk_rope_head_dim if c.attention_bias else 0)
          + c.kv_lora_rank + c.kv_lora_rank * heads * (c.qk_nope_head_dim + c.v_head_dim))
    out = heads * c.v_head_dim * c.hidden_size + bias
    gate = c.hidden_size * heads * c.v_head_dim if c.mla_use_output_gate else 0
    return q + kv + out + gate


def kda_params(c) -> int:
    h, heads, dim = c.hidden_size, c.linear_num_heads, c.linear_head_dim
    d = heads * dim
    forget = h * dim + dim * d + d + heads  # f_a, f_b, dt_bias, A_log
    gate = h * d if c.linear_use_full_rank_gate else h * dim + dim * d
    return 3 * h * d + 3 * d * c.linear_conv_kernel_dim + forget + h * heads + gate + dim + d * h


def moe_params(c) -> tuple[int, int]:
    """(routed experts, everything else of the MoE block)."""
    width = c.routed_expert_hidden_size or c.hidden_size
    routed = 3 * c.num_local_experts * c.moe_intermediate_size * width
    other = c.num_local_experts * c.hidden_size + 3 * c.hidden_size * c.moe_intermediate_size * c.n_shared_experts
    if c.routed_expert_hidden_size is not None:
        other += 2 * c.hidden_size * width + (width if c.latent_moe_use_norm else 0)
    return routed, other


def count_parameters(c) -> ParameterCounts:
    # transformers' Kimi Linear never ties lm_head to the embedding (its `_tied_weights_keys` is empty)
    counts = ParameterCounts(embedding=c.vocab_size * c.hidden_size, lm_head=c.vocab_size * c.hidden_size,
                             norms=c.hidden_size)
    mix = 2 * c.hidden_size  # one mix point: key-norm gain + pseudo-query
    counts.attn_res = mix if c.attn_res_mode != "standard" else 0  # the output mix
    for i in range(c.num_hidden_layers):
        attention = kda_params(c) if c.layer_types[i] == "linear_attention" else mla_params(c)
        routed, other = moe_params(c) if c.mlp_layer_types[i] == "sparse" else (0, 0)
        dense = 3 * c.hidden_size * c.intermediate_size if c.mlp_layer_types[i] != "sparse" else 0
        mixes = 2 * mix if c.attn_res_mode != "standard" else 0
        counts.attention += attention
        counts.routed_experts += routed
        counts.moe_other += other
        counts.dense_mlp += dense
        counts.norms += 2 * c.hidden_size
        counts.attn_res += mixes
        counts.per_layer.append(attention + routed + other + dense + 2 * c.hidden_size + mixes)
    return counts


__all__ = ["ParameterCounts", "count_parameters", "mla_params", "kda_params", "moe_params"]
