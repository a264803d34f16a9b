"""The source of a family convert (every family of the registry but Kimi Linear): a model folder or a GGUF file.

Every guard of the Kimi path runs before a model is built: the folder reader (damaged, truncated, lying or
overlapping safetensors headers, empty or missing weight files, integer dtypes; a GGUF file that does not parse:
`folders.model_family`, where the family was resolved), the config validator (`guards`: a mode that is not one, an
AttnRes one, the upcycle flags), and the size guard from the config's numbers. Loading then goes through
transformers, and its own report of missing, unexpected and mis-shaped tensors is a refusal: nothing is ever randomly
initialised on the way to a written folder.
"""
from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from ..core.buildable import device_memory_bytes
from ..families.upcycle import check_source_model
from ..folders.checkpoint_files import check_model_folder, weight_files
from ..folders.model_family import transformers_config
from ..utils import finite_weights
from .errors import ConversionError
from .guards import check_family_source, check_fits_in_memory

# the source and the converted model are in memory together
COPIES_IN_MEMORY = 2
logger = logging.getLogger(__name__)


@dataclass
class FamilySource:
    path: Path  # the input, a folder or a .gguf file
    folder: Path
    gguf_file: str | None
    family: str  # the family's own model_type
    config: object  # transformers' config of the source, checked; untied where the file holds its own lm_head

    def load(self, progress: bool = True, purpose: str = "upcycling"):
        """The source causal LM, in the dtype it is stored in; ConversionError naming every tensor transformers
        reports missing, unexpected or of another shape, a quantized model, or an integer or non-finite weight
        (`purpose`: what the model is loaded for, as the refusal says it)."""
        from transformers import AutoModelForCausalLM

        if progress and self.gguf_file:
            print(f"reading {self.path} (transformers dequantizes every tensor: this takes a while)", file=sys.stderr,
                  flush=True)
        model, info = AutoModelForCausalLM.from_pretrained(
            self.folder, gguf_file=self.gguf_file, config=self.config, dtype="auto", output_loading_info=True)
        problems = [f"{name}: missing" for name in info.get("missing_keys", ())]
        problems += [f"{name}: unexpected tensor" for name in info.get("unexpected_keys", ())]
        problems += [f"{item[0] if isinstance(item, tuple) else item}: shape differs from the config's"
                     for item in info.get("mismatched_keys", ())]
        if problems:
            raise ConversionError.from_problems(sorted(problems), f"{self.path} does not match its config")
        try:  # a NaN weight is named, never written: by its weight file where there are files
            if not self.gguf_file:
                finite_weights.check_folder(self.folder)
            check_source_model(model, purpose, where=self.path)  # what `hf_attnres.upcycle` refuses, refused here
        except ValueError as error:  # NonFiniteWeightsError and UpcycleError name the file already
            raise ConversionError(str(error)) from None
        if self.gguf_file:
            dequantized(model)
        return model.eval()

    def tokenizer(self):
        """The source's tokenizer, or None (a folder without one is still a model; a warning says so)."""
        from transformers import AutoTokenizer

        try:
            return AutoTokenizer.from_pretrained(self.folder, gguf_file=self.gguf_file)
        except Exception as error:  # noqa: BLE001  any failure: the model is written without it
            logger.warning("no tokenizer saved: %s cannot be read as one (%s)", self.path, type(error).__name__)
            return None


def dequantized(model) -> None:
    """Drop the GGUF mark of a model transformers dequantized on load: its weights are plain floats, and it saves as
    any model does."""
    model.hf_quantizer = None
    model.is_quantized = False
    model.config.__dict__.pop("quantization_config", None)


def open_source(input: Path, family: str, gguf_config=None, upcycle: str | None = None,
                block_size: int | None = None) -> FamilySource:
    """Every check that needs no model built (module docstring) of a source whose family the caller resolved
    (`guards.check_request`; `gguf_config`: the GGUF file's config it read); ConversionError naming the file, field
    or flag."""
    try:
        if gguf_config is not None:
            source = FamilySource(input, input.parent, input.name, family, gguf_config)
            check_family_source(gguf_config.to_dict(), input, upcycle, block_size)
        else:
            source = _open_folder(input, family, upcycle, block_size)
        fields = source.config.to_dict()
        dtype = fields.get("dtype") or fields.get("torch_dtype")
        check_fits_in_memory(fields, 2 if dtype in ("bfloat16", "float16") else 4, COPIES_IN_MEMORY,
                             device_memory_bytes(torch.device("cpu")))
    except ConversionError:
        raise
    except ValueError as error:  # CheckpointFileError is one
        raise ConversionError(str(error)) from None
    return source


def _open_folder(folder: Path, family: str, upcycle: str | None, block_size: int | None) -> FamilySource:
    fields = check_model_folder(folder, "input")  # config.json and every weight file's header and dtypes
    where = folder / "config.json"
    check_family_source(fields, where, upcycle, block_size)
    config = transformers_config(folder, None, where)
    if config.tie_word_embeddings and _file_lm_head_differs(folder):
        config.tie_word_embeddings = False  # keep what the file holds: its own lm_head, written untied
    return FamilySource(folder, folder, None, family, config)


def _file_lm_head_differs(folder: Path) -> bool:
    """Whether the weight files hold an lm_head.weight that is not the embedding (a config claiming tied weights
    over an untied checkpoint)."""
    from safetensors import safe_open

    found = {}
    for file in weight_files(folder):
        with safe_open(file, framework="pt") as handle:
            for name in ("lm_head.weight", "model.embed_tokens.weight"):
                if name in handle.keys():
                    found[name] = handle.get_tensor(name)
    head, embedding = found.get("lm_head.weight"), found.get("model.embed_tokens.weight")
    return head is not None and (embedding is None or not torch.equal(head, embedding))


__all__ = ["FamilySource", "open_source", "dequantized"]
