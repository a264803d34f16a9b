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
from ..utils.flags import check_output_file, parser_for
from . import command_main
from .combos import refuse_conflicts


def build_parser() -> argparse.ArgumentParser:
    return parser_for(BenchModelArgs, description=__doc__)


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
