"""The paper's ablations in the model (config switches `attn_res_static_mixing`, `attn_res_score`,
`attn_res_key_norm`): which tensors a mix point owns, and its mix through the reference op
(`attnres.kernels.mix.variants`). Used by `AttnResMixing` only when a switch is off its default, so the default model,
its tensor names and its fast paths are untouched.
"""
from __future__ import annotations

import torch
from torch import nn
from transformers.models.kimi_linear.modeling_kimi_linear import KimiLinearRMSNorm

from .kernels.mix.variants import attn_res_variant


class DepthLogits(nn.Module):
    """Static mixing: one learned logit per depth source of a mix point (`weight` [n]). Zero at init: uniform mix."""

    def __init__(self, num_sources: int):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(num_sources))


def num_sources(config, layer_idx: int, point: str) -> int:
    """How many depth sources the mix `point` of layer `layer_idx` reads (the output mix: layer_idx = num layers).

    block: the embedding, the completed blocks, and the partial sum unless this attention opens a block;
    full:  the embedding and two outputs per earlier layer (plus this layer's attention output at its MLP).
    """
    layers = config.num_hidden_layers
    if config.attn_res_mode == "full":
        return 1 + 2 * layer_idx + (point == "mlp")
    size = config.attn_res_block_size
    if point == "output_attn":
        return 1 + -(-layers // size)
    if point == "self_attention":
        return 1 + -(-layer_idx // size)  # layer 0: the embedding alone; a block's first layer: no partial sum yet
    return 2 + layer_idx // size


def add_ablation_point(owner: nn.Module, point: str, config) -> None:
    """The tensors of an ablated mix point, under K3's naming: `{point}_res_logits` (static mixing) or
    `{point}_res_proj` (the pseudo-query) with `{point}_res_norm` unless the key norm is ablated."""
    from .modeling_attnres import PseudoQuery  # the model module imports this one

    if config.attn_res_static_mixing:
        index = getattr(owner, "layer_idx", config.num_hidden_layers)
        setattr(owner, f"{point}_res_logits", DepthLogits(num_sources(config, index, point)))
        return
    if config.attn_res_key_norm:
        setattr(owner, f"{point}_res_norm", KimiLinearRMSNorm(config.hidden_size, eps=config.rms_norm_eps))
    setattr(owner, f"{point}_res_proj", PseudoQuery(config.hidden_size))


def single_source(source, logits, query, norm, weights, out_norm):
    """The mix over one source is the source. While autograd records, it is multiplied by a softmax over one score
    of the point's own tensors: exactly 1.0, derivative exactly 0, so every parameter takes part in the graph
    (DDP without find_unused_parameters), as in `AttnResMixing.single_source_mix`."""
    if torch.is_grad_enabled():
        score = logits.weight.float().sum() if logits is not None else query.float().sum()
        if norm is not None:
            score = score + norm.weight.float().sum()
        source = source * score.reshape(1).softmax(0).to(source.dtype)
    if weights is not None:
        weights.append(source.new_ones(*source.shape[:-1], 1, dtype=torch.float32))
    return source if out_norm is None else out_norm(source)


def mix_ablation(owner: nn.Module, point: str, sources, weights: list | None, out_norm=None) -> torch.Tensor:
    """`AttnResMixing.mix` for an ablated config: the reference op, then `out_norm` (not fused: there is no kernel)."""
    config = owner.config
    if config.resolved_backend() == "triton":
        raise ValueError("ATTNRES_BACKEND=triton: the fused kernels do not implement the ablations "
                         "(attn_res_static_mixing / attn_res_score / attn_res_key_norm); use auto or torch")
    logits = getattr(owner, f"{point}_res_logits", None)
    norm = getattr(owner, f"{point}_res_norm", None)
    query = None if logits is not None else owner.res_query(point)
    if len(sources) == 1:  # one source: the identity, in every variant (as K3 and the default mix skip it)
        return single_source(sources[0], logits, query, norm, weights, out_norm)
    mixed = attn_res_variant(
        sources, query=query, norm_weight=None if norm is None else norm.weight,
        eps=config.rms_norm_eps, logits=None if logits is None else logits.weight, score=config.attn_res_score,
        return_weights=weights is not None,
    )
    if weights is not None:
        mixed, probs = mixed
        weights.append(probs)
    return mixed if out_norm is None else out_norm(mixed)


__all__ = ["DepthLogits", "num_sources", "add_ablation_point", "mix_ablation", "single_source"]
