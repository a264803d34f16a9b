"""Checks of the model's inputs that go beyond shapes (dtypes, value ranges): each raises a ValueError naming
the argument before any kernel runs. The value checks cost one host synchronisation, shared by all of them: a folder's
code runs them once per `generate` call, the installed package at every forward (hf_attnres.core.installed)."""
from __future__ import annotations

import torch

# the integer dtypes the embedding takes as they are; ids of any other integer dtype are widened to torch.long
EMBEDDING_DTYPES = (torch.int32, torch.int64)


def widened(ids: torch.Tensor | None, keep=EMBEDDING_DTYPES) -> torch.Tensor | None:
    """Integer token ids as torch.long unless their dtype is in `keep`: int8 / uint8 / int16 / unsigned ids compare
    with the vocabulary size without wrapping (a small dtype cannot hold it) and index the embedding."""
    return ids if ids is None or ids.dtype in keep else ids.long()


def check_chunk_size(value) -> None:
    """A prefill chunk size (the forward's `prefill_chunk_size`, or transformers' generation option of that name) is
    None or a whole number of tokens >= 1: anything else would reach a tensor split as a raw torch error."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"prefill_chunk_size must be a whole number of tokens >= 1 (or None), got {value!r}")


def check_dtypes(input_ids, inputs_embeds, parameter_dtype: torch.dtype) -> None:
    not_integer = input_ids is not None and (input_ids.is_floating_point() or input_ids.is_complex()
                                             or input_ids.dtype == torch.bool)
    if not_integer:
        raise ValueError(f"input_ids must hold integer token ids (torch.long), got dtype {input_ids.dtype}")
    if inputs_embeds is not None:
        if not inputs_embeds.is_floating_point():
            raise ValueError(f"inputs_embeds must be floating point, got dtype {inputs_embeds.dtype}")
        if inputs_embeds.dtype != parameter_dtype and not torch.is_autocast_enabled(inputs_embeds.device.type):
            raise ValueError(f"inputs_embeds has dtype {inputs_embeds.dtype} but the model's weights are "
                             f"{parameter_dtype}: cast it with .to({parameter_dtype})")


def check_values(input_ids, attention_mask, vocab_size: int) -> None:
    """Token ids inside the vocabulary and a 2-D padding mask of 0/1 only (2, -1 or 0.5 would change the logits
    silently). One host sync for both; the details are computed only for the error message."""
    flags = []
    input_ids = widened(input_ids)
    if input_ids is not None:
        flags.append(((input_ids < 0) | (input_ids >= vocab_size)).any())
    mask = attention_mask if isinstance(attention_mask, torch.Tensor) and attention_mask.dim() == 2 else None
    if mask is not None and mask.dtype != torch.bool:
        flags.append(((mask != 0) & (mask != 1)).any())
    if not flags or not bool(torch.stack(flags).any()):
        return
    if input_ids is not None and bool(flags[0]):
        low, high = int(input_ids.min()), int(input_ids.max())
        raise ValueError(f"input_ids must lie in [0, vocab_size={vocab_size}), got values in [{low}, {high}]")
    bad = mask[(mask != 0) & (mask != 1)].unique()[:5].tolist()
    raise ValueError(f"attention_mask must hold only 0 (padding) and 1 (token), got values {bad}")
