"""Tiny AttnRes configs of any family: for the demo, the tests and CPU benchmarks (no Hub download needed).

Every family takes one dense decoder shape (`DenseShape`); Kimi Linear adds its MLA, KDA and MoE sizes
(`KimiLinearShape`) and, for Kimi K3's text architecture, K3's pieces (`K3Pieces`). The shapes are frozen dataclasses:
a misspelt field is a TypeError where the preset is written, never a silently ignored config attribute.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from ..families.registry import SUPPORTED, family_classes

# the family a caller gets when it names none: Llama, the dense decoder most families of the registry extend
DEFAULT_FAMILY = "llama"
KIMI_LINEAR = "kimi_linear"


def shape_fields(shape) -> dict:
    """A shape's fields as config keyword arguments; None leaves the config class's default."""
    return {key: value for key, value in asdict(shape).items() if value is not None}


@dataclass(frozen=True)
class DenseShape:
    """The widths every family's decoder takes (its attention and MLP; everything else is the family's default)."""

    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int


@dataclass(frozen=True)
class KimiLinearShape:
    """Kimi Linear's own sizes beyond the dense shape: MoE (after a dense first MLP), MLA and KDA heads."""

    moe_intermediate_size: int
    num_local_experts: int
    num_experts_per_tok: int
    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    linear_num_heads: int
    linear_head_dim: int
    routed_expert_hidden_size: int | None = None
    n_shared_experts: int | None = None
    # MLA reads no KV head count, but the config records one; a preset may set it apart from the dense widths
    num_key_value_heads: int | None = None


@dataclass(frozen=True)
class K3Pieces:
    """Kimi K3's text architecture on top of Kimi Linear's hybrid: SiTU, NoPE MLA with an output gate, latent MoE
    (with its norm), full-rank KDA gate with a lower bound; what every K3 runtime (llama.cpp, SGLang, TensorRT-LLM,
    MLX) computes."""

    hidden_act: str = "situ"
    activation_situ_beta: float = 4.0
    activation_situ_linear_beta: float = 25.0
    mla_use_output_gate: bool = True
    latent_moe_use_norm: bool = True
    linear_use_full_rank_gate: bool = True
    linear_gate_lower_bound: float = -5.0
    routed_scaling_factor: float = 1.0


@dataclass(frozen=True)
class SizePreset:
    """A model size: depth, default block size and the dense widths every family takes; `kimi_linear`: Kimi Linear's
    own sizes (None: the size is not built in Kimi Linear); `k3`: K3's pieces on top, which makes it a K3-text model,
    built in Kimi Linear only."""

    num_layers: int
    block_size: int
    dense: DenseShape
    kimi_linear: KimiLinearShape | None = None
    k3: K3Pieces | None = None

    def __post_init__(self):
        if self.k3 is not None and self.kimi_linear is None:
            raise ValueError("a SizePreset with K3's pieces needs Kimi Linear's shape (K3 is Kimi Linear's)")

    @property
    def families(self) -> tuple[str, ...]:
        """The families this size is built in."""
        if self.k3 is not None:
            return (KIMI_LINEAR,)
        return tuple(family for family in SUPPORTED if family != KIMI_LINEAR or self.kimi_linear is not None)

    def fields(self, family: str) -> dict:
        """The config fields of this size in `family` (without depth and block size); ValueError naming the family
        when the size is not built in it."""
        if family not in self.families:
            raise ValueError(f"family {family!r} has no such size preset (it is built in {', '.join(self.families)})")
        fields = shape_fields(self.dense)
        if family == KIMI_LINEAR:
            fields.update(shape_fields(self.kimi_linear))
            fields.update(shape_fields(self.k3) if self.k3 is not None else {})
        return fields


K3_PIECES = K3Pieces()
# the tiny widths `tiny_config` builds when a caller names no size: milliseconds per forward on CPU
TINY_DENSE = DenseShape(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=4)
TINY_KIMI_LINEAR = KimiLinearShape(
    moe_intermediate_size=32, num_local_experts=4, num_experts_per_tok=2, kv_lora_rank=16, qk_rope_head_dim=8,
    qk_nope_head_dim=8, v_head_dim=16, linear_num_heads=2, linear_head_dim=16,
)
TINY_SPECIAL_TOKENS = dict(vocab_size=256, pad_token_id=0, bos_token_id=1, eos_token_id=2)
# A small K3-text model for `train --model-size k3-small`: Block AttnRes, KDA with an MLA layer every third and the
# last position, a dense first MLP then latent MoE; exports with `attnres export --to k3`. KDA heads = MLA heads, as
# K3 (llama.cpp needs it).
K3_SMALL_PRESET = SizePreset(
    num_layers=6, block_size=2, k3=K3_PIECES,
    dense=DenseShape(hidden_size=128, intermediate_size=384, num_attention_heads=4, num_key_value_heads=4),
    kimi_linear=KimiLinearShape(
        moe_intermediate_size=64, routed_expert_hidden_size=64, num_local_experts=4, num_experts_per_tok=2,
        n_shared_experts=1, kv_lora_rank=32, qk_rope_head_dim=16, qk_nope_head_dim=16, v_head_dim=32,
        linear_num_heads=4, linear_head_dim=32,
    ),
)


def hybrid_layer_types(num_layers: int, mla_every: int = 3) -> list[str]:
    """KDA everywhere except an MLA layer at every `mla_every`-th position (1-indexed), and always the last one."""
    return [
        "full_attention" if (i + 1) % mla_every == 0 or i == num_layers - 1 else "linear_attention"
        for i in range(num_layers)
    ]


def tiny_config(mode: str = "block", block_size: int = 2, num_layers: int = 5, family: str = DEFAULT_FAMILY,
                **overrides):
    """A few-layer AttnRes config of `family` (a key of `hf_attnres.families.registry.SUPPORTED`) that runs in
    milliseconds on CPU; `overrides` replace any field. Kimi Linear's is a hybrid like Kimi Linear itself: KDA layers
    with an MLA layer every third (`hybrid_layer_types`), a dense first MLP, MoE after it. Another family's head
    dimension is hidden / heads (Qwen3's and Gemma 3's own defaults, 128 and 256, would dwarf a tiny model)."""
    if family not in SUPPORTED:
        raise ValueError(f"family {family!r} is not a supported family (supported: {sorted(SUPPORTED)})")
    config_class = family_classes(family)[0]
    fields = dict(TINY_SPECIAL_TOKENS, num_hidden_layers=num_layers, **shape_fields(TINY_DENSE))
    if family == KIMI_LINEAR:
        fields.update(shape_fields(TINY_KIMI_LINEAR), layer_types=hybrid_layer_types(num_layers))
    fields.update(attn_res_mode=mode, attn_res_block_size=block_size if mode == "block" else 0)
    fields.update(overrides)
    if family != KIMI_LINEAR and "head_dim" in config_class.__dataclass_fields__ and "head_dim" not in overrides:
        fields["head_dim"] = fields["hidden_size"] // fields["num_attention_heads"]
    return config_class(**fields)
