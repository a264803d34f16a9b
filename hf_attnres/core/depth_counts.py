"""The source counts the depth rule (`DepthLayout`) implies: how many sources enter each layer and each mix point.
The model's forward needs none of them (a mix reads the sources it is given); the ablations' static logits (one per
source of a point) and the tools (pipeline boundaries, the memory planner, diagnostics) do. The package hands them to
`DepthLayout` as methods at its import (hf_attnres.core.depth_queries), so a saved folder carries them only with the
ablations.
"""
from hf_attnres.core.depth_layout import OUTPUT_POINT, DepthLayout


def sources_before_layers(layout: DepthLayout) -> list[int]:
    """Entry i: the number of sources entering layer i; the last entry: those entering the output mix. A pipeline
    boundary before layer i carries exactly entry i tensors of [batch, seq, hidden]."""
    counts, n = [], 1  # the embedding is the first source
    for i in range(layout.num_layers):
        counts.append(n)
        n += layout.new_sources_per_layer if layout.opens_source(i) else 0
    counts.append(n)
    return counts


def num_sources(layout: DepthLayout, layer_idx: int, point: str) -> int:
    """Sources the mix `point` of layer `layer_idx` reads (the output mix: `layer_idx` = num_layers)."""
    if point == OUTPUT_POINT:
        layer_idx = layout.num_layers
    before = sources_before_layers(layout)[layer_idx]
    if point == "mlp" and layout.opens_source(layer_idx):
        return before + 1  # this layer's attention output is a source of its own at the MLP mix
    return before


__all__ = ["num_sources", "sources_before_layers"]
