"""What the installed package adds to the model classes, at its import (`install`), beyond the arithmetic a saved
folder's code ships (hf_attnres.folders.remote_code generates that code from the model modules, which import none of
this):

- the fused depth mix: the package's kernel layer mapped to `AttnResDepthMix` with the `kernels` library, and bound
  to every model the package's classes build (`hf_attnres.kernels.mix.layers`);
- the `ATTNRES_BACKEND` environment variable, which overrides a config's `attn_res_backend` for every model;
- the checks of a config's field types and of a family config's own fields at construction, and the refusal of a
  folder without config.json (`hf_attnres.core.config_checks`);
- the refusal of a config larger than the memory of the device it is built on (`hf_attnres.core.buildable`;
  `ATTNRES_ALLOW_LARGE_MODEL=1` insists);
- the checks of every forward's inputs (`hf_attnres.core.input_checks`: shapes, dtypes, ids in the vocabulary, a 0/1
  padding mask, the labels, the prefill chunk size; the values cost one host sync) and of the Triton backend's device,
  and of `generate`'s prefill chunk size; a folder's code takes input as transformers' models do;
- the save that writes a folder's generated code files (`save_with_code`);
- the depth layout's queries that only tools ask (`hf_attnres.core.depth_queries`);
- the two-phase inference schedule of block mode (`hf_attnres.core.inference`);
- the forward's long-context prefill in chunks (`prefill_chunk_size`, `hf_attnres.core.chunked_prefill`); a folder's
  code refuses the argument in one line (transformers' `generate` chunks a prompt itself).

Each is a class attribute the model modules read (None there by default), so a folder's own copy of the classes,
loaded as remote code, runs without them.
"""
from __future__ import annotations

import os
import warnings

import torch

from ..kernels.mix.layers import kernelize_model, register_kernels

# the config-switched features: they hook themselves onto the model and config classes at import
from . import ablation_checks, ablations, gated_point, gated_read_checks  # noqa: F401
from .buildable import decoder_parameters, refuse_unbuildable
from .chunked_prefill import chunked_causal_lm_forward
from .config import ATTN_RES_BACKENDS, AttnResConfigChecks, AttnResConfigMixin
from .config_checks import check_config_fields, config_dict_or_refusal, field_errors_as_value_errors
from .depth_queries import install as install_depth_queries
from .inference import two_phase_schedule
from .input_checks import check_chunk_size, check_dtypes, check_mask_shape, check_shapes, check_values
from .model import AttnResForCausalLMMixin, AttnResModelMixin, AttnResPreTrainedMixin, widened

BACKEND_ENV_VAR = "ATTNRES_BACKEND"
IGNORE_INDEX = -100  # transformers' loss skips these label positions


def backend_override(field: str) -> str:
    """The backend in force: `ATTNRES_BACKEND` wins over the config field."""
    backend = os.environ.get(BACKEND_ENV_VAR, field)
    if backend not in ATTN_RES_BACKENDS:
        raise ValueError(f"{BACKEND_ENV_VAR} must be one of {ATTN_RES_BACKENDS}, got {backend!r}")
    return backend


def check_backend(backend: str, device) -> None:
    """The Triton backend needs CUDA tensors (or Triton's interpreter): say so before Triton's driver fails."""
    if backend == "triton" and device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        raise ValueError(f"attn_res_backend (or {BACKEND_ENV_VAR}) is 'triton' but the input is on {device}: the "
                         "Triton kernels need a CUDA GPU; use 'auto' or 'torch'")


def check_forward_inputs(model, input_ids, inputs_embeds, attention_mask) -> None:
    """Clear errors for bad input, before it becomes an index error deep inside a kernel. The values cost a host sync
    and are left to the eager forward."""
    reference = input_ids if input_ids is not None else inputs_embeds
    check_dtypes(input_ids, inputs_embeds, model.embed_tokens.weight.dtype)
    check_shapes(input_ids, inputs_embeds, model.config.hidden_size)
    if not torch.compiler.is_compiling():
        check_backend(model.config.resolved_backend(), reference.device)
        check_values(input_ids, attention_mask, model.config.vocab_size)
    check_mask_shape(attention_mask, reference)


def check_buildable(config, parameters: int | None = None) -> None:
    """Refuse a model of `parameters` weights (None: a rotary decoder's lower bound) the device cannot hold."""
    bound = parameters is None
    refuse_unbuildable(config, decoder_parameters(config) if bound else parameters, at_least=bound)


def check_labels(model, labels, reference, prefill_chunk_size=None) -> None:
    """Labels: integers of the input's [batch, seq_len] shape, each a token id or -100 (ignored); then the prefill
    chunk size."""
    if labels is not None and not torch.compiler.is_compiling():
        check_label_values(labels, reference, model.config.vocab_size)
    check_chunk_size(prefill_chunk_size)


def check_label_values(labels, reference, vocab_size: int) -> None:
    if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
        raise ValueError(f"labels must hold integer token ids (torch.long), got dtype {labels.dtype}")
    labels = widened(labels, keep=(torch.int64,))
    if reference is not None and tuple(labels.shape) != tuple(reference.shape[:2]):
        raise ValueError(f"labels must have the input's shape [batch, seq_len] = {tuple(reference.shape[:2])}, "
                         f"got {tuple(labels.shape)}")
    ignored = labels == IGNORE_INDEX
    bad = ~ignored & ((labels < 0) | (labels >= vocab_size))
    any_bad, all_ignored = (bool(v) for v in torch.stack([bad.any(), ignored.all()]).tolist())
    if any_bad:
        raise ValueError(f"labels must lie in [0, vocab_size={vocab_size}) or be {IGNORE_INDEX} (ignored), got "
                         f"values {labels[bad].unique()[:5].tolist()}")
    if all_ignored:
        warnings.warn(f"every label is {IGNORE_INDEX}: no token to predict, so the loss is NaN (0 / 0)", stacklevel=4)


def checked_generate(self, *args, **kwargs):
    """transformers' `generate`, its prefill chunk size checked first (generate splits the prompt itself)."""
    generation_config = kwargs.get("generation_config") or getattr(self, "generation_config", None)
    check_chunk_size(kwargs.get("prefill_chunk_size", getattr(generation_config, "prefill_chunk_size", None)))
    return super(AttnResForCausalLMMixin, self).generate(*args, **kwargs)


def with_wrapped_init(cls) -> None:
    """`cls` and its subclasses built so far, their `__init__` re-raising `@strict`'s type errors as ValueErrors."""
    if "__init__" in cls.__dict__:
        cls.__init__ = field_errors_as_value_errors(cls.__init__)
    for subclass in cls.__subclasses__():
        with_wrapped_init(subclass)


def save_with_code(self, save_directory, *args, **kwargs):
    """transformers' save, plus the generated code files when the class is marked for remote code: the package's
    `save_pretrained` of every AttnRes model, writing with the `code_writer` its registration sets
    (hf_attnres/__init__.py). A folder's own copy keeps transformers' save, which copies the files its class came
    from."""
    super(AttnResPreTrainedMixin, self).save_pretrained(save_directory, *args, **kwargs)
    writer = getattr(self, "code_writer", None)
    if writer is not None and self.is_remote_code() and kwargs.get("is_main_process", True):
        writer(save_directory, type(self).__module__)


def install() -> None:
    """Hand the package's features to the model classes (idempotent)."""
    register_kernels()
    install_depth_queries()
    AttnResConfigChecks.backend_override = staticmethod(backend_override)
    AttnResConfigMixin.field_checks = staticmethod(check_config_fields)
    AttnResConfigMixin.init_wrapper = staticmethod(field_errors_as_value_errors)
    AttnResConfigMixin.get_config_dict = classmethod(config_dict_or_refusal)
    for subclass in AttnResConfigMixin.__subclasses__():
        with_wrapped_init(subclass)
    AttnResModelMixin.forward_check = staticmethod(check_forward_inputs)
    AttnResForCausalLMMixin.labels_check = staticmethod(check_labels)
    AttnResForCausalLMMixin.chunked_prefill = staticmethod(chunked_causal_lm_forward)
    AttnResForCausalLMMixin.generate = checked_generate
    AttnResModelMixin.depth_schedule = staticmethod(two_phase_schedule)
    AttnResPreTrainedMixin.build_check = staticmethod(check_buildable)
    AttnResPreTrainedMixin.kernel_binder = staticmethod(kernelize_model)
    AttnResPreTrainedMixin.save_pretrained = save_with_code


__all__ = ["install", "BACKEND_ENV_VAR", "backend_override", "check_backend", "check_forward_inputs", "check_labels"]
