"""Keep transformers' KimiLinear runnable on CPU when `fla-core` / `causal-conv1d` are installed.

transformers binds KDA and short-convolution functions to those packages at import when they are present; their
Triton/CUDA kernels cannot take CPU tensors. We route each call by device: CUDA tensors go to the bound fast kernel,
anything else to transformers' own PyTorch reference (the function the binding wraps).

transformers 5.25 routes these calls by device itself (`hub_kernels._PACKAGE_SUPPORTED_DEVICES`); there the guard
patches nothing, so transformers' module is left exactly as it ships. transformers 5.23 and 5.24 (in pyproject's
supported range) bind the packages' kernels unconditionally, so with `fla-core` installed on a CPU-only machine a
Kimi Linear forward fails there without the guard (tests/families/kimi_linear/test_kda_device_guard.py runs both
cases): it stays until the oldest supported transformers routes by device, and is then deleted.
"""
from __future__ import annotations

import functools
import importlib.util
import inspect

from transformers.models.kimi_linear import modeling_kimi_linear

GUARDED_FUNCTIONS = (
    "chunk_kimi_delta_attention",
    "recurrent_kimi_delta_attention",
    "causal_conv1d_fn",
    "causal_conv1d_update",
)
FAST_PACKAGES = ("fla", "causal_conv1d")


def _first_tensor(args, kwargs):
    for value in (*args, *kwargs.values()):
        if hasattr(value, "is_cuda"):
            return value
    return None


def route_by_device(bound, reference):
    """A function calling `bound` on CUDA tensors and `reference` (transformers' torch path) otherwise."""
    reference_params = set(inspect.signature(reference).parameters)

    @functools.wraps(reference)
    def routed(*args, **kwargs):
        tensor = _first_tensor(args, kwargs)
        if tensor is not None and tensor.is_cuda:
            return bound(*args, **kwargs)
        # the binding filters kwargs to the implementation's signature; do the same for the reference
        return reference(*args, **{k: v for k, v in kwargs.items() if k in reference_params})

    routed.attnres_device_routed = True
    return routed


def transformers_routes_by_device() -> bool:
    """Whether the installed transformers sends inputs on a device a kernel package lacks to its torch path."""
    from transformers.integrations import hub_kernels

    return hasattr(hub_kernels, "_PACKAGE_SUPPORTED_DEVICES")


def install_kda_device_guard(module=modeling_kimi_linear) -> list[str]:
    """Route transformers' KimiLinear kernel functions by device when a fast package is installed and transformers
    does not route them itself. Idempotent."""
    if transformers_routes_by_device() or not any(importlib.util.find_spec(package) for package in FAST_PACKAGES):
        return []
    routed_names = []
    for name in GUARDED_FUNCTIONS:
        bound = getattr(module, name, None)
        if bound is None or getattr(bound, "attnres_device_routed", False):
            continue
        reference = inspect.unwrap(bound)
        if reference is bound:
            continue
        setattr(module, name, route_by_device(bound, reference))
        routed_names.append(name)
    return routed_names
