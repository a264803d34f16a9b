"""What hardware a Kimi Linear / AttnRes / Kimi K3 model needs, from its config alone (nothing is instantiated).

Prints parameter counts (by part), weight memory per storage format (fp32, bf16, bf16 with MXFP4 routed experts as
Kimi K3 ships them; parameters only: no optimizer state, gradients or caches), the AttnRes depth bank (the block sums
and partial sum a forward holds) for a batch and context, and the bytes crossing each pipeline boundary per
micro-batch (every depth source present there crosses it).

CONFIG is a config.json (or a folder holding one) in any layout this project reads (ours, Moonshot's, Kimi K3's
multimodal wrapper), or a preset: k3 (Kimi K3's published text config, the default), tiny, tiny-k3.

Examples:
  attnres plan-memory                                  # Kimi K3, batch 1, 32k context, 8 stages
  attnres plan-memory path/to/config.json --batch 4 --context 131072 --stages 16
  attnres plan-memory tiny-k3 --activation-dtype fp32
"""
from __future__ import annotations

import argparse
import sys

from ..training.memory_plan import PRESETS
from ..training.tool_args import PlanMemoryArgs
from . import command_main
from .combos import refuse_first

DEFAULT_CONTEXT = 32768


def default_context(spec: str) -> tuple[int, str | None]:
    """(context, note): 32,768 tokens, or the config's max_position_embeddings when it is smaller (a plan beyond the
    positions the model has says nothing about that model), with a note saying so. An unreadable config gets the
    default here: plan_memory names its problem."""
    from ..training.memory_plan import read_config_dict

    if spec in PRESETS:
        return DEFAULT_CONTEXT, None
    try:
        positions = read_config_dict(spec)[0].get("max_position_embeddings")
    except (ValueError, AttributeError):
        return DEFAULT_CONTEXT, None
    if isinstance(positions, int) and not isinstance(positions, bool) and 0 < positions < DEFAULT_CONTEXT:
        return positions, (f"note: --context {positions:,}: the model's max_position_embeddings (the default "
                           f"{DEFAULT_CONTEXT:,} is beyond it); pass --context to plan another length")
    return DEFAULT_CONTEXT, None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", nargs="?", default="k3", help=f"config.json, a folder, or a preset {PRESETS}")
    parser.add_argument("--batch", type=int, default=1, help="sequences in the forward (default 1)")
    parser.add_argument("--context", type=int, default=None,
                        help=f"tokens per sequence (default {DEFAULT_CONTEXT:,}, or the model's "
                             "max_position_embeddings when smaller, with a note)")
    parser.add_argument("--stages", type=int, default=8,
                        help="pipeline stages, decoder layers split evenly (default 8)")
    parser.add_argument("--micro-batch", type=int, default=1, help="sequences per pipeline micro-batch (default 1)")
    parser.add_argument("--activation-dtype", choices=("bf16", "fp32"), default="bf16",
                        help="dtype of the depth sources and boundary tensors (default bf16)")
    return parser


def parse_args(argv=None) -> PlanMemoryArgs:
    parser = build_parser()
    args = PlanMemoryArgs(**vars(parser.parse_args(argv)))
    refuse_first(parser, args.problems())  # before any work: a count below 1 is refused by name
    return args


def main(argv=None) -> int:
    from ..training.memory_plan import plan_memory

    args = parse_args(argv)
    if args.context is None:
        args.context, note = default_context(args.config)
        if note:
            print(note, file=sys.stderr)
    return plan_memory(args.config, args.batch, args.context, args.stages, args.micro_batch, args.activation_dtype)


def run():
    sys.exit(command_main("plan-memory"))


if __name__ == "__main__":
    run()
