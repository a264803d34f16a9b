"""MXFP4 routed experts as Kimi K3 ships them (compressed-tensors "mxfp4-pack-quantized"), dequantized on load.

A weight [out, in] is stored as `weight_packed` uint8 [out, in / 2] (two E2M1 codes a byte, the even element in the
low nibble) and `weight_scale` uint8 [out, in / 32] (one E8M0 power of two per group of 32 along `in`):
w[o, i] = E2M1(code[o, i]) * 2 ** (scale[o, i // 32] - 127). Every such value is exact in bfloat16 (a 2-bit mantissa
times a power of two), so the bf16 in-memory experts are the checkpoint's values, bit for bit.
"""
from __future__ import annotations

import torch
from transformers.integrations.mxfp4 import FP4_VALUES

GROUP_SIZE = 32
PACKED_SUFFIX, SCALE_SUFFIX = ".weight_packed", ".weight_scale"
QUANT_METHOD, QUANT_FORMAT = "compressed-tensors", "mxfp4-pack-quantized"


def check_quantization_config(quantization: dict) -> None:
    """Only K3's own scheme is understood: compressed-tensors, MXFP4 packed, 4-bit float weights in groups of 32."""
    method, fmt = quantization.get("quant_method"), quantization.get("format")
    problems = []
    if method != QUANT_METHOD:
        problems.append(f"quant_method={method!r} (expected {QUANT_METHOD!r})")
    if fmt != QUANT_FORMAT:
        problems.append(f"format={fmt!r} (expected {QUANT_FORMAT!r})")
    for name, group in (quantization.get("config_groups") or {}).items():
        weights = group.get("weights") or {}
        for key, expected in (("num_bits", 4), ("type", "float"), ("group_size", GROUP_SIZE)):
            if key in weights and weights[key] != expected:
                problems.append(f"config_groups.{name}.weights.{key}={weights[key]!r} (expected {expected!r})")
    if problems:
        raise ValueError(
            f"quantization_config (quant_method={method!r}, format={fmt!r}): only Kimi K3's MXFP4 experts can be "
            "dequantized on load; " + "; ".join(problems)
        )


def check_packed(name: str, packed_shape, scale_shape, packed_dtype=torch.uint8, scale_dtype=torch.uint8) -> list[str]:
    """Problems (empty when none) of one packed weight's pair of tensors, as [out, in] would need them."""
    base = name.removesuffix(PACKED_SUFFIX)
    if packed_dtype != torch.uint8 or scale_dtype != torch.uint8:
        return [f"{base}: MXFP4 weight_packed and weight_scale must be uint8, got {packed_dtype} and {scale_dtype}"]
    if len(packed_shape) != 2 or len(scale_shape) != 2:
        return [
            f"{base}: MXFP4 tensors must be 2-D, got weight_packed {list(packed_shape)}, "
            f"weight_scale {list(scale_shape)}"
        ]
    out, half = packed_shape
    if tuple(scale_shape) != (out, 2 * half // GROUP_SIZE) or (2 * half) % GROUP_SIZE:
        return [
            f"{base}: weight_packed {list(packed_shape)} holds [{out}, {2 * half}] but weight_scale is "
            f"{list(scale_shape)}, expected [{out}, {2 * half // GROUP_SIZE}] (one scale per {GROUP_SIZE} inputs)"
        ]
    return []


def unpacked_shape(packed_shape) -> tuple[int, int]:
    return packed_shape[0], 2 * packed_shape[1]


def dequantize(packed: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """[out, in/2] codes + [out, in/32] exponents -> [out, in] weights in `dtype` (exact for bf16/fp32)."""
    problems = check_packed("weight", packed.shape, scale.shape, packed.dtype, scale.dtype)
    if problems:
        raise ValueError(problems[0])
    work = torch.float64 if dtype == torch.float64 else torch.float32  # exact for every E8M0 scale in range
    table = torch.tensor(FP4_VALUES, dtype=work, device=packed.device)
    codes = torch.stack((packed & 0x0F, packed >> 4), dim=-1).reshape(packed.shape[0], -1)  # even element: low nibble
    values = table[codes.long()].view(packed.shape[0], -1, GROUP_SIZE)
    exponents = scale.to(torch.int32).sub(127).unsqueeze(-1)
    return torch.ldexp(values, exponents).reshape(packed.shape[0], -1).to(dtype)
