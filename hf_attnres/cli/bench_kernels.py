"""Benchmark the AttnRes depth mix, ours beside the public peers: forward and forward+backward, time,
effective GB/s and % of the device's copy bandwidth measured in the same run.

Every implementation is first checked against our reference on the very inputs it is timed on (output and the
gradients of every source, the query and the key-norm gain; max |diff| / max |reference| per tensor, tolerance 1e-4
fp32, 1e-2 fp16, 3e-2 bf16). A mismatch is printed, marked in its rows ("check": "MISMATCH") and makes the command
exit 1 once the results are written.

Ours:
  torch_eager      the PyTorch reference (hf_attnres/kernels/mix/naive.py)
  torch_lean       the PyTorch path of backend "torch" (hf_attnres/kernels/mix/lean.py: no stacked copy, recompute)
  torch_compile    torch.compile of the reference (dynamic=False: one graph per shape)
  attnres_triton   the fused Triton kernel (hf_attnres/kernels/mix/triton.py); on CPU it runs in the Triton
                   *interpreter*, whose timings say nothing about GPU speed (recorded only to show the path runs)
Peers (pinned versions, installed apart from the environment by scripts/setup_peers.sh; --peers-path):
  fla              fla-core 0.6.0 fla.ops.attnres.fused_attnres (Triton; CUDA only, raises on CPU tensors)
  fla_naive        fla-core 0.6.0 fla/ops/attnres/naive.py naive_attnres (PyTorch)
  far_triton       flash-attn-res 0.1.12 phase-1 Triton op with one query (its output is always bf16, so it is
                   checked at the bf16 tolerance; power-of-two hidden sizes only)
  far_torch        flash-attn-res experimental/torch.py naive_attention_residual, torch.compile'd as shipped
                   (mode max-autotune-no-cudagraphs)
  far_torch_eager  the same function, not compiled
  far_phase1       flash-attn-res experimental/torch.py phase_1_fn (one query), torch.compile'd as shipped
  fast_attnres     fast-attnres 2.1.0 attnres.attnres, its public call (Triton; CUDA BF16 only: on CPU a row
                   saying it needs CUDA, in an fp32 run its dtype error; bf16 output, checked at the bf16 tolerance)
  fast_attnres_mq  fast-attnres 2.1.0's multi-query launchers with one query; on CPU they run in the Triton
                   interpreter (fp32 or bf16), which checks its math on CPU but says nothing about speed
fla scores RMSNorm(v) * gain . query, as we do. flash-attn-res and fast-attnres have no key-norm gain: they get
query * gain as the pseudo-query (the same scores; gradients reach query and gain through that product).
flash-attn-res takes the stacked [N, 1, T, D] bank, stacked inside the timed call as ours and fla's naive path stack
inside theirs; fast-attnres takes the list of sources. fast-attnres keys on the last len(query) coordinates: with
len(query) == hidden, scale 1 and our eps it is our mix. hf_attnres/bench/peers.py says what had to be supplied for
flash-attn-res 0.1.12 to import at all, and how each peer's math relates to ours.

Effective bytes (the least a fused kernel must move): forward reads n sources and writes the mix,
(n + 1) * T * d * itemsize; the backward reads the n sources, the upstream gradient and the mix and writes n
gradients, (2n + 2) * T * d * itemsize more. GB/s = those bytes / median time; % of copy = that / the GB/s of a large
`dst.copy_(src)` (read + write) timed the same way in the same run (JSON meta "copy_gbps").

Timing: on a GPU triton's do_bench (CUDA events, median); on CPU the median of --repeats runs after one warm-up
(and compilation), in process CPU time by default (--clock cpu: least disturbed by other jobs on the machine; with
several threads it sums them, so use --threads 1 to compare with wall time) or wall time (--clock wall).

Defaults: on a CUDA GPU every implementation but fast_attnres_mq, hidden 1024 and the Kimi K3 width 7168, 2/5/9
sources, 4k/16k/32k tokens, bf16; on CPU the PyTorch paths of ours, fla and flash-attn-res (ours, fla_naive,
far_*torch*/far_phase1: fast-attnres has none), hidden 256 and 1024, 256/1024 tokens, fp32. The JSON has one row per
implementation, shape and pass (with its check; in 16-bit runs also "max_rel_err_vs_fp32", its error against the
reference computed in fp32 throughout), "ratios": ms of each of ours / ms of each peer on the same shape and pass
(below 1: ours is faster), and "ratio_geomeans" over the shapes.

    scripts/setup_peers.sh                                  # once: the peers into ~/.cache/attnres/peers
    attnres bench-kernels                                   # CPU or GPU defaults, writes bench_kernels.json
    attnres bench-kernels --hidden 7168 --tokens 4096 --sources 9 --output k3.json
"""
from __future__ import annotations

import argparse
import sys

from ..bench.args import CPU_IMPLS, GPU_IMPLS, BenchKernelsArgs
from ..utils.flags import check_output_file, parser_for
from . import command_main
from .combos import refuse_conflicts


def build_parser() -> argparse.ArgumentParser:
    return parser_for(BenchKernelsArgs, description=__doc__)


def int_list(parser, flag, text) -> list[int]:
    try:
        values = [int(x) for x in text.split(",")]
    except ValueError:
        parser.error(f"{flag}: comma-separated integers, got {text!r}")
    if min(values) < 1:
        parser.error(f"{flag} must be positive")
    return values


def parse_args(argv=None) -> BenchKernelsArgs:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_output_file(parser, "--output", args.output)
    if args.device == "auto":
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    gpu = args.device == "cuda"
    args.dtype = args.dtype or ("bfloat16" if gpu else "float32")
    args.hidden = int_list(parser, "--hidden", args.hidden or ("1024,7168" if gpu else "256,1024"))
    args.sources = int_list(parser, "--sources", args.sources or "2,5,9")
    args.tokens = int_list(parser, "--tokens", args.tokens or ("4096,16384,32768" if gpu else "256,1024"))
    args.impls = (args.impls or (GPU_IMPLS if gpu else CPU_IMPLS)).split(",")
    args.repeats = args.repeats or (50 if gpu else 5)
    if args.threads is not None and args.threads < 1:
        parser.error("--threads must be positive")
    args = BenchKernelsArgs(**vars(args))
    refuse_conflicts(parser, argv, args)  # a flag another makes meaningless is refused
    return args


def main(argv=None) -> dict:
    """Run the benchmark; returns its results (also written to --output)."""
    args = parse_args(argv)
    from ..bench.kernels import bench_kernels

    return bench_kernels(args)


def run():
    sys.exit(command_main("bench-kernels"))


if __name__ == "__main__":
    run()
