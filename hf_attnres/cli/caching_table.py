"""The block transmissions of an interleaved pipeline, naive vs cached, as a table (hf_attnres.pipeline.caching):

    python -m hf_attnres.cli.caching_table                      # the paper's Fig. 3: P=4, V=2, a block per two chunks
    python -m hf_attnres.cli.caching_table --stages 8 --virtual 4
"""
from __future__ import annotations

import argparse

from ..pipeline.caching import simulate_interleaved
from ..pipeline.caching_args import CachingArgs
from ..utils.flags import parser_for
from .combos import refuse_first


def build_parser() -> argparse.ArgumentParser:
    return parser_for(CachingArgs, description="Block transmissions of an interleaved pipeline, naive vs cached "
                      "(defaults: the paper's Fig. 3, P=4, V=2, a block per two chunks)",
                      formatter_class=argparse.HelpFormatter)


def main(argv=None) -> None:
    parser = build_parser()
    args = CachingArgs(**vars(parser.parse_args(argv)))
    refuse_first(parser, args.problems())  # a count below 1: argparse's one `error:` line naming the flag
    print(simulate_interleaved(args.stages, args.virtual, args.layers_per_chunk, args.block_size,
                               args.cache_own_blocks).table())


if __name__ == "__main__":
    main()
