"""FSDP2 (`torch.distributed.fsdp.fully_shard`) units for Kimi Linear AttnRes models.

One unit per decoder layer (the model's `_no_split_modules`): a layer's mix points live inside it and are gathered
with it. Everything else (embedding, the output mix, final norm, `lm_head`) stays in the root unit, and must: the
output mix reads its pseudo-query and key-norm gain, and the fused final norm's gain, directly (one fused op, not a
module forward), so those tensors are gathered only when the unit whose forward runs the mix gathers them.

accelerate's own FSDP2 wrapping (`fsdp2_prepare_model`) carves the embedding and a tail [final norm, lm_head] into
units of their own; its final norm is the *last* norm-typed child of the base model, here `output_attn_res_norm`,
so the output mix would read a still-sharded tensor (`aten.mul.Tensor got mixed torch.Tensor and DTensor`). Shard
with `fully_shard_attnres` first: accelerate (and `Trainer(fsdp=...)`, which uses it) take an FSDP model as it is.
"""
from __future__ import annotations

from torch import nn


def fully_shard_attnres(model: nn.Module, **fsdp_kwargs) -> nn.Module:
    """Shard `model` in place (call before building the optimizer); `fsdp_kwargs` go to every `fully_shard` call
    (mesh, reshard_after_forward, mp_policy: e.g. `MixedPrecisionPolicy(param_dtype=torch.bfloat16,
    reduce_dtype=torch.float32)`; the mixes compute their scores and softmax in fp32 whatever the parameter dtype)."""
    from torch.distributed.fsdp import fully_shard

    split = set(getattr(model, "_no_split_modules", None) or ())
    for module in list(model.modules()):
        if type(module).__name__ in split:
            fully_shard(module, **fsdp_kwargs)
    fully_shard(model, **fsdp_kwargs)
    return model


__all__ = ["fully_shard_attnres"]
