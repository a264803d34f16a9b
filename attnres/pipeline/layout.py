"""What a pipeline stage needs of the depth layout (`attnres.depth_layout`): the mix tensors whose gradient is zero."""
from __future__ import annotations

from ..depth_layout import DepthLayout


def single_source_mix_params(config, layer_idx: int) -> list[str]:
    """Names (relative to the layer) of mix parameters whose gradient is exactly zero: a mix over one source is the
    identity (softmax over one source is exactly 1), so its norm and pseudo-query have no effect. Layer 0's attention
    point in block and full mode is the only case."""
    return [f"{point}_res_{part}.weight" for point in DepthLayout.of(config).single_source_points(layer_idx)
            for part in ("norm", "proj")]


__all__ = ["single_source_mix_params"]
