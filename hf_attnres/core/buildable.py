"""The check that refuses to build a model the machine cannot hold: a hostile or mistyped config (vocab_size 1e12,
100,000 layers) is one ValueError with the number, before any allocation, not an out-of-memory kill. A family counts
its parameters (Kimi Linear in closed form, `hf_attnres.families.kimi_linear.model_size`; a rotary decoder from a lower
bound, `decoder_parameters`)."""
from __future__ import annotations

import os

import torch

# Set to 1 to build a model larger than this machine's memory anyway (e.g. with swap, or to shard it right away)
ALLOW_LARGE_ENV = "ATTNRES_ALLOW_LARGE_MODEL"


def device_memory_bytes(device: torch.device) -> int | None:
    """The memory of the device a model is built on: physical RAM for the CPU, the GPU's total for CUDA."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    if device.type == "cpu":
        try:
            return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            return None
    return None


def refuse_unbuildable(config, parameters: int, at_least: bool = False) -> None:
    """ValueError naming the size when `parameters` weights in the default dtype exceed the memory of the device the
    constructor allocates on. Meta-device builds (from_pretrained, accelerate's init_empty_weights) allocate nothing
    and pass; `ATTNRES_ALLOW_LARGE_MODEL=1` insists."""
    probe = torch.empty(0)  # where and in which dtype the constructor will allocate
    if probe.device.type == "meta" or os.environ.get(ALLOW_LARGE_ENV) == "1":
        return
    available = device_memory_bytes(probe.device)
    needed = parameters * probe.element_size()
    if available is not None and needed > available:
        raise ValueError(
            f"this config builds {'at least ' if at_least else ''}{needed / 2**30:,.1f} GiB of "
            f"{torch.get_default_dtype()} weights, more than the {available / 2**30:,.1f} GiB of memory of "
            f"{probe.device} (vocab_size={config.vocab_size}, hidden_size={config.hidden_size}, "
            f"num_hidden_layers={config.num_hidden_layers}); check the config, or set {ALLOW_LARGE_ENV}=1 to build it "
            "anyway")


def decoder_parameters(config) -> int:
    """A lower bound of a rotary PreNorm decoder's parameters: the token embedding, and per layer the query and output
    projections and a gated MLP (key / value projections, norms and biases left out)."""
    hidden, heads = config.hidden_size, config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    per_layer = 2 * hidden * heads * head_dim + 3 * hidden * config.intermediate_size
    return config.vocab_size * hidden + config.num_hidden_layers * per_layer


__all__ = ["ALLOW_LARGE_ENV", "device_memory_bytes", "refuse_unbuildable", "decoder_parameters"]
