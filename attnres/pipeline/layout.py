"""How many depth sources exist at every point of a KimiLinearAttnRes model: what a pipeline boundary must carry.

Pure arithmetic on the config, mirroring the model's own rule (`KimiLinearAttnResModel.forward`): a layer that opens a
source keeps all sources and appends its new ones; otherwise it replaces the last (running partial sum).
"""
from __future__ import annotations

from ..configuration_attnres import KimiLinearAttnResConfig


def sources_before_layers(config: KimiLinearAttnResConfig) -> list[int]:
    """Entry i: the number of source tensors entering decoder layer i; the last entry: those entering the output mix.

    A pipeline boundary placed before layer i carries exactly entry i tensors of [batch, seq, hidden].
    """
    mode, counts, n = config.attn_res_mode, [], 1  # the embedding is the first source
    for i in range(config.num_hidden_layers):
        counts.append(n)
        if mode == "full":
            n += 2  # the attention output and the MLP output each become a source
        elif mode == "block" and i % config.attn_res_block_size == 0:
            n += 1  # a block opens: the previous partial sum (or, at layer 0, the embedding) stays as a source
    counts.append(n)
    return counts


def mix_point_sources(config: KimiLinearAttnResConfig, layer_idx: int) -> dict[str, int]:
    """Number of sources each mix point of decoder layer `layer_idx` reads (softmax over depth of that many)."""
    before = sources_before_layers(config)[layer_idx]
    opens = config.attn_res_mode == "full" or (
        config.attn_res_mode == "block" and layer_idx % config.attn_res_block_size == 0
    )
    return {"self_attention": before, "mlp": before + 1 if opens else before}


def single_source_mix_params(config: KimiLinearAttnResConfig, layer_idx: int) -> list[str]:
    """Names (relative to the layer) of mix parameters whose gradient is exactly zero: a mix over one source is the
    identity (softmax over one source is exactly 1), so its norm and pseudo-query have no effect. Layer 0's attention point in
    block and full mode is the only case."""
    if config.attn_res_mode == "standard":
        return []
    return [
        f"{point}_res_{part}.weight"
        for point, n in mix_point_sources(config, layer_idx).items()
        if n == 1
        for part in ("norm", "proj")
    ]


__all__ = ["sources_before_layers", "mix_point_sources", "single_source_mix_params"]
