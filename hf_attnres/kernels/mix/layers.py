"""The installed package's fused depth mix, mapped to the kernelizable `AttnResDepthMix` layer (`depth_mix.py`) the
way a kernel repository's layer is: `kernels.register_kernel_mapping` names it for the CPU and CUDA devices, and
`kernels.kernelize(model)` binds its forward to every `AttnResDepthMix` of the model, of the package's classes and of
a saved folder's copy alike.

The layer is in this process already, so its repository is `InstalledLayer`, whose `load()` returns the class: the
`kernels` library asks a repository for nothing else (`RepositoryProtocol`), and a Hub or local kernel repository
would need a network or a build folder in its own layout for code that is installed with the package.

Where `kernels` is not installed (transformers before 5.25 does not depend on it), `kernelize_model` binds the same
forward itself; that is the one registration of the package's own.

The forward chooses per call, as the fused kernels take only some inputs: backends "auto" and "cpp" run the C++
kernel on CPU tensors it takes, "auto" and "triton" the Triton kernels on CUDA tensors, and every other call the lean
path (`hf_attnres.kernels.mix.attn_res`). So one layer serves both devices, and a model moved to another device after
it was kernelized stays right.
"""
from __future__ import annotations

import importlib.util
from types import MethodType

from torch import nn

from . import attn_res
from .depth_mix import LAYER_NAME, AttnResDepthMix

KERNELS_AVAILABLE = importlib.util.find_spec("kernels") is not None


class FusedDepthMix(nn.Module):
    """The fused mix, as a kernel layer: no state and `AttnResDepthMix.forward`'s signature (the `kernels` library
    checks both). It has a backward (C++ and Triton) and runs under torch.compile (the C++ kernel steps aside there,
    the Triton kernels are custom ops)."""

    can_torch_compile = True
    has_backward = True

    def forward(self, sources, query, norm_weight, eps, return_weights=False, out_norm_weight=None, out_norm_eps=1e-6,
                backend="auto", recompute=False):
        return attn_res(sources, query, norm_weight, eps, return_weights=return_weights, backend=backend,
                        out_norm_weight=out_norm_weight, out_norm_eps=out_norm_eps, recompute=recompute)


class InstalledLayer:
    """A `kernels` repository of a layer class installed in this process (the library calls `load()` only)."""

    def __init__(self, layer: type[nn.Module]):
        self.layer = layer

    def load(self) -> type[nn.Module]:
        return self.layer

    def __eq__(self, other):
        return isinstance(other, InstalledLayer) and other.layer is self.layer

    def __hash__(self):
        return hash(self.layer)

    def __str__(self) -> str:
        return f"the installed {self.layer.__module__}.{self.layer.__name__}"


def kernel_mapping() -> dict:
    """The package's mapping for `kernels.register_kernel_mapping`: the fused layer on CPU and CUDA."""
    repository = InstalledLayer(FusedDepthMix)
    return {LAYER_NAME: {"cpu": repository, "cuda": repository}}


def register_kernels() -> bool:
    """Register the package's mapping with `kernels` (True), or nothing where it is not installed (False)."""
    if not KERNELS_AVAILABLE:
        return False
    from kernels import register_kernel_mapping

    register_kernel_mapping(kernel_mapping())
    return True


def kernelize_model(model: nn.Module) -> nn.Module:
    """Bind the mapped forward to every depth mix of `model`: `kernels.kernelize` of each (the model's other
    kernelizable layers, transformers' own, are left to transformers) where the library is installed and the layer is
    declared to it, else the same forward bound here. Mode: training (the layer has a backward, so it serves
    inference too)."""
    declared = [m for m in model.modules() if getattr(type(m), "kernel_layer_name", None) == LAYER_NAME]
    if KERNELS_AVAILABLE and declared:
        from kernels import Mode, kernelize

        register_kernels()
        device = "cuda" if any(p.is_cuda for p in model.parameters()) else "cpu"
        for module in declared:
            kernelize(module, mode=Mode.TRAINING, device=device)
        return model
    for module in model.modules():
        if type(module).__name__ == AttnResDepthMix.__name__ and isinstance(module, nn.Module):
            module.forward = MethodType(FusedDepthMix.forward, module)
    return model


__all__ = ["FusedDepthMix", "InstalledLayer", "kernel_mapping", "register_kernels", "kernelize_model",
           "KERNELS_AVAILABLE"]
