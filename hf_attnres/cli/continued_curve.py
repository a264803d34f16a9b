"""The upcycling budget curve: the same continued-training comparison at several token budgets (one continued grid per
budget, each trained with `attnres continued-study`), read back as one table and one plot: per budget and AttnRes
arm, the paired held-out loss deltas against the standard arm with their per-sequence and over-seed 95% CIs, the
verdict (helps / no measurable difference / hurts), and where the deltas move with log(tokens), the budget at which
they cross zero (a bootstrap interval) and whether --past (the GPU grid's budget) lies beyond it.

Trains nothing. Each grid's runs are read from <runs-root>/<grid name>/runs/ (what `attnres continued-study --grid G
--output-dir <runs-root>/<grid name>` wrote); a budget or seed not trained yet is listed as missing.

  attnres continued-curve                                      # the three curve grids, runs under runs/
  attnres continued-curve --runs-root /scratch/study --report-dir docs/results/curve
"""
from __future__ import annotations

import argparse
import sys

from ..study.study_args import ContinuedCurveArgs
from ..utils.flags import parser_for
from . import command_main


def build_parser() -> argparse.ArgumentParser:
    return parser_for(ContinuedCurveArgs, description=__doc__)


def main(argv=None, resolve_source=None) -> int:
    from ..study.continued.curve import read_budget, write_curve

    args = ContinuedCurveArgs(**vars(build_parser().parse_args(argv)))
    if not args.grids:
        sys.exit("error: give at least one continued grid file")
    if args.past < 1:
        sys.exit(f"error: --past must be a positive number of tokens, got {args.past}")
    budgets = []
    for grid in args.grids:
        if not grid.is_file():
            sys.exit(f"error: {grid}: no such grid file")
        try:
            budgets.append(read_budget(grid, args.runs_root, resolve_source))
        except ValueError as error:
            sys.exit(f"error: {error}")
    budgets.sort(key=lambda b: b.tokens)
    path = write_curve(budgets, args.report_dir, args.past)
    print(path.read_text(), end="")
    written = [p.name for p in (path.with_name("curve.json"), path.with_name("curve.png")) if p.is_file()]
    print(f"wrote {path} (and {', '.join(written)} beside it)")
    return 0


def run():
    sys.exit(command_main("continued-curve"))


if __name__ == "__main__":
    run()
