"""A rotary PreNorm decoder with AttnRes, built from its family's own modules, and its causal LM head.

Llama, Mistral, Qwen2, Qwen3 and Gemma 3 share one model body in transformers: embeddings, a rotary embedding, one
causal (or sliding-window) mask per layer type, the decoder layers, the final RMSNorm. A family names its modules as
class attributes and this body runs them the family's way, except the residual (`attnres.core.model.run_depth`):

    class LlamaAttnResModel(AttnResDecoderModel, LlamaAttnResPreTrainedModel):
        decoder_layer_class, norm_class, rotary_class = LlamaAttnResDecoderLayer, LlamaRMSNorm, LlamaRotaryEmbedding

In standard mode the forward is the family's own, operation for operation, so the logits are equal bit for bit.
"""
from dataclasses import dataclass

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.cache_utils import Cache, DynamicCache
from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast
from transformers.modeling_utils import slice_logits_to_keep
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs, can_return_tuple
from transformers.utils.generic import merge_with_config_defaults
from transformers.utils.output_capturing import capture_outputs

from attnres.core.inference import chunked_causal_lm_forward
from attnres.core.input_checks import check_labels

# Imports of this package: a saved folder's files are generated flat from these modules (remote_code.py)
from attnres.core.model import AttnResModelMixin

MASKS = {"full_attention": create_causal_mask, "sliding_attention": create_sliding_window_causal_mask}


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
    """The base model of a rotary PreNorm family (first base, before the family's AttnRes PreTrainedModel)."""

    decoder_layer_class = norm_class = rotary_class = None
    rotary_per_layer_type = False  # Gemma 3: one rotary embedding per attention type (local and global bases)

    def __init__(self, config):
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
        """The family's token embedding (Gemma 3 scales it by sqrt(hidden_size))."""
        return nn.Embedding(config.vocab_size, config.hidden_size, self.padding_idx)

    def causal_masks(self, inputs_embeds, attention_mask, past_key_values, position_ids, types) -> dict:
        if isinstance(attention_mask, dict):  # already prepared, e.g. by `generate`
            return attention_mask
        mask_kwargs = dict(config=self.config, inputs_embeds=inputs_embeds, attention_mask=attention_mask,
                           past_key_values=past_key_values, position_ids=position_ids)
        return {kind: MASKS[kind](**mask_kwargs) for kind in dict.fromkeys(types)}

    def position_embeddings(self, inputs_embeds, position_ids, types) -> dict:
        if self.rotary_per_layer_type:
            return {kind: self.rotary_emb(inputs_embeds, position_ids, kind) for kind in dict.fromkeys(types)}
        shared = self.rotary_emb(inputs_embeds, position_ids)
        return dict.fromkeys(types, shared)

    @merge_with_config_defaults
    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        use_cache: bool | None = None,
        output_hidden_states: bool | int | list[int] | None = None,
        output_attn_res_weights: bool = False,
        **kwargs: Unpack[TransformersKwargs],
    ) -> AttnResDecoderOutputWithPast:
        self.check_inputs(input_ids, inputs_embeds, attention_mask)
        if output_hidden_states is None:
            output_hidden_states = self.config.output_hidden_states
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        if use_cache and past_key_values is None:
            past_key_values = DynamicCache(config=self.config)
        if position_ids is None:
            past_seen_tokens = past_key_values.get_seq_length() if past_key_values is not None else 0
            position_ids = torch.arange(inputs_embeds.shape[1], device=inputs_embeds.device) + past_seen_tokens
            position_ids = position_ids.unsqueeze(0)

        types = attention_types(self.config)
        masks = self.causal_masks(inputs_embeds, attention_mask, past_key_values, position_ids, types)
        rotary = self.position_embeddings(inputs_embeds, position_ids, types)
        hidden_states, all_hidden_states, all_weights = self.run_depth(
            inputs_embeds,
            lambda i: dict(attention_mask=masks[types[i]], position_embeddings=rotary[types[i]],
                           position_ids=position_ids, past_key_values=past_key_values, use_cache=use_cache),
            output_hidden_states,
            output_attn_res_weights,
            **kwargs,
        )
        return AttnResDecoderOutputWithPast(
            last_hidden_state=hidden_states,
            past_key_values=past_key_values,
            hidden_states=all_hidden_states,
            attn_res_weights=all_weights,
        )


class AttnResDecoderForCausalLM:
    """The causal LM of a family (first base, then the family's AttnRes PreTrainedModel and its own ForCausalLM, whose
    tied-weight, tensor-parallel and generation settings it keeps). `model_class`: the family's AttnRes base model."""

    model_class = None

    def __init__(self, config):
        PreTrainedModel.__init__(self, config)  # not the family's ForCausalLM.__init__, which builds its own model
        self.model = self.model_class(config)
        self.vocab_size = config.vocab_size
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        prefill_chunk_size: int | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> AttnResDecoderCausalLMOutputWithPast:
        """`prefill_chunk_size`: run a longer prompt in chunks of this many tokens, carrying the cache (long-context
        prefill: the depth bank holds chunk-sized tensors). Same logits and cache; no loss, per-layer outputs."""
        reference = input_ids if input_ids is not None else inputs_embeds
        check_labels(labels, reference, self.config.vocab_size)
        if prefill_chunk_size is not None and reference is not None and reference.shape[1] > prefill_chunk_size:
            logits, cache = chunked_causal_lm_forward(
                self, input_ids=input_ids, inputs_embeds=inputs_embeds, attention_mask=attention_mask,
                past_key_values=past_key_values, chunk_size=prefill_chunk_size, logits_to_keep=logits_to_keep,
                labels=labels, **kwargs,
            )
            return AttnResDecoderCausalLMOutputWithPast(logits=self.softcap(logits), past_key_values=cache)
        outputs: AttnResDecoderOutputWithPast = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )
        logits = self.softcap(self.lm_head(slice_logits_to_keep(outputs.last_hidden_state, logits_to_keep)))
        loss = None
        if labels is not None:
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **kwargs)
        return AttnResDecoderCausalLMOutputWithPast(
            loss=loss,
            logits=logits,
            past_key_values=outputs.past_key_values,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
            attn_res_weights=outputs.attn_res_weights,
        )

    def softcap(self, logits: torch.Tensor) -> torch.Tensor:
        """Gemma's final logit soft-capping, where the config has it (as the family's own ForCausalLM applies it)."""
        cap = getattr(self.config, "final_logit_softcapping", None)
        if cap is None:
            return logits
        return torch.tanh(logits / cap) * cap


__all__ = ["AttnResDecoderModel", "AttnResDecoderForCausalLM", "AttnResDecoderOutputWithPast",
           "AttnResDecoderCausalLMOutputWithPast", "attention_types"]
