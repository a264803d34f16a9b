"""Long-context prefill of an AttnRes model of any family: a long prompt through the model in sequence chunks, carrying
the family's cache (its attention keys and values, and any recurrent state), so the depth bank only ever holds
chunk-sized tensors. Logits and cache equal the unchunked forward.
"""
from __future__ import annotations

import torch
from transformers.cache_utils import DynamicCache

from .input_checks import check_chunk_size


def chunked_causal_lm_forward(model, input_ids=None, inputs_embeds=None, attention_mask=None, cache=None,
                              chunk_size: int = 4096, logits_to_keep: int | torch.Tensor = 0, **kwargs):
    """`model(...)` (an AttnRes causal LM) over the prompt in chunks of `chunk_size` tokens, cache carried.

    Only the hidden states the logits need are kept (`logits_to_keep`: 0 = all, k = the last k tokens).
    """
    if kwargs.get("labels") is not None:
        raise ValueError("prefill_chunk_size does not compute a loss: pass labels to an unchunked forward")
    kwargs.pop("labels", None)
    check_chunk_size(chunk_size)
    if kwargs.get("output_attn_res_weights") or kwargs.get("output_hidden_states"):
        raise ValueError("prefill_chunk_size does not collect per-layer outputs: run an unchunked forward for those")
    if attention_mask is not None and attention_mask.dim() != 2:
        raise ValueError("prefill_chunk_size needs a 2-D attention_mask [batch, past + seq] (it is cut per chunk)")
    reference = input_ids if input_ids is not None else inputs_embeds
    seq_len = reference.shape[1]
    cache = cache if cache is not None else DynamicCache(config=model.config)
    past = int(cache.get_seq_length())  # a tensor where a linear-attention layer counts it (transformers 5.24+)
    keep_from = seq_len - logits_to_keep if isinstance(logits_to_keep, int) and logits_to_keep > 0 else 0
    position_ids = kwargs.pop("position_ids", None)
    kept = []
    for start in range(0, seq_len, chunk_size):
        end = min(start + chunk_size, seq_len)
        outputs = model.model(
            position_ids=position_ids[:, start:end] if position_ids is not None else None,
            input_ids=input_ids[:, start:end] if input_ids is not None else None,
            inputs_embeds=inputs_embeds[:, start:end] if inputs_embeds is not None else None,
            attention_mask=attention_mask[:, : past + end] if attention_mask is not None else None,
            cache=cache,
            use_cache=True,
            **kwargs,
        )
        if end > keep_from:
            kept.append(outputs.last_hidden_state[:, max(keep_from - start, 0) :])
    hidden_states = torch.cat(kept, dim=1)
    if isinstance(logits_to_keep, torch.Tensor):
        hidden_states = hidden_states[:, logits_to_keep]
    return model.lm_head(hidden_states), cache
