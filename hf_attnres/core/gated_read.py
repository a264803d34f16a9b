"""The gated depth read: an upcycle that is exact at init and learns from its first step (`attn_res_gated_read`).

At every mix point (before each sub-layer and before the final norm) the sub-layer reads the standard residual
stream plus a gated AttnRes mix of the depth sources, instead of the mix alone:

    h = sum(sources)                                   # the standard residual stream (its depth layout's sources)
    m = attn_res(sources; query, key norm gain)        # the AttnRes softmax mix over depth (`naive.attn_res_naive`)
    x = h + gate * m                                   # gate: one value per channel [hidden], zero at init

Why it is exact at init: with the gate at zero, `x` is `h`, the standard stream, whatever the query and the key
norm; the reading norm sees the source model's input (to the rounding of summing the sources in another order), not
a scaled one, so no epsilon changes (the Block / Full upcycle reads `h / n`, exact only to `n^2 * eps`).
Why it learns at step 1: dL/dgate = dL/dx * m, and m is not zero (at a zero query it is `h / n`, the mean of the
sources); the gate is per channel because the reading RMSNorm removes a common scale, so a scalar gate times
`h / n` would get a gradient of (nearly) zero. The query sits behind the gate: its gradient is exactly zero at
step 0 and non-zero once the gate has moved (step 2), as a zero-initialised LoRA B lets A learn; the key norm's, as
in Block, once the query is off zero.
The formula is AttnRes_PEFT's gated adapter (a zero-initialised gate times a depth-attention read, added to the
standard stream; docs/MODELS.md cites it) placed at AttnRes's mix points over its depth sources.

The mix `m` runs through the point's kernelizable `attn_res_mix` (fused where a kernel is mapped); the sum and the
gate are plain PyTorch. `hf_attnres.kernels.mix.naive.gated_read_naive` is the reference the model is tested against.
"""
import torch
from torch import nn

from hf_attnres.core.offload import onloaded
from hf_attnres.kernels.mix.naive import attn_res_naive


class DepthGate(nn.Module):
    """A mix point's gate on the depth read (`{point}_res_gate`), one value per channel (`weight` [hidden]). Zero at
    init: the point reads the standard residual stream exactly."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(hidden_size))


def add_gate(owner: nn.Module, point: str, config) -> None:
    setattr(owner, f"{point}_res_gate", DepthGate(config.hidden_size))


def gated_read(owner: nn.Module, point: str, sources, weights: list | None, out_norm=None) -> torch.Tensor:
    """The gated read of `owner`'s `point` over `sources` (module docstring), then `out_norm` (not fused)."""
    modules = owner._modules
    norm, proj, gate = modules[point + "_res_norm"], modules[point + "_res_proj"], modules[point + "_res_gate"]
    with onloaded(norm, proj, gate):
        query = owner.res_query(point)
        if len(sources) == 1:  # one source: the softmax is exactly 1 (its query and key norm stay in the graph)
            mixed = attn_res_naive(sources, query, norm.weight, norm.variance_epsilon, weights is not None)
        else:
            mixed = modules["attn_res_mix"].forward(sources, query, norm.weight, norm.variance_epsilon,
                                                    weights is not None)
        if weights is not None:
            mixed, probs = mixed
            weights.append(probs)
        # in fp32, as the mix is computed: a bf16 model's read rounds once, not at every source added
        stream = sources[0].float()
        for source in sources[1:]:
            stream = stream + source.float()
        hidden = (stream + gate.weight.float() * mixed.float()).to(sources[0].dtype)
    return hidden if out_norm is None else out_norm(hidden)


__all__ = ["DepthGate", "add_gate", "gated_read"]
