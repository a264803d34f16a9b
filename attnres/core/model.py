"""The family-independent parts of an AttnRes model: the loop that carries the depth sources through the decoder
layers and mixes them before the final norm, the input checks, and saving / loading with the weights record.

A family's model is `class XAttnResModel(AttnResModelMixin, XAttnResPreTrainedModel)`: it prepares what its layers
need (masks, rotary embeddings) the family's own way and hands the layers' keyword arguments to `run_depth`.
"""
import torch
from transformers import initialization as init
from transformers.utils.output_capturing import selected_hidden_states

# Imports of this package: a saved folder's files are generated flat from these modules (remote_code.py)
from attnres.core.inference import two_phase_schedule
from attnres.core.input_checks import check_backend, check_dtypes, check_values
from attnres.core.mix_point import AttnResMixing, DepthKeyNorm, DepthLogits, MixSettings, PseudoQuery
from attnres.core.saved_model import RECORD_FIELDS, check_folder_before_load, check_weights_record, save_folder


class AttnResModelMixin(AttnResMixing):
    """The base model's depth machinery; `self.layers` are `AttnResDecoderLayerMixin`s, `self.norm` the final norm."""

    def init_output_mix(self, config) -> None:
        """The mix before the final norm (`model.output_attn_res_*`), in the block and full modes."""
        if config.attn_res_mode != "standard":
            self.add_mix_point("output_attn", config)

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

    def run_depth(self, inputs_embeds, layer_kwargs, output_hidden_states, output_attn_res_weights: bool, **kwargs):
        """The decoder layers over the depth sources, then the output mix and the final norm.

        `layer_kwargs(i)`: the family's per-layer keyword arguments (mask, positions, cache); `kwargs` go to every
        layer. Returns (last hidden state, the hidden states asked for or None, the mix weights or None).
        """
        all_hidden_states = [inputs_embeds] if output_hidden_states else None
        all_weights = [] if output_attn_res_weights else None
        schedule = two_phase_schedule(self, inputs_embeds, output_attn_res_weights)
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


class AttnResPreTrainedMixin:
    """Loading with the folder checks, saving with the weights record, and the AttnRes tensors' initialization.
    First base of a family's PreTrainedModel (`class XAttnResPreTrainedModel(AttnResPreTrainedMixin, ...)`)."""

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        # a local folder's files are checked first (damaged ones named), and its config against the weights record
        check_folder_before_load(pretrained_model_name_or_path)
        loaded = super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
        model = loaded[0] if kwargs.get("output_loading_info") else loaded  # (model, loading info) when asked
        explicit = set(kwargs) | (set(RECORD_FIELDS) if "config" in kwargs else set())
        check_weights_record(model.config, pretrained_model_name_or_path, explicit)
        return loaded

    def save_pretrained(self, save_directory, *args, **kwargs):
        """transformers' save, plus every module the model needs beside it when the class is marked for remote code
        (see remote_code.py), through a temporary folder with the weights record: a failed save leaves the previous
        model intact."""
        save_folder(self._save_with_code, save_directory, self.config, *args, **kwargs)

    # the package's generator of a folder's code files (set by attnres.core.remote_code, which the package always
    # imports); a folder's own copy, loaded as remote code, has none: transformers copies the files it came from
    code_writer = None

    def _save_with_code(self, save_directory, *args, **kwargs):
        super().save_pretrained(save_directory, *args, **kwargs)
        if self.is_remote_code() and kwargs.get("is_main_process", True) and self.code_writer is not None:
            self.code_writer(save_directory, type(self).__module__)

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


__all__ = ["AttnResModelMixin", "AttnResPreTrainedMixin", "select_hidden_states"]
