"""A PreNorm decoder layer that reads its input from the depth sources instead of one residual stream.

Any family whose layer is `h + attn(norm1(h))` then `h + mlp(norm2(h))` (the post-norms of Gemma 3 included: they are
part of a sub-layer's output) becomes AttnRes by mixing the sources before each sub-layer, where the residual stream
was read. The layer receives the current *depth sources* and returns the ones it adds or updates
(`hf_attnres.core.depth_layout`):

- standard: one source, the residual stream; a sub-layer output is added to it (the family's own layer, exactly).
- block:    a block's first attention output opens a new partial sum; every other output joins the partial sum.
- full:     every sub-layer output is its own source.

A family's layer is `class <Family>AttnResDecoderLayer(AttnResDecoderLayerMixin, <Family>DecoderLayer)`; it names
the norms that read each mix (`attn_res_input_norms`), the modules that end each sub-layer's output
(`attn_res_output_modules`), and overrides `attention` / `feed_forward` where its sub-layers differ otherwise.
"""
import torch

from hf_attnres.core.cache_arg import cache_kwargs, given_cache
from hf_attnres.core.depth_layout import DepthLayout
from hf_attnres.core.mix_point import AttnResMixing


class AttnResDecoderLayerMixin(AttnResMixing):
    """A PreNorm layer (`h + attn(norm1(h))` then `h + mlp(norm2(h))`) reading its input from the depth sources: the
    sources are mixed before each sub-layer, where the residual stream was read, and the layer returns the sources it
    adds or updates (`DepthLayout`). Standard mode is the family's own layer, exactly."""

    # the RMSNorms that read the attention and the MLP mix (the family's pre-norms)
    attn_res_input_norms = ("input_layernorm", "post_attention_layernorm")
    # the modules applied to the attention and the MLP output before it joins the depth sources (Gemma 3's post-norms,
    # Phi-3's residual dropouts); empty: the sub-layer's output joins as it is
    attn_res_output_modules: tuple[str, ...] = ()

    def __init__(self, config, layer_idx: int):
        super().__init__(config, layer_idx)  # the family's own layer, then the AttnRes tensors after its modules
        self.init_attn_res(config, layer_idx)

    def init_attn_res(self, config, layer_idx: int) -> None:
        """The layer's place in the depth layout and its mix points (after the family's modules are built)."""
        self.config = config
        self.layer_idx = layer_idx
        # where this layer's outputs go among the depth sources
        self.depth_layout = DepthLayout.of(config)
        self.opens_source = self.depth_layout.opens_source(layer_idx)
        self.num_new_sources = self.depth_layout.new_sources_per_layer
        if config.attn_res_mode != "standard":
            self.add_mix_point("self_attention", config)
            self.add_mix_point("mlp", config)

    def update_sources(self, sources: tuple[torch.Tensor, ...], new_sources: tuple[torch.Tensor, ...]):
        """The depth sources after this layer: its outputs open new sources, or replace the running partial sum."""
        return self.depth_layout.update_sources(self.layer_idx, sources, new_sources)

    def attention(self, hidden_states, attention_mask, position_ids, cache, use_cache, **kwargs):
        """The family's attention sub-layer on its normed input, without the residual add its `forward` fuses in."""
        hidden_states, _ = self.self_attn(
            hidden_states=hidden_states,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=use_cache,
            **cache_kwargs(cache),
            **kwargs,
        )
        return hidden_states

    def feed_forward(self, hidden_states):
        """The family's MLP (or MoE) sub-layer on its normed input."""
        return self.mlp(hidden_states)

    def forward(
        self,
        *sources: torch.Tensor,
        attention_mask=None,
        position_ids=None,
        cache=None,
        use_cache: bool | None = False,
        output_attn_res_weights: bool = False,
        attn_res_schedule=None,
        attn_res_settings=None,
        past_key_values=None,
        **kwargs,
    ) -> tuple[torch.Tensor, ...]:
        """Sources come positionally: reentrant checkpointing only tracks gradients of positional tensors.

        Returns the new sources (1, or 2 in full mode) followed by the mix weights when asked: a flat tuple of tensors.
        `attn_res_schedule`: how no-grad mixes are computed (the installed package's two-phase schedule), None: plain.
        `attn_res_settings`: the config's mix switches, resolved once per model forward (`mix_point.MixSettings`).
        `cache`: `past_key_values` before transformers 5.24 (either name; the model passes the installed one's, which
        transformers' gradient-checkpointing layer clears under checkpointing).
        """
        cache = given_cache(cache, past_key_values)
        weights = [] if output_attn_res_weights else None
        attn_norm, mlp_norm = (self._modules[name] for name in self.attn_res_input_norms)
        h = self.mix("self_attention", sources, weights, attn_norm, attn_res_schedule, attn_res_settings)
        attn_out = self.attention(h, attention_mask, position_ids, cache, use_cache, **kwargs)
        # an output module belongs to its sub-layer: the output joins the sources through it, so no mix reads past it
        ends = self.attn_res_output_modules
        if ends:
            attn_out = self._modules[ends[0]](attn_out)
        if self.opens_source:
            kept, partial = sources, attn_out
        else:
            kept, partial = sources[:-1], sources[-1] + attn_out
        h = self.mix("mlp", (*kept, partial), weights, mlp_norm, attn_res_schedule, attn_res_settings)
        mlp_out = self.feed_forward(h)
        if ends:
            mlp_out = self._modules[ends[1]](mlp_out)
        new_sources = (partial, mlp_out) if self.num_new_sources == 2 else (partial + mlp_out,)
        return (*new_sources, *(weights or ()))


__all__ = ["AttnResDecoderLayerMixin"]
