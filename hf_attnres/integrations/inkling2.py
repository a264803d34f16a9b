"""transformers' Inkling-2 (`inkling2`, transformers >= 5.23) and looped Inkling-2 (`inkling2_loop`, >= 5.25) on the
fused Inkling depth-mix kernels (`kernels.mix.inkling_mix.attn_res_inkling`).

    from hf_attnres.integrations.inkling2 import use_attnres_kernels
    use_attnres_kernels(model)   # Inkling2ForCausalLM, Inkling2ForConditionalGeneration, the Loop models, any nn.Module

Each `Inkling2BlockAttentionResidual` / `Inkling2LoopBlockAttentionResidual` (one query before the MLP and the final
norm, three at a full-attention layer's input) and `Inkling2LoopMessageAttentionResidual` (four queries per loop layer)
gets an instance-level `forward` computing the same function on the kernel: the bank of block states is read in place
(transformers concatenates it with the partial sum at every mix point), the rows' RMSNorm, all queries' scores and
the softmax-weighted sum of the normed rows run in one pass per token. Same inputs, same fp32 outputs, the same
parameters (`query`): a model's weights, state dict and saved folders are unchanged, and `restore(model)` puts
transformers' forward back. The modules are found by class name, so the swap needs neither model class importable.
transformers' `config._attn_implementation` no longer applies to these modules (the kernel computes attention
itself); the rest of the model keeps it.
"""
from __future__ import annotations

import types

import torch
from torch import nn

from ..kernels.mix.inkling_mix import INKLING_BACKENDS, attn_res_inkling

BLOCK_MIXES = ("Inkling2BlockAttentionResidual", "Inkling2LoopBlockAttentionResidual")
MESSAGE_MIXES = ("Inkling2LoopMessageAttentionResidual",)


def norm_eps(module: nn.Module) -> float:
    """The epsilon of the module's unweighted RMSNorm (`eps` in 5.23, `variance_epsilon` from 5.25)."""
    norm = module.norm
    return float(getattr(norm, "variance_epsilon", getattr(norm, "eps", 1e-6)))


def block_forward(self, block_states: torch.Tensor, partial_block_states: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """`Inkling2BlockAttentionResidual.forward` on the kernel: one fp32 [..., d] mix per query."""
    mixed = attn_res_inkling(block_states, partial_block_states, self.query, eps=norm_eps(self),
                             backend=self.attnres_backend)
    return mixed.unbind(-2)


def message_forward(self, block_states: torch.Tensor, partial_block_states: torch.Tensor,
                    loop_layer_idx: int) -> torch.Tensor:
    """`Inkling2LoopMessageAttentionResidual.forward` on the kernel: the fp32 [..., 4, d] messages of one loop
    layer."""
    return attn_res_inkling(block_states, partial_block_states, self.query[loop_layer_idx],
                            eps=norm_eps(self), backend=self.attnres_backend)


def use_attnres_kernels(model: nn.Module, backend: str = "auto") -> int:
    """Run every Inkling-2 depth mix in `model` on the kernels; returns how many modules were swapped.

    `backend`: "auto" (Triton on CUDA, the fused C++ kernel on CPU), "cpp", "triton" or "torch" (the plain reference,
    `kernels.mix.inkling.attn_res_inkling_naive`). Calling it again changes the backend. Raises ValueError where the
    model has no Inkling-2 depth mix."""
    if backend not in INKLING_BACKENDS:
        raise ValueError(f"backend must be one of {INKLING_BACKENDS}, got {backend!r}")
    swapped = 0
    for module in model.modules():
        name = type(module).__name__
        if name in BLOCK_MIXES or name in MESSAGE_MIXES:
            module.attnres_backend = backend
            module.forward = types.MethodType(block_forward if name in BLOCK_MIXES else message_forward, module)
            swapped += 1
    if not swapped:
        names = ", ".join(BLOCK_MIXES + MESSAGE_MIXES)
        raise ValueError(f"{type(model).__name__} has no Inkling-2 depth mix ({names})")
    return swapped


def restore(model: nn.Module) -> int:
    """Put transformers' own forward back on every module `use_attnres_kernels` swapped; returns how many."""
    restored = 0
    for module in model.modules():
        if "attnres_backend" in vars(module):
            del module.forward, module.attnres_backend
            restored += 1
    return restored


__all__ = ["use_attnres_kernels", "restore"]
