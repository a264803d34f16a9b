"""What the installed package adds to the model classes, at its import (`install`), beyond the arithmetic a saved
folder's code ships (hf_attnres.folders.remote_code generates that code from the model modules, which import none of
this):

- the fused depth mix: the package's kernel layer mapped to `AttnResDepthMix` with the `kernels` library, and bound
  to every model the package's classes build (`hf_attnres.kernels.mix.layers`);
- the `ATTNRES_BACKEND` environment variable, which overrides a config's `attn_res_backend` for every model;
- the checks of a family config's own fields at construction (`hf_attnres.core.config_checks`);
- the refusal of a config larger than the memory of the device it is built on (`hf_attnres.core.buildable`;
  `ATTNRES_ALLOW_LARGE_MODEL=1` insists);
- the check of every forward's input values (ids in the vocabulary, a 0/1 padding mask, the labels: one host sync)
  and of the Triton backend's device; a folder's code checks the ids and mask once per `generate`;
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
from .config_checks import check_family_fields, check_init_kwargs
from .depth_queries import install as install_depth_queries
from .inference import two_phase_schedule
from .input_checks import check_values, widened
from .model import AttnResForCausalLMMixin, AttnResModelMixin, AttnResPreTrainedMixin

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


def check_forward_inputs(model, input_ids, attention_mask, reference) -> None:
    check_backend(model.config.resolved_backend(), reference.device)
    check_values(input_ids, attention_mask, model.config.vocab_size)


def check_buildable(config, parameters: int | None = None) -> None:
    """Refuse a model of `parameters` weights (None: a rotary decoder's lower bound) the device cannot hold."""
    bound = parameters is None
    refuse_unbuildable(config, decoder_parameters(config) if bound else parameters, at_least=bound)


def check_labels(labels, reference, vocab_size: int) -> None:
    """Labels: integers of the input's [batch, seq_len] shape, each a token id or -100 (ignored)."""
    if labels is None or torch.compiler.is_compiling():
        return
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
        warnings.warn(f"every label is {IGNORE_INDEX}: no token to predict, so the loss is NaN (0 / 0)", stacklevel=3)


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
    AttnResConfigMixin.field_checks = staticmethod(check_family_fields)
    AttnResConfigMixin.init_kwargs_checks = staticmethod(check_init_kwargs)
    AttnResModelMixin.forward_check = staticmethod(check_forward_inputs)
    AttnResForCausalLMMixin.labels_check = staticmethod(check_labels)
    AttnResForCausalLMMixin.chunked_prefill = staticmethod(chunked_causal_lm_forward)
    AttnResModelMixin.depth_schedule = staticmethod(two_phase_schedule)
    AttnResPreTrainedMixin.build_check = staticmethod(check_buildable)
    AttnResPreTrainedMixin.kernel_binder = staticmethod(kernelize_model)
    AttnResPreTrainedMixin.save_pretrained = save_with_code


__all__ = ["install", "BACKEND_ENV_VAR", "backend_override", "check_backend", "check_forward_inputs", "check_labels"]
