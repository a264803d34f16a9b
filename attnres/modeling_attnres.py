"""Kimi Linear with Attention Residuals: Kimi Linear, except the residual.

Every sub-module (MLA, KDA, MoE, MLP, RMSNorm, cache, masks) is transformers' own. What changes is how the depth stream
is carried. A layer receives the current *depth sources* and returns the ones it adds or updates:

- standard: one source, the residual stream; a sub-layer output is added to it (PreNorm, identical to Kimi Linear).
- block:    the embedding, one sum per completed block, and the running partial sum of the current block (last).
            A block's first attention output opens a new partial sum; every other output is added to the partial sum.
- full:     the embedding and every sub-layer output, each its own source.

Before each sub-layer and before the final norm, a learned pseudo-query mixes the sources by softmax over depth
(`attnres.kernels.attn_res`, Kimi K3's numerics). With a single source the mix is the identity and is skipped.
"""
# No `from __future__ import annotations`: transformers reads forward annotations at runtime (return types for the
# outputs a model declares, `Unpack[TransformersKwargs]` for output_attentions support).
from dataclasses import dataclass

import torch
from torch import nn
from transformers import initialization as init
from transformers.cache_utils import Cache, DynamicCache
from transformers.generation import GenerationMixin
from transformers.masking_utils import create_causal_mask, create_recurrent_attention_mask
from transformers.modeling_outputs import MoeCausalLMOutputWithPast, MoeModelOutputWithPast
from transformers.modeling_utils import slice_logits_to_keep
from transformers.models.kimi_linear.modeling_kimi_linear import (
    KimiLinearAttention,
    KimiLinearDecoderLayer,
    KimiLinearForCausalLM,
    KimiLinearPreTrainedModel,
    KimiLinearRMSNorm,
    KimiLinearTopkRouter,
)
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs, can_return_tuple
from transformers.utils.generic import merge_with_config_defaults
from transformers.utils.output_capturing import OutputRecorder, capture_outputs, selected_hidden_states

# Imports of this package are absolute here and rewritten to flat relative ones in saved folders (remote_code.py)
from attnres.conversion_mapping import register_moonshot_mapping  # noqa: F401  (registers: Moonshot names load)
from attnres.depth_layout import DepthLayout
from attnres.inference import chunked_causal_lm_forward, two_phase_schedule
from attnres.input_checks import check_backend, check_dtypes, check_labels, check_values
from attnres.k3 import install as install_k3
from attnres.k3 import uses_k3
from attnres.kda_device_guard import install as install_kda_device_guard
from attnres.mix_point import AttnResMixing, DepthKeyNorm, DepthLogits, MixSettings, PseudoQuery
from attnres.model_size import check_buildable
from attnres.remote_code import write_code_files
from attnres.saved_model import RECORD_FIELDS, check_folder_before_load, check_weights_record, save_folder

from .configuration_attnres import KimiLinearAttnResConfig

install_kda_device_guard()


@dataclass
class AttnResModelOutputWithPast(MoeModelOutputWithPast):
    """`attn_res_weights`: with `output_attn_res_weights=True`, one fp32 tensor [batch, seq, n_sources] per mix point,
    in order: layer 0 attention, layer 0 MLP, ..., the final (output) mix. A point with one source has weight 1."""

    attn_res_weights: tuple[torch.Tensor, ...] | None = None


@dataclass
class AttnResCausalLMOutputWithPast(MoeCausalLMOutputWithPast):
    attn_res_weights: tuple[torch.Tensor, ...] | None = None


class KimiLinearAttnResDecoderLayer(AttnResMixing, KimiLinearDecoderLayer):
    """Kimi Linear's decoder layer, reading its input from the depth sources instead of one residual stream."""

    def __init__(self, config: KimiLinearAttnResConfig, layer_idx: int):
        super().__init__(config, layer_idx)
        if uses_k3(config):  # Kimi K3's modules where its config asks for them (attnres/k3)
            install_k3(self, config, layer_idx)
        self.config = config
        self.layer_idx = layer_idx
        # where this layer's outputs go among the depth sources (attnres/depth_layout.py)
        self.depth_layout = DepthLayout.of(config)
        self.opens_source = self.depth_layout.opens_source(layer_idx)
        self.num_new_sources = self.depth_layout.new_sources_per_layer
        if config.attn_res_mode != "standard":
            self.add_mix_point("self_attention", config)
            self.add_mix_point("mlp", config)

    def update_sources(self, sources: tuple[torch.Tensor, ...], new_sources: tuple[torch.Tensor, ...]):
        """The depth sources after this layer: its outputs open new sources, or replace the running partial sum."""
        return self.depth_layout.update_sources(self.layer_idx, sources, new_sources)

    def attention(self, hidden_states, attention_mask, position_ids, past_key_values, use_cache, **kwargs):
        """Kimi Linear's attention dispatch (KDA or MLA), without the residual add that its `forward` fuses in."""
        if self.block_type == "linear_attention":
            return self.self_attn(
                hidden_states=hidden_states, cache_params=past_key_values, attention_mask=attention_mask, **kwargs
            )
        hidden_states, _ = self.self_attn(
            hidden_states=hidden_states,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            use_cache=use_cache,
            **kwargs,
        )
        return hidden_states

    def forward(
        self,
        *sources: torch.Tensor,
        attention_mask=None,
        position_ids=None,
        past_key_values: Cache | None = None,
        use_cache: bool | None = False,
        output_attn_res_weights: bool = False,
        attn_res_schedule=None,
        attn_res_settings=None,
        **kwargs,
    ) -> tuple[torch.Tensor, ...]:
        """Sources come positionally: reentrant checkpointing only tracks gradients of positional tensors.

        Returns the new sources (1, or 2 in full mode) followed by the mix weights when asked: a flat tuple of tensors.
        `attn_res_schedule`: how no-grad mixes are computed (`attnres.inference.TwoPhaseSchedule`), None: plain.
        `attn_res_settings`: the config's mix switches, resolved once per model forward (`mix_point.MixSettings`).
        """
        weights = [] if output_attn_res_weights else None
        h = self.mix("self_attention", sources, weights, self.input_layernorm, attn_res_schedule, attn_res_settings)
        attn_out = self.attention(h, attention_mask, position_ids, past_key_values, use_cache, **kwargs)
        if self.opens_source:
            kept, partial = sources, attn_out
        else:
            kept, partial = sources[:-1], sources[-1] + attn_out
        h = self.mix("mlp", (*kept, partial), weights, self.post_attention_layernorm, attn_res_schedule,
                     attn_res_settings)
        mlp_out = self.mlp(h)
        new_sources = (partial, mlp_out) if self.num_new_sources == 2 else (partial + mlp_out,)
        return (*new_sources, *(weights or ()))


class KimiLinearAttnResPreTrainedModel(KimiLinearPreTrainedModel):
    config: KimiLinearAttnResConfig
    config_class = KimiLinearAttnResConfig
    _no_split_modules = ["KimiLinearAttnResDecoderLayer"]
    # hidden states are collected by the model itself: what a layer "outputs" depends on the AttnRes mode
    _can_record_outputs = {
        "router_logits": OutputRecorder(KimiLinearTopkRouter, index=0),
        "attentions": KimiLinearAttention,
    }

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        # a local folder's files are checked first (damaged ones named), and its config against the weights record
        check_folder_before_load(pretrained_model_name_or_path)
        loaded = super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
        model = loaded[0] if kwargs.get("output_loading_info") else loaded  # (model, loading info) when asked
        explicit = set(kwargs) | (set(RECORD_FIELDS) if "config" in kwargs else set())
        check_weights_record(model.config, pretrained_model_name_or_path, explicit)
        return loaded

    @classmethod
    def _can_set_experts_implementation(cls) -> bool:
        # transformers detects support by grepping the model's source for its experts decorator; our experts are
        # transformers' own (decorated) KimiLinearExperts, so every experts implementation applies
        return True

    def save_pretrained(self, save_directory, *args, **kwargs):
        """transformers' save, plus every module the model needs beside it, so the folder loads with
        `trust_remote_code=True` where this package is not installed (see remote_code.py)."""
        # through a temporary folder, with the weights record: a failed save leaves the previous model intact
        save_folder(self._save_with_code, save_directory, self.config, *args, **kwargs)

    def _save_with_code(self, save_directory, *args, **kwargs):
        super().save_pretrained(save_directory, *args, **kwargs)
        if self.is_remote_code() and kwargs.get("is_main_process", True):
            write_code_files(save_directory, type(self).__module__)

    @torch.no_grad()
    def _init_weights(self, module):
        if isinstance(module, PseudoQuery) and self.config.attn_res_query_init_std > 0:
            # a study arm: random queries (this draws from the RNG, so the arm's other weights differ from a matched
            # standard run's)
            init.normal_(module.weight, std=self.config.attn_res_query_init_std)
            return
        if isinstance(module, (PseudoQuery, DepthLogits)):
            init.zeros_(module.weight)  # no random draw first (see PseudoQuery.reset_parameters)
            return
        if isinstance(module, DepthKeyNorm):
            init.constant_(module.weight, self.config.attn_res_key_norm_init)
            return
        super()._init_weights(module)


class KimiLinearAttnResModel(AttnResMixing, KimiLinearAttnResPreTrainedModel):
    def __init__(self, config: KimiLinearAttnResConfig):
        check_buildable(config)  # a config too large for this machine is refused with the number, before allocation
        super().__init__(config)
        # No padding_idx (Kimi Linear passes pad_token_id): padded positions are already excluded by the attention mask
        # and labels=-100, and pad is usually a real token (most BPE tokenizers use pad = EOS). A padding_idx freezes
        # that token's embedding at zero, and a zero residual stream makes RMSNorm's backward scale by 1/sqrt(eps) per
        # layer: deep models diverged (issue 9). Forward is unchanged: standard mode equals Kimi Linear given the
        # weights.
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(
            [KimiLinearAttnResDecoderLayer(config, layer_idx) for layer_idx in range(config.num_hidden_layers)]
        )
        self.norm = KimiLinearRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        if config.attn_res_mode != "standard":
            self.add_mix_point("output_attn", config)
        self.gradient_checkpointing = False
        self.post_init()

    def check_inputs(self, input_ids, inputs_embeds, attention_mask) -> None:
        """Clear errors for bad input, before it becomes an index error deep inside a kernel."""
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("You must specify exactly one of input_ids or inputs_embeds")
        reference = input_ids if input_ids is not None else inputs_embeds
        check_dtypes(input_ids, inputs_embeds, self.embed_tokens.weight.dtype)
        check_backend(self.config.resolved_backend(), reference.device)
        if input_ids is not None and input_ids.dim() != 2:
            raise ValueError(f"input_ids must have shape [batch, seq_len], got {tuple(input_ids.shape)}")
        if inputs_embeds is not None and (
            inputs_embeds.dim() != 3 or inputs_embeds.shape[-1] != self.config.hidden_size
        ):
            raise ValueError(
                f"inputs_embeds must have shape [batch, seq_len, {self.config.hidden_size}], "
                f"got {tuple(inputs_embeds.shape)}"
            )
        if reference.shape[0] == 0 or reference.shape[1] == 0:
            raise ValueError(f"empty input: batch and sequence length must be >= 1, got shape {tuple(reference.shape)}")
        # one host sync per forward (each decode step): ids in the vocabulary, a 0/1 padding mask
        if not torch.compiler.is_compiling():
            check_values(input_ids, attention_mask, self.config.vocab_size)
        if isinstance(attention_mask, torch.Tensor) and attention_mask.dim() == 2:
            batch, seq_len = reference.shape[:2]
            if attention_mask.shape[0] != batch or attention_mask.shape[1] < seq_len:
                raise ValueError(
                    f"attention_mask must have shape [batch={batch}, past + seq_len >= {seq_len}], "
                    f"got {tuple(attention_mask.shape)}"
                )
        elif isinstance(attention_mask, torch.Tensor) and attention_mask.dim() != 4:
            raise ValueError(f"attention_mask must be 2-D [batch, seq] (or a 4-D mask), got {attention_mask.dim()}-D")

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
    ) -> AttnResModelOutputWithPast:
        self.check_inputs(input_ids, inputs_embeds, attention_mask)
        if output_hidden_states is None:
            output_hidden_states = self.config.output_hidden_states
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)

        if use_cache and past_key_values is None:
            past_key_values = DynamicCache(config=self.config)

        if position_ids is None:
            past_seen_tokens = past_key_values.get_seq_length() if past_key_values is not None else 0
            position_ids = torch.arange(inputs_embeds.shape[1], device=inputs_embeds.device)
            position_ids = (position_ids + past_seen_tokens).unsqueeze(0)

        if not isinstance(causal_mask_mapping := attention_mask, dict):
            mask_kwargs = {
                "config": self.config,
                "inputs_embeds": inputs_embeds,
                "attention_mask": attention_mask,
                "past_key_values": past_key_values,
                "position_ids": position_ids,
            }
            causal_mask_mapping = {
                "full_attention": create_causal_mask(**mask_kwargs),
                "linear_attention": create_recurrent_attention_mask(**mask_kwargs),
            }

        all_hidden_states = [inputs_embeds] if output_hidden_states else None
        all_weights = [] if output_attn_res_weights else None
        schedule = two_phase_schedule(self, inputs_embeds, output_attn_res_weights)
        settings = MixSettings.of(self.config)  # read once here, not at each of the 2L+1 mix points
        sources = (inputs_embeds,)
        for i, layer in enumerate(self.layers[: self.config.num_hidden_layers]):
            outputs = layer(
                *sources,
                attention_mask=causal_mask_mapping[self.config.layer_types[i]],
                position_ids=position_ids,
                past_key_values=past_key_values,
                use_cache=use_cache,
                output_attn_res_weights=output_attn_res_weights,
                attn_res_schedule=schedule,
                attn_res_settings=settings,
                **kwargs,
            )
            sources = layer.update_sources(sources, outputs[: layer.num_new_sources])
            if all_weights is not None:
                all_weights.extend(outputs[layer.num_new_sources :])
            if all_hidden_states is not None:
                all_hidden_states.append(sources[-1])

        hidden_states = self.mix("output_attn", sources, all_weights, self.norm, schedule, settings)
        if all_hidden_states is not None:
            all_hidden_states[-1] = hidden_states  # transformers' convention: the last one is after the final norm
            all_hidden_states = select_hidden_states(all_hidden_states, output_hidden_states)

        return AttnResModelOutputWithPast(
            last_hidden_state=hidden_states,
            past_key_values=past_key_values,
            hidden_states=tuple(all_hidden_states) if all_hidden_states is not None else None,
            attn_res_weights=tuple(all_weights) if all_weights is not None else None,
        )


def select_hidden_states(hidden_states: list, output_hidden_states) -> list:
    """`output_hidden_states` as transformers reads it: True for all, or the indices (negative from the end) to keep;
    the others are None, as transformers' own output capturing returns them."""
    selected = selected_hidden_states(output_hidden_states)
    if selected is None:
        return hidden_states
    n = len(hidden_states)
    keep = {i % n for i in selected if -n <= i < n}
    return [h if i in keep else None for i, h in enumerate(hidden_states)]


class KimiLinearAttnResForCausalLM(KimiLinearAttnResPreTrainedModel, KimiLinearForCausalLM, GenerationMixin):
    def __init__(self, config: KimiLinearAttnResConfig):
        KimiLinearAttnResPreTrainedModel.__init__(self, config)
        self.model = KimiLinearAttnResModel(config)
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
    ) -> AttnResCausalLMOutputWithPast:
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
            return AttnResCausalLMOutputWithPast(logits=logits, past_key_values=cache)
        outputs: AttnResModelOutputWithPast = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )
        logits = self.lm_head(slice_logits_to_keep(outputs.last_hidden_state, logits_to_keep))
        loss = None
        if labels is not None:
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **kwargs)
        return AttnResCausalLMOutputWithPast(
            loss=loss,
            logits=logits,
            past_key_values=outputs.past_key_values,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
            router_logits=outputs.router_logits,
            attn_res_weights=outputs.attn_res_weights,
        )


__all__ = [
    "KimiLinearAttnResPreTrainedModel",
    "KimiLinearAttnResModel",
    "KimiLinearAttnResForCausalLM",
    "KimiLinearAttnResDecoderLayer",
    "PseudoQuery",
]
