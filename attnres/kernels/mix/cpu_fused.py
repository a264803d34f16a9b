"""The AttnRes mix as one fused C++ CPU kernel: the path of backend "auto" (and "cpp") on CPU tensors.

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

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cmath>
#include <vector>

namespace {
// The per-row loops are `omp simd` (built with -fopenmp-simd: no OpenMP runtime), which lets the compiler reorder the
// fp32 reductions into vector lanes; plain loops would stay scalar (IEEE order), hand-split lanes vectorised badly.
inline float f32(float x) { return x; }
inline float f32(c10::BFloat16 x) { return c10::detail::f32_from_bits(x.x); }
template <typename T> inline T cast(float x) { return static_cast<T>(x); }  // BFloat16: round to nearest even

// (sum v_i^2, sum v_i w_i) of one row
template <typename T>
inline void sumsq_dot(const T* __restrict__ v, const float* __restrict__ w, int64_t d, float& ss_out, float& dot_out) {
  float ss = 0.f, dot = 0.f;
#pragma omp simd reduction(+ : ss, dot)
  for (int64_t i = 0; i < d; ++i) { const float x = f32(v[i]); ss += x * x; dot += x * w[i]; }
  ss_out = ss;
  dot_out = dot;
}

template <typename T>
inline float dot(const float* __restrict__ g, const T* __restrict__ v, int64_t d) {
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < d; ++i) s += g[i] * f32(v[i]);
  return s;
}

// acc = sum_j p[j] v_j (fp32), the eager path's order: p_0 v_0 first, then the others
template <typename T>
inline void weighted_sum(const std::vector<const T*>& rows, const float* p, int64_t d, float* __restrict__ acc) {
  const T* __restrict__ first = rows[0];
  const float p0 = p[0];
#pragma omp simd
  for (int64_t i = 0; i < d; ++i) acc[i] = p0 * f32(first[i]);
  for (size_t j = 1; j < rows.size(); ++j) {
    const T* __restrict__ v = rows[j];
    const float pj = p[j];
#pragma omp simd
    for (int64_t i = 0; i < d; ++i) acc[i] += pj * f32(v[i]);
  }
}

// acc (fp32 mix) -> m = float(T(acc)) in place; returns rsqrt(mean(m^2) + eps) of the cast mix
template <typename T>
inline float cast_and_rstd(float* __restrict__ acc, int64_t d, float eps) {
  float ss = 0.f;
#pragma omp simd reduction(+ : ss)
  for (int64_t i = 0; i < d; ++i) { acc[i] = f32(cast<T>(acc[i])); ss += acc[i] * acc[i]; }
  return 1.f / std::sqrt(ss / d + eps);
}

// the n source rows of token t
template <typename T>
inline void rows_of(const std::vector<const T*>& base, int64_t t, int64_t d, std::vector<const T*>& rows) {
  for (size_t j = 0; j < base.size(); ++j) rows[j] = base[j] + t * d;
}

template <typename T>
std::vector<const T*> pointers(const std::vector<at::Tensor>& sources) {
  std::vector<const T*> ptrs;
  for (const auto& s : sources) ptrs.push_back(s.data_ptr<T>());
  return ptrs;
}

int64_t grain(int64_t n, int64_t d) { return std::max<int64_t>(1, 32768 / std::max<int64_t>(1, n * d)); }

template <typename T>
void forward_impl(const std::vector<at::Tensor>& sources, const float* w, float eps, const T* gain, float eps2,
                  T* out, float* probs, float* rstd, float* scores, int64_t tokens, int64_t d) {
  const auto base = pointers<T>(sources);
  const int64_t n = base.size();
  at::parallel_for(0, tokens, grain(n, d), [&](int64_t begin, int64_t end) {
    std::vector<float> acc(d), p(n);
    std::vector<const T*> rows(n);
    for (int64_t t = begin; t < end; ++t) {
      rows_of(base, t, d, rows);
      float top = -INFINITY;
      for (int64_t j = 0; j < n; ++j) {
        float ss, vw;
        sumsq_dot(rows[j], w, d, ss, vw);
        const float r = 1.f / std::sqrt(ss / d + eps);
        p[j] = r * vw;
        if (rstd != nullptr) { rstd[j * tokens + t] = r; scores[j * tokens + t] = p[j]; }  // kept for the backward
        top = std::max(top, p[j]);
      }
      float total = 0.f;
      for (int64_t j = 0; j < n; ++j) { p[j] = std::exp(p[j] - top); total += p[j]; }
      for (int64_t j = 0; j < n; ++j) { p[j] /= total; probs[j * tokens + t] = p[j]; }
      weighted_sum(rows, p.data(), d, acc.data());
      T* o = out + t * d;
      if (gain == nullptr) {
#pragma omp simd
        for (int64_t i = 0; i < d; ++i) o[i] = cast<T>(acc[i]);
        continue;
      }
      const float r2 = cast_and_rstd<T>(acc.data(), d, eps2);  // KimiLinearRMSNorm: weight * (x * rstd).to(dtype)
#pragma omp simd
      for (int64_t i = 0; i < d; ++i) o[i] = cast<T>(f32(gain[i]) * f32(cast<T>(acc[i] * r2)));
    }
  });
}

// g (fp32, d): dLoss/dmix through the output norm, as the eager path rounds it; adds the gain's gradient to ggain
template <typename T>
void norm_backward_row(float* __restrict__ m, const T* __restrict__ go, const T* __restrict__ gain, float eps2,
                       int64_t d, float* __restrict__ g, float* __restrict__ ggain) {
  const float r2 = cast_and_rstd<T>(m, d, eps2);
  float c = 0.f;
#pragma omp simd reduction(+ : c)
  for (int64_t i = 0; i < d; ++i) {
    const float x_hat = m[i] * r2;
    ggain[i] += f32(go[i]) * f32(cast<T>(x_hat));
    g[i] = f32(cast<T>(f32(go[i]) * f32(gain[i])));
    m[i] = x_hat;
    c += g[i] * x_hat;
  }
  c /= d;
#pragma omp simd
  for (int64_t i = 0; i < d; ++i) g[i] = f32(cast<T>(r2 * (g[i] - m[i] * c)));
}

template <typename T>
void backward_impl(const std::vector<at::Tensor>& sources, const float* w, const T* gain, float eps2, const T* grad_out,
                   const float* probs, const float* rstd, const float* scores, std::vector<T*>& grads,
                   float* gw_all, float* ggain_all, int64_t tokens, int64_t d) {
  const auto base = pointers<T>(sources);
  const int64_t n = base.size();
  at::parallel_for(0, tokens, grain(n, d), [&](int64_t begin, int64_t end) {
    float* gw = gw_all + at::get_thread_num() * d;  // per-thread partial sums over tokens, added up afterwards
    float* ggain = ggain_all + at::get_thread_num() * d;
    std::vector<float> m(d), g(d), p(n), gdv(n);
    std::vector<const T*> rows(n);
    for (int64_t t = begin; t < end; ++t) {
      rows_of(base, t, d, rows);
      const T* go = grad_out + t * d;
      for (int64_t j = 0; j < n; ++j) p[j] = probs[j * tokens + t];
      if (gain != nullptr) {
        weighted_sum(rows, p.data(), d, m.data());  // the mix, recomputed: never saved
        norm_backward_row(m.data(), go, gain, eps2, d, g.data(), ggain);
      } else {
#pragma omp simd
        for (int64_t i = 0; i < d; ++i) g[i] = f32(go[i]);
      }
      float g_out = 0.f;  // g . out = sum_j p_j (g . v_j)
      for (int64_t j = 0; j < n; ++j) { gdv[j] = dot(g.data(), rows[j], d); g_out += p[j] * gdv[j]; }
      for (int64_t j = 0; j < n; ++j) {
        const float r = rstd[j * tokens + t];
        const float key_coef = p[j] * (gdv[j] - g_out) * r;  // dLoss/ds_j * r_j
        const float value_coef = key_coef * scores[j * tokens + t] * r / d;
        const T* __restrict__ v = rows[j];
        const float pj = p[j];
#pragma omp simd
        for (int64_t i = 0; i < d; ++i) gw[i] += key_coef * f32(v[i]);
        if (grads[j] == nullptr) continue;  // a source without gradient (frozen embeddings)
        T* __restrict__ dv = grads[j] + t * d;
        const float* __restrict__ gr = g.data();
#pragma omp simd
        for (int64_t i = 0; i < d; ++i) dv[i] = cast<T>(pj * gr[i] + key_coef * w[i] - value_coef * f32(v[i]));
      }
    }
  });
}

// the eager path's w = (norm_weight * query).float(): the product rounded to the parameters' dtype, then fp32.
// Computed here for the common dtypes: at decode sizes two tensor ops cost more than the whole mix.
std::vector<float> mixed_weight(const at::Tensor& query, const at::Tensor& norm_weight) {
  const int64_t d = query.numel();
  std::vector<float> w(d);
  const auto type = query.scalar_type();
  if (type == norm_weight.scalar_type() && query.is_contiguous() && norm_weight.is_contiguous() &&
      (type == at::kFloat || type == at::kBFloat16)) {
    AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, type, "attnres_mix_weight", [&] {
      const scalar_t* q = query.data_ptr<scalar_t>();
      const scalar_t* g = norm_weight.data_ptr<scalar_t>();
      for (int64_t i = 0; i < d; ++i) w[i] = f32(cast<scalar_t>(f32(g[i]) * f32(q[i])));
    });
    return w;
  }
  const at::Tensor product = norm_weight.mul(query).to(at::kFloat).contiguous();
  std::copy(product.data_ptr<float>(), product.data_ptr<float>() + d, w.begin());
  return w;
}
}  // namespace

// Whether the kernel takes these inputs. It reads raw memory, so every tensor must be a plain strided CPU tensor with
// its own storage (no Python subclass such as DTensor or FakeTensor, no functorch wrapper, no lazy conj / neg view).
// Checked here rather than in Python: at decode sizes the checks were a good part of the call.
bool plain_cpu(const at::Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.layout() == at::kStrided && t.has_storage() &&
         !t.unsafeGetTensorImpl()->is_python_dispatch() && !t.is_conj() && !t.is_neg();
}

bool mix_fits(std::vector<at::Tensor> sources, at::Tensor query, at::Tensor norm_weight,
              c10::optional<at::Tensor> out_norm_weight) {
  if (sources.empty() || !plain_cpu(sources[0]) || sources[0].dim() == 0) return false;
  const auto& first = sources[0];
  const auto type = first.scalar_type();
  const int64_t d = first.size(-1);
  if ((type != at::kFloat && type != at::kBFloat16) || d == 0) return false;
  for (const auto& s : sources)
    if (!plain_cpu(s) || s.scalar_type() != type || !s.sizes().equals(first.sizes()) || !s.is_contiguous())
      return false;
  for (const auto* p : {&query, &norm_weight})  // [d] (or the [1, d] weight of the query's Linear), any float dtype
    if (!plain_cpu(*p) || !at::isFloatingType(p->scalar_type()) || p->numel() != d) return false;
  if (out_norm_weight.has_value()) {
    const auto& gain = *out_norm_weight;
    if (!plain_cpu(gain) || gain.scalar_type() != type || gain.numel() != d || !gain.is_contiguous()) return false;
  }
  return true;
}

// (out, probs [n, ...], rstd [n, ...], scores [n, ...]); rstd and scores (the backward's) undefined unless keep_stats
std::vector<at::Tensor> mix_forward(std::vector<at::Tensor> sources, at::Tensor query, at::Tensor norm_weight,
                                    double eps, c10::optional<at::Tensor> out_norm_weight, double out_norm_eps,
                                    bool keep_stats) {
  const auto& first = sources[0];
  const int64_t d = first.size(-1), tokens = first.numel() / d, n = sources.size();
  auto stat_shape = first.sizes().vec();
  stat_shape.back() = n;
  std::rotate(stat_shape.rbegin(), stat_shape.rbegin() + 1, stat_shape.rend());  // [n, ...]
  const auto stat_opts = first.options().dtype(at::kFloat);
  at::Tensor out = at::empty_like(first), probs = at::empty(stat_shape, stat_opts), rstd, scores;
  if (keep_stats) {
    rstd = at::empty(stat_shape, stat_opts);
    scores = at::empty(stat_shape, stat_opts);
  }
  const std::vector<float> w = mixed_weight(query, norm_weight);
  AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, first.scalar_type(), "attnres_mix_forward", [&] {
    const scalar_t* gain = out_norm_weight.has_value() ? out_norm_weight->data_ptr<scalar_t>() : nullptr;
    forward_impl<scalar_t>(sources, w.data(), eps, gain, out_norm_eps, out.data_ptr<scalar_t>(),
                           probs.data_ptr<float>(), keep_stats ? rstd.data_ptr<float>() : nullptr,
                           keep_stats ? scores.data_ptr<float>() : nullptr, tokens, d);
  });
  return {out, probs, rstd, scores};
}

// (grad of w = norm_weight * query (fp32 [d]), grad of the output norm's gain or undefined, grad of each source or
// undefined where `needs_grad` is false)
std::vector<at::Tensor> mix_backward(std::vector<at::Tensor> sources, at::Tensor query, at::Tensor norm_weight,
                                     c10::optional<at::Tensor> out_norm_weight, double out_norm_eps,
                                     at::Tensor grad_out, at::Tensor probs, at::Tensor rstd, at::Tensor scores,
                                     std::vector<bool> needs_grad) {
  const auto& first = sources[0];
  const int64_t d = first.size(-1), tokens = first.numel() / d, n = sources.size();
  const std::vector<float> w = mixed_weight(query, norm_weight);
  grad_out = grad_out.contiguous();
  const auto threads = at::get_num_threads();
  at::Tensor gw = at::zeros({threads, d}, first.options().dtype(at::kFloat));
  at::Tensor ggain = at::zeros({threads, d}, first.options().dtype(at::kFloat));
  std::vector<at::Tensor> result(n + 2);
  AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, first.scalar_type(), "attnres_mix_backward", [&] {
    std::vector<scalar_t*> grads(n, nullptr);
    for (int64_t j = 0; j < n; ++j) {
      if (!needs_grad[j]) continue;
      result[2 + j] = at::empty_like(first);
      grads[j] = result[2 + j].data_ptr<scalar_t>();
    }
    const scalar_t* gain = out_norm_weight.has_value() ? out_norm_weight->data_ptr<scalar_t>() : nullptr;
    backward_impl<scalar_t>(sources, w.data(), gain, out_norm_eps, grad_out.data_ptr<scalar_t>(),
                            probs.data_ptr<float>(), rstd.data_ptr<float>(), scores.data_ptr<float>(), grads,
                            gw.data_ptr<float>(), ggain.data_ptr<float>(), tokens, d);
  });
  result[0] = gw.sum(0);
  if (out_norm_weight.has_value()) result[1] = ggain.sum(0).to(out_norm_weight->scalar_type());
  return result;
}
"""

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
"""

PREFIX = "attnres_mix_cpu"
FUNCTIONS = ("mix_fits", "mix_forward", "mix_backward")
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


def build_key() -> dict:
    """Everything that makes the build: a cached module is loaded only where all of it is the same. The torch
    installation's folder is part of it (two virtual environments never share, nor rewrite, one build)."""
    return dict(
        source=hashlib.sha256((CPP_DECLARATIONS + CPP_SOURCE).encode()).hexdigest(), functions=list(FUNCTIONS),
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
    only when no verified build exists, so it announces itself: minutes with no output otherwise (issue 32: a demo's
    progress bar sat at 0 for 5 minutes)."""
    from torch.utils.cpp_extension import load_inline

    logger.warning("attnres: compiling the fused C++ CPU mix kernel for this machine, once (about 1 CPU minute; "
                   "several minutes on a busy machine); cached in %s", folder)
    started = time.monotonic()
    module = load_inline(name, cpp_sources=[CPP_DECLARATIONS, CPP_SOURCE], functions=list(FUNCTIONS),
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
