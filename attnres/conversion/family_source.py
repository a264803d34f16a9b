"""The source of a family convert (Llama, Mistral, Qwen2, Qwen3, Gemma 3 text): a model folder or a GGUF file.

Every guard of the Kimi path runs before a model is built: the folder reader (damaged, truncated, lying or
overlapping safetensors headers, empty or missing weight files, integer dtypes; a GGUF file that does not parse), the
config validator (`source_checks`), the family (refused ones by name, a mode that is not one), and the size guard
from the config's numbers. Loading then goes through transformers, and its own report of missing, unexpected and
mis-shaped tensors is a refusal: nothing is ever randomly initialised on the way to a written folder.
"""
from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from ..core.buildable import device_memory_bytes
from ..core.config import ATTN_RES_MODES
from ..families.registry import source_family_of
from ..families.upcycle import check_not_quantized
from ..folders.checkpoint_files import CheckpointFileError, check_model_folder, weight_files
from ..folders.model_family import family_of_folder
from ..utils import finite_weights
from .errors import ConversionError
from .source_checks import check_fits_in_memory, check_source_fields

GGUF_SUFFIX = ".gguf"
# GGUF metadata sizes (`<architecture>.<key>`)
GGUF_SIZE_KEYS = (".block_count", ".context_length", ".embedding_length", ".feed_forward_length",
                  ".attention.head_count", ".attention.head_count_kv", ".vocab_size")
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

    def load(self, progress: bool = True):
        """The source causal LM, in the dtype it is stored in; ConversionError naming every tensor transformers
        reports missing, unexpected or of another shape, a quantized model, or a non-finite weight."""
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
        try:
            check_not_quantized(model)
            if self.gguf_file:  # a NaN weight is named, never written: by its file where there are files
                for name, tensor in model.state_dict().items():
                    finite_weights.check_tensor(name, tensor, self.path)
            else:
                finite_weights.check_folder(self.folder)
        except (ValueError, finite_weights.NonFiniteWeightsError) as error:
            raise ConversionError(f"{self.path}: {error}") from None
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


def is_kimi_input(input: Path) -> bool:
    """Whether a convert's input goes to Kimi Linear's streaming converter: a folder whose config.json names Kimi
    Linear (`folders.model_family.family_of_folder`), or whose config.json is missing or damaged (that converter names
    it). A GGUF file is a family's; a refused family is a ConversionError with the reason."""
    if input.suffix == GGUF_SUFFIX:
        return False
    try:
        return family_of_folder(input)[0] == "kimi_linear"
    except CheckpointFileError:
        return True
    except ValueError as error:
        raise ConversionError(f"{input / 'config.json'}: {error}") from None


def open_source(input: Path) -> FamilySource:
    """Every check that needs no model built (module docstring); ConversionError naming the file or field."""
    try:
        source = _open_gguf(input) if input.suffix == GGUF_SUFFIX else _open_folder(input)
        fields = source.config.to_dict()
        dtype = fields.get("dtype") or fields.get("torch_dtype")
        check_fits_in_memory(fields, 2 if dtype in ("bfloat16", "float16") else 4, COPIES_IN_MEMORY,
                             device_memory_bytes(torch.device("cpu")))
    except ConversionError:
        raise
    except ValueError as error:  # CheckpointFileError is one
        raise ConversionError(str(error)) from None
    return source


def _open_folder(folder: Path) -> FamilySource:
    fields = check_model_folder(folder, "input")  # config.json and every weight file's header and dtypes
    where = folder / "config.json"
    model_type = fields.get("model_type")
    mode = fields.get("attn_res_mode")
    if str(model_type).endswith("_attnres") and mode is not None and mode not in ATTN_RES_MODES:
        raise ValueError(f"{where}: field attn_res_mode={mode!r} is not a mode (one of {ATTN_RES_MODES})")
    try:
        family = source_family_of(model_type, mode if mode is not None else "standard")
        check_source_fields(fields)
    except ValueError as error:
        raise ValueError(f"{where}: {error}") from None
    config = _transformers_config(folder, None, where)
    if config.tie_word_embeddings and _file_lm_head_differs(folder):
        config.tie_word_embeddings = False  # keep what the file holds: its own lm_head, written untied
    return FamilySource(folder, folder, None, family, config)


def _open_gguf(path: Path) -> FamilySource:
    if not path.is_file():
        raise ValueError(f"{path}: not found (a GGUF file)")
    from gguf import GGUFReader

    try:
        reader = GGUFReader(path)  # header, metadata and every tensor's extent, from a memory map: no tensor is read
    except Exception as error:  # noqa: BLE001  struct.error, ValueError, ...: any malformed file is one line
        raise ValueError(f"{path}: not a readable GGUF file ({type(error).__name__}: {error})") from None
    for key, field in reader.fields.items():  # sizes transformers divides by or builds from, before it reads them
        if key.endswith(GGUF_SIZE_KEYS) and len(field.data) == 1:
            value = field.parts[field.data[0]].tolist()
            value = value[0] if isinstance(value, list) and len(value) == 1 else value
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{path}: field {key}={value!r} must be an integer >= 1")
    config = _transformers_config(path.parent, path.name, path)
    try:
        family = source_family_of(config.model_type, "standard")
        check_source_fields(config.to_dict())
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None
    return FamilySource(path, path.parent, path.name, family, config)


def _transformers_config(folder: Path, gguf_file: str | None, where: Path):
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(folder, gguf_file=gguf_file)
    except Exception as error:  # noqa: BLE001  any reader failure is one line naming the file
        raise ValueError(f"{where}: transformers cannot read it ({type(error).__name__}: {error})") from None


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


__all__ = ["FamilySource", "open_source", "is_kimi_input", "dequantized"]
