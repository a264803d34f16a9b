"""transformers' own Inkling-2 against the same model on the Inkling kernels, side by side in one run: the depth mix
alone and the whole training step, time and peak memory (hf_attnres/bench/inkling2.py says how each is measured):

    python -m hf_attnres.cli.bench_inkling2 --threads 1 --output inkling2.json   # the docs/BENCHMARKS.md run (CPU)
    python -m hf_attnres.cli.bench_inkling2 --device cuda --dtype bfloat16       # on a GPU
"""
from __future__ import annotations

import argparse
import sys

from ..bench.args import BenchInkling2Args
from ..bench.inkling2 import main as run_benchmark
from ..utils.flags import parser_for
from .combos import refuse_first


def build_parser() -> argparse.ArgumentParser:
    return parser_for(BenchInkling2Args, prog="python -m hf_attnres.cli.bench_inkling2", description=__doc__)


def main(argv=None) -> int:
    parser = build_parser()
    args = BenchInkling2Args(**vars(parser.parse_args(argv)))
    refuse_first(parser, args.problems())  # argparse's one `error:` line naming the flag, nothing run
    return run_benchmark(args)


if __name__ == "__main__":
    sys.exit(main())
