"""The family-independent AttnRes core: what any PreNorm decoder needs to read its depth sources.

- `config`: the AttnRes fields of a config and their checks (`AttnResConfigMixin`).
- `decoder_layer`: a decoder layer that mixes the depth sources before its two sub-layers (`AttnResDecoderLayerMixin`).
- `model`: the loop over the layers carrying the sources, the output mix before the final norm, the input checks,
  save / load with the weights record (`AttnResModelMixin`, `AttnResPreTrainedMixin`).
- `decoder_model`: a rotary PreNorm decoder (Llama, Mistral, Qwen2, Qwen3, Gemma 3) built from its family's own
  modules, and its causal LM head (`AttnResDecoderModel`, `AttnResDecoderForCausalLM`).

The mix itself, the depth layout, the two-phase schedule and the kernels were family-independent already:
`attnres.core.mix_point`, `attnres.core.depth_layout`, `attnres.core.inference`, `attnres.kernels`. Families live in
`attnres.families`; Kimi Linear (`attnres.families.kimi_linear.modeling_kimi_linear_attnres`) is one of them.
"""
