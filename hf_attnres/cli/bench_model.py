"""Benchmark whole models side by side: standard residuals vs Block AttnRes vs Full AttnRes on one config.

Phases, each timed for every mode in the same run (the overhead ratios compare them):
  train         forward + backward of a language-modelling loss         tokens/s = batch * seq / step
  prefill       no-grad forward over the prompt, cache on                tokens/s = batch * seq / time
  decode        no-grad one-token steps after a short prompt, cached     tokens/s = batch * steps / time
  long_prefill  batch 1, a long prompt, unchunked and chunked (`prefill_chunk_size`): peak memory is the point
  mix_call      the last layer's MLP mix point alone, 2000 decode-shaped calls: AttnRes's mix (+ its RMSNorm)
                against standard's RMSNorm at the same place (not in the default phases)

Timing: all modes' models live in one process and are run round by round (standard, block, full, standard, ...), so a
busy machine slows them alike; the median over rounds is reported, with the paired ratio (median of per-round
ratios) and each run's minor page faults (on CPU, fresh pages from the allocator cost CPU time too: --allocator).
Peak memory: on CUDA `torch.cuda.max_memory_allocated` above the loaded model; on CPU each run in a fresh process,
its resident-set growth above the loaded model, sampled every 0.5 ms (Linux /proc; includes allocator slack: compare
modes, not bytes).
Defaults: a small CPU config (hidden 256, 6 layers, block size 2); on GPU pass a larger one (--hidden, --layers, ...).

    attnres bench-model                                       # CPU defaults, writes bench_model.json
    attnres bench-model --device cuda --dtype bfloat16 --hidden 2048 --layers 24 --block-size 4 --seq 4096
"""
from __future__ import annotations

import argparse
import sys

from ..bench.args import BenchModelArgs
from ..bench.model import MODES, PHASES, VARIANTS
from ..utils.flags import check_output_file, multiple_of
from . import command_main
from .combos import refuse_conflicts


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto", help="auto: cuda when available")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated AttnRes modes to compare")
    parser.add_argument("--phases", default="train,prefill,decode,long_prefill", help="comma-separated phases")
    parser.add_argument("--hidden", type=multiple_of(8, "the experts' grouped matmuls need 16-byte aligned rows"),
                        default=256, help="hidden size (a multiple of 8)")
    parser.add_argument("--layers", type=int, default=6, help="decoder layers")
    parser.add_argument("--block-size", type=int, default=2, help="layers per block in block mode")
    parser.add_argument("--attention", choices=("hybrid", "mla"), default="hybrid",
                        help="hybrid: KDA with MLA every third layer (Kimi Linear); mla: MLA only (on CPU "
                             "transformers' KDA reference dominates the time and hides the residual's cost)")
    parser.add_argument("--mlp", choices=("moe", "dense"), default="moe",
                        help="Kimi Linear's MoE MLP (default) or a dense one in every layer. With MoE the routing is "
                             "data-dependent, so the modes' experts see different token counts and their matmuls "
                             "cost a few percent more or less: dense measures the residual alone")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=256, help="tokens per sequence for train and prefill")
    parser.add_argument("--decode-steps", type=int, default=16)
    parser.add_argument("--long-prompt", type=int, default=4096, help="tokens of the long_prefill prompt (batch 1)")
    parser.add_argument("--chunk", type=int, default=512, help="prefill_chunk_size of the chunked long prefill")
    parser.add_argument("--repeats", type=int, default=3, help="timed repetitions (median) after one warm-up")
    parser.add_argument("--backend", choices=("auto", "torch", "triton", "cpp"), default="auto",
                        help="AttnRes kernel backend (auto: Triton on CUDA, the fused C++ kernel on CPU)")
    parser.add_argument("--two-phase", choices=("auto", "on", "off"), default="auto",
                        help="no-grad schedule of block mode: auto (on with Triton), or force it on / off")
    parser.add_argument("--allocator", choices=("system", "retain"), default="system",
                        help="CPU memory for the timed runs: the system allocator as it is (glibc hands big freed "
                             "blocks back and faults fresh pages in on the next use, a large and layout-dependent "
                             "share of CPU time, counted in minor_faults), or retain: glibc told to keep freed memory, "
                             "as a caching allocator (jemalloc, tcmalloc) would")
    parser.add_argument("--skip-memory", action="store_true",
                        help="time only: skip the peak-memory runs (a fresh process per mode and phase on CPU)")
    parser.add_argument("--output", default="bench_model.json", help="JSON results file (written atomically)")
    return parser


def parse_args(argv=None) -> BenchModelArgs:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.modes = args.modes.split(",")
    args.phases = args.phases.split(",")
    for mode in args.modes:
        if mode not in MODES and mode not in VARIANTS:
            parser.error(f"--modes: unknown mode {mode!r}, choose from {MODES + tuple(VARIANTS)}")
    for phase in args.phases:
        if phase not in PHASES:
            parser.error(f"--phases: unknown phase {phase!r}, choose from {tuple(PHASES)}")
    check_output_file(parser, "--output", args.output)
    if args.device == "auto":
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    args = BenchModelArgs(**vars(args))
    refuse_conflicts(parser, argv, args)  # a flag another makes meaningless is refused
    return args


def main(argv=None) -> dict:
    """Run the benchmark; returns its results (also written to --output)."""
    args = parse_args(argv)
    from ..bench.model import bench_model

    return bench_model(args)


def run():
    sys.exit(command_main("bench-model"))


if __name__ == "__main__":
    run()
