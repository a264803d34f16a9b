"""Train a model of any family (Llama by default, or --family / --config / --init-from's) with standard
residuals or Attention Residuals (block / full) on a prepared dataset.

One process (CPU or GPU):
  attnres train --attn-res block
Several processes, DDP (accelerate):
  accelerate launch --multi_gpu --num_processes 8 -m hf_attnres.cli.train --attn-res block
DeepSpeed ZeRO (stage 1, 2 or 3; torchrun or the deepspeed launcher):
  torchrun --nproc_per_node 8 -m hf_attnres.cli.train --deepspeed configs/deepspeed/zero2.json
Fine-tune an existing model (final/, Moonshot's layout, an upcycled checkpoint, a family's own such as a plain Llama):
  attnres train --init-from runs/small-block/final --data data/sft --lr 1e-4
The matched baseline is the same command with --attn-res standard. Data: scripts/prepare_data.py. Details and CPU
commands: docs/TRAINING.md. Writes <output-dir>/{metrics.jsonl, tensorboard/, diagnostics.jsonl,
depth_diagnostics.png, final/} and, with --checkpoints resumable (the default from scratch; a fine-tune with
--init-from writes final/ only unless asked), checkpoints/step-00000500/ (8-digit step: the weights plus the
optimizer state, about 3x the weights' size each). The run prints what it writes where, and how big.
"""
from __future__ import annotations

import sys

from . import command_main
from .combos import refuse_conflicts


def build_parser():
    from ..training.args import TrainArgs
    from ..utils.flags import parser_for

    return parser_for(TrainArgs, __doc__)


def main(argv=None) -> dict:
    """Train; returns the run's summary. `argv` given (a caller, a test): errors raise; else one line and exit code."""
    parser = build_parser()
    from ..training.args import TrainArgs

    args = TrainArgs(**vars(parser.parse_args(argv)))
    refuse_conflicts(parser, argv, args)  # before any work: a flag another makes meaningless is refused
    from ..utils.extras import require

    require("datasets", why="the prepared dataset")
    from ..training.args import SetupError
    from ..training.checkpoints import interrupted_message
    from ..training.guard import EXIT_CODE, NonFiniteError
    from ..training.loop import train
    from ..utils.safe_paths import interrupt_signal, signals_interrupt

    try:
        with signals_interrupt():  # SIGTERM stops as Ctrl-C does: the checkpoint being written is removed
            summary = train(args, argv)
    except KeyboardInterrupt as stop:
        if argv is not None:
            raise
        print(interrupted_message(args.output_dir, interrupt_signal(stop)), file=sys.stderr)
        sys.exit(128 + interrupt_signal(stop))
    except SetupError as error:
        # Bad input: one clear line, not a traceback (raised before any training work starts)
        if argv is not None:
            raise
        sys.exit(f"error: {error}")
    except NonFiniteError as error:  # the loss or gradients kept being NaN/inf: its own exit code
        if argv is not None:
            raise
        print(f"error: {error}", file=sys.stderr)
        sys.exit(EXIT_CODE)
    loss = "n/a (resumed at the last step)" if summary["train_loss"] is None else f"{summary['train_loss']:.4f}"
    print(f"done: step {summary['step']}, train loss {loss}, output {summary['output_dir']}")
    return summary


def run():
    sys.exit(command_main("train"))


if __name__ == "__main__":  # python -m hf_attnres.cli.train (how the main job launches its runs)
    run()
