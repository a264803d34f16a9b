"""The paper's ablations of the depth mix at a mix point (config switches `attn_res_static_mixing`, `attn_res_score`,
`attn_res_key_norm`): the tensors they own and their mix through the plain PyTorch reference op
(`hf_attnres.kernels.mix.variants`), no fused kernel.

Registered on `AttnResMixing` when this module is imported (below): the package imports it, and a saved folder's
code holds it only when the folder's config ablates the mix (the folder's config refuses, in one line, an ablation
its code was not generated with). With every switch at its default nothing here runs.
"""
import torch
from torch import nn

from hf_attnres.core.depth_counts import num_sources
from hf_attnres.core.depth_layout import DepthLayout
from hf_attnres.core.mix_point import AttnResMixing, DepthKeyNorm, PseudoQuery
from hf_attnres.core.model import AttnResPreTrainedMixin
from hf_attnres.kernels.mix.variants import attn_res_variant


class DepthLogits(nn.Module):
    """Static mixing: one learned logit per depth source of a mix point (`weight` [n]). Zero at init: uniform mix."""

    def __init__(self, num_sources: int):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(num_sources))


def add_ablation_point(owner: nn.Module, point: str, config) -> None:
    """The tensors of an ablated mix point, under K3's naming: `{point}_res_logits` (static mixing) or
    `{point}_res_proj` (the pseudo-query) with `{point}_res_norm` unless the key norm is ablated."""
    if config.attn_res_static_mixing:
        index = getattr(owner, "layer_idx", config.num_hidden_layers)
        setattr(owner, f"{point}_res_logits", DepthLogits(num_sources(DepthLayout.of(config), index, point)))
        return
    if config.attn_res_key_norm:
        setattr(owner, f"{point}_res_norm", DepthKeyNorm(config.hidden_size, eps=config.rms_norm_eps))
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
        raise ValueError("backend 'triton': the fused kernels do not implement the ablations "
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


AttnResMixing.ablation_point = staticmethod(add_ablation_point)
AttnResMixing.ablation_mix = staticmethod(mix_ablation)
AttnResPreTrainedMixin.zero_init = (*AttnResPreTrainedMixin.zero_init, DepthLogits)

__all__ = ["DepthLogits", "add_ablation_point", "mix_ablation", "single_source"]
