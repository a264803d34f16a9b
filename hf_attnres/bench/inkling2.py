"""transformers' own Inkling-2 against the same model on the Inkling kernels (`integrations.inkling2`), side by side
in one run: the depth mix alone (one `Inkling2BlockAttentionResidual`, one query and three) and the whole training
step (forward and backward of `Inkling2ForCausalLM` with labels), time and peak memory.

Every (measurement, arm) runs in a child process of its own, so each peak is that arm's alone: on CPU the child's
peak resident set (`resource.getrusage` ru_maxrss: torch's CPU allocator keeps no statistics), reported as the rise
over the resident set just before the measured calls (the model, its inputs and one warm-up call already in place);
on CUDA `torch.cuda.max_memory_allocated` over the same span. Times are medians over `--repeats` calls after one
warm-up: on CPU the child's CPU time (`time.process_time`: what other jobs on a shared machine disturb least) and
its wall time; on CUDA wall time between synchronisations. Before timing, each child checks its arm against
transformers' own forward on the same weights and inputs (logits, or the mix), so a fast number is never a wrong one.
"""
from __future__ import annotations

import dataclasses
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone

from ..folders.atomic_io import write_json_atomic

ARMS = ("transformers", "kernels")
MEASUREMENTS = ("mix_q1", "mix_q3", "step")


def text_config(args):
    from transformers.models.inkling2.configuration_inkling2 import Inkling2TextConfig

    heads = max(1, args.hidden // 128)
    return Inkling2TextConfig(
        vocab_size=args.vocab, unpadded_vocab_size=args.vocab, hidden_size=args.hidden,
        num_hidden_layers=args.layers, num_attention_heads=heads, num_key_value_heads=max(1, heads // 4), head_dim=128,
        swa_num_attention_heads=heads, swa_num_key_value_heads=max(1, heads // 4), swa_head_dim=128,
        sliding_window_size=128, rel_extent=128, moe_intermediate_size=args.hidden // 2, n_routed_experts=8,
        num_experts_per_tok=2, n_layers_per_attn_res_block=args.block, max_position_embeddings=max(4096, args.seq),
        eos_token_id=None,
    )


def random_queries(model, torch) -> None:
    """transformers initialises the queries to zero (a uniform mix): draw them, as a trained model has them."""
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("_input.query") or name.endswith(".query"):
                parameter.normal_(0, 0.5)


def peak_tracker(device, torch):
    """(start(), peak_bytes()) for the measured span: CUDA allocator peak, or the rise of the CPU resident set."""
    if device == "cuda":
        def start():
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            return torch.cuda.memory_allocated()

        return start, lambda base: torch.cuda.max_memory_allocated() - base

    def rss_now() -> int:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    return rss_now, lambda base: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base


def time_calls(fn, repeats, device, torch) -> dict:
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    cpu, wall = [], []
    for _ in range(repeats):
        sync()
        c0, w0 = time.process_time(), time.perf_counter()
        fn()
        sync()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    return {"cpu_s": statistics.median(cpu), "wall_s": statistics.median(wall)}


def run_child(args) -> dict:
    import torch

    measurement, arm = args.child.split(":")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    from transformers.models.inkling2 import modeling_inkling2

    from ..integrations.inkling2 import use_attnres_kernels

    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    config = text_config(args)
    if measurement == "step":
        model = modeling_inkling2.Inkling2ForCausalLM(config).to(device, dtype)
        random_queries(model, torch)
        ids = torch.randint(0, args.vocab, (args.batch, args.seq), device=device)
        with torch.no_grad():
            want = model(ids[:, :64]).logits.float()
        if arm == "kernels":
            use_attnres_kernels(model)
        with torch.no_grad():
            error = (model(ids[:, :64]).logits.float() - want).abs().max().item()
        model.train()

        def call():
            model.zero_grad(set_to_none=True)
            model(ids, labels=ids).loss.backward()
    else:
        queries = 1 if measurement == "mix_q1" else 3
        module = modeling_inkling2.Inkling2BlockAttentionResidual(config, num_queries=queries).to(device)
        random_queries(module, torch)
        blocks = -(-args.layers // args.block)  # the bank at the final mix: one state per block
        bank = torch.randn(args.batch, args.seq, blocks, args.hidden, device=device, dtype=dtype, requires_grad=True)
        partial = torch.randn(args.batch, args.seq, args.hidden, device=device, dtype=torch.float32,
                              requires_grad=True)
        with torch.no_grad():
            want = torch.stack(module(bank, partial), -2)
        if arm == "kernels":
            use_attnres_kernels(module)
        with torch.no_grad():
            error = (torch.stack(module(bank, partial), -2) - want).abs().max().item()
        grads = [torch.randn_like(want[..., 0, :]) for _ in range(queries)]

        def call():
            torch.autograd.backward(module(bank, partial), grads)

    start, peak = peak_tracker(args.device, torch)
    base = start()
    call()  # warm-up (the C++ kernel was loaded by the check): inside the memory span, its peak is the calls' peak
    timing = time_calls(call, args.repeats, args.device, torch)
    absolute = (torch.cuda.max_memory_allocated() if args.device == "cuda"
                else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    return {"measurement": measurement, "arm": arm, "max_abs_error_vs_transformers": error,
            "peak_bytes": peak(base), "peak_total_bytes": absolute, **timing}


def machine() -> dict:
    model = next((line.split(":", 1)[1].strip() for line in subprocess.run(
        ["lscpu"], capture_output=True, text=True).stdout.splitlines() if line.startswith("Model name")), "")
    return {"cpu": model or platform.processor(), "load_average": os.getloadavg(), "python": sys.version.split()[0]}


def run(args) -> dict:
    import torch
    import transformers

    settings = {k: v for k, v in dataclasses.asdict(args).items() if k != "child"}
    record = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "argv": sys.argv,
              "settings": settings, "torch": torch.__version__, "transformers": transformers.__version__,
              "before": machine(), "results": []}
    if args.device == "cuda":
        record["gpu"] = torch.cuda.get_device_name()
    forwarded = [f"--{k}={v}" for k, v in record["settings"].items() if k != "output" and v is not None]
    for measurement in args.measurements.split(","):
        for arm in ARMS:
            done = subprocess.run([sys.executable, "-m", "hf_attnres.cli.bench_inkling2", *forwarded, "--child",
                                   f"{measurement}:{arm}"], capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"{measurement}:{arm} failed:\n{done.stderr[-3000:]}")
            result = json.loads(done.stdout.strip().splitlines()[-1])
            record["results"].append(result)
            print(json.dumps(result), file=sys.stderr)
    record["after"] = machine()
    return record


def table(record: dict) -> str:
    rows = ["| measurement | arm | CPU time (s) | wall (s) | peak rise (MiB) | peak total (MiB) | max abs err |",
            "|---|---|---|---|---|---|---|"]
    by = {(r["measurement"], r["arm"]): r for r in record["results"]}
    for (measurement, arm), r in by.items():
        rows.append(f"| {measurement} | {arm} | {r['cpu_s']:.4f} | {r['wall_s']:.4f} | {r['peak_bytes'] / 2**20:.1f} "
                    f"| {r['peak_total_bytes'] / 2**20:.1f} | {r['max_abs_error_vs_transformers']:.1e} |")
    rows.append("")
    for measurement in dict.fromkeys(m for m, _ in by):
        own, fused = by.get((measurement, "transformers")), by.get((measurement, "kernels"))
        if own and fused:
            rows.append(f"- {measurement}: kernels {own['cpu_s'] / fused['cpu_s']:.2f}x faster (CPU time), "
                        f"{own['wall_s'] / fused['wall_s']:.2f}x (wall); peak memory rise "
                        f"{fused['peak_bytes'] / max(own['peak_bytes'], 1):.2f}x transformers'")
    return "\n".join(rows)


def main(args) -> int:
    """`args`: a `BenchInkling2Args` (hf_attnres.cli.bench_inkling2 parses the command line into it)."""
    if args.child:
        print(json.dumps(run_child(args)))
        return 0
    record = run(args)
    if args.output:
        write_json_atomic(args.output, record)
    print(table(record))
    return 0
