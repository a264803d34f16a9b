"""Evaluate two or more models on the same tasks and settings, then report metrics, deltas and paired tests.

    from hf_attnres.evaluation import compare
    report = compare(["runs/small-standard/final", "runs/small-block/final"], tasks=["heldout", "attnres_mmlu_bpb"],
                     out_dir="outputs/eval", data_dir="data/packed", limit=50)

The first model is the reference: every other model is compared with it, item by item. Tasks are lm-eval task names
(ours from task_templates/, rendered by compare for the benchmarks eval/prepare_eval_data.py laid out in
<eval_data>, or any lm-eval task the installation can load) plus "heldout": loss and bits per byte on the training
corpus's validation split (`data_dir`).
"""
from __future__ import annotations

import hashlib
import re
from contextlib import contextmanager, nullcontext
from functools import partial
from pathlib import Path

from ..folders.atomic_io import OutputConflictError, claim_output
from ..folders.checkpoint_files import CheckpointFileError
from ..utils import finite_weights
from ..utils.finite_weights import NonFiniteWeightsError
from ..utils.safe_paths import disk_errors_named
from ..utils.tokenizer_files import TOKENIZER_FILES, has_tokenizer
from ..utils.trust import TRUST_FLAG, UntrustedCodeError, check_folder_code, trust_kwargs
from .code_exec import ALLOW_ENV, CodeSettingError
from .code_exec import check_settings as check_code_settings
from .data import DEFAULT_EVAL_DATA, PREPARED_FILE, read_prepared
from .provenance import check_model_dir, describe_model
from .runner import HELDOUT, evaluate_task, file_stamp, is_main_process, model_stamp, run_heldout, run_lm_eval_task
from .tasks import CODE_TASKS, TASKS, private_tasks, rendered_benchmarks

QUICK_LIMIT = 4  # --quick: heldout sequences, and MMLU gold answers per subject (57 x 4 = 228)
QUICK_TIMING = ("Measured on this project's 2-core CPU (docs/BENCHMARKS.md, 'compare --quick'): two SmolLM2-135M\n"
                "models (plain and its Block AttnRes upcycle) 6.5 min wall with OMP_NUM_THREADS=1; two tiny test\n"
                "models 40-94 s. On a CPU shared with other jobs, set OMP_NUM_THREADS=1: two threads made a forward\n"
                "10-100x slower there.")
DEFAULT_MAX_LENGTH = 2048  # KimiLinear's config reports 1,048,576 positions; lm-eval would use that as the window
# lm-eval model options that compare's own flags set (a second value would silently win or crash the model's init)
RESERVED_MODEL_ARGS = {"pretrained": "the model folders", "trust_remote_code": TRUST_FLAG, "max_length": "--max-length",
                       "device": "--device", "batch_size": "--batch-size"}


class CompareError(ValueError):
    """Bad input, found before any evaluation starts, or a task's own code that failed or exited during one (the CLI
    prints its message alone)."""


def default_tasks(eval_data: Path, data_dir: Path | None) -> list[str]:
    """Every prepared task that needs no generation (fast, informative at small scale), plus held-out if data given."""
    return planned_tasks(eval_data, data_dir)[0]


def planned_tasks(eval_data: Path, data_dir: Path | None, quick: bool = False) -> tuple[list[str], list[dict]]:
    """(the tasks a comparison without --tasks runs, the ones it would run but cannot): the default set, or --quick's
    (heldout when a corpus is given, MMLU gold-answer bits per byte: smooth in model quality at small scale, no
    generation, the cheapest informative benchmark), and per missing input one {"tasks", "reason", "how"} entry that
    the output and report.md state, so a metric never disappears from a report unmentioned."""
    prepared = read_prepared(Path(eval_data), missing_ok=True)
    wanted = ["attnres_mmlu_bpb"] if quick else [t for t, (_, generates) in TASKS.items() if not generates]
    tasks = [HELDOUT] if data_dir is not None else []
    skipped = [] if data_dir is not None else [dict(
        tasks=[HELDOUT], reason="no --data given (the held-out split of a prepared training corpus)",
        how="pass --data DIR, a folder `attnres prepare-data` wrote")]
    missing: dict[str, list[str]] = {}
    for task in wanted:
        bench = TASKS[task][0]
        if "rows" in prepared.get(bench, {}):
            tasks.append(task)
        else:
            missing.setdefault(bench, []).append(task)
    for bench, names in missing.items():
        status = prepared.get(bench)
        reason = (f"its data is not prepared in {eval_data}" if not isinstance(status, dict) or "error" not in status
                  else f"its preparation in {eval_data} failed ({status['error']})")
        csv = " --gpqa-csv FILE" if bench == "gpqa" else ""
        skipped.append(dict(tasks=names, reason=f"{bench}: {reason}",
                            how=f"attnres prepare-eval-data --benchmarks {bench}{csv} --output-dir {eval_data}"))
    return tasks, skipped


def skipped_lines(skipped: list[dict]) -> list[str]:
    """One line per skipped group of tasks (or unscored metric): which, why, and the command that makes them
    available (or where the value is)."""
    return [f"skipped {', '.join(s['tasks'])}: {s['reason']}; "
            + (f"to run it: {s['how']}" if s.get("how") else s.get("see", "")) for s in skipped]


def check_include_path(include_path: Path | None) -> Path | None:
    """--include-path: a folder of the user's own lm-eval task YAMLs (they trust its code, as lm-eval's own flag)."""
    if include_path is None:
        return None
    include_path = Path(include_path)
    if not include_path.is_dir():
        raise CompareError(f"--include-path {include_path}: not a folder (a folder of lm-eval task YAML files)")
    if not any(include_path.rglob("*.yaml")):
        raise CompareError(f"--include-path {include_path}: no *.yaml task files in it")
    return include_path


def model_labels(model_dirs: list[Path], labels: list[str] | None) -> list[str]:
    """Short unique names: given, or the folder name (its parent's for a train.py final/ folder)."""
    if labels is None:
        labels = [(p.resolve().parent.name if p.name == "final" else p.name) for p in model_dirs]
    if len(labels) != len(model_dirs):
        raise CompareError(f"--labels: {len(labels)} labels for {len(model_dirs)} models")
    labels = [re.sub(r"[^A-Za-z0-9._-]", "_", label) for label in labels]
    if len(set(labels)) != len(labels):
        raise CompareError(f"model labels {labels} are not unique: pass --labels")
    return labels


def check_tasks(tasks: list[str], eval_data: Path, data_dir: Path | None, allow_code_execution: bool,
                include_path: Path | None = None) -> tuple[str, ...]:
    """One clear message for an unknown, unprepared or refused task; returns lm-eval's include paths: the user's
    --include-path, then the rendered task folder (if any), which lm-eval reads last so our task names stay ours."""
    if not tasks:
        raise CompareError("no tasks to run: prepare benchmarks (eval/prepare_eval_data.py) "
                           "or pass --data for held-out")
    if HELDOUT in tasks and data_dir is None:
        raise CompareError("task 'heldout' needs --data (a scripts/prepare_data.py folder)")
    prepared = read_prepared(eval_data, missing_ok=True)
    include = None  # lm-eval reads our tasks from a rendering of the package's templates, never <eval-data>/tasks
    if any(t != HELDOUT for t in tasks) and rendered_benchmarks(prepared):
        try:
            include = private_tasks(Path(eval_data), rendered_benchmarks(prepared))
        except (OSError, ValueError) as error:
            raise CompareError(f"--eval-data {eval_data}: cannot render its lm-eval tasks: {error}") from None
    for task in tasks:
        if task in TASKS and "rows" not in prepared.get(TASKS[task][0], {}):
            reason = prepared.get(TASKS[task][0], {}).get("error", "not prepared")
            raise CompareError(f"task {task}: its data is not available in {eval_data} ({reason}); "
                               f"run `python eval/prepare_eval_data.py --output-dir {eval_data}`")
        if task in CODE_TASKS and not allow_code_execution:
            raise CompareError(f"task {task} runs code the model wrote: pass --allow-code-execution to allow it")
    includes = tuple(str(p) for p in (include_path, include) if p is not None)
    others = [t for t in tasks if t != HELDOUT and t not in TASKS]
    if others:
        from .runner import task_manager
        from .user_tasks import TaskFileError, check_loadable, resolve_functions

        manager = task_manager(includes)
        known = set(manager.all_tasks)
        try:
            skipped_files = check_loadable(others, include_path, manager)
            unknown = [t for t in others if t not in known]
            if unknown:
                mine = f", or in --include-path {include_path}" if include_path else " (your own: --include-path DIR)"
                raise CompareError(f"unknown task(s) {unknown}: ours are {[HELDOUT, *TASKS]}; "
                                   f"any lm-eval task name also works{mine}{skipped_files or ''}")
            resolve_functions(others, manager, include_path)
        except TaskFileError as error:
            raise CompareError(str(error)) from None
    return includes


def check_tokenizers(model_dirs: list[Path], tasks: list[str], data_dir: Path | None) -> None:
    """Every model is loaded through lm-eval's HF wrapper, which reads the model's own tokenizer (heldout too, though
    it scores the corpus's ids): a folder without one is named before any work. heldout needs the corpus's tokenizer
    to be the model's."""
    for model_dir in model_dirs:
        if not has_tokenizer(model_dir):
            raise CompareError(f"model folder {model_dir} has no tokenizer ({' / '.join(TOKENIZER_FILES[:2])}): "
                               "save the tokenizer beside the weights (tokenizer.save_pretrained(folder))")
    for model_dir in model_dirs:
        if HELDOUT in tasks and data_dir is not None:
            from .heldout import check_tokenizer

            try:
                check_tokenizer(model_dir, Path(data_dir))
            except ValueError as error:
                raise CompareError(f"--data: {error}") from None


def check_settings(limit, num_fewshot, max_length, batch_size) -> None:
    if limit is not None and limit < 1:
        raise CompareError(f"--limit must be >= 1, got {limit}")
    if num_fewshot is not None and num_fewshot < 0:
        raise CompareError(f"--num-fewshot must be >= 0, got {num_fewshot}")
    if max_length < 1:
        raise CompareError(f"--max-length must be >= 1, got {max_length}")
    size = str(batch_size)
    if not (re.fullmatch(r"auto(:[1-9][0-9]*)?", size) or re.fullmatch(r"[1-9][0-9]*", size)):
        raise CompareError(f"--batch-size must be a positive integer, 'auto' or 'auto:N', got {size!r}")


def parse_arg_string(flag: str, text: str | None, reserved: dict | None = None) -> dict:
    """lm-eval's `name=value,name=value` (--model-args, --gen-kwargs): every part needs a name and `=`, so a typo is
    refused instead of being passed on as an empty option that nothing reads."""
    parsed = {}
    for part in (text or "").split(","):
        if not part:
            continue  # lm-eval skips empty parts too ("a=1,")
        name, equals, value = part.partition("=")
        if not equals or not name.strip().isidentifier():
            raise CompareError(f"{flag} {text!r}: {part!r} is not name=value (comma-separated, e.g. "
                               f"{'dtype=bfloat16' if flag == '--model-args' else 'max_gen_toks=64'})")
        if reserved and name.strip() in reserved:
            raise CompareError(f"{flag}: {name.strip()} is set by {reserved[name.strip()]}, not here")
        parsed[name.strip()] = value
    return parsed


def check_device(device: str | None) -> None:
    """A device torch knows and this machine has (lm-eval would otherwise fall back or fail deep inside)."""
    if device is None:
        return
    import torch

    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise CompareError(f"--device {device!r} is not a device name (cpu, cuda, cuda:1, mps, ...)") from None
    if parsed.type == "cpu":
        return
    backend = {"cuda": torch.cuda, "mps": getattr(torch.backends, "mps", None), "xpu": getattr(torch, "xpu", None)}
    backend = backend.get(parsed.type)
    if backend is None or not backend.is_available():
        raise CompareError(f"--device {device}: this machine has no {parsed.type} device (use --device cpu)")
    count = backend.device_count() if hasattr(backend, "device_count") else 1
    if parsed.index is not None and parsed.index >= count:
        raise CompareError(f"--device {device}: this machine has {count} {parsed.type} device(s)")


def check_output_dir(out_dir: Path, inputs: list[Path]) -> None:
    """The report folder must be a folder and must not lie in (or be) an input: the results would change them."""
    if out_dir.exists() and not out_dir.is_dir():
        raise CompareError(f"--output-dir {out_dir} is a file, not a folder")
    out = out_dir.resolve()
    for path in inputs:
        if out == path.resolve() or path.resolve() in out.parents:
            raise CompareError(f"--output-dir {out_dir} is inside the input folder {path}: choose another folder")


def compare(model_dirs, tasks=None, out_dir="outputs/eval", *, labels=None, data_dir=None,
            eval_data=DEFAULT_EVAL_DATA, limit=None, num_fewshot=None, seed=1234, batch_size=1, device=None,
            max_length=DEFAULT_MAX_LENGTH, model_args="", gen_kwargs=None, allow_code_execution=False,
            trust_remote_code=False, progress=True, include_path=None, quick=False) -> dict | None:
    """Evaluate `model_dirs` (two or more; the first is the reference) on `tasks` and write
    <out_dir>/{report.md, report.json, metrics.png, deltas.png, results/<label>/<task>.json}. Returns the report
    (None on non-main processes of a multi-process launch). Resumable: finished (model, task) results are reused.
    Code a model folder carries (an auto_map) runs only with `trust_remote_code` (hf_attnres.utils.trust).
    Without `tasks`, the default set runs (`quick`: --quick's); the report's "skipped" lists what of it could not.
    An earlier report in `out_dir` of other models or settings is moved to <out_dir>/previous/, never overwritten:
    the report's "previous_report" names where."""
    model_dirs = [Path(p) for p in model_dirs]
    if len(model_dirs) < 2:
        raise CompareError("compare needs at least two model folders (the first is the reference)")
    for model_dir in model_dirs:
        try:
            check_model_dir(model_dir)
            check_folder_code(model_dir, trust_remote_code)
            finite_weights.check_folder(model_dir)  # a NaN weight is named, never evaluated into an `n/a` report
        except (FileNotFoundError, UntrustedCodeError, CheckpointFileError, NonFiniteWeightsError) as error:
            raise CompareError(str(error)) from error
    if data_dir is not None:
        from ..training.data import check_prepared

        try:
            check_prepared(Path(data_dir))
        except (FileNotFoundError, ValueError) as error:  # missing, or disagreeing with its meta.json
            raise CompareError(str(error)) from error
    check_settings(limit, num_fewshot, max_length, batch_size)
    check_device(device)
    parse_arg_string("--model-args", model_args, RESERVED_MODEL_ARGS)
    parse_arg_string("--gen-kwargs", gen_kwargs)
    include_path = check_include_path(include_path)
    check_output_dir(Path(out_dir), [*model_dirs, *([Path(data_dir)] if data_dir else []), Path(eval_data),
                                     *([include_path] if include_path else [])])
    tasks, skipped = (list(tasks), []) if tasks else planned_tasks(Path(eval_data), data_dir, quick)
    if not tasks:
        raise CompareError("no tasks to run: " + "; ".join(skipped_lines(skipped)))
    include = check_tasks(tasks, Path(eval_data), data_dir, allow_code_execution, include_path)
    check_tokenizers(model_dirs, tasks, data_dir)
    if allow_code_execution and any(t in CODE_TASKS for t in tasks):
        try:
            check_code_settings()
        except CodeSettingError as error:
            raise CompareError(str(error)) from None
    labels = model_labels(model_dirs, labels)
    out_dir = Path(out_dir)
    with _one_writer(out_dir), disk_errors_named(f"--output-dir {out_dir}", "the report was not replaced; finished "
                                                 "results are kept and a rerun continues", CompareError):
        return _evaluate_and_report(model_dirs, labels, tasks, out_dir, include, include_path, data_dir, eval_data,
                                    limit, num_fewshot, seed, batch_size, device, max_length, model_args, gen_kwargs,
                                    allow_code_execution, trust_remote_code, progress, skipped)


def include_stamp(include_path: Path | None) -> str | None:
    """Changes when any file of --include-path changes: an edited task of the user's is evaluated anew."""
    return file_stamp(*sorted(p for p in Path(include_path).rglob("*") if p.is_file())) if include_path else None


@contextmanager
def _one_writer(out_dir: Path):
    """The --output-dir claimed by this compare (main process) until its report is written: a second compare into
    it stops at once, by name (`atomic_io.claim_output`)."""
    try:
        with claim_output(out_dir) if is_main_process() else nullcontext():
            yield
    except OutputConflictError as error:
        raise CompareError(f"--output-dir {error}") from None


def _evaluate_and_report(model_dirs, labels, tasks, out_dir, include, include_path, data_dir, eval_data, limit,
                         num_fewshot, seed, batch_size, device, max_length, model_args, gen_kwargs,
                         allow_code_execution, trust_remote_code, progress, skipped=()):
    import os

    from .report import build_report, write_report

    records = {}
    saved = os.environ.get(ALLOW_ENV)
    try:
        if allow_code_execution:
            os.environ[ALLOW_ENV] = "1"  # read by code_exec in lm-eval's process_results
        for model_dir, label in zip(model_dirs, labels):
            settings = dict(limit=limit, num_fewshot=num_fewshot, seed=seed, max_length=max_length,
                            gen_kwargs=gen_kwargs, model_args=model_args, model=model_stamp(model_dir),
                            eval_data=file_stamp(Path(eval_data) / PREPARED_FILE),
                            include_path=include_stamp(include_path))
            records[label] = evaluate_model(model_dir, label, tasks, out_dir, include, data_dir, settings,
                                            batch_size, device, model_args, allow_code_execution, progress,
                                            trust_remote_code)
    finally:
        if saved is None:
            os.environ.pop(ALLOW_ENV, None)
        else:
            os.environ[ALLOW_ENV] = saved
    if records[labels[0]] is None:
        return None  # not the main process
    models = [describe_model(d, label) for d, label in zip(model_dirs, labels)]
    settings = dict(tasks=tasks, limit=limit, num_fewshot=num_fewshot, seed=seed, max_length=max_length,
                    gen_kwargs=gen_kwargs, batch_size=batch_size, eval_data=str(eval_data),
                    data_dir=str(data_dir) if data_dir else None,
                    include_path=str(include_path) if include_path else None)
    report = build_report(models, records, settings, read_prepared(eval_data, missing_ok=True), skipped)
    write_report(report, out_dir)
    return report


def evaluate_model(model_dir, label, tasks, out_dir, include, data_dir, base_settings, batch_size, device,
                   model_args, allow_code_execution, progress=True, trust_remote_code=False) -> dict | None:
    """{task: record} for one model; the model is loaded once, and only when some task is not finished yet."""
    from tqdm.auto import tqdm

    from ..training.logs import data_fingerprint  # not at import: training's modules load `datasets`
    from .runner import task_manager

    loaded = {}

    def lm():
        if "lm" not in loaded:
            loaded["lm"] = make_lm(model_dir, batch_size, device, base_settings["max_length"], model_args,
                                   trust_remote_code)
        return loaded["lm"]

    records = {}
    for task in tqdm(tasks, desc=f"evaluate {label}", disable=not (progress and is_main_process())):
        settings = dict(base_settings, task=task)
        if task == HELDOUT or (task in TASKS and task.endswith("_bpb")):
            settings["num_fewshot"] = None  # defined zero-shot: --num-fewshot is for the official tasks
        path = out_dir / "results" / label / f"{task}.json"
        if task == HELDOUT:
            settings["data"] = data_fingerprint(data_dir)  # another corpus (or a re-prepared one): recompute
            compute = lambda: run_heldout(model_dir, data_dir, settings, model=lm().model, progress=progress)  # noqa: E731
        else:
            settings["task_files"] = task_stamp(task_manager(tuple(include)), task)  # its data, wherever it lies
            compute = partial(_run_task, lm, task, include, settings, allow_code_execution)
        records[task] = evaluate_task(path, settings, compute)
    return None if any(r is None for r in records.values()) else records


def task_stamp(manager, task: str) -> str | None:
    """Changes when any local file the task reads changes (`user_tasks.task_files`: its YAMLs, modules and data,
    wherever they lie), each under its full path; None for a task with no local file."""
    from .user_tasks import task_files

    files = task_files(manager, task)
    if not files:
        return None
    return hashlib.sha256("\0".join([*map(str, files), file_stamp(*files)]).encode()).hexdigest()[:16]


def _run_task(lm, task, include, settings, allow_code_execution):
    """run_lm_eval_task on the loaded model; a task whose own code failed or exited is one line, by name."""
    from .user_tasks import TaskFileError

    try:
        return run_lm_eval_task(lm(), task, include, settings, allow_code_execution)
    except TaskFileError as error:
        raise CompareError(str(error)) from None


def make_lm(model_dir: Path, batch_size, device, max_length: int, model_args: str, trust_remote_code: bool = False):
    """lm-eval's HF model on `model_dir` (an explicit max_length; the folder's own code only with
    `trust_remote_code`: our saved folders load through the registered classes); `model_args` adds lm-eval options
    such as parallelize=True or dtype=bfloat16."""
    from lm_eval.models.huggingface import HFLM

    import hf_attnres  # noqa: F401  registers the AttnRes classes with the Auto classes

    check_folder_code(model_dir, trust_remote_code)
    args = f"pretrained={model_dir},trust_remote_code={trust_kwargs(trust_remote_code)['trust_remote_code']}"
    args += f",max_length={max_length}" + (f",{model_args}" if model_args else "")
    import torch

    extra = dict(batch_size=batch_size, device=device or ("cuda" if torch.cuda.is_available() else "cpu"))
    try:
        return HFLM.create_from_arg_string(args, extra)
    except TypeError as error:  # an option neither lm-eval nor the model's from_pretrained takes
        if not model_args or "argument" not in str(error):
            raise
        raise CompareError(f"--model-args {model_args!r}: {error}") from None
