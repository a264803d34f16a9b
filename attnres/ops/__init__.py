"""Kernels and schedules of attnres. Each op keeps its plain-PyTorch reference (`naive.py`) beside its fast paths."""
from .mix import BACKENDS, attn_res, attn_res_naive

__all__ = ["BACKENDS", "attn_res", "attn_res_naive"]
