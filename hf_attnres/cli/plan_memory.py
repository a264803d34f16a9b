"""What hardware a Kimi Linear / AttnRes / Kimi K3 model needs, from its config alone (nothing is instantiated).

Prints parameter counts (by part), weight memory per storage format (fp32, bf16, bf16 with MXFP4 routed experts as
Kimi K3 ships them; parameters only: no optimizer state, gradients or caches), the AttnRes depth bank (the block sums
and partial sum a forward holds) for a batch and context, and the bytes crossing each pipeline boundary per
micro-batch (every depth source present there crosses it).

CONFIG is a config.json (or a folder holding one) in any layout this project reads (ours, Moonshot's, Kimi K3's
multimodal wrapper), or a preset: k3 (Kimi K3's published text config, the default), tiny-k3, tiny-<family> (any
family's tiny model, e.g. tiny-llama, tiny-kimi_linear), tiny (Llama's).

Examples:
  attnres plan-memory                                  # Kimi K3, batch 1, 32k context, 8 stages
  attnres plan-memory path/to/config.json --batch 4 --context 131072 --stages 16
  attnres plan-memory tiny-k3 --activation-dtype fp32
"""
from __future__ import annotations

import argparse
import sys

from ..training.memory_plan import PRESETS
from ..training.tool_args import DEFAULT_CONTEXT, PlanMemoryArgs
from ..utils.flags import parser_for
from . import command_main
from .combos import given_flags, refuse_first


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


def beyond_positions(context: int, positions) -> str | None:
    """The note for a --context longer than the model's max_position_embeddings: planned as given (a longer context
    by RoPE scaling is a real plan), but said, since the model as configured has no positions for it."""
    if isinstance(positions, int) and not isinstance(positions, bool) and 0 < positions < context:
        return (f"note: --context {context:,} is beyond the model's max_position_embeddings {positions:,}: planned as "
                "given, for a model extended to that length")
    return None


def build_parser() -> argparse.ArgumentParser:
    return parser_for(PlanMemoryArgs, description=__doc__)


def parse_args(argv=None) -> PlanMemoryArgs:
    parser = build_parser()
    args = PlanMemoryArgs(**vars(parser.parse_args(argv)))
    # before any work: a count below 1, and micro-batches that do not tile the batch, are refused by name
    refuse_first(parser, [*args.problems(), micro_batch_problem(args)])
    return args


def micro_batch_problem(args: PlanMemoryArgs) -> str | None:
    """The refusal line of a --micro-batch that does not divide --batch (a pipeline splits each batch into whole
    micro-batches: 5 of a batch of 2 is no split), else None."""
    if args.micro_batch >= 1 and args.batch >= 1 and args.batch % args.micro_batch:  # below 1: problems()
        return (f"--micro-batch {args.micro_batch} must divide --batch {args.batch}: a batch splits into whole "
                "micro-batches (pass a larger --batch or a smaller --micro-batch)")
    return None


def fit_stages(stages: int, layers: int, given: bool) -> tuple[int, str | None]:
    """(stages, note): the stages to plan. Each stage holds at least one decoder layer, so more stages than layers
    is refused when --stages was given (SystemExit through the caller's parser: `StagesError`), and the default 8
    on a shallower model becomes one stage a layer with a note saying so."""
    if stages <= layers:
        return stages, None
    if given:
        raise StagesError(f"--stages {stages}: the model has {layers} decoder layers, so at most {layers} stages "
                          "(each stage holds at least one layer)")
    return layers, (f"note: --stages {layers}: one stage a decoder layer (the default {stages} is more than the "
                    f"model's {layers} layers); pass --stages to plan fewer")


class StagesError(ValueError):
    """More pipeline stages asked for than the model has decoder layers."""


def main(argv=None) -> int:
    from ..training.memory_plan import format_plan, load_plan_config

    parser = build_parser()
    args = parse_args(argv)
    try:
        config, name = load_plan_config(args.config)
    except ValueError as error:  # ConversionError is one; the file given is named
        print(f"error: {error}", file=sys.stderr)
        return 1
    given = given_flags(parser, argv)
    try:
        args.stages, stages_note = fit_stages(args.stages, config.num_hidden_layers, "stages" in given)
    except StagesError as error:
        parser.error(str(error))
    if args.context is None:
        args.context, note = default_context(args.config)
    else:
        note = beyond_positions(args.context, getattr(config, "max_position_embeddings", None))
    if note:
        print(note, file=sys.stderr)
    if stages_note:
        print(stages_note, file=sys.stderr)
    print(format_plan(config, name, args.batch, args.context, args.stages, args.micro_batch, args.activation_dtype))
    return 0


def run():
    sys.exit(command_main("plan-memory"))


if __name__ == "__main__":
    run()
