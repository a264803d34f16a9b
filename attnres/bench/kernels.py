"""The AttnRes depth mix on its own, every available implementation side by side, the `attnres bench-kernels`
command (scripts/bench_kernels.py, whose help lists the implementations and how bytes are counted)."""
from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from datetime import datetime, timezone

import torch
from tqdm import tqdm

from ..atomic_io import write_json_atomic
from ..kernels.mix.lean import attn_res_lean
from ..kernels.mix.naive import attn_res_naive


def timer(device):
    """A function (fn) -> median seconds: triton's do_bench (CUDA events, L2 flushed) on GPU, wall clock on CPU."""
    if device == "cuda":
        import triton.testing

        return lambda fn, repeats: triton.testing.do_bench(fn, rep=max(25, repeats), return_mode="median") / 1e3

    def cpu_time(fn, repeats):
        fn()  # warm-up (and compilation)
        samples = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - start)
        return statistics.median(samples)

    torch.set_num_threads(torch.get_num_threads())
    return cpu_time


def copy_bandwidth(device, dtype, measure) -> float:
    """GB/s of a plain device copy (read + write), the ceiling a memory-bound kernel can approach."""
    numel = (1 << 30 if device == "cuda" else 1 << 26) // torch.finfo(dtype).bits * 8
    src = torch.empty(numel, dtype=dtype, device=device).uniform_()
    dst = torch.empty_like(src)
    seconds = measure(lambda: dst.copy_(src), 20)
    return 2 * src.numel() * src.element_size() / seconds / 1e9


def implementations(names, device):
    """name -> mix(sources, query, norm_weight, eps), or name -> reason it is unavailable."""
    impls = {}
    for name in names:
        if name == "torch_eager":
            impls[name] = attn_res_naive
        elif name == "torch_lean":
            impls[name] = attn_res_lean
        elif name == "torch_compile":
            # one specialised graph per (source count, shape), as a model compiled per layer gets
            torch._dynamo.config.recompile_limit = 1024
            impls[name] = torch.compile(attn_res_naive, dynamic=False)
        elif name == "attnres_triton":
            from ..kernels.mix.triton import attn_res_triton  # defines the kernels: after TRITON_INTERPRET is set

            impls[name] = attn_res_triton
        elif name == "fla":
            try:
                from fla.ops.attnres import fused_attnres
            except ImportError as error:
                impls[name] = f"not importable: {error}"
                continue
            impls[name] = lambda sources, query, norm_weight, eps: fused_attnres(query, sources, norm_weight,
                                                                                 rms_eps=eps)
        else:
            raise SystemExit(f"--impls: unknown implementation {name!r}")
    return impls


def case_inputs(n, tokens, hidden, dtype, device):
    sources = [torch.randn(tokens, hidden, dtype=dtype, device=device).requires_grad_() for _ in range(n)]
    query = (0.02 * torch.randn(hidden, device=device)).to(dtype).requires_grad_()
    norm_weight = torch.ones(hidden, dtype=dtype, device=device).requires_grad_()
    grad = torch.randn(tokens, hidden, dtype=dtype, device=device)
    return sources, query, norm_weight, grad


def bench_case(impl, inputs, measure, repeats):
    """(forward seconds, forward+backward seconds) of one implementation on one shape."""
    sources, query, norm_weight, grad = inputs

    def forward():
        with torch.no_grad():
            impl(sources, query, norm_weight, 1e-6)

    def forward_backward():
        out = impl(sources, query, norm_weight, 1e-6)
        torch.autograd.grad(out, [*sources, query, norm_weight], grad)

    return measure(forward, repeats), measure(forward_backward, repeats)


def bench_kernels(args) -> dict:
    """Time every implementation on every shape of `args` (the flags of `attnres.cli.bench_kernels`), write the JSON
    results file, print the table; returns the results."""
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before any kernel is defined: Triton runs on CPU tensors
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device is available")
    dtype = getattr(torch, args.dtype)
    measure = timer(args.device)
    copy_gbps = copy_bandwidth(args.device, dtype, measure)
    impls = implementations(args.impls, args.device)
    itemsize = torch.finfo(dtype).bits // 8
    results = []
    cases = [(n, t) for n in args.sources for t in args.tokens]
    for n, tokens in tqdm(cases, desc="shapes", file=sys.stderr):
        inputs = case_inputs(n, tokens, args.hidden, dtype, args.device)
        fwd_bytes = (n + 1) * tokens * args.hidden * itemsize
        bwd_bytes = (2 * n + 2) * tokens * args.hidden * itemsize
        bytes_by_pass = {"forward": fwd_bytes, "forward_backward": fwd_bytes + bwd_bytes}
        timings = {}
        for name, impl in impls.items():
            if isinstance(impl, str):
                results.append(dict(impl=name, sources=n, tokens=tokens, unavailable=impl))
                continue
            try:
                timings[name] = dict(zip(bytes_by_pass, bench_case(impl, inputs, measure, args.repeats)))
            except Exception as error:  # one failing implementation must not lose the others' numbers
                results.append(dict(impl=name, sources=n, tokens=tokens, error=f"{type(error).__name__}: {error}"))
        for name, by_pass in timings.items():
            for pass_name, seconds in by_pass.items():
                gbps = bytes_by_pass[pass_name] / seconds / 1e9
                eager = timings.get("torch_eager", {}).get(pass_name)
                results.append(dict(
                    impl=name, sources=n, tokens=tokens, pass_=pass_name, ms=round(seconds * 1e3, 4),
                    gbps=round(gbps, 2), pct_of_copy=round(100 * gbps / copy_gbps, 1),
                    speedup_vs_eager=round(eager / seconds, 3) if eager else None,
                ))
    cpu = f"CPU: {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads"
    meta = dict(
        date=datetime.now(timezone.utc).isoformat(timespec="seconds"), command=" ".join(sys.argv),
        device=torch.cuda.get_device_name() if args.device == "cuda" else cpu,
        triton_interpreter=os.environ.get("TRITON_INTERPRET") == "1", torch=torch.__version__, dtype=args.dtype,
        hidden=args.hidden, copy_gbps=round(copy_gbps, 2), repeats=args.repeats,
    )
    payload = dict(meta=meta, results=[{k.rstrip("_"): v for k, v in r.items()} for r in results])
    write_json_atomic(args.output, payload)
    print(json.dumps(meta))
    header = f"{'impl':16} {'n':>3} {'tokens':>7} {'pass':17} {'ms':>10} {'GB/s':>8} {'%copy':>6} {'x eager':>8}"
    print(header)
    for r in results:
        if "ms" in r:
            print(f"{r['impl']:16} {r['sources']:>3} {r['tokens']:>7} {r['pass_']:17} {r['ms']:>10.3f} "
                  f"{r['gbps']:>8.1f} {r['pct_of_copy']:>6.1f} {r['speedup_vs_eager'] or float('nan'):>8.2f}")
        else:
            print(f"{r['impl']:16} {r['sources']:>3} {r['tokens']:>7} {r.get('unavailable') or r.get('error')}")
    print(f"wrote {args.output}", file=sys.stderr)
    return payload


__all__ = ["bench_kernels"]
