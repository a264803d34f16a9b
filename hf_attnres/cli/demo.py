"""First run of attnres: build a tiny Kimi Linear AttnRes model, fit it briefly to a toy sequence, generate, and show
where each sub-layer looks over depth.

    attnres demo                      # block AttnRes, 6 layers, 2 per block
    attnres demo --mode full          # every sub-layer output is its own source
    attnres demo --plot weights.png   # also draw the depth-attention map

Runs on CPU in seconds; no download. The first run on a machine also compiles the fused C++ mix kernel, once (about
1 CPU minute, several on a busy machine; it says so when it starts, and it is cached for every later run).
"""
from __future__ import annotations

import argparse
import sys

from ..bench.args import DemoArgs
from ..utils.flags import parser_for
from . import command_main
from .combos import refuse_conflicts


def build_parser() -> argparse.ArgumentParser:
    return parser_for(DemoArgs, description=__doc__)


def main(argv=None) -> None:
    parser = build_parser()
    args = DemoArgs(**vars(parser.parse_args(argv)))
    refuse_conflicts(parser, argv, args)  # before any work: a flag another makes meaningless is refused
    from ..bench.demo import demo

    demo(args)


def run():
    sys.exit(command_main("demo"))


if __name__ == "__main__":
    run()
