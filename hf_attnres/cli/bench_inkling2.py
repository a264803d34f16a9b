"""transformers' own Inkling-2 against the same model on the Inkling kernels, side by side in one run: the depth mix
alone and the whole training step, time and peak memory (hf_attnres/bench/inkling2.py says how each is measured):

    python -m hf_attnres.cli.bench_inkling2 --threads 1 --output inkling2.json   # the docs/BENCHMARKS.md run (CPU)
    python -m hf_attnres.cli.bench_inkling2 --device cuda --dtype bfloat16       # on a GPU
"""
from __future__ import annotations

import argparse
import sys

from ..bench.args import INKLING2_MEASUREMENTS, BenchInkling2Args
from ..bench.inkling2 import main as run_benchmark
from .combos import refuse_first


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m hf_attnres.cli.bench_inkling2", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--hidden", type=int, default=1024, help="hidden size")
    parser.add_argument("--layers", type=int, default=12, help="decoder layers")
    parser.add_argument("--block", type=int, default=3, help="n_layers_per_attn_res_block")
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads in every child (CPU)")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per arm, after one warm-up")
    parser.add_argument("--measurements", default=",".join(INKLING2_MEASUREMENTS),
                        help=f"comma list of {', '.join(INKLING2_MEASUREMENTS)}")
    parser.add_argument("--output", default=None, help="write the results as JSON here")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = BenchInkling2Args(**vars(parser.parse_args(argv)))
    refuse_first(parser, args.problems())  # argparse's one `error:` line naming the flag, nothing run
    return run_benchmark(args)


if __name__ == "__main__":
    sys.exit(main())
