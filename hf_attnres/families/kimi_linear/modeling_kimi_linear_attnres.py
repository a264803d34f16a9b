"""Kimi Linear with Attention Residuals: Kimi Linear, except the residual.

Every sub-module (MLA, KDA, MoE, MLP, RMSNorm, cache, masks) is transformers' own. What changes is how the depth stream
is carried. A layer receives the current *depth sources* and returns the ones it adds or updates:

- standard: one source, the residual stream; a sub-layer output is added to it (PreNorm, identical to Kimi Linear).
- block:    the embedding, one sum per completed block, and the running partial sum of the current block (last).
            A block's first attention output opens a new partial sum; every other output is added to the partial sum.
- full:     the embedding and every sub-layer output, each its own source.

Before each sub-layer and before the final norm, a learned pseudo-query mixes the sources by softmax over depth
(`hf_attnres.kernels.attn_res`, Kimi K3's numerics). With a single source the mix is the identity and is skipped.
"""
# No `from __future__ import annotations`: transformers reads forward annotations at runtime (return types for the
# outputs a model declares, `Unpack[TransformersKwargs]` for output_attentions support).
import functools
from dataclasses import dataclass

import torch
from torch import nn
from transformers.generation import GenerationMixin
from transformers.masking_utils import create_causal_mask, create_recurrent_attention_mask
from transformers.modeling_outputs import MoeCausalLMOutputWithPast, MoeModelOutputWithPast
from transformers.models.kimi_linear.modeling_kimi_linear import (
    KimiLinearAttention,
    KimiLinearDecoderLayer,
    KimiLinearForCausalLM,
    KimiLinearPreTrainedModel,
    KimiLinearRMSNorm,
    KimiLinearTopkRouter,
)
from transformers.utils.output_capturing import OutputRecorder

# Imports of this package: a saved folder's files are generated flat from these modules (remote_code.py)
from hf_attnres.core.cache_arg import CACHE_ARG, cache_kwargs
from hf_attnres.core.decoder_layer import AttnResDecoderLayerMixin
from hf_attnres.core.mix_point import AttnResMixing, PseudoQuery  # noqa: F401  (AttnResMixing: imported from here by pipeline)
from hf_attnres.core.model import AttnResForCausalLMMixin, AttnResModelMixin, AttnResPreTrainedMixin
from hf_attnres.families.kimi_linear.conversion_mapping import register_moonshot_mapping  # noqa: F401  (registers: Moonshot names load)
from hf_attnres.families.kimi_linear.k3 import install_k3, uses_k3
from hf_attnres.families.kimi_linear.kda_device_guard import install_kda_device_guard
from hf_attnres.families.kimi_linear.model_size import count_parameters

from .configuration_kimi_linear_attnres import KimiLinearAttnResConfig

install_kda_device_guard()


# Linear-attention (KDA) layers took the cache as `cache_params` before transformers 5.24 renamed it (`CACHE_ARG`)
LINEAR_CACHE_ARG = "cache" if CACHE_ARG == "cache" else "cache_params"


def annotated_forward(cls) -> None:
    """The class's forward is the mixin's, annotated with its `output_class`: transformers reads a forward's return
    annotation for the outputs a model declares (`router_logits`)."""
    if "output_class" not in cls.__dict__ or "forward" in cls.__dict__:
        return
    forward = next(base.__dict__["forward"] for base in cls.__mro__ if "forward" in base.__dict__)

    @functools.wraps(forward)  # the signature stays the mixin's (`inspect.signature` follows `__wrapped__`)
    def annotated(*args, **kwargs):
        return forward(*args, **kwargs)

    annotated.__annotations__ = {**forward.__annotations__, "return": cls.output_class}
    cls.forward = annotated


@dataclass
class AttnResModelOutputWithPast(MoeModelOutputWithPast):
    """Kimi Linear's MoE output (router logits) with the mix weights, as `AttnResDecoderOutputWithPast` describes them
    (hf_attnres.core.decoder_model)."""

    attn_res_weights: tuple[torch.Tensor, ...] | None = None


@dataclass
class AttnResCausalLMOutputWithPast(MoeCausalLMOutputWithPast):
    attn_res_weights: tuple[torch.Tensor, ...] | None = None


class KimiLinearAttnResDecoderLayer(AttnResDecoderLayerMixin, KimiLinearDecoderLayer):
    """Kimi Linear's decoder layer, reading its input from the depth sources instead of one residual stream
    (the mixes around its two sub-layers: `hf_attnres.core.decoder_layer`)."""

    fusable_norm = KimiLinearRMSNorm  # Llama's RMSNorm formula: the mix kernels may apply it fused

    def __init__(self, config: KimiLinearAttnResConfig, layer_idx: int):
        KimiLinearDecoderLayer.__init__(self, config, layer_idx)
        if uses_k3(config):  # Kimi K3's modules where its config asks for them (hf_attnres/families/kimi_linear/k3)
            install_k3(self, config, layer_idx)
        self.init_attn_res(config, layer_idx)

    def attention(self, hidden_states, attention_mask, position_ids, cache, use_cache, **kwargs):
        """Kimi Linear's attention dispatch (KDA or MLA), without the residual add that its `forward` fuses in."""
        if self.block_type == "linear_attention":
            return self.self_attn(
                hidden_states=hidden_states, attention_mask=attention_mask, **{LINEAR_CACHE_ARG: cache}, **kwargs
            )
        return super().attention(hidden_states, attention_mask, position_ids, cache, use_cache, **kwargs)


class KimiLinearAttnResPreTrainedModel(AttnResPreTrainedMixin, KimiLinearPreTrainedModel):
    config: KimiLinearAttnResConfig
    config_class = KimiLinearAttnResConfig
    _no_split_modules = ["KimiLinearAttnResDecoderLayer"]
    # hidden states are collected by the model itself: what a layer "outputs" depends on the AttnRes mode
    _can_record_outputs = {
        "router_logits": OutputRecorder(KimiLinearTopkRouter, index=0),
        "attentions": KimiLinearAttention,
    }

    @classmethod
    def _can_set_experts_implementation(cls) -> bool:
        # transformers detects support by grepping the model's source for its experts decorator; our experts are
        # transformers' own (decorated) KimiLinearExperts, so every experts implementation applies
        return True


class KimiLinearAttnResModel(AttnResModelMixin, KimiLinearAttnResPreTrainedModel):
    output_class = AttnResModelOutputWithPast
    fusable_norm = KimiLinearRMSNorm

    def __init__(self, config: KimiLinearAttnResConfig):
        if self.build_check is not None:  # the installed package's memory check, with the number, before allocation
            self.build_check(config, count_parameters(config).total)
        super().__init__(config)
        # No padding_idx (Kimi Linear passes pad_token_id): padded positions are already excluded by the attention mask
        # and labels=-100, and pad is usually a real token (most BPE tokenizers use pad = EOS). A padding_idx freezes
        # that token's embedding at zero, and a zero residual stream makes RMSNorm's backward scale by 1/sqrt(eps) per
        # layer: deep models diverge. Forward is unchanged: standard mode equals Kimi Linear given the
        # weights.
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(
            [KimiLinearAttnResDecoderLayer(config, layer_idx) for layer_idx in range(config.num_hidden_layers)]
        )
        self.norm = KimiLinearRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.init_output_mix(config)
        self.gradient_checkpointing = False
        self.post_init()

    def layer_kwargs(self, inputs_embeds, attention_mask, cache, position_ids, use_cache):
        if not isinstance(causal_mask_mapping := attention_mask, dict):  # already prepared, e.g. by `generate`
            mask_kwargs = {
                "config": self.config,
                "inputs_embeds": inputs_embeds,
                "attention_mask": attention_mask,
                "position_ids": position_ids,
                **cache_kwargs(cache),
            }
            causal_mask_mapping = {
                "full_attention": create_causal_mask(**mask_kwargs),
                "linear_attention": create_recurrent_attention_mask(**mask_kwargs),
            }
        layer_types = self.config.layer_types
        return lambda i: dict(attention_mask=causal_mask_mapping[layer_types[i]], position_ids=position_ids,
                              use_cache=use_cache, **cache_kwargs(cache))


class KimiLinearAttnResForCausalLM(
    AttnResForCausalLMMixin, KimiLinearAttnResPreTrainedModel, KimiLinearForCausalLM, GenerationMixin
):
    """The causal LM head (`hf_attnres.core.model.AttnResForCausalLMMixin`); its output carries the MoE router
    logits."""

    model_class = KimiLinearAttnResModel
    output_class = AttnResCausalLMOutputWithPast
    model_outputs = (*AttnResForCausalLMMixin.model_outputs, "router_logits")


annotated_forward(KimiLinearAttnResModel)
annotated_forward(KimiLinearAttnResForCausalLM)

__all__ = [
    "KimiLinearAttnResPreTrainedModel",
    "KimiLinearAttnResModel",
    "KimiLinearAttnResForCausalLM",
    "KimiLinearAttnResDecoderLayer",
    "PseudoQuery",
]
