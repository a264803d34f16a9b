#!/usr/bin/env python3
"""Benchmark the AttnRes depth mix: forward and forward+backward, time, effective GB/s and % of the device's measured
copy bandwidth, for every available implementation side by side:

  torch_eager     the PyTorch reference (attnres.kernels.mix.naive.attn_res_naive)
  torch_compile   torch.compile of that reference
  torch_lean      the PyTorch path of backend "torch" (attnres.kernels.mix.lean: no stacked copy, recompute)
  attnres_triton  the fused Triton kernel (attnres.kernels.mix.triton); on CPU it runs in the Triton *interpreter*,
                  whose timings say nothing about GPU speed (recorded only to show the path runs)
  fla             flash-linear-attention's `fused_attnres`, when `fla` is importable

Defaults: on a CUDA GPU the Kimi K3 shapes (hidden 7168, 2/5/9 sources, 4k-32k tokens, bf16); on CPU small shapes.
Effective bytes: forward reads n sources and writes the mix, (n + 1) * T * d * itemsize; the backward reads the n
sources, the upstream gradient and the saved mix and writes n gradients, (2n + 2) * T * d * itemsize more.

    python3 scripts/bench_kernels.py                        # CPU or GPU defaults, writes bench_kernels.json
    python3 scripts/bench_kernels.py --tokens 4096 --sources 9 --output k3.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from datetime import datetime, timezone


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto", help="auto: cuda when available")
    parser.add_argument("--dtype", choices=("bfloat16", "float16", "float32"), default="bfloat16")
    parser.add_argument("--hidden", type=int, help="hidden size (default: 7168 on GPU, 1024 on CPU)")
    parser.add_argument("--sources", help="comma-separated source counts (default: 2,5,9)")
    parser.add_argument("--tokens", help="comma-separated token counts (default: 4096,8192,16384,32768 GPU; 256,1024 CPU)")
    parser.add_argument("--impls", default="torch_eager,torch_lean,torch_compile,attnres_triton,fla",
                        help="comma-separated implementations to time (default: all available)")
    parser.add_argument("--repeats", type=int, help="timed repetitions per case (default: 50 GPU, 5 CPU)")
    parser.add_argument("--output", default="bench_kernels.json", help="JSON results file (written atomically)")
    args = parser.parse_args(argv)
    if args.device == "auto":
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    gpu = args.device == "cuda"
    args.hidden = args.hidden or (7168 if gpu else 1024)
    args.sources = [int(x) for x in (args.sources or "2,5,9").split(",")]
    args.tokens = [int(x) for x in (args.tokens or ("4096,8192,16384,32768" if gpu else "256,1024")).split(",")]
    args.impls = args.impls.split(",")
    args.repeats = args.repeats or (50 if gpu else 5)
    if min(args.sources) < 1 or min(args.tokens) < 1 or args.hidden < 1:
        parser.error("--sources, --tokens and --hidden must be positive")
    return args


def timer(device):
    """A function (fn) -> median seconds: triton's do_bench (CUDA events, L2 flushed) on GPU, wall clock on CPU."""
    import torch

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
    import torch

    numel = (1 << 30 if device == "cuda" else 1 << 26) // torch.finfo(dtype).bits * 8
    src = torch.empty(numel, dtype=dtype, device=device).uniform_()
    dst = torch.empty_like(src)
    seconds = measure(lambda: dst.copy_(src), 20)
    return 2 * src.numel() * src.element_size() / seconds / 1e9


def implementations(names, device):
    """name -> mix(sources, query, norm_weight, eps), or name -> reason it is unavailable."""
    import torch

    from attnres.kernels.mix.naive import attn_res_naive

    impls = {}
    for name in names:
        if name == "torch_eager":
            impls[name] = attn_res_naive
        elif name == "torch_lean":
            from attnres.kernels.mix.lean import attn_res_lean

            impls[name] = attn_res_lean
        elif name == "torch_compile":
            # one specialised graph per (source count, shape), as a model compiled per layer gets
            torch._dynamo.config.recompile_limit = 1024
            impls[name] = torch.compile(attn_res_naive, dynamic=False)
        elif name == "attnres_triton":
            from attnres.kernels.mix.triton import attn_res_triton

            impls[name] = attn_res_triton
        elif name == "fla":
            try:
                from fla.ops.attnres import fused_attnres
            except ImportError as error:
                impls[name] = f"not importable: {error}"
                continue
            impls[name] = lambda sources, query, norm_weight, eps: fused_attnres(query, sources, norm_weight, rms_eps=eps)
        else:
            raise SystemExit(f"--impls: unknown implementation {name!r}")
    return impls


def case_inputs(n, tokens, hidden, dtype, device):
    import torch

    sources = [torch.randn(tokens, hidden, dtype=dtype, device=device).requires_grad_() for _ in range(n)]
    query = (0.02 * torch.randn(hidden, device=device)).to(dtype).requires_grad_()
    norm_weight = torch.ones(hidden, dtype=dtype, device=device).requires_grad_()
    grad = torch.randn(tokens, hidden, dtype=dtype, device=device)
    return sources, query, norm_weight, grad


def bench_case(impl, inputs, measure, repeats):
    """(forward seconds, forward+backward seconds) of one implementation on one shape."""
    import torch

    sources, query, norm_weight, grad = inputs

    def forward():
        with torch.no_grad():
            impl(sources, query, norm_weight, 1e-6)

    def forward_backward():
        out = impl(sources, query, norm_weight, 1e-6)
        torch.autograd.grad(out, [*sources, query, norm_weight], grad)

    return measure(forward, repeats), measure(forward_backward, repeats)


def main(argv=None):
    args = parse_args(argv)
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before any kernel is defined: Triton runs on CPU tensors
    import torch
    from tqdm import tqdm

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
        bytes_by_pass = {"forward": fwd_bytes, "forward_backward": fwd_bytes + (2 * n + 2) * tokens * args.hidden * itemsize}
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
    meta = dict(
        date=datetime.now(timezone.utc).isoformat(timespec="seconds"), command=" ".join(sys.argv),
        device=torch.cuda.get_device_name() if args.device == "cuda" else f"CPU: {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads",
        triton_interpreter=os.environ.get("TRITON_INTERPRET") == "1", torch=torch.__version__, dtype=args.dtype,
        hidden=args.hidden, copy_gbps=round(copy_gbps, 2), repeats=args.repeats,
    )
    from attnres.atomic_io import write_json_atomic

    write_json_atomic(args.output, dict(meta=meta, results=[{k.rstrip("_"): v for k, v in r.items()} for r in results]))
    print(json.dumps(meta))
    header = f"{'impl':16} {'n':>3} {'tokens':>7} {'pass':17} {'ms':>10} {'GB/s':>8} {'%copy':>6} {'x eager':>8}"
    print(header)
    for r in results:
        if "ms" in r:
            print(f"{r['impl']:16} {r['sources']:>3} {r['tokens']:>7} {r['pass_']:17} {r['ms']:>10.3f} {r['gbps']:>8.1f} "
                  f"{r['pct_of_copy']:>6.1f} {r['speedup_vs_eager'] or float('nan'):>8.2f}")
        else:
            print(f"{r['impl']:16} {r['sources']:>3} {r['tokens']:>7} {r.get('unavailable') or r.get('error')}")
    print(f"wrote {args.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
