"""Kernels and schedules of attnres. Each op keeps its plain-PyTorch reference (`naive.py`) beside its fast paths."""
from .mix import BACKENDS, attn_res, attn_res_naive, rms_norm_naive
from .two_phase import phase1, phase2

__all__ = ["BACKENDS", "attn_res", "attn_res_naive", "rms_norm_naive", "phase1", "phase2"]
