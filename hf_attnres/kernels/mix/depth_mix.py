"""The depth mix as a module transformers' kernel mechanism can replace: `AttnResDepthMix` is declared kernelizable
under the layer name `AttnResDepthMix` (`transformers.integrations.use_kernel_forward_from_hub`, as transformers'
own RMSNorm and MoE modules are), and its forward is the lean path's arithmetic in PyTorch (`lean_ops`).

The module holds no tensors: a mix point's tensors stay on the module that owns the point (`{point}_res_norm`,
`{point}_res_proj`) and are passed in. Where a kernel is mapped to the layer name for the model's device
(`kernels.register_kernel_mapping`, then `kernels.kernelize(model)`), its forward replaces this one; where none is
mapped (no `kernels` library, a saved folder loaded without the installed package), this forward runs. The installed
package maps its fused kernels (C++ on CPU, Triton on CUDA; `hf_attnres.kernels.mix.layers`).
"""
from __future__ import annotations

from torch import nn
from transformers.integrations import use_kernel_forward_from_hub

from .lean_ops import lean_mix

LAYER_NAME = "AttnResDepthMix"


@use_kernel_forward_from_hub(LAYER_NAME)
class AttnResDepthMix(nn.Module):
    """`forward(sources, query, norm_weight, eps, return_weights, out_norm_weight, out_norm_eps, backend, recompute)`:
    the mix of `sources` by softmax attention over depth, then the RMSNorm of gain `out_norm_weight` when given
    (`lean_forward` spells the arithmetic). `query`: the point's [1, hidden] Linear weight or a [hidden] vector.
    `backend` and `recompute` name what a mapped kernel may use; the lean path computes the same mix on any device.

    The module holds no tensors (a mix point's stay on the module owning the point, passed in). A kernel mapped to the
    layer name for the model's device (`kernels.register_kernel_mapping`, then `kernels.kernelize(model)`) replaces
    this forward; where none is mapped, this one runs."""

    def forward(self, sources, query, norm_weight, eps, return_weights=False, out_norm_weight=None, out_norm_eps=1e-6,
                backend="auto", recompute=False):
        return lean_mix(sources, query[0] if query.dim() == 2 else query, norm_weight, eps, return_weights,
                        out_norm_weight, out_norm_eps)
