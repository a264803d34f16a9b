"""What a pipeline stage needs beside its layers: the mix tensors whose gradient is zero
(from `hf_attnres.core.depth_layout`),
and the causal mask and positions a decoder layer reads. Free of DeepSpeed: both pipelines use it."""
from __future__ import annotations

import torch
from transformers.masking_utils import create_causal_mask, create_recurrent_attention_mask

from ..core.cache_arg import cache_kwargs
from ..core.depth_layout import DepthLayout


def single_source_mix_params(config, layer_idx: int) -> list[str]:
    """Names (relative to the layer) of mix parameters whose gradient is exactly zero: a mix over one source is the
    identity (softmax over one source is exactly 1), so its norm and pseudo-query have no effect. Layer 0's attention
    point in block and full mode is the only case."""
    return [f"{point}_res_{part}.weight" for point in DepthLayout.of(config).single_source_points(layer_idx)
            for part in ("norm", "proj")]


def layer_context(config, layer_idx: int, hidden: torch.Tensor) -> dict:
    """Causal mask and positions of a packed, unpadded batch, rebuilt from its length (as `KimiLinearAttnResModel`)."""
    position_ids = torch.arange(hidden.shape[1], device=hidden.device).unsqueeze(0)
    mask_fn = (create_causal_mask if config.layer_types[layer_idx] == "full_attention"
               else create_recurrent_attention_mask)
    mask = mask_fn(config=config, inputs_embeds=hidden, attention_mask=None, position_ids=position_ids,
                   **cache_kwargs(None))
    return {"attention_mask": mask, "position_ids": position_ids}


__all__ = ["single_source_mix_params", "layer_context"]
