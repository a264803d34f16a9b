"""Whole models side by side: standard residuals vs Block AttnRes vs Full AttnRes on one config, the
`attnres bench-model` command (scripts/bench_model.py, whose help describes the phases, timing and memory method)."""
from __future__ import annotations

import concurrent.futures
import ctypes
import gc
import json
import multiprocessing
import os
import platform
import resource
import statistics
import sys
import threading
import time
from datetime import datetime, timezone

import torch
from tqdm import tqdm

from ..core.cache_arg import CACHE_ARG, cache_kwargs
from ..core.mix_point import MixSettings
from ..families.registry import family_classes, family_of_model_type
from ..folders.atomic_io import write_json_atomic
from ..kernels.mix.cpu_fused import load_extension
from ..utils.tiny import tiny_config
from .args import MODES, BenchModelArgs

# extra modes for side-by-side comparisons within one run, (mode, two-phase schedule, backend): block mode with the
# no-grad two-phase schedule forced on; block / full mode on the eager PyTorch path (backend "torch") whatever --backend
VARIANTS = {"block_two_phase": ("block", True, None), "block_eager": ("block", None, "torch"),
            "full_eager": ("full", None, "torch")}


def build_model(args: BenchModelArgs, mode):
    mode, two_phase, backend = VARIANTS.get(mode, (mode, None, None))
    heads = max(2, args.hidden // 64)
    config = tiny_config(
        mode, args.block_size, args.layers, hidden_size=args.hidden, intermediate_size=4 * args.hidden,
        moe_intermediate_size=args.hidden, num_attention_heads=heads, num_key_value_heads=heads,
        linear_num_heads=heads, linear_head_dim=64, vocab_size=1024, attn_res_backend=backend or args.backend,
        **({"layer_types": ["full_attention"] * args.layers} if args.attention == "mla" else {}),
        **({"mlp_layer_types": ["dense"] * args.layers} if getattr(args, "mlp", "moe") == "dense" else {}),
            family="kimi_linear",
    )
    if getattr(args, "two_phase", "auto") != "auto":
        config.attn_res_two_phase = args.two_phase == "on"
    if two_phase is not None:
        config.attn_res_two_phase = two_phase
    if args.device == "cpu" and config.resolved_backend() in ("auto", "cpp"):
        load_extension()  # the fused CPU kernel (built or loaded from its cache) before any measured run
    torch.manual_seed(0)  # same shared weights in every mode
    model_class = family_classes(family_of_model_type(config.model_type))[1]
    return model_class(config).to(device=args.device, dtype=getattr(torch, args.dtype))


def synchronize(device):
    if device == "cuda":
        torch.cuda.synchronize()


def ids(args: BenchModelArgs, batch, seq, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(3, 1024, (batch, seq), generator=generator).to(args.device)


# A workload: (args) -> (tokens, setup, run). `setup()` prepares untimed state, `run(state)` is the timed part.


def train_workload(args: BenchModelArgs):
    batch = ids(args, args.batch, args.seq)

    def run(model):
        model.train()
        model.zero_grad(set_to_none=True)
        model(batch, labels=batch, use_cache=False).loss.backward()

    return args.batch * args.seq, lambda model: model, run


def prefill_workload(args: BenchModelArgs, batch_size=None, seq=None, chunk=None):
    batch_size, seq = batch_size or args.batch, seq or args.seq
    prompt = ids(args, batch_size, seq)

    def run(model):
        model.eval()
        with torch.no_grad():
            model(prompt, use_cache=True, logits_to_keep=1, prefill_chunk_size=chunk)

    return batch_size * seq, lambda model: model, run


def decode_workload(args: BenchModelArgs):
    prompt = ids(args, args.batch, 16)

    def setup(model):  # the prompt is not timed: only the one-token steps
        model.eval()
        with torch.no_grad():
            out = model(prompt, use_cache=True)
        return model, getattr(out, CACHE_ARG), out.logits[:, -1:].argmax(-1)

    def run(state):
        model, cache, token = state
        with torch.no_grad():
            for _ in range(args.decode_steps):
                token = model(token, use_cache=True, **cache_kwargs(cache)).logits[:, -1:].argmax(-1)

    return args.batch * args.decode_steps, setup, run


def mix_call_workload(args: BenchModelArgs, calls=2000):
    """One decode step's mix at the last layer's MLP point, alone, `calls` times: AttnRes mixes that point's sources
    (decode-shaped, [batch, 1, hidden]) and applies the RMSNorm that follows; standard residuals run that RMSNorm
    (their one-source "mix"). The overhead vs standard is then the mix call against the RMSNorm it replaces."""

    def setup(model):
        layer = model.model.layers[-1]
        count = layer.depth_layout.num_sources(layer.layer_idx, "mlp")
        generator = torch.Generator().manual_seed(0)
        sources = tuple(torch.randn(args.batch, 1, model.config.hidden_size, generator=generator)
                        .to(device=args.device, dtype=getattr(torch, args.dtype)) for _ in range(count))
        settings = MixSettings.of(model.config)  # as the model's forward hands it to every point
        return layer, sources, settings

    def run(state):
        layer, sources, settings = state
        with torch.no_grad():
            for _ in range(calls):
                layer.mix("mlp", sources, None, layer.post_attention_layernorm, None, settings)

    return calls * args.batch, setup, run


WORKLOADS = {
    "train": train_workload,
    "prefill": prefill_workload,
    "decode": decode_workload,
    "mix_call": mix_call_workload,
    "long_prefill": lambda args: prefill_workload(args, 1, args.long_prompt),
    "long_prefill_chunked": lambda args: prefill_workload(args, 1, args.long_prompt, args.chunk),
}
PHASES = {"train": ["train"], "prefill": ["prefill"], "decode": ["decode"], "mix_call": ["mix_call"],
          "long_prefill": ["long_prefill", "long_prefill_chunked"]}


def time_side_by_side(args: BenchModelArgs, models, name):
    """Median seconds per mode, wall clock and this process's CPU time, the modes interleaved round by round so they
    share the machine's load, and each run's minor page faults (`minor_faults`). On a shared CPU the CPU time
    (single-threaded: the work done) is the steadier figure: wall time also counts the time other jobs held the cores.
    The minimum CPU time is kept too: on a VM whose neighbours share its caches and memory bandwidth, the least
    disturbed round is the steadiest estimate of the work. Each round's samples are kept as well, for the paired ratio
    (`overheads`)."""
    tokens, setup, run = WORKLOADS[name](args)
    samples = {mode: [] for mode in models}
    cpu_samples = {mode: [] for mode in models}
    faults = {mode: [] for mode in models}
    for round_index in range(args.repeats + 1):  # round 0 warms up
        for mode, model in models.items():
            state = setup(model)
            synchronize(args.device)
            start, cpu_start, faults_start = time.perf_counter(), time.process_time(), minor_faults()
            run(state)
            synchronize(args.device)
            if round_index > 0:
                samples[mode].append(time.perf_counter() - start)
                cpu_samples[mode].append(time.process_time() - cpu_start)
                faults[mode].append(minor_faults() - faults_start)
    return tokens, {mode: (statistics.median(samples[mode]), statistics.median(cpu_samples[mode]),
                           min(cpu_samples[mode]), cpu_samples[mode], faults[mode])
                    for mode in models}


def minor_faults() -> int:
    """This process's minor page faults so far: each is a fresh page the kernel zeroes and maps, which is how the
    memory a run's tensors get from the allocator shows up as CPU time (often inside the op that first writes it)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def glibc():
    """The C library when it is glibc (malloc_trim, mallopt), else None."""
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


# glibc mallopt parameters (malloc.h)
M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4


def retain_freed_memory() -> None:
    """`--allocator retain`: glibc keeps the memory freed tensors leave in the process (no mmap for big blocks, no
    trimming of the heap), so a run's tensors reuse pages already mapped instead of faulting fresh ones in. That is
    what a caching allocator (jemalloc, tcmalloc, PyTorch's own on CUDA) gives; with glibc's defaults an fp32 prefill
    at hidden 512 faults in ~200 MB per forward, ~20% of its CPU time, and how much depends on the heap's layout, so
    it moves between modes and runs."""
    libc = glibc()
    if libc is None:
        raise SystemExit("--allocator retain: needs glibc (libc.so.6); run with the system allocator")
    if not (libc.mallopt(M_MMAP_MAX, 0) and libc.mallopt(M_TRIM_THRESHOLD, 2**31 - 1)):
        raise SystemExit("--allocator retain: glibc refused mallopt; run with the system allocator")


def peak_memory(args: BenchModelArgs, mode, name):
    """Peak memory (MiB) of one run of a workload above the loaded model (and its untimed setup)."""
    model = build_model(args, mode)
    _, setup, run = WORKLOADS[name](args)
    state = setup(model)
    if args.device == "cuda":
        synchronize(args.device)
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        run(state)
        return (torch.cuda.max_memory_allocated() - base) / 2**20
    return rss_growth_during(lambda: run(state)) / 2**20


def rss_growth_during(fn) -> int:
    """Bytes: the highest resident set size while `fn` runs (sampled every 0.5 ms), minus the one before it.

    Freed heap is first handed back to the system (glibc `malloc_trim`), so the baseline is the live data only.
    """
    gc.collect()
    libc = glibc()
    if libc is not None:  # not glibc: the baseline may include free heap, growth is then underestimated
        libc.malloc_trim(0)
    page = os.sysconf("SC_PAGE_SIZE")

    def rss():
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * page

    base = peak = rss()
    done = threading.Event()

    def sample():
        nonlocal peak
        while not done.is_set():
            peak = max(peak, rss())
            time.sleep(0.0005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        fn()
    finally:
        done.set()
        sampler.join()
    return max(peak, rss()) - base


def measure_memory(args: BenchModelArgs, jobs):
    """CPU: each run in a fresh process, whose peak RSS is its own; CUDA: in this process, peak stats reset."""
    if args.device == "cuda":
        return {job: peak_memory(args, *job) for job in tqdm(jobs, desc="peak memory", file=sys.stderr)}
    context = multiprocessing.get_context("spawn")
    memory = {}
    for job in tqdm(jobs, desc="peak memory (a process each)", file=sys.stderr):
        with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
            memory[job] = pool.submit(peak_memory, args, *job).result()
    return memory


def overheads(results):
    """Per phase, each mode's time per token and peak memory relative to standard residuals."""
    table = {}
    for r in results:
        base = next((b for b in results if b["phase"] == r["phase"] and b["mode"] == "standard"), None)
        if base is None or r["mode"] == "standard":
            continue
        table.setdefault(r["phase"], {})[r["mode"]] = dict(
            time_overhead_pct=round(100 * (base["tokens_per_s"] / r["tokens_per_s"] - 1), 1),
            cpu_time_overhead_pct=round(100 * (r["cpu_seconds"] / base["cpu_seconds"] - 1), 1),
            min_cpu_time_overhead_pct=round(100 * (r["cpu_seconds_min"] / base["cpu_seconds_min"] - 1), 1),
            # the median over rounds of this round's ratio: a round's modes ran back to back under one load, so a load
            # that drifts between rounds cancels (the ratio of medians mixes rounds)
            paired_cpu_time_overhead_pct=round(100 * (statistics.median(
                mode / standard for mode, standard in zip(r["cpu_rounds"], base["cpu_rounds"])) - 1), 1),
            memory_ratio=round(r["peak_mem_mib"] / base["peak_mem_mib"], 3) if base["peak_mem_mib"] else None,
            minor_faults_ratio=round(r["minor_faults"] / base["minor_faults"], 3) if base.get("minor_faults") else None,
        )
    return table


def bench_model(args: BenchModelArgs) -> dict:
    """Time (and measure) every mode on every phase of `args` (the flags of `hf_attnres.cli.bench_model`), write the
    JSON results file, print the table; returns the results."""
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device is available")
    load_before = os.getloadavg()
    names = [name for phase in args.phases for name in PHASES[phase]]
    if getattr(args, "allocator", "system") == "retain":
        retain_freed_memory()  # timing only: the peak-memory runs are fresh processes with the system allocator
    models = {mode: build_model(args, mode) for mode in args.modes}
    timings = {name: time_side_by_side(args, models, name) for name in tqdm(names, desc="timing", file=sys.stderr)}
    del models
    jobs = [(mode, name) for name in names for mode in args.modes]
    memory = dict.fromkeys(jobs) if args.skip_memory else measure_memory(args, jobs)
    results = [
        dict(mode=mode, phase=name, tokens=tokens, seconds=round(seconds, 5), tokens_per_s=round(tokens / seconds, 1),
             cpu_seconds=round(cpu_seconds, 5), cpu_seconds_min=round(cpu_min, 5),
             cpu_rounds=[round(x, 5) for x in rounds], minor_faults=statistics.median(faults), fault_rounds=faults,
             peak_mem_mib=None if memory[mode, name] is None else round(memory[mode, name], 1))
        for name, (tokens, by_mode) in timings.items()
        for mode, (seconds, cpu_seconds, cpu_min, rounds, faults) in by_mode.items()
    ]
    device = torch.cuda.get_device_name() if args.device == "cuda" else f"CPU {platform.machine()}"
    meta = dict(
        date=datetime.now(timezone.utc).isoformat(timespec="seconds"), command=" ".join(sys.argv),
        device=f"{device}, {torch.get_num_threads()} CPU threads", torch=torch.__version__,
        config={k: v for k, v in vars(args).items() if k != "output"},
        load_average_1min=dict(start=round(load_before[0], 2), end=round(os.getloadavg()[0], 2)),  # shared machine?
    )
    payload = dict(meta=meta, results=results, overheads_vs_standard=overheads(results))
    write_json_atomic(args.output, payload)
    print(f"{'phase':22} {'mode':16} {'tokens/s':>10} {'CPU s':>9} {'peak MiB':>9} {'page faults':>11}")
    for r in results:
        memory = r["peak_mem_mib"] if r["peak_mem_mib"] is not None else float("nan")
        print(f"{r['phase']:22} {r['mode']:16} {r['tokens_per_s']:>10.1f} {r['cpu_seconds']:>9.4f} {memory:>9.1f} "
              f"{r['minor_faults']:>11.0f}")
    print(json.dumps(payload["overheads_vs_standard"], indent=1))
    print(f"load average (1 min) at start / end: {load_before[0]:.2f} / {os.getloadavg()[0]:.2f}")
    print(f"wrote {args.output}", file=sys.stderr)
    return payload


__all__ = ["MODES", "PHASES", "VARIANTS", "bench_model", "build_model"]
