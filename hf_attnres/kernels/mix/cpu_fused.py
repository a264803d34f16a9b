"""The AttnRes mix as one fused C++ CPU kernel: the path of backend "auto" (and "cpp") on CPU tensors, registered with
the mix dispatcher by the installed package (hf_attnres/__init__.py); a saved folder's code does not carry it.

Same semantics as `naive.attn_res_naive` (the reference) and the same saved state as `lean.attn_res_lean` (the eager
PyTorch path, which stays the fallback): per token, the scores r_j * (v_j . w) of all sources, their fp32 softmax,
the weighted sum and the optional output RMSNorm in one pass over the token's n source rows (a few KiB, cache
resident), where the eager path runs ~8 PyTorch ops per source, each a pass over memory. Autograd saves the sources by
reference plus fp32 [n, tokens] statistics (r, s, p); the backward recomputes the mix (and its norm) in the same
per-token pass that writes the source gradients. Rounding follows the eager path: the mix is cast to the sources' dtype
before the norm, and the norm's product is rounded as `KimiLinearRMSNorm` rounds it.

Tokens are split over torch's intra-op threads (`at::parallel_for`); the parameter gradients sum per-thread partials.
Built once with `torch.utils.cpp_extension.load_inline` on first use (~1 CPU minute: torch's headers) and cached under
~/.cache/attnres/torch_extensions (or $ATTNRES_EXTENSIONS_DIR) by `extension_cache`: keyed by the source, flags,
compiler, torch installation, Python ABI and CPU; folders of the user's own only; a cached library loaded only when its
build record verifies (concurrent first uses share one build). No compiler, a failed or refused build or an
unsupported input (not CPU, not fp32/bf16, mixed dtypes, non-contiguous, a tensor subclass, inside torch.compile) runs
the lean path instead: a failed or refused build warns once.
"""
from __future__ import annotations

import functools
import hashlib
import logging
import os
import platform
import shutil
import sys
import sysconfig
import threading
import time
import warnings
from collections.abc import Sequence
from pathlib import Path

import torch

from .extension_cache import CacheRefused, cache_folders, key_digest, load_or_build

logger = logging.getLogger(__name__)


CPP_DECLARATIONS = r"""
bool mix_fits(std::vector<at::Tensor> sources, at::Tensor query, at::Tensor norm_weight,
              c10::optional<at::Tensor> out_norm_weight);
std::vector<at::Tensor> mix_forward(std::vector<at::Tensor> sources, at::Tensor query, at::Tensor norm_weight,
                                    double eps, c10::optional<at::Tensor> out_norm_weight, double out_norm_eps,
                                    bool keep_stats);
std::vector<at::Tensor> mix_backward(std::vector<at::Tensor> sources, at::Tensor query, at::Tensor norm_weight,
                                     c10::optional<at::Tensor> out_norm_weight, double out_norm_eps,
                                     at::Tensor grad_out, at::Tensor probs, at::Tensor rstd, at::Tensor scores,
                                     std::vector<bool> needs_grad);
bool inkling_fits(at::Tensor bank, at::Tensor partial, at::Tensor queries);
std::vector<at::Tensor> inkling_forward(at::Tensor bank, at::Tensor partial, at::Tensor queries, double scale,
                                        double eps, bool normed_values, bool keep_stats);
std::vector<at::Tensor> inkling_backward(at::Tensor bank, at::Tensor partial, at::Tensor queries, double scale,
                                         bool normed_values, at::Tensor grad_out, at::Tensor probs, at::Tensor rstd,
                                         at::Tensor scores, bool bank_grad, bool partial_grad);
"""

PREFIX = "attnres_mix_cpu"
# the Inkling-2 variant (inkling_cpu.py) shares the build: one compile, one cache entry
FUNCTIONS = ("mix_fits", "mix_forward", "mix_backward", "inkling_fits", "inkling_forward", "inkling_backward")
DTYPES = (torch.float32, torch.bfloat16)
PLAIN = (torch.Tensor, torch.nn.Parameter)
_state = {"module": None, "tried": False}
_lock = threading.Lock()


def cpu_flags() -> str:
    """The CPU's feature flags (Linux), part of the build key: the kernel is compiled for the CPU it runs on."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            return next((line for line in cpuinfo if line.startswith(("flags", "Features"))), "")
    except OSError:
        return ""


def build_flags() -> list[str]:
    """Compiler flags. -fopenmp: `at::parallel_for` splits the tokens over torch's intra-op threads (on Linux torch
    ships libgomp.so.1, so the extension shares torch's OpenMP runtime); elsewhere (macOS clang has no OpenMP) the
    kernel runs on one thread. -fopenmp-simd: the per-row `omp simd` loops. -march=native on x86-64 Linux only (AVX2 /
    AVX-512 where present); the build key includes the CPU's flags."""
    linux = sys.platform.startswith("linux")
    flags = ["-O3", "-fopenmp-simd"] + (["-fopenmp"] if linux else [])
    return flags + (["-march=native"] if linux and platform.machine() in ("x86_64", "AMD64") else [])


def link_flags() -> list[str]:
    return ["-fopenmp"] if "-fopenmp" in build_flags() else []


def compiler() -> list[str]:
    """The C++ compiler torch's build runs ($CXX or c++) and the file it resolves to (an upgrade changes it)."""
    name = os.environ.get("CXX", "c++")
    found = shutil.which(name)
    return [name, os.path.realpath(found) if found else ""]


@functools.cache
def cpp_source() -> str:
    """The kernel's C++ source (package data), read when the kernel is first built or looked up."""
    return Path(__file__).with_name("cpu_fused.cpp").read_text(encoding="utf-8")


def build_key() -> dict:
    """Everything that makes the build: a cached module is loaded only where all of it is the same. The torch
    installation's folder is part of it (two virtual environments never share, nor rewrite, one build)."""
    return dict(
        source=hashlib.sha256((CPP_DECLARATIONS + cpp_source()).encode()).hexdigest(), functions=list(FUNCTIONS),
        cflags=build_flags(), ldflags=link_flags(), compiler=compiler(),
        torch=[torch.__version__, torch.version.git_version, os.path.realpath(os.path.dirname(torch.__file__))],
        python=[sys.version, sys.implementation.cache_tag, sysconfig.get_config_var("EXT_SUFFIX"),
                getattr(sys, "abiflags", "")],
        platform=[sys.platform, platform.machine(), cpu_flags()],
    )


def build_directory() -> tuple[str, Path]:
    """(extension name, its build folder): one folder per `build_key`, under $ATTNRES_EXTENSIONS_DIR or
    <XDG_CACHE_HOME or ~/.cache>/attnres/torch_extensions."""
    name = f"{PREFIX}_{key_digest(build_key())[:16]}"
    return name, cache_folders()[-1] / name


def load_extension():
    """The compiled kernel module, built on first call (cached on disk), or None where it cannot be built."""
    if _state["tried"]:
        return _state["module"]
    with _lock:
        if not _state["tried"]:
            _state["module"] = build_extension()
            _state["tried"] = True
    return _state["module"]


def compile_module(name: str, folder: Path):
    """torch's JIT build of the kernel into `folder` (emptied by the cache first: what it imports, it built). Called
    only when no verified build exists, so it announces itself: a first build takes minutes, and a progress
    bar sitting at 0 meanwhile would look like a hang."""
    from torch.utils.cpp_extension import load_inline

    logger.warning("attnres: compiling the fused C++ CPU mix kernel for this machine, once (about 1 CPU minute; "
                   "several minutes on a busy machine); cached in %s", folder)
    started = time.monotonic()
    module = load_inline(name, cpp_sources=[CPP_DECLARATIONS, cpp_source()], functions=list(FUNCTIONS),
                         extra_cflags=build_flags(), extra_ldflags=link_flags(), build_directory=str(folder),
                         verbose=False)
    logger.warning("attnres: the fused C++ CPU mix kernel is built (%.0f s)", time.monotonic() - started)
    return module


def build_extension():
    """The kernel from the per-user cache (`extension_cache`: a verified earlier build, else built here), or None with
    one warning: no compiler, a failed build, or a cache folder that is not the user's own."""
    try:
        return load_or_build(PREFIX, build_key(), compile_module)
    except CacheRefused as error:
        reason = f"is not loaded: {error}"
    except Exception as error:  # no compiler, no ninja, a failed build: the eager path serves every mix
        reason = (f"could not be built ({type(error).__name__}: "
                  f"{str(error).strip().splitlines()[-1] if str(error).strip() else ''})")
    warnings.warn(f"attnres: the fused CPU mix kernel {reason}; using the eager PyTorch path (backend 'torch'), which "
                  "is slower at small widths", RuntimeWarning, stacklevel=3)
    return None


def fits(sources: Sequence[torch.Tensor], query, norm_weight, out_norm_weight) -> bool:
    """Whether the kernel takes these inputs: plain contiguous CPU tensors (no subclass, no wrapper), sources of one
    shape and dtype (fp32 or bf16), query and key gain of `hidden` elements (the query may be its Linear's [1, hidden]
    weight), the output norm's gain contiguous in the sources' dtype, outside torch.compile's tracing. The first source
    is looked at here, so a model that never mixes CPU tensors never builds the kernel; the kernel's own `mix_fits`
    checks the rest (at decode sizes these checks, in Python, were a good part of the call)."""
    first = sources[0]
    if not first.is_cpu or first.dtype not in DTYPES or torch.compiler.is_compiling():
        return False
    if type(query) not in PLAIN or type(norm_weight) not in PLAIN or not all(type(s) in PLAIN for s in sources):
        return False  # a subclass would come back a plain tensor (and a __torch_dispatch__ one has no memory to read)
    extension = load_extension()
    return extension is not None and extension.mix_fits(sources, query, norm_weight, out_norm_weight)


class FusedMix(torch.autograd.Function):
    """out = mix(sources) (or `out_norm_weight * rms_norm(mix)`), probs [n, ...]: `lean.LeanMix`'s contract, the
    forward and backward each one kernel call."""

    @staticmethod
    def forward(ctx, query, norm_weight, out_norm_weight, eps, out_norm_eps, *sources):
        out, probs, rstd, scores = load_extension().mix_forward(list(sources), query, norm_weight, eps,
                                                                out_norm_weight, out_norm_eps, True)
        ctx.save_for_backward(query, norm_weight, out_norm_weight, rstd, scores, probs, *sources)
        ctx.out_norm_eps = out_norm_eps
        ctx.mark_non_differentiable(probs)
        return out, probs

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out, _grad_probs):
        query, norm_weight, out_norm_weight, rstd, scores, probs, *sources = ctx.saved_tensors
        needs = list(ctx.needs_input_grad[5:])
        grad_w, grad_out_norm, *grad_sources = load_extension().mix_backward(
            sources, query, norm_weight, out_norm_weight, ctx.out_norm_eps, grad_out, probs, rstd, scores, needs,
        )
        grad_w = grad_w.to(torch.promote_types(query.dtype, norm_weight.dtype))
        grad_query = (grad_w * norm_weight).view(query.shape)  # query: [d] or its Linear's [1, d] weight
        return grad_query, grad_w * query.reshape(-1), grad_out_norm, None, None, *grad_sources


def attn_res_cpu(
    sources: Sequence[torch.Tensor],
    query: torch.Tensor,
    norm_weight: torch.Tensor,
    eps: float,
    return_weights: bool = False,
    out_norm_weight: torch.Tensor | None = None,
    out_norm_eps: float = 1e-6,
):
    """`lean.attn_res_lean`'s contract on the fused kernel. The caller checks `fits` first."""
    if torch.is_grad_enabled() and (query.requires_grad or norm_weight.requires_grad or any(
            s.requires_grad for s in sources) or (out_norm_weight is not None and out_norm_weight.requires_grad)):
        out, probs = FusedMix.apply(query, norm_weight, out_norm_weight, float(eps), float(out_norm_eps), *sources)
    else:  # inference: no autograd node, one call
        out, probs, _, _ = load_extension().mix_forward(sources, query, norm_weight, eps, out_norm_weight,
                                                       out_norm_eps, False)
    return (out, probs.movedim(0, -1)) if return_weights else out


__all__ = ["attn_res_cpu", "fits", "load_extension"]
