"""One (model, task) evaluation through lm-eval's `simple_evaluate`, kept as per-item results in one JSON file.

The file is written atomically when the task finishes, so a crash or Ctrl-C loses at most the task in progress and a
rerun skips every finished task whose settings match (same model files, task, shots, limit, seed, max length, model
options, prepared data).
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

from ..folders.atomic_io import write_json_atomic
from ..folders.json_limits import JSONDepthError, loads_limited

HELDOUT = "heldout"


HASHED_BYTES = 64 << 20  # a file up to this size is stamped by its content, a larger one (weights) by its metadata


def file_stamp(*paths: Path) -> str | None:
    """Changes when any of the files changes; None when there is none. A file up to HASHED_BYTES counts by its
    content; a larger one by size, mtime and ctime (no 10 GB hash: a rewrite that sets the mtime back, as `cp -p` or
    `touch -r` do, still moves the ctime, which no tool sets back). Names, not folders, enter the key: a model folder
    moved elsewhere keeps its results."""
    digest = hashlib.sha256()
    files = [p for p in paths if p.is_file()]
    for path in files:
        stat = path.stat()
        digest.update(f"{path.name}:{stat.st_size}:".encode())
        if stat.st_size <= HASHED_BYTES:
            digest.update(hashlib.sha256(path.read_bytes()).digest())
        else:
            digest.update(f"{stat.st_mtime_ns}:{stat.st_ctime_ns}".encode())
    return digest.hexdigest()[:16] if files else None


def model_stamp(model_dir: Path) -> str:
    """Changes when any file the model loads from changes: config, weights, tokenizer (whatever its format), code and
    chat template; the folder's prose (*.md) aside."""
    return file_stamp(*sorted(p for p in Path(model_dir).iterdir() if p.is_file() and p.suffix != ".md"))


def is_main_process() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def load_finished(path: Path, settings: dict) -> dict | None:
    if not path.is_file():
        return None
    try:
        record = loads_limited(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, JSONDepthError):
        return None  # not ours (atomic writes never leave half a file): redo the task
    if not isinstance(record, dict) or not isinstance(record.get("items"), dict):
        return None  # damaged or edited by hand: redo the task
    return record if record.get("settings") == settings else None


def items_from_samples(samples: dict) -> dict:
    """{metric,filter: {subtask/doc_id: value}} from lm-eval's logged samples (numeric per-item metrics only)."""
    metrics: dict[str, dict] = {}
    for subtask, rows in samples.items():
        for row in rows:
            for name in row.get("metrics", []):  # the metric names this row carries values for
                value = row.get(name)
                if isinstance(value, (int, float)):
                    key = f"{name},{row.get('filter', 'none')}"
                    metrics.setdefault(key, {})[f"{subtask}/{row['doc_id']}"] = float(value)
    return metrics


@lru_cache(maxsize=4)
def task_manager(include_paths: tuple[str, ...] = ()):
    """lm-eval's task index (it reads every task YAML of the installation: seconds), built once per set of folders
    (later folders win a name both define)."""
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=list(include_paths) or None)


def run_lm_eval_task(lm, task: str, include_paths: tuple[str, ...], settings: dict,
                     allow_code_execution: bool) -> dict | None:
    """Per-item metrics and lm-eval's aggregate results of one task (None on non-main processes)."""
    from lm_eval import simple_evaluate

    from .user_tasks import TaskFileError, describe_failure, user_frame

    seed = settings["seed"]
    try:
        with quiet_git_probe():
            out = simple_evaluate(
                model=lm, tasks=[task], num_fewshot=settings["num_fewshot"], limit=settings["limit"],
                log_samples=True, task_manager=task_manager(tuple(include_paths)), bootstrap_iters=0,
                random_seed=seed, numpy_random_seed=seed, torch_random_seed=seed, fewshot_random_seed=seed,
                confirm_run_unsafe_code=allow_code_execution, gen_kwargs=settings.get("gen_kwargs"),
            )
    except SystemExit as error:  # task code that exits (even with 0) ended no evaluation: never a silent success
        raise TaskFileError(f"task {task}: its code ended the run: "
                            f"{describe_failure(error, list(map(Path, include_paths)))}") from None
    except Exception as error:
        if user_frame(error, list(map(Path, include_paths))) is None:
            raise  # not the task's own code: lm-eval's, the model's or ours, with its traceback
        raise TaskFileError(f"task {task}: its code failed: "
                            f"{describe_failure(error, list(map(Path, include_paths)))}") from None
    if out is None:
        return None
    return dict(items=items_from_samples(out["samples"]), lm_eval_results=out["results"],
                n_samples=out.get("n-samples"), versions=out.get("versions"))


@contextmanager
def quiet_git_probe():
    """lm-eval records the git commit of the working folder (`git describe`) with git's stderr open, so outside a
    repository every task prints "fatal: not a git repository". Within: the same probe with git's stderr discarded
    (the recorded value is unchanged: the commit, or lm-eval's own fallback)."""
    import lm_eval.evaluator as evaluator
    from lm_eval.loggers.utils import get_commit_from_path

    def git_commit_hash():
        try:
            return subprocess.check_output(["git", "describe", "--always"], stderr=subprocess.DEVNULL).strip().decode()
        except (subprocess.CalledProcessError, OSError):
            return get_commit_from_path(os.getcwd())

    saved = evaluator.get_git_commit_hash
    evaluator.get_git_commit_hash = git_commit_hash
    try:
        yield
    finally:
        evaluator.get_git_commit_hash = saved


def run_heldout(model_dir: Path, data_dir: Path, settings: dict, model=None, progress: bool = True) -> dict:
    from .heldout import heldout_metrics

    result = heldout_metrics(model_dir, data_dir, max_sequences=settings["limit"], model=model, progress=progress)
    keys = [f"validation/{i}" for i in range(result["sequences"])]

    def scored(values):  # a sequence without a scored token is no item of the paired test
        return {k: v for k, v in zip(keys, values) if v == v}

    return dict(items={"bpb,none": scored(result["items"]), "loss,none": scored(result["item_loss"])},
                heldout={k: result[k] for k in ("loss", "bpb", "tokens", "bytes", "sequences", "split_sequences",
                                                 "scored")})


def evaluate_task(path: Path, settings: dict, compute) -> dict | None:
    """The finished record at `path` (marked "reused": the report says so), or `compute()`'s, saved there (main
    process only)."""
    record = load_finished(path, settings)
    if record is not None:
        return dict(record, reused=True)
    result = compute()
    if result is None or not is_main_process():
        return None
    record = dict(settings=settings, **result)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, record)
    return record
