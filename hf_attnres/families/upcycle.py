"""Upcycling a loaded model: a standard-residual causal LM of a supported family becomes Block or Full AttnRes of the
same family. The new pseudo-queries are zero (uniform depth softmax, as at the start of AttnRes training) and the new
key norms are ones (RMSNorm's init).

Why the function is kept: with zero queries the softmax over the n sources of a mix point is uniform, so the mix is
their sum divided by n, and their sum is exactly the standard residual stream h. The RMSNorm that reads every mix (each
sub-layer's pre-norm, and the final norm) removes the scale: norm(h / n) = w * h / sqrt(mean(h^2) + n^2 * eps). So the
upcycled model *is* the source model with each reading norm's epsilon multiplied by n^2 at its point (the tests check
that to rounding), and differs from the source only by that epsilon (docs/CONVERSION.md "Upcycling: why the
function is kept": the stated tolerance, and why no exactly preserving variant is offered). `attnres convert
--upcycle` reaches this same function from a folder or a GGUF file (`hf_attnres.conversion.family_convert`).

Mode "gated" (`hf_attnres.core.gated_read`): Block AttnRes's depth sources, each point reading the standard stream
plus a zero-initialised per-channel gate times the AttnRes mix. The gate at zero reads the standard stream itself, so
the function is the source's (to the rounding of summing the sources in another order, no epsilon changed), and the
gate's gradient at init is the mix, not zero: it learns from step 1 where Block's queries and key norms start with
an exactly zero gradient for the key norms. Saved as attn_res_mode "block" with attn_res_gated_read True.
"""
from __future__ import annotations

import math
import operator

import torch

UPCYCLE_MODES = ("block", "full", "gated")
# the depth layout of each upcycle mode (the config's attn_res_mode) and whether its points read through a gate
_LAYOUTS = {"block": ("block", False), "full": ("full", False), "gated": ("block", True)}
# the modes that take a block size (Block's layout)
BLOCK_SIZE_MODES = tuple(mode for mode, (layout, _) in _LAYOUTS.items() if layout == "block")
# Paper and K3 both use about 8 blocks (K3: 12 of 93 layers per block)
DEFAULT_NUM_BLOCKS = 8


class UpcycleError(ValueError):
    """A model cannot be upcycled as asked (its family, its mode, the flags); raised before anything is built."""


def is_attn_res_tensor(name: str) -> bool:
    return name.endswith(("_res_norm.weight", "_res_proj.weight", "_res_gate.weight"))


def new_attn_res_tensor(meta: torch.Tensor, name: str) -> torch.Tensor:
    """The starting value of an AttnRes tensor the standard checkpoint does not have."""
    if name.endswith("_res_norm.weight"):
        return torch.ones(meta.shape, dtype=meta.dtype)
    return torch.zeros(meta.shape, dtype=meta.dtype)


def default_block_size(num_layers: int) -> int:
    return max(1, math.ceil(num_layers / DEFAULT_NUM_BLOCKS))


# how a caller names the mode and the block size in a refusal: the command's flags, or upcycle()'s arguments
CLI_NAMES = ("--upcycle", "--block-size")
PYTHON_NAMES = ("mode", "block_size")


def resolve_block_size(mode: str, block_size: int | None, num_layers: int, names=CLI_NAMES) -> int:
    """The block size of the upcycled model (0 in full mode; gated: Block's layout, so its block size): 1 to
    `num_layers` decoder layers per block (a larger
    block is the same single block, so it is refused rather than written as a number the model never uses).
    UpcycleError naming the argument as the caller spells it (`names`: the mode's, the block size's)."""
    mode_name, size_name = names
    if mode not in UPCYCLE_MODES:
        raise UpcycleError(f"{mode_name} must be one of {UPCYCLE_MODES}, got {mode!r}")
    if mode not in BLOCK_SIZE_MODES:
        if block_size is not None:
            raise UpcycleError(f"{size_name} applies to {mode_name} {' or '.join(BLOCK_SIZE_MODES)} only (Full "
                               "AttnRes has no blocks)")
        return 0
    block_size = default_block_size(num_layers) if block_size is None else _as_int(block_size)
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise UpcycleError(f"{size_name} must be an integer >= 1 (decoder layers per block), got {block_size!r}")
    if block_size > num_layers:
        raise UpcycleError(f"{size_name} {block_size} is more than the model's {num_layers} decoder layers "
                           f"(num_hidden_layers): a block holds 1 to {num_layers} layers")
    return block_size


def _as_int(value):
    """An integer of another type (numpy's, torch's) as a Python int, which the config stores; anything else as given
    (refused by the caller)."""
    if isinstance(value, bool):
        return value
    try:
        return operator.index(value)
    except TypeError:
        return value


# fields of a saved config that describe the file, not the model: dropped when a config becomes another family's
_FILE_FIELDS = ("model_type", "architectures", "auto_map", "transformers_version", "quantization_config")


def upcycled_family_config(config, mode: str, block_size: int | None = None, family: str | None = None,
                           names=CLI_NAMES):
    """(AttnRes config, causal LM class) for a standard-residual config of any supported family, Kimi Linear's
    included (its own, or a standard-mode AttnRes one): every field kept, the AttnRes mode and block size set. The one
    builder of an upcycled config: `hf_attnres.upcycle`, both convert paths. `family`: the family a caller resolved and
    checked already (the converter), else read from the config; `names`: how the caller spells the mode and block
    size in a refusal."""
    from hf_attnres.families.registry import family_classes

    family = checked_family(config, family)
    config_class, model_class = family_classes(family)
    block_size = resolve_block_size(mode, block_size, config.num_hidden_layers, names)
    fields = {key: value for key, value in config.to_dict().items() if key not in _FILE_FIELDS}
    layout, gated = _LAYOUTS[mode]
    fields.update(attn_res_mode=layout, attn_res_block_size=block_size)
    if gated:  # the other modes leave the switch at its default (off)
        fields.update(attn_res_gated_read=True)
    target = config_class.from_dict(fields)
    target.architectures = [model_class.__name__]
    return target, model_class


def plain_family_config(config, family: str | None = None):
    """The family's own transformers config (plain `llama`, ...) of a standard-mode AttnRes config or of the
    family's own: every field but the AttnRes ones kept. UpcycleError for Block / Full configs (their weights
    compute another function) and for Kimi Linear (its model is this package's own)."""
    from transformers import AutoConfig

    family = checked_family(config, family, upcycling=False)
    if family == "kimi_linear":
        raise UpcycleError("Kimi Linear has no plain transformers model here: it stays kimi_linear_attnres")
    fields = {key: value for key, value in config.to_dict().items()
              if key not in _FILE_FIELDS and not key.startswith("attn_res_")}
    return AutoConfig.for_model(family, **fields)


def checked_family(config, family: str | None, upcycling: bool = True) -> str:
    """The family of a config to rebuild (`upcycling`, or as the family's own plain model): `family` when the caller
    resolved it, else read from the config (a mistyped mode, an AttnRes mode, a refused family: UpcycleError)."""
    from hf_attnres.families.registry import source_family

    check_mode(config)
    check_standard_stream(getattr(config, "model_type", None), getattr(config, "attn_res_mode", None), upcycling)
    if family is not None:
        return family
    try:
        return source_family(config)
    except ValueError as error:
        raise UpcycleError(str(error)) from None


def check_source_mode(model_type, mode, upcycling: bool = True) -> None:
    """A config.json to upcycle (`upcycling`), or to write as the family's own model: an AttnRes mode it names is a
    mode, and the standard one (what is rebuilt has the standard residual stream); ValueError naming the field."""
    from hf_attnres.families.registry import check_standard_residual

    if mode is not None:
        _check_mode(model_type, mode, "field ")
    check_standard_stream(model_type, mode if mode is not None else "standard", upcycling)
    check_standard_residual(model_type, mode if mode is not None else "standard")


def check_standard_stream(model_type, mode, upcycling: bool) -> None:
    """UpcycleError when an AttnRes model_type (or a wrapper's) is in another mode than standard, said for what was
    asked: upcycling it (it is AttnRes already), or writing it as the family's own plain model (which has only the
    standard residual stream: these weights compute another function)."""
    from hf_attnres.families.registry import ATTN_RES_SUFFIX, WRAPPERS

    if not ((model_type or "").endswith(ATTN_RES_SUFFIX) or model_type in WRAPPERS) or mode == "standard":
        return
    if upcycling:
        raise UpcycleError(f"model_type {model_type!r} with attn_res_mode={mode!r} is already AttnRes: upcycling "
                           "turns a standard-residual checkpoint into Block or Full AttnRes")
    raise UpcycleError(f"model_type {model_type!r} with attn_res_mode={mode!r} is {str(mode).title()} AttnRes, which "
                       "the family's own plain model (standard residual stream only) cannot compute: use it as it is")


def check_mode(config) -> None:
    """An AttnRes config's mode must be one of the modes (a mistyped "Block" is named as such, not as AttnRes)."""
    _check_mode(getattr(config, "model_type", ""), getattr(config, "attn_res_mode", None))


def _check_mode(model_type, mode, prefix: str = "") -> None:
    from hf_attnres.core.config import ATTN_RES_MODES

    if str(model_type).endswith("_attnres") and mode not in ATTN_RES_MODES:
        raise UpcycleError(f"{prefix}attn_res_mode={mode!r} is not a mode (one of {ATTN_RES_MODES})")


class UpcycleTypeError(UpcycleError, TypeError):
    """The object given is not what is rebuilt (not a transformers model, or a model without its causal LM head)."""


# modules of torch's eager (dynamic / static) quantization: packed integer weights, no float weight to copy
_QUANTIZED_MODULES = ("torch.ao.nn.quantized", "torch.nn.quantized", "torch.ao.nn.intrinsic.quantized")


def check_model(model) -> None:
    """A loaded causal LM with weights: a transformers model with its head (…ForCausalLM: a bare decoder such as
    `LlamaModel` has no lm_head to copy), not a meta-device model (nothing to copy). UpcycleTypeError (a ValueError
    and a TypeError) for the wrong object, UpcycleError for a model without weights."""
    from transformers import PreTrainedModel

    name = type(model).__name__
    if not isinstance(model, PreTrainedModel):
        raise UpcycleTypeError(f"expected a transformers causal LM (a PreTrainedModel), got {name}")
    if not name.endswith("ForCausalLM"):
        raise UpcycleTypeError(f"expected a causal LM (…ForCausalLM, as AutoModelForCausalLM loads it), got {name}: "
                               "load the model with its language-model head")
    parameter = next(model.parameters(), None)
    if parameter is None or parameter.device.type == "meta":
        raise UpcycleError(f"{name} has no weights to copy (built on the meta device): load it with its weights first")


def check_not_quantized(model, purpose: str = "upcycling") -> None:
    """A quantized model's tensors are packed integers, not weights to copy: refused, naming the method (a
    transformers quantizer, or torch's eager quantization by its first quantized module). A GGUF file is dequantized
    by transformers on load (plain float weights, only marked as GGUF), so it passes."""
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:
        method = getattr(quantizer.quantization_config, "quant_method", None)
        method = getattr(method, "value", method)
        if method != "gguf":
            raise UpcycleError(f"the model is quantized ({method}): load it in float precision (or dequantize it) "
                               f"before {purpose}")
    for name, module in model.named_modules():
        kind = type(module).__module__
        if kind.startswith(_QUANTIZED_MODULES):
            how = "torch dynamic quantization" if ".dynamic" in kind else "torch quantization"
            raise UpcycleError(f"the model is quantized ({how}: {name} is a quantized {type(module).__name__}): load "
                               f"it in float precision before {purpose}")


def check_weights(model, source=None) -> None:
    """Every tensor of the model is a finite float weight: an integer tensor (a quantized or cast weight) copied into
    a float model would be another model, and a NaN or infinity would be written on. UpcycleError naming the tensor
    and `source` (the file it was read from; default: the model's class)."""
    source = source if source is not None else type(model).__name__
    for name, tensor in model.state_dict().items():
        if not isinstance(tensor, torch.Tensor) or tensor.is_quantized:
            raise UpcycleError(f"{source}: tensor {name} is quantized ({type(tensor).__name__}): load the model in "
                               "float precision first")
        if not tensor.is_floating_point():
            raise UpcycleError(f"{source}: tensor {name} is {tensor.dtype}, not a float weight (a quantized or cast "
                               "weight would be copied into float as another value): load the model in float "
                               "precision first")
        # the model side imports no tool (hf_attnres.utils.finite_weights is the tools' file-level twin of this)
        if not bool(torch.isfinite(tensor).all()):
            nan, inf = int(torch.isnan(tensor).sum()), int(torch.isinf(tensor).sum())
            raise UpcycleError(f"{source}: tensor {name} holds non-finite values ({nan} NaN, {inf} inf of "
                               f"{tensor.numel()}): the weights are damaged; use a finite checkpoint")


def check_source_model(model, purpose: str = "upcycling", where=None) -> None:
    """The one validation of a model to rebuild, shared by `upcycle`, `plain_family_model` and `attnres convert`
    (which runs it on the model it loaded, `where` naming the file): the object (`check_model`), quantization
    (`check_not_quantized`), then every tensor (`check_weights`). One line naming the problem (and `where`)."""
    try:
        check_model(model)
        check_not_quantized(model, purpose)
    except UpcycleError as error:
        if where is None:
            raise
        raise type(error)(f"{where}: {error}") from None
    check_weights(model, where)


@torch.no_grad()
def upcycle(model, mode: str = "block", block_size: int | None = None, family: str | None = None):
    """The Block, Full or gated-read AttnRes model (`mode`, one of UPCYCLE_MODES) of a loaded standard-residual causal
    LM of a supported family (any of `hf_attnres.families.registry.SUPPORTED`, docs/FAMILIES.md), of the same family,
    dtype and device.

    Every weight of `model` is copied; the new pseudo-queries are zero and the key norms one, so the logits equal the
    source's up to the RMSNorm epsilon (module docstring); in mode "gated" the new gates are zero too, and the logits
    equal the source's to rounding. `block_size`: decoder layers per block, 1 to the model's
    layer count (default: about 8 blocks, as the paper and Kimi K3). `family`: the source's family when the caller
    resolved and checked it (the converter), else read from the config. Refused before anything is built, in one
    line: UpcycleTypeError (a TypeError) for an object that is not a causal LM (a bare `LlamaModel`), UpcycleError (a
    ValueError) for an unsupported family, a model that is already AttnRes, a quantized or meta-device model, an
    integer or non-finite weight, or a bad mode / block size.
    """
    check_source_model(model)
    config, model_class = upcycled_family_config(model.config, mode, block_size, family, names=PYTHON_NAMES)
    return rebuild(model, config, model_class)


@torch.no_grad()
def plain_family_model(model, family: str | None = None):
    """The family's own transformers causal LM (plain `llama`, no remote code) computing what a standard-mode AttnRes
    model (or the family's own) computes: the same tensors in the family's own class (`family` as in `upcycle`;
    refused as `upcycle` refuses its input)."""
    check_source_model(model, "writing it as the family's own model")
    config = plain_family_config(model.config, family)
    model_class = plain_family_class(config.model_type)
    return model if type(model) is model_class else rebuild(model, config, model_class)


def plain_family_class(model_type: str):
    """transformers' own causal LM class of a family (LlamaForCausalLM for `llama`)."""
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return getattr(transformers, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type])


def rebuild(model, config, model_class):
    """`model`'s weights in a `model_class` of `config`, its dtype, device, mode and generation config; a tensor the
    new model has and `model` lacks must be an AttnRes one (set to its start: zero queries and gates, unit gains)."""
    from transformers.initialization import no_init_weights

    parameter = next(model.parameters())
    with no_init_weights():  # every tensor is copied or set below: no random draw over the whole model first
        target = model_class._from_config(config, dtype=parameter.dtype)
    target.tie_weights()
    missing, unexpected = target.load_state_dict(model.state_dict(), strict=False)
    stray = [name for name in missing if not is_attn_res_tensor(name)]
    if unexpected or stray:
        problems = [f"{name}: not in {model_class.__name__}" for name in unexpected] + [f"{n}: missing" for n in stray]
        raise UpcycleError(f"{type(model).__name__} does not map onto {model_class.__name__}: " + "; ".join(problems))
    for name in missing:  # set explicitly: the zero-query / unit-gain start the argument relies on
        tensor = target.get_parameter(name)
        tensor.copy_(new_attn_res_tensor(tensor, name))
    target.to(parameter.device)
    target.train(model.training)
    if getattr(model, "generation_config", None) is not None:
        target.generation_config = model.generation_config
    return target


__all__ = ["upcycle", "UpcycleError", "UpcycleTypeError", "UPCYCLE_MODES", "BLOCK_SIZE_MODES", "CLI_NAMES",
           "PYTHON_NAMES", "resolve_block_size", "upcycled_family_config", "plain_family_config", "plain_family_model",
           "plain_family_class", "rebuild", "check_source_model", "check_model", "check_not_quantized", "check_weights",
           "check_mode", "check_source_mode", "check_standard_stream", "checked_family", "is_attn_res_tensor",
           "new_attn_res_tensor", "default_block_size"]
