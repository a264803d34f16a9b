"""Saving and loading a model folder with the checks the model classes leave to the tools.

`save`: the model's own `save_pretrained` (transformers' save, plus the generated code files of a package class) into
a temporary sibling with the weights record (`attnres_weights.json`), then swapped into place: a failed save leaves the
previous model intact. `load`: a local folder's config.json and weight files read first (damaged ones named), the
model loaded, then its config compared with the weights record (a mismatch refused, naming the fields).
"""
from __future__ import annotations

from pathlib import Path

from .saved_model import (
    RECORD_FIELDS,
    check_folder_before_load,
    check_weights_record,
    save_folder,
    write_weights_record,
)


def write_model(model, folder: Path, tokenizer=None, *args, **save_kwargs) -> None:
    """The one way a model is written into a folder being built (`save`, convert, push-to-hub):
    `model.save_pretrained(folder, *args, **save_kwargs)`, the tokenizer beside it, and for an AttnRes model its
    weights record (`attnres_weights.json`: what the weights were saved as, checked by `load`). A plain transformers
    model's folder is transformers' own, nothing of ours."""
    model.save_pretrained(folder, *args, **save_kwargs)
    if hasattr(model.config, "attn_res_mode"):
        write_weights_record(folder, model.config)
    if tokenizer is not None:
        tokenizer.save_pretrained(folder)


def save(model, folder, *args, **kwargs) -> None:
    """`model.save_pretrained(folder, *args, **kwargs)`, crash-safe and with the weights record (`write_model` into a
    temporary sibling swapped into place). Off the writing process, or with transformers' own `push_to_hub`, it is
    transformers' save as it is."""
    if not kwargs.get("is_main_process", True) or kwargs.get("push_to_hub"):
        model.save_pretrained(folder, *args, **kwargs)
        return
    save_folder(lambda building: write_model(model, building, None, *args, **kwargs), folder)


def load(folder, *args, model_class=None, **kwargs):
    """`model_class.from_pretrained(folder, *args, **kwargs)` (default: `AutoModelForCausalLM`), the folder checked
    before and the weights record after. Returns what `from_pretrained` returns."""
    if model_class is None:
        from transformers import AutoModelForCausalLM as model_class
    check_folder_before_load(folder)
    loaded = model_class.from_pretrained(folder, *args, **kwargs)
    model = loaded[0] if kwargs.get("output_loading_info") else loaded  # (model, loading info) when asked
    explicit = set(kwargs) | (set(RECORD_FIELDS) if "config" in kwargs else set())
    check_weights_record(model.config, folder, explicit)
    return loaded


__all__ = ["save", "load", "write_model"]
