"""Train an AttnRes model of any family with PyTorch's interleaved pipeline schedule (torch.distributed.pipelining,
ScheduleInterleaved1F1B) and the paper's cross-stage caching of completed Block AttnRes blocks.

Each process is one physical stage holding --virtual-stages chunks of decoder layers (chunk c on rank c % P). Between
chunks travel the depth sources; with caching (the default) a rank keeps, per micro-batch, the completed sources that
reached its earlier chunks, so each transition sends only the blocks the receiver lacks plus the partial sum, and the
gradient of a kept block goes back once. --model is a save_pretrained folder of any AttnRes family (a family's plain
checkpoint trains in standard mode). With no arguments (under a 2-process launcher) it trains a tiny random Kimi Linear
block AttnRes model on synthetic tokens.

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
from pathlib import Path

from ..pipeline.args import InterleavedArgs
from ..training.recipe import add_recipe_args
from ..utils.flags import seed as seed_flag
from . import command_main
from .combos import refuse_conflicts
from .train_pipeline import add_checkpoint_args, add_model_and_data_args


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_and_data_args(parser, block_size=3, layers=8)
    train = parser.add_argument_group("training")
    train.add_argument("--virtual-stages", type=int, default=2, help="chunks per process V (P = the processes)")
    train.add_argument("--no-caching", action="store_true", help="send every depth source at every transition")
    train.add_argument("--micro-batch-size", type=int, default=2)
    train.add_argument("--grad-accum", type=int, default=2, help="micro-batches per step (fill the pipe)")
    train.add_argument("--steps", type=int, default=4)
    add_recipe_args(train, lr=1e-3, warmup_steps=0)  # the training recipe's flags (hf_attnres/training/recipe.py)
    train.add_argument("--seed", type=seed_flag, default=0)
    train.add_argument("--max-nonfinite-steps", type=int, default=3,
                       help="a step with a NaN/inf loss or gradient makes no update and is logged; this many in a row "
                            "stop the run with exit code 3 and no saved model (default 3)")
    out = parser.add_argument_group("output")
    out.add_argument("--output-dir", type=Path, default=Path("runs/interleaved"))
    add_checkpoint_args(out, "checkpoint every N steps (and at the end)")
    out.add_argument("--no-save", action="store_true", help="skip writing the trained model")
    return parser


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
