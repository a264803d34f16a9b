"""The installed package's checks of a model's inputs (hf_attnres.core.installed hands them to the classes): shapes,
dtypes and value ranges, each a ValueError naming the argument before any kernel runs. A saved folder's code takes
input as transformers' own models do (their errors, torch's), and asks for exactly one of ids and embeddings. The value
checks cost one host synchronisation, shared by all of them: the package runs them at every forward and once per
`generate` call (before the prompt's first step).
"""
from __future__ import annotations

import torch

from .model import widened


def check_chunk_size(value) -> None:
    """A prefill chunk size (the forward's `prefill_chunk_size`, or transformers' generation option of that name) is
    None or a whole number of tokens >= 1: anything else would reach a tensor split as a raw torch error."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"prefill_chunk_size must be a whole number of tokens >= 1 (or None), got {value!r}")


def check_shapes(input_ids, inputs_embeds, hidden_size: int) -> None:
    """[batch, seq_len] ids or [batch, seq_len, hidden_size] embeddings, neither empty."""
    reference = input_ids if input_ids is not None else inputs_embeds
    if input_ids is not None and input_ids.dim() != 2:
        raise ValueError(f"input_ids must have shape [batch, seq_len], got {tuple(input_ids.shape)}")
    if inputs_embeds is not None and (inputs_embeds.dim() != 3 or inputs_embeds.shape[-1] != hidden_size):
        raise ValueError(f"inputs_embeds must have shape [batch, seq_len, {hidden_size}], "
                         f"got {tuple(inputs_embeds.shape)}")
    if reference.shape[0] == 0 or reference.shape[1] == 0:
        raise ValueError(f"empty input: batch and sequence length must be >= 1, got shape {tuple(reference.shape)}")


def check_mask_shape(attention_mask, reference) -> None:
    """A 2-D padding mask [batch, past + seq_len] (or a prepared 4-D mask)."""
    if isinstance(attention_mask, torch.Tensor) and attention_mask.dim() == 2:
        batch, seq_len = reference.shape[:2]
        if attention_mask.shape[0] != batch or attention_mask.shape[1] < seq_len:
            raise ValueError(
                f"attention_mask must have shape [batch={batch}, past + seq_len >= {seq_len}], "
                f"got {tuple(attention_mask.shape)}"
            )
    elif isinstance(attention_mask, torch.Tensor) and attention_mask.dim() != 4:
        raise ValueError(f"attention_mask must be 2-D [batch, seq] (or a 4-D mask), got {attention_mask.dim()}-D")


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
