"""The family-independent parts of an AttnRes model: the loop that carries the depth sources through the decoder
layers and mixes them before the final norm, the input checks, and the AttnRes tensors' initialization.

A family's model is `class <Family>AttnResModel(AttnResModelMixin, <Family>AttnResPreTrainedModel)`: it prepares what
its layers need (masks, rotary embeddings) the family's own way and hands the layers' keyword arguments to
`run_depth`.
"""
import torch
from torch import nn
from transformers import PreTrainedModel
from transformers import initialization as init
from transformers.cache_utils import Cache, DynamicCache
from transformers.modeling_outputs import ModelOutput
from transformers.modeling_utils import slice_logits_to_keep
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs, can_return_tuple
from transformers.utils.generic import merge_with_config_defaults
from transformers.utils.output_capturing import capture_outputs, selected_hidden_states

# Imports of this package: a saved folder's files are generated flat from these modules (remote_code.py)
from hf_attnres.core.cache_arg import CACHE_ARG, cache_kwargs, given_cache, takes_old_cache_name
from hf_attnres.core.mix_point import AttnResMixing, DepthKeyNorm, MixSettings, PseudoQuery

# the integer dtypes the embedding takes as they are; ids of any other integer dtype are widened to torch.long
EMBEDDING_DTYPES = (torch.int32, torch.int64)


def widened(ids: torch.Tensor | None, keep=EMBEDDING_DTYPES) -> torch.Tensor | None:
    """Integer token ids as torch.long unless their dtype is in `keep`: int8 / uint8 / int16 / unsigned ids compare
    with the vocabulary size without wrapping (a small dtype cannot hold it) and index the embedding. Float, complex
    and bool tensors are no ids: left as they are, for the embedding to refuse rather than truncate."""
    if ids is None or ids.dtype in keep or ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
        return ids
    return ids.long()


class AttnResModelMixin(AttnResMixing):
    """The base model's forward and depth machinery; `self.layers` are `AttnResDecoderLayerMixin`s, `self.norm` the
    final norm. A family names its output class (`output_class`, with `attn_res_weights`) and prepares what its
    layers need (masks, rotary embeddings) in `layer_kwargs`."""

    output_class = None
    # The installed package's, set at its import (None in a folder's copy): `forward_check(model, input_ids,
    # inputs_embeds, attention_mask)` checks every forward's input shapes, dtypes and values, `depth_schedule(model,
    # hidden_states, output_attn_res_weights)` gives the two-phase schedule of a no-grad forward, or None
    forward_check = depth_schedule = None

    @takes_old_cache_name
    @merge_with_config_defaults
    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        use_cache: bool | None = None,
        output_hidden_states: bool | int | list[int] | None = None,
        output_attn_res_weights: bool = False,
        past_key_values: Cache | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> ModelOutput:
        """`cache` (`past_key_values` before transformers 5.24: either name is taken, `given_cache`)."""
        cache = given_cache(cache, past_key_values)
        inputs_embeds, cache, position_ids, output_hidden_states = self.prepare_inputs(
            input_ids, inputs_embeds, attention_mask, cache, position_ids, use_cache, output_hidden_states
        )
        hidden_states, all_hidden_states, all_weights = self.run_depth(
            inputs_embeds,
            self.layer_kwargs(inputs_embeds, attention_mask, cache, position_ids, use_cache),
            output_hidden_states,
            output_attn_res_weights,
            **kwargs,
        )
        return self.output_class(
            last_hidden_state=hidden_states,
            hidden_states=all_hidden_states,
            attn_res_weights=all_weights,
            **cache_kwargs(cache),
        )

    def layer_kwargs(self, inputs_embeds, attention_mask, cache, position_ids, use_cache):
        """The family's per-layer keyword arguments: a function of the layer index (mask, positions, and the cache
        under the installed transformers' name, `cache_kwargs`, which its gradient-checkpointing layers clear)."""
        raise NotImplementedError

    def init_output_mix(self, config) -> None:
        """The mix before the final norm (`model.output_attn_res_*`), in the block and full modes."""
        if config.attn_res_mode != "standard":
            self.add_mix_point("output_attn", config)

    def check_inputs(self, input_ids, inputs_embeds, attention_mask) -> None:
        """Exactly one of ids and embeddings, as transformers' models ask (given both, the ids would be ignored); the
        installed package checks the rest (`forward_check`)."""
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("You must specify exactly one of input_ids or inputs_embeds")
        if self.forward_check is not None:
            self.forward_check(self, input_ids, inputs_embeds, attention_mask)

    def prepare_inputs(self, input_ids, inputs_embeds, attention_mask, cache, position_ids, use_cache,
                       output_hidden_states):
        """Every family's forward preamble: the inputs checked, the embeddings, a new cache when one is used, the
        positions. Returns (inputs_embeds, cache, position_ids, output_hidden_states)."""
        self.check_inputs(input_ids, inputs_embeds, attention_mask)
        if output_hidden_states is None:
            output_hidden_states = self.config.output_hidden_states
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(widened(input_ids))
        if use_cache and cache is None:
            cache = DynamicCache(config=self.config)
        if position_ids is None:
            past_seen_tokens = cache.get_seq_length() if cache is not None else 0
            position_ids = torch.arange(inputs_embeds.shape[1], device=inputs_embeds.device) + past_seen_tokens
            position_ids = position_ids.unsqueeze(0)
        return inputs_embeds, cache, position_ids, output_hidden_states

    def run_depth(self, inputs_embeds, layer_kwargs, output_hidden_states, output_attn_res_weights: bool, **kwargs):
        """The decoder layers over the depth sources, then the output mix and the final norm.

        `layer_kwargs(i)`: the family's per-layer keyword arguments (mask, positions, cache); `kwargs` go to every
        layer. Returns (last hidden state, the hidden states asked for or None, the mix weights or None).
        """
        all_hidden_states = [inputs_embeds] if output_hidden_states else None
        all_weights = [] if output_attn_res_weights else None
        schedule = None if self.depth_schedule is None else self.depth_schedule(self, inputs_embeds,
                                                                                  output_attn_res_weights)
        settings = MixSettings.of(self.config)  # read once here, not at each of the 2L+1 mix points
        sources = (inputs_embeds,)
        for i, layer in enumerate(self.layers[: self.config.num_hidden_layers]):
            outputs = layer(
                *sources,
                output_attn_res_weights=output_attn_res_weights,
                attn_res_schedule=schedule,
                attn_res_settings=settings,
                **layer_kwargs(i),
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
            all_hidden_states = tuple(select_hidden_states(all_hidden_states, output_hidden_states))
        return hidden_states, all_hidden_states, tuple(all_weights) if all_weights is not None else None


def select_hidden_states(hidden_states: list, output_hidden_states) -> list:
    """`output_hidden_states` as transformers reads it: True for all, or the indices (negative from the end) to keep;
    the others are None, as transformers' own output capturing returns them."""
    selected = selected_hidden_states(output_hidden_states)
    if selected is None:
        return hidden_states
    n = len(hidden_states)
    keep = {i % n for i in selected if -n <= i < n}
    return [h if i in keep else None for i, h in enumerate(hidden_states)]


class AttnResForCausalLMMixin:
    """The causal LM head of every family (first base, then the family's AttnRes PreTrainedModel and its own
    ForCausalLM, whose tied-weight, tensor-parallel and generation settings it keeps). A family names its AttnRes base
    model (`model_class`), its output class (`output_class`, with `attn_res_weights`) and the base model's outputs that
    the output carries beside the logits (`model_outputs`: Kimi Linear's adds `router_logits`)."""

    model_class = output_class = None
    model_outputs = (CACHE_ARG, "hidden_states", "attentions", "attn_res_weights")
    # The installed package's, set at its import (None in a folder's copy): `labels_check(model, labels, reference,
    # prefill_chunk_size)`, its check of the labels and the chunk size, and `chunked_prefill(model, **inputs,
    # chunk_size=) -> (logits, cache)`, its prefill in chunks, a way to run in bounded memory, not the arithmetic
    labels_check = chunked_prefill = None

    def __init__(self, config):
        PreTrainedModel.__init__(self, config)  # not the family's ForCausalLM.__init__, which builds its own model
        self.model = self.model_class(config)
        self.vocab_size = config.vocab_size
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    @takes_old_cache_name
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        prefill_chunk_size: int | None = None,
        past_key_values: Cache | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> ModelOutput:
        """`prefill_chunk_size`: run a longer prompt in chunks of this many tokens, carrying the cache (long-context
        prefill: the depth bank holds chunk-sized tensors), where the installed package is. Same logits and cache; no
        loss, per-layer outputs.
        `cache`: `past_key_values` before transformers 5.24 (either name is taken, `given_cache`)."""
        cache = given_cache(cache, past_key_values)
        reference = input_ids if input_ids is not None else inputs_embeds
        if self.labels_check is not None:
            self.labels_check(self, labels, reference, prefill_chunk_size)
        labels = widened(labels, keep=(torch.int64,))  # the loss takes torch.long targets
        if prefill_chunk_size is not None and reference is not None and reference.shape[1] > prefill_chunk_size:
            if self.chunked_prefill is None:
                raise ValueError("prefill_chunk_size: a chunked forward needs the hf-attnres package (pip install "
                                 "hf-attnres); without it, generate(..., prefill_chunk_size=N) chunks the prompt")
            logits, cache = self.chunked_prefill(
                self, input_ids=input_ids, inputs_embeds=inputs_embeds, attention_mask=attention_mask,
                cache=cache, chunk_size=prefill_chunk_size, logits_to_keep=logits_to_keep, labels=labels, **kwargs,
            )
            return self.output_class(logits=self.postprocess_logits(logits), **cache_kwargs(cache))
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=cache,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )
        logits = self.postprocess_logits(self.lm_head(slice_logits_to_keep(outputs.last_hidden_state, logits_to_keep)))
        loss = None
        if labels is not None:
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **kwargs)
        carried = {name: getattr(outputs, name) for name in self.model_outputs}
        return self.output_class(loss=loss, logits=logits, **carried)

    def postprocess_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """The family's last step on the logits (Gemma's soft-capping); none by default."""
        return logits


class AttnResPreTrainedMixin:
    """The AttnRes tensors' initialization. First base of a family's PreTrainedModel
    (`class <Family>AttnResPreTrainedModel(AttnResPreTrainedMixin, ...)`)."""

    # The installed package's, set at its import (None in a folder's copy): `build_check(config, parameters=None)`
    # refuses a config larger than the machine's memory before any allocation, `kernel_binder(model)` binds its fused
    # depth mix to the model's `AttnResDepthMix` modules
    build_check = kernel_binder = None
    # the AttnRes models read token ids only, whatever the family's PreTrainedModel lists (Gemma 3's lists images: it
    # is shared with the multimodal model)
    input_modalities = ("text",)
    # the AttnRes tensors that start at zero, without a random draw (a feature's code adds its own at its import)
    zero_init = (PseudoQuery,)

    def post_init(self):
        super().post_init()
        if self.kernel_binder is not None:
            self.kernel_binder(self)

    @torch.no_grad()
    def _init_weights(self, module):
        if isinstance(module, PseudoQuery) and self.config.attn_res_query_init_std > 0:
            # a study arm: random queries (this draws from the RNG, so the arm's other weights differ from a matched
            # standard run's)
            init.normal_(module.weight, std=self.config.attn_res_query_init_std)
            return
        if isinstance(module, self.zero_init):
            init.zeros_(module.weight)  # no random draw first (see PseudoQuery.reset_parameters)
            return
        if isinstance(module, DepthKeyNorm):
            init.constant_(module.weight, self.config.attn_res_key_norm_init)
            return
        super()._init_weights(module)


__all__ = ["AttnResForCausalLMMixin", "AttnResModelMixin", "AttnResPreTrainedMixin", "select_hidden_states"]
