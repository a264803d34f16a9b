"""What a pipeline stage needs beside its layers, for a model of any family: the mix tensors whose gradient is zero
(from `hf_attnres.core.depth_layout`), what a decoder layer reads beside the depth sources (mask, positions, rotary
embeddings: the base model's own `layer_kwargs`), the family's last step on the logits, and the non-persistent buffers
a module built on the meta device must recompute. Free of DeepSpeed: both pipelines use it.

Nothing here names a family: a stage gets what it needs from what every AttnRes model declares (`layer_kwargs`,
`postprocess_logits`, `_init_weights`), so a new family trains in both pipelines as soon as its model runs.
"""
from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from types import SimpleNamespace

import torch
from torch import nn

from ..core.depth_layout import DepthLayout


def single_source_mix_params(config, layer_idx: int) -> list[str]:
    """Names (relative to the layer) of mix parameters whose gradient is exactly zero: a mix over one source is the
    identity (softmax over one source is exactly 1), so its norm and pseudo-query have no effect. Layer 0's attention
    point in block and full mode is the only case."""
    return [f"{point}_res_{part}.weight" for point in DepthLayout.of(config).single_source_points(layer_idx)
            for part in ("norm", "proj")]


def causal_lm_class(config) -> type:
    """The AttnRes causal LM class of `config`'s family (by its model_type)."""
    from ..training.models import model_class_of

    return model_class_of(config)


def restore_unsaved_buffers(module: nn.Module, init_weights: Callable[[nn.Module], None]) -> None:
    """Recompute the non-persistent buffers of `module` (rotary frequencies, Gemma's embedding scale): computed in
    `__init__` and never saved, they hold garbage after `to_empty` off the meta device. `init_weights` is the model's
    `_init_weights`, which recomputes them as transformers does for a model loaded from the meta device (it also draws
    the module's parameters, which the caller then overwrites with the checkpoint's)."""
    for sub in module.modules():
        if sub._non_persistent_buffers_set:
            init_weights(sub)


class LayerContext:
    """What every decoder layer reads beside the depth sources, for a packed, unpadded causal batch: the attention
    mask of its type, the positions and (rotary families) the position embeddings, computed by the base model's own
    `layer_kwargs` from the sequence length alone, so nothing but depth sources crosses a stage boundary.

    It runs `layer_kwargs` on a shallow copy of the base model that keeps only the children owning no parameter (the
    rotary embedding; none for Kimi Linear): a stage holds no other stage's weights. Those children are copied, and
    materialized on CPU when the base model lives on the meta device. They are not submodules of a stage (a bf16 stage
    would round the rotary frequencies); they follow the hidden states' device instead."""

    def __init__(self, base: nn.Module):
        shell = copy.copy(base)  # shares the config and the family's methods; its tables must be its own
        shell._parameters, shell._buffers = {}, {}
        shell._modules = {name: copy.deepcopy(child) for name, child in base.named_children()
                          if next(child.parameters(), None) is None}
        for child in shell._modules.values():
            if any(buffer.is_meta for buffer in child.buffers()):
                child.to_empty(device="cpu")
                restore_unsaved_buffers(child, base._init_weights)
        self.model = shell
        self.device = torch.device("cpu")

    def __call__(self, hidden: torch.Tensor) -> Callable[[int], dict]:
        """layer index -> that layer's keyword arguments, for a batch shaped as `hidden` [batch, seq, hidden]."""
        if hidden.device != self.device:
            self.model.to(hidden.device)
            self.device = hidden.device
        position_ids = torch.arange(hidden.shape[1], device=hidden.device).unsqueeze(0)
        return self.model.layer_kwargs(hidden, None, None, position_ids, False)


def logits_step(model: nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    """The family's last step on the logits (`postprocess_logits`: Gemma's soft-capping, the identity elsewhere),
    holding only the config: a stage that keeps it does not keep the model alive."""
    return functools.partial(type(model).postprocess_logits, SimpleNamespace(config=model.config))


__all__ = ["single_source_mix_params", "causal_lm_class", "restore_unsaved_buffers", "LayerContext", "logits_step"]
