"""Train an AttnRes model of any family with PyTorch's interleaved pipeline schedule (torch.distributed.pipelining,
ScheduleInterleaved1F1B) and the paper's cross-stage caching of completed Block AttnRes blocks.

Each process is one physical stage holding --virtual-stages chunks of decoder layers (chunk c on rank c % P). Between
chunks travel the depth sources; with caching (the default) a rank keeps, per micro-batch, the completed sources that
reached its earlier chunks, so each transition sends only the blocks the receiver lacks plus the partial sum, and the
gradient of a kept block goes back once. --model is a save_pretrained folder of any AttnRes family (a family's plain
checkpoint is refused: upcycle it first). With no arguments (under a 2-process launcher) it trains a tiny random block
AttnRes model of --family (default Llama) on synthetic tokens.

CPU (gloo):
  torchrun --nproc_per_node 2 -m hf_attnres.cli.train_interleaved
  torchrun --nproc_per_node 4 -m hf_attnres.cli.train_interleaved --layers 8 --block-size 2 --grad-accum 4  # Fig. 3
GPU (NCCL), 4 stages x 2 virtual stages, a prepared dataset and a checkpoint:
  torchrun --nproc_per_node 4 -m hf_attnres.cli.train_interleaved --model path/to/checkpoint --data data/packed \\
      --micro-batch-size 4 --grad-accum 8 --steps 1000 --save-every 100 --output-dir runs/ipp4

Outputs (--output-dir): log.jsonl (loss and gradient norm per step), checkpoints/step-N/ (each rank's weights and
AdamW state; --resume auto continues from the latest), comms.json (tensors and bytes sent per transition, measured,
next to the plan and the caching simulator), and the trained model `model/` (a from_pretrained folder, one shard per
rank; saving uses the DeepSpeed pipeline's exporter, the `train` extra). fp32 weights; packed, unpadded batches.
"""
from __future__ import annotations

import argparse
import sys

from ..pipeline.args import InterleavedArgs
from ..utils.flags import parser_for
from . import command_main
from .combos import refuse_conflicts


def build_parser() -> argparse.ArgumentParser:
    return parser_for(InterleavedArgs, __doc__)


def main(argv=None):
    """Parse the flags and run this process's stage (`hf_attnres.pipeline.interleaved_train`): the run's summary, or
    exit code 3 when the non-finite guard stopped it."""
    parser = build_parser()
    args = InterleavedArgs(**vars(parser.parse_args(argv)))
    refuse_conflicts(parser, argv, args)  # before any work: a flag another makes meaningless is refused
    from ..pipeline.interleaved_train import train_interleaved
    from ..training.args import SetupError

    try:
        summary = train_interleaved(args)
    except SetupError as error:  # bad input (a locked output folder, ...): one line, not a traceback
        raise SystemExit(f"error: {error}") from None
    return summary.get("exit_code", summary)


def run():
    sys.exit(command_main("train-interleaved"))


if __name__ == "__main__":
    run()
