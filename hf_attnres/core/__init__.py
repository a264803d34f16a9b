"""The family-independent AttnRes core: what any PreNorm decoder needs to read its depth sources.

- `config`: the AttnRes fields of a config and their checks (`AttnResConfigMixin`).
- `decoder_layer`: a decoder layer that mixes the depth sources before its two sub-layers (`AttnResDecoderLayerMixin`).
- `model`: every family's base-model forward (embeddings, cache, positions; the loop over the layers
  carrying the sources, the output mix before the final norm), its causal LM head, the AttnRes tensors' initialization
  (`AttnResModelMixin`, `AttnResForCausalLMMixin`, `AttnResPreTrainedMixin`).
- `decoder_model`: a rotary PreNorm decoder (every generated family of `hf_attnres.families`) built from its family's
  own modules (masks, rotary embeddings), and its causal LM head (`AttnResDecoderModel`, `AttnResDecoderForCausalLM`).

Beside them: the mix point (`mix_point`), the depth rule (`depth_layout`) and the source counts it implies
(`depth_counts`). The features a config may switch on hook themselves onto these classes at their import, and a
saved folder ships them only where its config uses them: the paper's ablations (`ablations`), the gated read
(`gated_point`). What only the installed package adds to these classes (its fused depth mix, the `ATTNRES_BACKEND`
switch, the config fields' checks, the memory check, the input checks, the tools' depth queries, the two-phase
schedule, chunked prefill) is handed to them at its import (`installed`); a saved folder's code is generated from
the model modules, which import none of it. The core reads and writes no file: the folder reader, the weights
record, atomic saves and the code files of a saved folder are the tools' (`hf_attnres.folders`); the kernels are
`hf_attnres.kernels`.
Families live in `hf_attnres.families`; Kimi Linear (`hf_attnres.families.kimi_linear`) is one.
"""
