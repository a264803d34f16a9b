"""The public AttnRes implementations `attnres bench-kernels` runs beside ours, loaded from their own installed code
and mapped onto our call, mix(sources, query, norm_weight, eps) -> [..., d] in the sources' dtype.

They live in a folder outside the environment (scripts/setup_peers.sh: `pip install --no-deps --target`), because
with `fla` importable, transformers' Kimi Linear binds fla's kernels when its modeling module is imported and then
fails on CPU. `use_peers_path` puts that folder first on sys.path inside the benchmark process only, after transformers'
Kimi Linear modeling is imported (it has bound the PyTorch path by then).

What each peer computes, read from its source (fla-core 0.6.0, flash-attn-res 0.1.12, fast-attnres 2.1.0):
  fla `naive_attnres(query, residuals, rms_weight, rms_eps=eps)` / `fused_attnres(...)`: keys = RMSNorm(v) * rms_weight,
      score = keys . query, softmax over sources, sum p v. The same as ours (the gain folds into the query: ours
      scores RMSNorm(v) . (norm_weight * query)), fp32 inside, output in the sources' dtype. `fused_attnres` is
      Triton on CUDA only (it raises on CPU tensors).
  flash-attn-res takes a stacked [N, B, T, D] bank and pseudo-queries, with **no key-norm gain**: score =
      RMSNorm(v) . q. We pass q = norm_weight * query (built in autograd, so the gradients of query and norm_weight
      follow by the chain rule) and the stack of the sources; the stack is part of the timed call, as for ours and
      fla's naive path, which stack inside.
      - Triton (`ops.phase_1.phase_1_batched_attention_triton_op` with one query): its output is always **bf16**, so
        its check uses the bf16 tolerance whatever the run's dtype; `tl.arange(0, HIDDEN_DIM)` needs a power-of-two
        hidden size. Its package `__init__` fails on triton 3.9 (the phase-2 kernel's autotune key names arguments it
        does not take), so when that import fails we load `ops.phase_1` without the package `__init__` (phase 1 is
        the whole mix; phase 2 is the block-streaming merge, not used here).
      - PyTorch (`experimental/torch.py`): `naive_attention_residual(q, values)` and `phase_1_fn(q[None], values)`,
        both under `torch.compile(mode="max-autotune-no-cudagraphs")` as shipped. The file imports none of the names
        it uses (torch, F, EPS, DTYPE, BLOCK_SIZE), so we execute it with them supplied: EPS = the benchmark's eps,
        DTYPE = the run's dtype (its output cast), BLOCK_SIZE unused by these two functions.
  fast-attnres `attnres.attnres(values, query, *, eps, scale)`: keys = the last R = len(query) coordinates of each
      source, RMS-normalised with **no gain** (t * rsqrt(mean(t^2) + eps), eps inside the root as ours), score =
      scale * (keys . query), softmax over sources, sum p v over the raw full-width values. R == D and scale = 1 is our
      mix with q = norm_weight * query (the same mapping as flash-attn-res); R < D ("sliced LR-AttnRes") keys on a
      tail slice only, which ours has no form of. Its import package is `attnres` and its torch.library ops live
      in the `attnres` namespace: why ours are `hf_attnres` (tests/test_peer_install.py installs both side by side).
      - `fast_attnres`: the public call, given the list of sources (no stack). It takes CUDA BF16 values and query
        only (BF16 output and gradients, fp32 inside): on CPU the row says it needs CUDA; in a CUDA fp32 run its own
        dtype error is the row.
      - `fast_attnres_mq`: its private multi-query launchers (`attnres._kernels.multiquery.forward` / `backward`)
        with one query, in an autograd.Function of ours that calls them exactly as their own custom op does. Their
        docstring says they take fp32 CPU tensors under TRITON_INTERPRET=1 "for equation checks": the only way to
        run fast-attnres' own kernels on CPU (2.1.0 ships no PyTorch reference). Its CPU timings are the Triton
        interpreter's and say nothing about speed; with one query the public call runs the fixed-tail kernels, not
        these.
"""
from __future__ import annotations

import importlib
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import sys
import types
from pathlib import Path

import torch

DEFAULT_PEERS_PATH = os.environ.get("ATTNRES_PEERS", str(Path.home() / ".cache" / "attnres" / "peers"))
NOT_INSTALLED = "not installed (run scripts/setup_peers.sh)"
PINNED = {"fla-core": "0.6.0", "flash-attn-res": "0.1.12", "fast-attnres": "2.1.0"}
NEEDS_CUDA = "needs CUDA: fast-attnres 2.1.0's attnres takes CUDA BF16 tensors only"

# name -> (peer, what it is); the order the benchmark lists them in
PEER_IMPLS = {
    "fla": ("fla", "fla.ops.attnres.fused_attnres (Triton, CUDA only)"),
    "fla_naive": ("fla", "fla.ops.attnres.naive_attnres (fla's PyTorch reference)"),
    "far_triton": ("flash-attn-res", "flash_attn_res.ops.phase_1 Triton op, one query (bf16 output)"),
    "far_torch": ("flash-attn-res", "experimental/torch.py naive_attention_residual, torch.compile'd as shipped"),
    "far_torch_eager": ("flash-attn-res", "the same function uncompiled (dynamo's original callable)"),
    "far_phase1": ("flash-attn-res", "experimental/torch.py phase_1_fn, one query, torch.compile'd as shipped"),
    "fast_attnres": ("fast-attnres", "attnres.attnres, the public call (Triton; CUDA BF16 only)"),
    "fast_attnres_mq": ("fast-attnres", "attnres._kernels.multiquery launchers, one query (Triton; on CPU the "
                                        "interpreter: an equation check, not a speed)"),
}
# the dtype a peer's output is rounded to whatever the inputs' dtype (its check uses that dtype's tolerance)
OUTPUT_DTYPE = {"far_triton": torch.bfloat16, "fast_attnres": torch.bfloat16}


def use_peers_path(folder: str) -> bool:
    """Put the peers' folder first on sys.path (after transformers' Kimi Linear has bound its kernels); False when the
    folder does not exist."""
    import transformers.models.kimi_linear.modeling_kimi_linear  # noqa: F401  binds the torch path before fla exists

    if not Path(folder).is_dir():
        return False
    if folder not in sys.path:
        sys.path.insert(0, folder)  # first: the pinned versions win over any the environment has
    return True


def versions(folder: str) -> dict:
    """The peers' installed versions in `folder` (None when absent) and the pinned ones."""
    found = {dist.metadata["Name"].lower(): dist.version for dist in importlib.metadata.distributions(path=[folder])}
    return {name: dict(installed=found.get(name), pinned=pin) for name, pin in PINNED.items()}


def load_fla() -> dict:
    """name -> mix, or name -> why not, for fla's two implementations."""
    if importlib.util.find_spec("fla") is None:
        return {"fla": NOT_INSTALLED, "fla_naive": NOT_INSTALLED}
    try:
        from fla.ops.attnres import fused_attnres, naive_attnres
    except Exception as error:  # noqa: BLE001  an import failure is a row, not a crash
        reason = f"not importable: {type(error).__name__}: {error}"
        return {"fla": reason, "fla_naive": reason}
    return {
        "fla": lambda sources, query, norm_weight, eps: fused_attnres(query, sources, norm_weight, rms_eps=eps),
        "fla_naive": lambda sources, query, norm_weight, eps: naive_attnres(query, sources, norm_weight, rms_eps=eps),
    }


def flash_attn_res_package(notes: dict) -> Path:
    """Import flash_attn_res, or, when its package `__init__` fails (triton 3.9 rejects its phase-2 autotune key),
    register the package without running that `__init__` so its submodules still import. Returns its folder."""
    try:
        import flash_attn_res

        return Path(flash_attn_res.__file__).parent
    except Exception as error:  # noqa: BLE001  recorded in the results' meta
        notes["flash_attn_res_init"] = f"{type(error).__name__}: {error}"
    for name in [m for m in sys.modules if m == "flash_attn_res" or m.startswith("flash_attn_res.")]:
        del sys.modules[name]  # half-imported pieces of the failed import
    folder = Path(importlib.util.find_spec("flash_attn_res").origin).parent
    package = importlib.util.module_from_spec(importlib.machinery.ModuleSpec("flash_attn_res", None, is_package=True))
    package.__path__, package.__file__ = [str(folder)], str(folder / "__init__.py")
    sys.modules["flash_attn_res"] = package
    return folder


def one_config_each(notes: dict) -> None:
    """Under the Triton interpreter the autotuner has no benchmarker: keep each kernel's first config (their own
    `set_autotune_configs`), so the kernels run on CPU to check the mapping. Not done on a GPU."""
    configs = importlib.import_module("flash_attn_res.kernels.configs")
    for module in ("flash_attn_res.kernels.phase_1", "flash_attn_res.kernels.reduce"):
        for kernel in vars(importlib.import_module(module)).values():
            if hasattr(kernel, "configs") and hasattr(kernel, "cache"):
                configs.set_autotune_configs(kernel, kernel.configs[:1])
    notes["flash_attn_res_autotune"] = "interpreter: first config of each kernel only"


def experimental_torch(folder: Path, eps: float, dtype: torch.dtype) -> types.ModuleType:
    """flash_attn_res/experimental/torch.py executed with the names it uses but does not import."""
    path = folder / "experimental" / "torch.py"
    module = types.ModuleType("flash_attn_res.experimental.torch")
    module.__file__ = str(path)
    module.__dict__.update(torch=torch, F=torch.nn.functional, EPS=eps, DTYPE=dtype, BLOCK_SIZE=None)
    exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), module.__dict__)  # noqa: S102  their file
    sys.modules[module.__name__] = module
    return module


def load_flash_attn_res(eps: float, dtype: torch.dtype, notes: dict) -> dict:
    """name -> mix, or name -> why not, for flash-attn-res's Triton op and its two PyTorch functions."""
    names = [name for name, (peer, _) in PEER_IMPLS.items() if peer == "flash-attn-res"]
    if importlib.util.find_spec("flash_attn_res") is None:
        return dict.fromkeys(names, NOT_INSTALLED)
    folder = flash_attn_res_package(notes)
    impls = {}
    try:
        phase_1 = importlib.import_module("flash_attn_res.ops.phase_1")
        if os.environ.get("TRITON_INTERPRET") == "1":
            one_config_each(notes)
        impls["far_triton"] = far_triton(phase_1.phase_1_batched_attention_triton_op)
    except Exception as error:  # noqa: BLE001
        impls["far_triton"] = f"not importable: {type(error).__name__}: {error}"
    try:
        module = experimental_torch(folder, eps, dtype)
    except Exception as error:  # noqa: BLE001
        return {**impls, **dict.fromkeys(names[1:], f"not loadable: {type(error).__name__}: {error}")}
    compiled = module.naive_attention_residual
    impls["far_torch"] = far_naive(compiled, eps)
    impls["far_torch_eager"] = far_naive(compiled._torchdynamo_orig_callable, eps)
    impls["far_phase1"] = far_phase1(module.phase_1_fn, eps)
    return impls


def far_triton(op):
    def mix(sources, query, norm_weight, eps):
        out, _lse = op(torch.stack(tuple(sources)), (norm_weight * query).unsqueeze(0), eps)
        return out[0].to(sources[0].dtype)

    return mix


def far_naive(fn, module_eps):
    def mix(sources, query, norm_weight, eps):
        assert eps == module_eps, "experimental/torch.py reads its EPS global, set when the file was loaded"
        return fn(norm_weight * query, torch.stack(tuple(sources)))

    return mix


def far_phase1(fn, module_eps):
    def mix(sources, query, norm_weight, eps):
        assert eps == module_eps, "experimental/torch.py reads its EPS global, set when the file was loaded"
        _lse, _normalized_bf16, first = fn((norm_weight * query).unsqueeze(0), torch.stack(tuple(sources)))
        return first.to(sources[0].dtype)  # fp32: the normalised output of query 0 before its bf16 copy

    return mix


def load_fast_attnres() -> dict:
    """name -> mix, or name -> why not, for fast-attnres' public call and its multi-query launchers."""
    names = [name for name, (peer, _) in PEER_IMPLS.items() if peer == "fast-attnres"]
    if importlib.util.find_spec("attnres") is None:
        return dict.fromkeys(names, NOT_INSTALLED)
    try:
        import attnres

        if not callable(getattr(attnres, "attnres", None)):  # another distribution's `attnres` module
            raise ImportError(f"{attnres.__file__} has no attnres.attnres")
    except Exception as error:  # noqa: BLE001  an import failure is a row, not a crash
        return dict.fromkeys(names, f"not importable: {type(error).__name__}: {error}")
    impls = {"fast_attnres": fast_attnres_public(attnres.attnres)}
    try:
        impls["fast_attnres_mq"] = fast_attnres_multiquery(importlib.import_module("attnres._kernels.multiquery"))
    except Exception as error:  # noqa: BLE001
        impls["fast_attnres_mq"] = f"not importable: {type(error).__name__}: {error}"
    return impls


def fast_attnres_public(fn):
    def mix(sources, query, norm_weight, eps):
        if not sources[0].is_cuda:  # its own check comes after the dtype check, so a CPU fp32 run would blame dtype
            raise RuntimeError(NEEDS_CUDA)
        return fn(list(sources), norm_weight * query, eps=eps, scale=1.0)

    return mix


def fast_attnres_multiquery(module):
    """fast-attnres' multi-query forward/backward launchers as one autograd op with a single query (M = 1), called
    with the arguments, saved tensors and layout of their `attnres::_multiquery_forward_with_aux` op, whose
    registration is CUDA-only; the sources go in as a list (no stack), as its public call takes them."""

    class MultiQuery(torch.autograd.Function):
        @staticmethod
        def forward(ctx, eps, query, *sources):
            queries = query.unsqueeze(0)
            out, mixed, inv, logits, stats = module.forward(list(sources), queries, None, False, eps, 1.0, "auto",
                                                            "query_major")
            ctx.save_for_backward(queries, mixed, inv, logits, stats, *sources)
            return out[0]

        @staticmethod
        def backward(ctx, grad):
            queries, mixed, inv, logits, stats, *sources = ctx.saved_tensors
            grads = module.backward(sources, queries, None, False, mixed, grad.unsqueeze(0).contiguous(), inv,
                                    logits, stats, 1.0, "query_major")
            return None, grads[-1][0], *grads[:-1]

    def mix(sources, query, norm_weight, eps):
        return MultiQuery.apply(eps, norm_weight * query, *sources)

    return mix


def peer_implementations(names, folder: str, eps: float, dtype: torch.dtype) -> tuple[dict, dict]:
    """({name: mix or reason} for the peer names among `names`, notes for the results' meta)."""
    wanted = [name for name in names if name in PEER_IMPLS]
    notes = {"peers_path": folder}
    if not wanted:
        return {}, notes
    if not use_peers_path(folder):
        return dict.fromkeys(wanted, NOT_INSTALLED), notes
    notes["versions"] = versions(folder)
    loaded = {}
    if any(PEER_IMPLS[name][0] == "fla" for name in wanted):
        loaded |= load_fla()
    if any(PEER_IMPLS[name][0] == "flash-attn-res" for name in wanted):
        loaded |= load_flash_attn_res(eps, dtype, notes)
    if any(PEER_IMPLS[name][0] == "fast-attnres" for name in wanted):
        loaded |= load_fast_attnres()
    for module in ("fla", "flash_attn_res", "attnres"):
        if module in sys.modules and getattr(sys.modules[module], "__file__", None):
            notes[f"{module}_file"] = sys.modules[module].__file__
    return {name: loaded[name] for name in wanted}, notes


__all__ = ["DEFAULT_PEERS_PATH", "NEEDS_CUDA", "NOT_INSTALLED", "OUTPUT_DTYPE", "PEER_IMPLS", "peer_implementations"]
