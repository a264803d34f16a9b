"""Kimi K3's checkpoint layout, read by `from_pretrained` through transformers' weight conversion.

K3 stores its text model as Moonshot's Kimi Linear layout (under `language_model.`, which `conversion/mapping.py`
strips; vision tensors stay unexpected and unloaded), with three differences handled here, all at load time only
(what we save is the dequantized model, in Moonshot's names):
- routed experts in MXFP4: `experts.{e}.w{1,2,3}.weight_packed` + `.weight_scale`, dequantized to bf16, then merged
  as transformers merges Kimi Linear's bf16 experts;
- KDA's `A_log` padded to head_dim ([head_dim], the first num_heads entries used; SGLang and Moonshot's FLA kernels
  index it per head) instead of Kimi Linear's [1, 1, num_heads, 1];
- K3's KDA gate fields inside `linear_attn_config` (`k3_linear_attn_config` writes them back there).
"""
from __future__ import annotations

import torch
from transformers.core_model_loading import (
    Concatenate,
    ConversionOps,
    MergeModulelist,
    WeightConverter,
    WeightRenaming,
    WeightTransform,
)

from .config import LINEAR_ATTN_K3_KEYS
from .mxfp4 import PACKED_SUFFIX, SCALE_SUFFIX, dequantize

_NEVER = "\x00never\x00"


class LoadOnlyConverter(WeightConverter):
    """A converter applied when reading; saving never produces its (quantized, padded) source layout but, given
    `saved_as`, that converter's (Kimi Linear's bf16 experts), or else leaves the name to the other transforms."""

    __slots__ = ("saved_as",)

    def __init__(self, *args, saved_as: WeightConverter | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.saved_as = saved_as

    def reverse_transform(self) -> WeightTransform:
        return self.saved_as.reverse_transform() if self.saved_as is not None else WeightRenaming(_NEVER, _NEVER)


class DequantizeMxfp4(ConversionOps):
    """{`...weight_packed` pattern: [packed per expert], `...weight_scale` pattern: [scales]} -> the packed pattern
    holding the bf16 weights, in the order later ops (merge, concatenate) expect."""

    def convert(self, input_dict, source_patterns, target_patterns, full_layer_name=None, model=None, **kwargs):
        # the dtype of the parameter it loads into (the model's dtype; bf16 holds MXFP4 values exactly)
        dtype = model.get_parameter(full_layer_name).dtype if model is not None else torch.bfloat16
        out = {}
        for pattern in source_patterns:
            if not pattern.endswith(PACKED_SUFFIX):
                continue
            packed = input_dict.pop(pattern, None)
            scale = input_dict.pop(pattern.removesuffix(PACKED_SUFFIX) + SCALE_SUFFIX, None)
            if packed is None or scale is None:
                raise ValueError(f"{full_layer_name}: MXFP4 weight_packed without its weight_scale (or the reverse)")
            packed, scale = [_codes(t) for t in _as_list(packed)], [_codes(t) for t in _as_list(scale)]
            if len(packed) != len(scale):
                raise ValueError(
                    f"{full_layer_name}: {len(packed)} weight_packed tensors but {len(scale)} weight_scale"
                )
            out[pattern] = [dequantize(p, s, dtype) for p, s in zip(packed, scale)]
        return out


class HeadALog(ConversionOps):
    """K3's A_log [head_dim] (first num_heads entries used) -> Kimi Linear's [1, 1, num_heads, 1]."""

    def convert(self, input_dict, source_patterns, target_patterns, config=None, full_layer_name=None, **kwargs):
        (tensor,) = [t for v in input_dict.values() for t in _as_list(v)]
        heads = config.linear_num_heads
        if tensor.dim() == 1:
            if tensor.numel() < heads:
                raise ValueError(f"{full_layer_name}: A_log has {tensor.numel()} entries, fewer than {heads} heads")
            tensor = tensor[:heads].reshape(1, 1, heads, 1)
        return {target_patterns[0]: tensor}


def _codes(tensor: torch.Tensor) -> torch.Tensor:
    """uint8 codes back from the float copy transformers' loader makes (it casts every tensor to its parameter's
    dtype before conversion; 0..255 are exact in fp16, bf16 and fp32)."""
    if not tensor.is_floating_point():
        return tensor
    codes = tensor.to(torch.int32)
    if not torch.equal(codes.to(tensor.dtype), tensor) or codes.min() < 0 or codes.max() > 255:
        raise ValueError("MXFP4 weight_packed / weight_scale must hold uint8 codes")
    return codes.to(torch.uint8)


def _as_list(value):
    return value if isinstance(value, list) else [value]


def _packed(name: str) -> list[str]:
    return [rf"\.experts.*.{name}.weight_packed", rf"\.experts.*.{name}.weight_scale"]


def k3_load_transforms(moonshot: list[WeightTransform]) -> list[WeightTransform]:
    """Placed before Moonshot's transforms: the packed expert names must not reach the bf16 expert converters."""
    bf16_experts = {t._original_target_patterns[0]: t for t in moonshot if isinstance(t, WeightConverter)}
    gate_up, down = r"\.experts.gate_up_proj", r"\.experts.down_proj"
    return [
        LoadOnlyConverter(
            [*_packed("w1"), *_packed("w3")], gate_up, saved_as=bf16_experts[gate_up],
            operations=[DequantizeMxfp4(), MergeModulelist(dim=0), Concatenate(dim=1)],
        ),
        LoadOnlyConverter(_packed("w2"), down, saved_as=bf16_experts[down],
                          operations=[DequantizeMxfp4(), MergeModulelist(dim=0)]),
        # after the forget-gate renames (transformers applies every renaming, then one converter)
        LoadOnlyConverter(r"forget_gate\.A_log", "forget_gate.A_log", operations=[HeadALog()]),
    ]


def k3_linear_attn_config(config_dict: dict) -> dict:
    """Our K3 KDA gate fields written back inside Moonshot's `linear_attn_config`, as K3's config.json has them."""
    for key, our_key in LINEAR_ATTN_K3_KEYS.items():
        value = config_dict.pop(our_key, None)
        if value not in (None, False):
            config_dict["linear_attn_config"][key] = value
    return config_dict
