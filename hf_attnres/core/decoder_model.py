"""A rotary PreNorm decoder with AttnRes, built from its family's own modules, and its causal LM head.

The rotary PreNorm families (those generated from a declaration, `hf_attnres.families.declaration`) share one model
body in transformers: embeddings, a rotary embedding, one causal (or sliding-window) mask per layer type, the decoder
layers, the final RMSNorm. A family names its modules as
class attributes and this body runs them the family's way, except the residual (`hf_attnres.core.model.run_depth`):

    class <Family>AttnResModel(AttnResDecoderModel, <Family>AttnResPreTrainedModel):
        decoder_layer_class = <Family>AttnResDecoderLayer
        norm_class, rotary_class = <Family>RMSNorm, <Family>RotaryEmbedding

In standard mode the forward is the family's own, operation for operation, so the logits are equal bit for bit.
"""
from dataclasses import dataclass

import torch
from torch import nn
from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast

# Imports of this package: a saved folder's files are generated flat from these modules (remote_code.py)
from hf_attnres.core.cache_arg import cache_kwargs
from hf_attnres.core.model import AttnResForCausalLMMixin, AttnResModelMixin

MASKS = {"full_attention": create_causal_mask, "sliding_attention": create_sliding_window_causal_mask}
# the scale a family's embedding multiplies the token vectors by, by rule name (Gemma's stream starts at sqrt(d))
EMBEDDING_SCALES = {"sqrt_hidden_size": lambda config: config.hidden_size**0.5}


@dataclass
class AttnResDecoderOutputWithPast(BaseModelOutputWithPast):
    """`attn_res_weights`: with `output_attn_res_weights=True`, one fp32 tensor [batch, seq, n_sources] per mix point,
    in order: layer 0 attention, layer 0 MLP, ..., the final (output) mix. A point with one source has weight 1."""

    attn_res_weights: tuple[torch.Tensor, ...] | None = None


@dataclass
class AttnResDecoderCausalLMOutputWithPast(CausalLMOutputWithPast):
    attn_res_weights: tuple[torch.Tensor, ...] | None = None


def attention_types(config) -> list[str]:
    """Each layer's attention type: the config's `layer_types` (Qwen2, Qwen3, Gemma 3), else one type for all, the
    sliding window where the config has one (Mistral), full attention otherwise (Llama)."""
    types = getattr(config, "layer_types", None)
    if types:
        return list(types)
    sliding = getattr(config, "sliding_window", None) is not None
    return ["sliding_attention" if sliding else "full_attention"] * config.num_hidden_layers


class AttnResDecoderModel(AttnResModelMixin):
    """The base model of a rotary PreNorm family (first base, before the family's AttnRes PreTrainedModel): the
    family's own modules, run the family's way except the residual (`run_depth`). In standard mode the forward is the
    family's own, operation for operation, so the logits are equal bit for bit."""

    output_class = AttnResDecoderOutputWithPast
    decoder_layer_class = norm_class = rotary_class = None
    # one rotary embedding per attention type, called with the layer's type (Gemma 3: local and global bases)
    rotary_per_layer_type = False
    embedding_class = nn.Embedding  # the family's token embedding
    embedding_scale = None  # a rule of EMBEDDING_SCALES, given to `embedding_class` as `embed_scale=`; None: unscaled

    def __init__(self, config):
        if self.build_check is not None:  # the installed package's memory check, before any allocation
            self.build_check(config)
        super().__init__(config)
        self.padding_idx = config.pad_token_id
        self.vocab_size = config.vocab_size
        self.embed_tokens = self.build_embedding(config)
        self.layers = nn.ModuleList(
            [self.decoder_layer_class(config, layer_idx) for layer_idx in range(config.num_hidden_layers)]
        )
        self.norm = self.norm_class(config.hidden_size, eps=config.rms_norm_eps)
        self.rotary_emb = self.rotary_class(config)
        self.init_output_mix(config)
        self.gradient_checkpointing = False
        self.post_init()

    def build_embedding(self, config) -> nn.Module:
        """The family's token embedding: `embedding_class(vocab_size, hidden_size, padding_idx)`, given
        `embed_scale=` by its scale rule where it has one."""
        if self.embedding_scale is None:
            return self.embedding_class(config.vocab_size, config.hidden_size, self.padding_idx)
        scale = EMBEDDING_SCALES[self.embedding_scale](config)
        return self.embedding_class(config.vocab_size, config.hidden_size, self.padding_idx, embed_scale=scale)

    def causal_masks(self, inputs_embeds, attention_mask, cache, position_ids, types) -> dict:
        if isinstance(attention_mask, dict):  # already prepared, e.g. by `generate`
            return attention_mask
        mask_kwargs = dict(config=self.config, inputs_embeds=inputs_embeds, attention_mask=attention_mask,
                           position_ids=position_ids, **cache_kwargs(cache))
        return {kind: MASKS[kind](**mask_kwargs) for kind in dict.fromkeys(types)}

    def position_embeddings(self, inputs_embeds, position_ids, types) -> dict:
        if self.rotary_per_layer_type:
            return {kind: self.rotary_emb(inputs_embeds, position_ids, kind) for kind in dict.fromkeys(types)}
        shared = self.rotary_emb(inputs_embeds, position_ids)
        return dict.fromkeys(types, shared)

    def layer_kwargs(self, inputs_embeds, attention_mask, cache, position_ids, use_cache):
        types = attention_types(self.config)
        masks = self.causal_masks(inputs_embeds, attention_mask, cache, position_ids, types)
        rotary = self.position_embeddings(inputs_embeds, position_ids, types)
        return lambda i: dict(attention_mask=masks[types[i]], position_embeddings=rotary[types[i]],
                              position_ids=position_ids, use_cache=use_cache, **cache_kwargs(cache))


class AttnResDecoderForCausalLM(AttnResForCausalLMMixin):
    """The causal LM of a rotary PreNorm family (`AttnResForCausalLMMixin`). `model_class`: the family's AttnRes base
    model."""

    output_class = AttnResDecoderCausalLMOutputWithPast


__all__ = ["AttnResDecoderModel", "AttnResDecoderForCausalLM", "AttnResDecoderOutputWithPast",
           "AttnResDecoderCausalLMOutputWithPast", "attention_types", "EMBEDDING_SCALES"]
