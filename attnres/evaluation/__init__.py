"""Evaluation of AttnRes models against their matched baselines (lm-evaluation-harness, offline).

Entry points:
    compare(model_dirs, tasks, out_dir, *, data_dir=None, limit=None, ...)  -> report dict (report.md/json, PNGs)
    heldout_metrics(model_dir, data_dir, *, max_sequences=None, ...)       -> validation loss and bits per byte
    prepare_eval_data(out_dir, cache_dir, gpqa_csv=None)                   -> benchmark data laid out for lm-eval
CLIs: eval/compare.py, eval/prepare_eval_data.py.
"""
from .comparison import DEFAULT_MAX_LENGTH, CompareError, compare, default_tasks
from .data import DEFAULT_EVAL_DATA, DataError, prepare_eval_data
from .heldout import heldout_metrics
from .runner import HELDOUT
from .tasks import TASKS

__all__ = ["compare", "heldout_metrics", "prepare_eval_data", "default_tasks", "CompareError", "DataError",
           "DEFAULT_EVAL_DATA", "DEFAULT_MAX_LENGTH", "HELDOUT", "TASKS"]
