"""A K3 checkpoint folder as `convert_checkpoint` reads it: MXFP4 expert pairs and padded KDA `A_log` presented as
the bf16 / Kimi Linear tensors they stand for, so the conversion plan checks and converts them like any other.

`weight_packed` + `weight_scale` -> one bf16 `weight` [out, in] (dequantized when read: one decoder layer at a time,
as every unit is); `A_log` [head_dim] -> [1, 1, num_heads, 1]. Any malformed pair is reported, naming the tensor,
before anything is read.
"""
from __future__ import annotations

from pathlib import Path

import torch
from safetensors import safe_open

from ...families.kimi_linear.k3.mxfp4 import PACKED_SUFFIX, SCALE_SUFFIX, check_packed, dequantize, unpacked_shape
from ..errors import ConversionError
from .reader import CheckpointReader, TensorInfo

_U8 = "U8"


class K3SourceReader(CheckpointReader):
    def __init__(self, folder: str | Path, config):
        super().__init__(folder)
        self.packed: dict[str, tuple[TensorInfo, TensorInfo]] = {}  # bf16 name -> (packed, scale)
        self.a_log_heads: dict[str, int] = {}  # A_log name -> heads kept
        problems = self._virtual_experts() + self._head_a_logs(config.linear_num_heads)
        if problems:
            raise ConversionError.from_problems(problems, f"{self.folder}: Kimi K3 tensors")

    def _virtual_experts(self) -> list[str]:
        problems = []
        for name in [n for n in self.tensors if n.endswith((PACKED_SUFFIX, SCALE_SUFFIX))]:
            if name not in self.tensors or self.tensors[name].dtype != _U8:  # pair taken; or not MXFP4 (int4 words...)
                continue
            base = name.removesuffix(PACKED_SUFFIX).removesuffix(SCALE_SUFFIX)
            packed, scale = self.tensors.get(base + PACKED_SUFFIX), self.tensors.get(base + SCALE_SUFFIX)
            if packed is None or scale is None:
                missing = "weight_scale" if scale is None else "weight_packed"
                problems.append(f"{base}: MXFP4 {missing} is missing (the pair is stored together)")
                self.tensors.pop(name)
                continue
            if name.endswith(SCALE_SUFFIX):
                continue
            dtypes = (torch.uint8 if packed.dtype == _U8 else packed.dtype,
                      torch.uint8 if scale.dtype == _U8 else scale.dtype)
            problems += check_packed(name, packed.shape, scale.shape, *dtypes)
            del self.tensors[base + PACKED_SUFFIX], self.tensors[base + SCALE_SUFFIX]
            weight = base + ".weight"
            self.packed[weight] = (packed, scale)
            self.tensors[weight] = TensorInfo(packed.file, packed.stored_name, unpacked_shape(packed.shape), "BF16")
        return problems

    def _head_a_logs(self, heads: int) -> list[str]:
        problems = []
        for name, info in list(self.tensors.items()):
            if name.endswith("self_attn.A_log") and len(info.shape) == 1:
                if info.shape[0] < heads:
                    problems.append(f"{name}: shape {list(info.shape)}, "
                                    f"expected [head_dim >= {heads}] or [1, 1, {heads}, 1]")
                    continue
                self.a_log_heads[name] = heads
                self.tensors[name] = TensorInfo(info.file, info.stored_name, (1, 1, heads, 1), info.dtype)
        return problems

    def load(self, names: list[str]) -> dict[str, torch.Tensor]:
        packed = [n for n in names if n in self.packed]
        loaded = super().load([n for n in names if n not in self.packed])
        for name, heads in self.a_log_heads.items():
            if name in loaded:
                loaded[name] = loaded[name][:heads].reshape(1, 1, heads, 1).clone()
        for name in packed:
            codes, scale = (self._read(info) for info in self.packed[name])
            loaded[name] = dequantize(codes, scale)
        return {name: loaded[name] for name in names}

    def _read(self, info: TensorInfo) -> torch.Tensor:
        with safe_open(self.folder / info.file, framework="pt") as handle:
            return handle.get_tensor(info.stored_name)
