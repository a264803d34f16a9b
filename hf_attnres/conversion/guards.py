"""Every check of a convert before work: the request (paths, flags, output folder, shard size, and the source's
family, resolved here once and handed down), and the config validator of a family checkpoint (Llama, Mistral, Qwen2,
Qwen3, Gemma 3, Phi-3; its own config.json or the config transformers reads from a GGUF file), run on the plain
fields before any model is built.

transformers' config classes accept what their constructors cannot use: a missing layer count becomes the class
default (32 layers, most of them random), 0 layers a model without layers, heads 0 a ZeroDivisionError, an unknown
activation or rope type a KeyError, `rms_norm_eps` NaN all-NaN logits. So every field a build reads is checked here,
with one ValueError naming the field, and the model's size is computed from the same numbers (closed form, nothing
built), so 1e9 layers are refused at once instead of built layer by layer.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from ..core.buildable import ALLOW_LARGE_ENV
from ..families.upcycle import UpcycleError, check_source_mode, resolve_block_size
from ..folders.checkpoint_files import CheckpointFileError
from ..folders.model_family import GGUF_SUFFIX, family_of_source
from ..utils.safe_paths import UnsafeOutputError, check_output_folder
from .errors import ConversionError

KIMI = "kimi_linear"

# read by every family's build; a missing one would silently take the class default
REQUIRED_COUNTS = ("num_hidden_layers", "num_attention_heads", "hidden_size", "intermediate_size", "vocab_size")
OPTIONAL_COUNTS = ("num_key_value_heads", "head_dim", "max_position_embeddings")
# far above any published decoder (a few hundred layers at most); a bound that keeps a typo from building forever
MAX_LAYERS = 10_000
ACTIVATION_FIELDS = ("hidden_act", "hidden_activation")
# published decoders use 1e-5 or 1e-6, far below the mean square of their hidden states; a larger epsilon dominates
# the norm, and the upcycle check's tolerance (which grows with it) stops telling one function from another
MAX_RMS_NORM_EPS = 1e-2
ROPE_FIELDS = ("rope_parameters", "rope_scaling")
DTYPES = ("float32", "float16", "bfloat16", "auto")


def check_layer_count(fields: dict) -> None:
    """The layer count alone, for configs whose other fields their own class validates (Kimi Linear's): before any
    per-layer list is built from it."""
    value = fields.get("num_hidden_layers")
    if isinstance(value, int) and not isinstance(value, bool) and value > MAX_LAYERS:
        raise ValueError(f"field num_hidden_layers={value} is beyond any decoder's depth (at most {MAX_LAYERS:,} "
                         "accepted)")


def check_source_fields(fields: dict) -> None:
    """ValueError naming the first field a family build cannot use (`field ...: ...`)."""
    for field in REQUIRED_COUNTS + OPTIONAL_COUNTS:
        if field not in fields or (fields[field] is None and field in OPTIONAL_COUNTS):
            if field in REQUIRED_COUNTS:
                raise ValueError(f"field {field} is missing (the model's size must be stated, not defaulted)")
            continue
        value = fields[field]
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"field {field} must be an integer, got {value!r} ({type(value).__name__})")
        if value < 1:
            raise ValueError(f"field {field} must be >= 1, got {value}")
    check_layer_count(fields)
    heads, kv_heads = fields["num_attention_heads"], fields.get("num_key_value_heads") or fields["num_attention_heads"]
    if fields.get("head_dim") is None and fields["hidden_size"] % heads:
        raise ValueError(f"field hidden_size={fields['hidden_size']} is not a multiple of num_attention_heads={heads} "
                         "(and no head_dim is given)")
    if heads % kv_heads:
        raise ValueError(f"field num_attention_heads={heads} is not a multiple of num_key_value_heads={kv_heads}")
    _check_eps(fields)
    _check_activation(fields)
    _check_rope(fields)
    for field in ("dtype", "torch_dtype"):
        value = fields.get(field)
        if value is not None and value not in DTYPES:
            raise ValueError(f"field {field}={value!r} is not a dtype this model computes in (one of {DTYPES})")
    tie = fields.get("tie_word_embeddings", False)
    if not isinstance(tie, bool):
        raise ValueError(f"field tie_word_embeddings must be true or false, got {tie!r}")
    quantization = fields.get("quantization_config")
    if quantization:
        method = quantization.get("quant_method", "unknown") if isinstance(quantization, dict) else quantization
        raise ValueError(f"field quantization_config: the checkpoint is quantized ({method}); its integer weights "
                         "are not float weights to copy: dequantize it first (load it in float precision and save)")


def _check_eps(fields: dict) -> None:
    value = fields.get("rms_norm_eps", 1e-6)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"field rms_norm_eps must be a finite number > 0, got {value!r}")
    if value > MAX_RMS_NORM_EPS:
        raise ValueError(f"field rms_norm_eps={value!r} is far above any model's norm epsilon (at most "
                         f"{MAX_RMS_NORM_EPS} accepted): it would outweigh the hidden states every RMSNorm divides")


def _check_activation(fields: dict) -> None:
    from transformers.activations import ACT2FN

    for field in ACTIVATION_FIELDS:
        value = fields.get(field)
        if value is not None and (not isinstance(value, str) or value not in ACT2FN):
            raise ValueError(f"field {field}={value!r} is not an activation transformers knows "
                             f"(e.g. silu, gelu_pytorch_tanh)")


def _rope_dicts(value):
    """The rope dicts of a `rope_parameters` / `rope_scaling` field: one, or one per layer type (Gemma 3)."""
    if isinstance(value, dict) and any(isinstance(v, dict) for v in value.values()):
        return [v for v in value.values() if isinstance(v, dict)]
    return [value]


def _check_rope(fields: dict) -> None:
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    for field in ROPE_FIELDS:
        if fields.get(field) is None:
            continue
        for rope in _rope_dicts(fields[field]):
            if not isinstance(rope, dict):
                raise ValueError(f"field {field} must be an object, got {rope!r}")
            kind = rope.get("rope_type", rope.get("type", "default"))
            if kind != "default" and kind not in ROPE_INIT_FUNCTIONS:
                raise ValueError(f"field {field}: rope_type {kind!r} is not one transformers knows "
                                 f"(default, {', '.join(ROPE_INIT_FUNCTIONS)})")
            theta = rope.get("rope_theta", 1.0)
            if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not math.isfinite(theta) \
                    or theta <= 0:
                raise ValueError(f"field {field}: rope_theta must be a finite number > 0, got {theta!r}")


def parameter_count(fields: dict) -> int:
    """Parameters of a dense PreNorm decoder of these (checked) fields, in closed form: embedding, lm_head unless
    tied, per layer the q/k/v/o projections, the gated MLP and two norms, the final norm. Biases and q/k norms are
    below a percent and left out: this sizes a refusal, it does not plan memory."""
    hidden, layers = fields["hidden_size"], fields["num_hidden_layers"]
    heads = fields["num_attention_heads"]
    kv_heads = fields.get("num_key_value_heads") or heads
    head_dim = fields.get("head_dim") or hidden // heads
    attention = hidden * head_dim * (2 * heads + 2 * kv_heads)
    mlp = 3 * hidden * fields["intermediate_size"]
    embedding = fields["vocab_size"] * hidden * (1 if fields.get("tie_word_embeddings") else 2)
    return embedding + layers * (attention + mlp + 2 * hidden) + hidden


def check_fits_in_memory(fields: dict, bytes_per_parameter: int, copies: int, available: int | None) -> None:
    """ValueError, with the numbers, when `copies` models of these fields would not fit in `available` bytes of
    memory (None: unknown, nothing refused); ATTNRES_ALLOW_LARGE_MODEL=1 insists."""
    if available is None or os.environ.get(ALLOW_LARGE_ENV) == "1":
        return
    needed = parameter_count(fields) * bytes_per_parameter * copies
    if needed > available:
        raise ValueError(
            f"this config needs about {needed / 2**30:,.1f} GiB ({copies} model(s) of {parameter_count(fields):,} "
            f"parameters at {bytes_per_parameter} bytes), more than the {available / 2**30:,.1f} GiB of memory here "
            f"(vocab_size={fields['vocab_size']}, hidden_size={fields['hidden_size']}, num_hidden_layers="
            f"{fields['num_hidden_layers']}); check the config, or set {ALLOW_LARGE_ENV}=1 to try anyway")


@dataclass
class Request:
    """A convert request that passed every check needing no weights read: the family resolved once."""
    input: Path  # absolute
    output: Path  # literal absolute (a link stays the link)
    family: str  # the family's own model_type ("kimi_linear" also for a folder whose config.json its converter names)
    gguf_config: object | None  # transformers' config of a GGUF input, read once


def check_request(args) -> Request:
    """The checks of `attnres convert` (a ConvertArgs) in the order a user fixes them: paths, the source's family,
    the flags that family takes, the output, the shard size. ConversionError naming the flag, file or field."""
    for flag, path in (("input", args.input), ("output", args.output)):
        check_utf8_path(path, flag)
    input = Path(args.input).resolve()
    family, gguf_config = resolve_family(input)
    if family == KIMI:
        if args.check:
            raise ConversionError("--check compares the logits of the other families' conversions; Kimi Linear's "
                                  "is checked tensor by tensor: use --verify (bit for bit)")
    else:
        if args.to != "hf":
            raise ConversionError("--to moonshot is Kimi Linear's layout; other families are written as model "
                                  "folders")
        if args.upcycle is None and args.block_size is not None:
            raise ConversionError("--block-size applies with --upcycle block only (it sets the new block size)")
    output = check_output(args.output, args.force, inputs=[input])
    check_max_shard_size(args.max_shard_size)
    return Request(input, output, family, gguf_config)


def resolve_family(input: Path):
    """(family, GGUF config or None) of a convert's input, the one place a convert works it out
    (`folders.model_family.family_of_source`). A folder whose config.json is missing or damaged goes to Kimi
    Linear's converter, which names the damage; a refused family is a ConversionError with the reason."""
    try:
        return family_of_source(input)
    except CheckpointFileError:
        return KIMI, None
    except ValueError as error:
        if input.suffix == GGUF_SUFFIX:
            raise ConversionError(str(error)) from None
        raise ConversionError(f"{input / 'config.json'}: {error}") from None


def check_utf8_path(path: Path, flag: str) -> None:
    """A path that is not valid UTF-8 (a byte string the shell passed through) cannot be named in config files, logs
    or messages: refused by the flag, with its printable form."""
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        shown = str(path).encode("utf-8", "backslashreplace").decode("ascii", "backslashreplace")
        raise ConversionError(f"{flag} {shown}: the path is not valid UTF-8; rename it") from None


def check_output(output: Path, force: bool, inputs=(), flag: str = "output") -> Path:
    """The output folder as a literal absolute path (a link stays the link), or a ConversionError: see
    `hf_attnres.utils.safe_paths.check_output_folder`."""
    try:
        return check_output_folder(output, inputs, force, flag)
    except UnsafeOutputError as error:
        raise ConversionError(str(error)) from None


def check_max_shard_size(max_shard_size: int | str) -> int:
    """Bytes of --max-shard-size ("5GB", "500MB", an int), or a ConversionError naming the flag."""
    from huggingface_hub.serialization._base import parse_size_to_int

    try:
        size = max_shard_size if isinstance(max_shard_size, int) and not isinstance(max_shard_size, bool) else \
            parse_size_to_int(max_shard_size)  # True is no size
    except (ValueError, TypeError, AttributeError):
        size = 0
    if size <= 0:
        raise ConversionError(f"--max-shard-size {max_shard_size!r}: expected a positive size such as 5GB or 500MB")
    return size


def check_family_source(fields: dict, where, upcycle: str | None, block_size: int | None) -> None:
    """A family checkpoint's config fields: its residual stream (standard: what is upcycled or written plain),
    `check_source_fields`, and the upcycle flags against its depth. ValueError naming `where` and the field, or a
    ConversionError naming the flag."""
    try:
        check_source_mode(fields.get("model_type"), fields.get("attn_res_mode"), upcycling=upcycle is not None)
        check_source_fields(fields)
    except ValueError as error:
        raise ValueError(f"{where}: {error}") from None
    if upcycle is not None:
        try:
            resolve_block_size(upcycle, block_size, fields["num_hidden_layers"])
        except UpcycleError as error:
            raise ConversionError(str(error)) from None


__all__ = ["Request", "check_request", "resolve_family", "check_output", "check_max_shard_size", "check_utf8_path",
           "check_family_source", "check_layer_count", "check_source_fields", "parameter_count",
           "check_fits_in_memory", "MAX_LAYERS", "MAX_RMS_NORM_EPS"]
