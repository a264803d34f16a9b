"""The AttnRes depth mix on its own, ours and the public peers side by side, the `attnres bench-kernels`
command (scripts/bench_kernels.py, whose help lists the implementations and how bytes are counted).

Per shape: every implementation first runs forward and backward on the same inputs and is checked against our
reference (`attn_res_naive`), output and every gradient, with a tolerance per dtype; then it is timed. A mismatch is
printed loudly, marked in its rows ("check": "MISMATCH") and makes the command exit non-zero after the results are
written, so a wrong implementation is never a quiet fast number."""
from __future__ import annotations

import json
import math
import os
import platform
import statistics
import sys
import time
from datetime import datetime, timezone

import torch
from tqdm import tqdm

from ..folders.atomic_io import write_json_atomic
from ..kernels.mix.lean import attn_res_lean
from ..kernels.mix.naive import attn_res_naive
from .args import BenchKernelsArgs
from .peers import OUTPUT_DTYPE, PEER_IMPLS, peer_implementations

EPS = 1e-6
OURS = ("torch_eager", "torch_lean", "torch_compile", "attnres_cpp", "attnres_triton")
# max |got - want| / max |want| per tensor (output and each gradient); as scripts/bench_gpu.sh's CUDA parity
TOLERANCE = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 3e-2}
TRITON_IMPLS = ("attnres_triton", "far_triton", "fast_attnres_mq")
NO_INTERPRETER = ("on CPU needs TRITON_INTERPRET=1 in the environment before Python starts (triton compiles its own "
                  "library when imported, and transformers imports it before this command runs)")


def interpreter_ready() -> bool:
    """Triton kernels can run on CPU tensors: the interpreter was on when triton was imported, or it can be still."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        return True
    if "triton" in sys.modules:
        return False
    os.environ["TRITON_INTERPRET"] = "1"  # before any kernel (and triton's own library) is defined
    return True


def timer(device, clock):
    """A function (fn, repeats) -> median seconds: triton's do_bench (CUDA events, L2 flushed) on GPU; on CPU the
    process's CPU time (`clock` "cpu": what other jobs on the machine disturb least) or wall time."""
    if device == "cuda":
        import triton.testing

        return lambda fn, repeats: triton.testing.do_bench(fn, rep=max(25, repeats), return_mode="median") / 1e3
    now = time.process_time if clock == "cpu" else time.perf_counter

    def cpu_time(fn, repeats):
        fn()  # warm-up (and compilation)
        samples = []
        for _ in range(repeats):
            start = now()
            fn()
            samples.append(now() - start)
        return statistics.median(samples)

    return cpu_time


def copy_bandwidth(device, dtype, measure) -> float:
    """GB/s of a plain device copy (read + write), the ceiling a memory-bound kernel can approach."""
    numel = (1 << 30 if device == "cuda" else 1 << 26) // torch.finfo(dtype).bits * 8
    src = torch.empty(numel, dtype=dtype, device=device).uniform_()
    dst = torch.empty_like(src)
    seconds = measure(lambda: dst.copy_(src), 20)
    return 2 * src.numel() * src.element_size() / seconds / 1e9


def our_implementations(names) -> dict:
    """name -> mix(sources, query, norm_weight, eps) for ours among `names`."""
    impls = {}
    for name in names:
        if name == "torch_eager":
            impls[name] = attn_res_naive
        elif name == "torch_lean":
            impls[name] = attn_res_lean
        elif name == "torch_compile":
            impls[name] = torch.compile(attn_res_naive, dynamic=False)
        elif name == "attnres_cpp":
            impls[name] = cpp_mix_or_reason()
        elif name == "attnres_triton":
            from ..kernels.mix.triton import attn_res_triton  # defines the kernels: after TRITON_INTERPRET is set

            impls[name] = attn_res_triton
    return impls


def cpp_mix_or_reason():
    """Our fused C++ CPU kernel (what backend "auto" runs on CPU), or why it is unavailable (a row says so)."""
    from ..kernels.mix.cpu_fused import attn_res_cpu, load_extension

    try:
        load_extension()  # built once and cached: the build is not timed
    except Exception as error:  # no compiler / ninja: the model falls back to the eager path, the row says why
        return f"C++ kernel unavailable: {error}"
    return attn_res_cpu


def implementations(names, args: BenchKernelsArgs, dtype) -> tuple[dict, dict]:
    """({name: mix or the reason it is unavailable}, notes on the peers for the results' meta)."""
    unknown = [name for name in names if name not in OURS and name not in PEER_IMPLS]
    if unknown:
        raise SystemExit(f"--impls: unknown implementation(s) {', '.join(unknown)}; known: "
                         f"{', '.join((*OURS, *PEER_IMPLS))}")
    # decided before any kernel is defined: on CPU, Triton kernels only run in the interpreter
    skipped = [] if args.device != "cpu" or interpreter_ready() else [n for n in names if n in TRITON_IMPLS]
    loadable = [name for name in names if name not in skipped]
    # one specialised graph per (source count, shape) for ours, as a model compiled per layer gets; the peers'
    # compiled functions (default dynamic) must not fall back to eager after 8 shapes either
    torch._dynamo.config.recompile_limit = 1024
    peers, notes = peer_implementations(loadable, args.peers_path, EPS, dtype)
    impls = {**our_implementations(loadable), **peers, **dict.fromkeys(skipped, NO_INTERPRETER)}
    return {name: impls[name] for name in names}, notes


def case_inputs(n, tokens, hidden, dtype, device):
    """n sources [1, tokens, hidden] (batch 1: flash-attn-res takes [N, B, T, D] banks) of different scales, a small
    query (trained pseudo-queries start at zero) and a key-norm gain far from 1 (so a peer that dropped the gain fails
    the check), the upstream gradient. Seeded by the shape: every implementation gets the same tensors."""
    gen = torch.Generator(device).manual_seed(1000 * n + hidden + tokens)

    def randn(*shape, scale=1.0, shift=0.0):
        return (shift + scale * torch.randn(*shape, generator=gen, device=device)).to(dtype)

    sources = [randn(1, tokens, hidden, scale=1.0 + j).requires_grad_() for j in range(n)]
    query = randn(hidden, scale=0.02).requires_grad_()
    norm_weight = randn(hidden, scale=0.2, shift=1.0).requires_grad_()
    return sources, query, norm_weight, randn(1, tokens, hidden)


def outputs_and_grads(impl, inputs) -> list[torch.Tensor]:
    sources, query, norm_weight, grad = inputs
    out = impl(sources, query, norm_weight, EPS)
    return [out, *torch.autograd.grad(out, [*sources, query, norm_weight], grad)]


def float32_truth(inputs, dtype) -> list[torch.Tensor] | None:
    """For 16-bit runs, the reference's output and gradients computed in float32 throughout on the same (rounded)
    inputs, parameters included: how accurate each path is (the reference itself rounds norm_weight * query to the
    parameters' dtype). None for float32 runs, where it is the reference."""
    if dtype == torch.float32:
        return None
    sources, query, norm_weight, grad = inputs
    as32 = [t.detach().float().requires_grad_() for t in (*sources, query, norm_weight)]
    return outputs_and_grads(attn_res_naive, (as32[:-2], as32[-2], as32[-1], grad.float()))


def max_errors(got, want) -> tuple[float, float]:
    """(max |got - want|, max of |got - want| / max |want| per tensor) over the output and every gradient."""
    abs_err = rel_err = 0.0
    for a, b in zip(got, want, strict=True):
        diff = (a.float() - b.float()).abs().max().item()
        abs_err = max(abs_err, diff)
        rel_err = max(rel_err, diff / max(b.float().abs().max().item(), 1e-12))
    return abs_err, rel_err


def check(impl, name, inputs, want, dtype, truth=None) -> dict:
    """Output and gradients of `impl` against the reference's `want` (same dtype): max abs and max relative error,
    the tolerance, "ok" or "MISMATCH"; with `truth` also the relative error against it (accuracy, not judged)."""
    got = outputs_and_grads(impl, inputs)
    tol = max(TOLERANCE[dtype], TOLERANCE[OUTPUT_DTYPE.get(name, dtype)])
    shapes = [(tuple(a.shape), tuple(b.shape)) for a, b in zip(got, want) if a.shape != b.shape]
    if shapes:
        return dict(check="MISMATCH", detail=f"shapes (got, want): {shapes}", tol=tol)
    abs_err, rel_err = max_errors(got, want)
    verdict = dict(check="ok" if rel_err <= tol else "MISMATCH", max_abs_err=float(f"{abs_err:.3g}"),
                   max_rel_err=float(f"{rel_err:.3g}"), tol=tol)
    if truth is not None:
        verdict["max_rel_err_vs_fp32"] = float(f"{max_errors(got, truth)[1]:.3g}")
    return verdict


def bench_case(impl, inputs, measure, repeats):
    """(forward seconds, forward+backward seconds) of one implementation on one shape."""
    sources, query, norm_weight, grad = inputs

    def forward():
        with torch.no_grad():
            impl(sources, query, norm_weight, EPS)

    def forward_backward():
        out = impl(sources, query, norm_weight, EPS)
        torch.autograd.grad(out, [*sources, query, norm_weight], grad)

    return measure(forward, repeats), measure(forward_backward, repeats)


def peer_of(name) -> str:
    return PEER_IMPLS[name][0] if name in PEER_IMPLS else "ours"


def case_rows(impls, shape, inputs, measure, args: BenchKernelsArgs, dtype, copy_gbps) -> list[dict]:
    """The rows of one shape: check each implementation, time it, one row per pass (or one row saying why not)."""
    n, tokens, hidden = shape
    base = dict(sources=n, tokens=tokens, hidden=hidden)
    itemsize = torch.finfo(dtype).bits // 8
    fwd_bytes = (n + 1) * tokens * hidden * itemsize
    bytes_by_pass = {"forward": fwd_bytes, "forward_backward": fwd_bytes + (2 * n + 2) * tokens * hidden * itemsize}
    want, truth = outputs_and_grads(attn_res_naive, inputs), float32_truth(inputs, dtype)
    rows, timings = [], {}
    for name, impl in impls.items():
        head = dict(impl=name, peer=peer_of(name), **base)
        if isinstance(impl, str):
            rows.append(dict(head, unavailable=impl))
            continue
        try:  # one failing implementation must not lose the others' numbers
            verdict = check(impl, name, inputs, want, dtype, truth)
            if verdict["check"] != "ok":
                print(f"\n!!! MISMATCH {name} at {base}: {verdict}", file=sys.stderr)
            seconds = bench_case(impl, inputs, measure, args.repeats)
        except Exception as error:  # noqa: BLE001
            rows.append(dict(head, error=f"{type(error).__name__}: {(str(error).splitlines() or [''])[0][:300]}"))
            continue
        timings[name] = dict(zip(bytes_by_pass, seconds))
        for pass_name, secs in timings[name].items():
            gbps = bytes_by_pass[pass_name] / secs / 1e9
            eager = timings.get("torch_eager", {}).get(pass_name)
            rows.append(dict(head, pass_=pass_name, ms=round(secs * 1e3, 4), gbps=round(gbps, 3),
                             pct_of_copy=round(100 * gbps / copy_gbps, 2),
                             speedup_vs_eager=round(eager / secs, 3) if eager else None, **verdict))
    return rows


def ratios(rows, skip=()) -> list[dict]:
    """ms of each of ours / ms of each peer, same shape, pass and run (below 1: ours is faster), leaving out the
    implementations in `skip` (those timed in the Triton interpreter, whose times say nothing about speed);
    both_checked_ok is False where either side mismatched the reference (such a ratio compares different results).
    Ratios keep 3 significant digits: an interpreted peer is thousands of times slower, and a ratio rounded to 0
    would have no logarithm for the geometric mean."""
    timed = {(r["impl"], r["sources"], r["tokens"], r["hidden"], r["pass_"]): r for r in rows
             if "ms" in r and r["impl"] not in skip}
    out = []
    for (name, *case), row in timed.items():
        if row["peer"] != "ours":
            continue
        for (peer_name, *peer_case), peer_row in timed.items():
            if peer_case == case and peer_row["peer"] != "ours":
                out.append(dict(ours=name, peer_impl=peer_name, sources=case[0], tokens=case[1], hidden=case[2],
                                pass_=case[3], ratio=float(f"{row['ms'] / peer_row['ms']:.3g}"),
                                both_checked_ok=row["check"] == peer_row["check"] == "ok"))
    return out


def geomeans(ratio_rows) -> list[dict]:
    """Per (ours, peer, pass): the geometric mean of the ratios over the run's shapes, and how many shapes."""
    logs = {}
    for r in ratio_rows:
        logs.setdefault((r["ours"], r["peer_impl"], r["pass_"]), []).append(math.log(r["ratio"]))
    return [dict(ours=o, peer_impl=p, pass_=s, geomean=float(f"{math.exp(sum(v) / len(v)):.3g}"), shapes=len(v))
            for (o, p, s), v in logs.items()]


def print_table(meta, rows, means):
    print(json.dumps(meta))
    print(f"{'impl':16} {'n':>3} {'tokens':>7} {'hidden':>6} {'pass':17} {'ms':>10} {'GB/s':>8} {'%copy':>6} "
          f"{'x eager':>8} {'max rel err':>11} check")
    for r in rows:
        lead = f"{r['impl']:16} {r['sources']:>3} {r['tokens']:>7} {r['hidden']:>6}"
        if "ms" in r:
            print(f"{lead} {r['pass_']:17} {r['ms']:>10.3f} {r['gbps']:>8.2f} {r['pct_of_copy']:>6.1f} "
                  f"{r['speedup_vs_eager'] or float('nan'):>8.2f} {r['max_rel_err']:>11.2e} {r['check']}")
        else:
            print(f"{lead} {r.get('unavailable') or r.get('error')}")
    if means:
        print("ms ours / ms peer, geometric mean over the shapes (below 1: ours is faster):")
    for m in means:
        print(f"  {m['ours']:16} / {m['peer_impl']:16} {m['pass_']:17} {m['geomean']:>6.2f}  ({m['shapes']} shapes)")


def run_meta(args: BenchKernelsArgs, started, copy_gbps, notes) -> dict:
    cpu = f"CPU: {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads"
    return dict(
        date=started, finished=datetime.now(timezone.utc).isoformat(timespec="seconds"), command=" ".join(sys.argv),
        device=torch.cuda.get_device_name() if args.device == "cuda" else cpu,
        clock="cuda events (triton do_bench)" if args.device == "cuda" else f"{args.clock} time, median",
        triton_interpreter=os.environ.get("TRITON_INTERPRET") == "1", torch=torch.__version__, dtype=args.dtype,
        hidden=args.hidden, copy_gbps=round(copy_gbps, 3), repeats=args.repeats, eps=EPS,
        bytes="forward (n+1)*T*d*itemsize; forward_backward adds (2n+2)*T*d*itemsize", peers=notes,
    )


def bench_kernels(args: BenchKernelsArgs) -> dict:
    """Check and time every implementation on every shape of `args` (the flags of `hf_attnres.cli.bench_kernels`),
    write the JSON results file, print the table; returns the results. Exits non-zero after writing when any
    implementation mismatched the reference."""
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device is available")
    if args.threads:
        torch.set_num_threads(args.threads)
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    dtype = getattr(torch, args.dtype)
    measure = timer(args.device, args.clock)
    copy_gbps = copy_bandwidth(args.device, dtype, measure)
    impls, notes = implementations(args.impls, args, dtype)
    rows = []
    shapes = [(n, t, h) for h in args.hidden for n in args.sources for t in args.tokens]
    for shape in tqdm(shapes, desc="shapes", file=sys.stderr):
        rows += case_rows(impls, shape, case_inputs(*shape, dtype, args.device), measure, args, dtype, copy_gbps)
    meta = run_meta(args, started, copy_gbps, notes)
    clean = [{k.rstrip("_"): v for k, v in r.items()} for r in rows]
    ratio_rows = ratios(rows, skip=TRITON_IMPLS if args.device == "cpu" else ())
    means = geomeans(ratio_rows)
    payload = dict(meta=meta, results=clean, ratios=[{k.rstrip("_"): v for k, v in r.items()} for r in ratio_rows],
                   ratio_geomeans=[{k.rstrip("_"): v for k, v in m.items()} for m in means])
    write_json_atomic(args.output, payload)
    print_table(meta, rows, means)
    print(f"wrote {args.output}", file=sys.stderr)
    bad = sorted({r["impl"] for r in rows if r.get("check") == "MISMATCH"})
    if bad:
        raise SystemExit(f"bench-kernels: MISMATCH against the reference: {', '.join(bad)} (rows marked in "
                         f"{args.output})")
    return payload


__all__ = ["bench_kernels"]
