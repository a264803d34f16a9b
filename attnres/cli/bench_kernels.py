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
import sys

from . import command_main


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto", help="auto: cuda when available")
    parser.add_argument("--dtype", choices=("bfloat16", "float16", "float32"), default="bfloat16")
    parser.add_argument("--hidden", type=int, help="hidden size (default: 7168 on GPU, 1024 on CPU)")
    parser.add_argument("--sources", help="comma-separated source counts (default: 2,5,9)")
    parser.add_argument("--tokens",
                        help="comma-separated token counts (default: 4096,8192,16384,32768 GPU; 256,1024 CPU)")
    parser.add_argument("--impls", default="torch_eager,torch_lean,torch_compile,attnres_triton,fla",
                        help="comma-separated implementations to time (default: all available)")
    parser.add_argument("--repeats", type=int, help="timed repetitions per case (default: 50 GPU, 5 CPU)")
    parser.add_argument("--output", default="bench_kernels.json", help="JSON results file (written atomically)")
    return parser


def parse_args(argv=None) -> argparse.Namespace:
    parser = build_parser()
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


def main(argv=None) -> dict:
    """Run the benchmark; returns its results (also written to --output)."""
    args = parse_args(argv)
    from ..bench.kernels import bench_kernels

    return bench_kernels(args)


def run():
    sys.exit(command_main("bench-kernels"))


if __name__ == "__main__":
    run()
