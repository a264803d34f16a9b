"""Kimi K3's text backbone on top of transformers' Kimi Linear: SiTU-GLU, latent MoE, MLA output gate, KDA full-rank
output gate and forget-gate lower bound, MXFP4 experts dequantized on load, the `language_model.` layout.

`install_k3(layer, config)` swaps a built Kimi Linear decoder layer's modules for the K3 ones its config asks for; with
no K3 field set nothing changes (`uses_k3`).
"""
from __future__ import annotations

from .activation import SiTUMLP  # importing it registers ACT2FN["situ"], so Kimi Linear's constructors accept it
from .attention import GatedMLA, K3DeltaAttention
from .config import uses_k3
from .moe import LatentMoE


def install_k3(layer, config, layer_idx: int) -> None:
    if layer.block_type == "linear_attention":
        if (
            config.hidden_act == "situ"
            or config.linear_use_full_rank_gate
            or config.linear_gate_lower_bound is not None
        ):
            layer.self_attn = K3DeltaAttention(config, layer_idx)
    elif config.mla_use_output_gate:
        layer.self_attn = GatedMLA(config, layer_idx)
    if config.mlp_layer_types[layer_idx] == "sparse":
        if config.hidden_act == "situ" or config.routed_expert_hidden_size is not None:
            layer.mlp = LatentMoE(config)
    elif config.hidden_act == "situ":
        layer.mlp = SiTUMLP(config)


__all__ = ["install_k3", "uses_k3"]
