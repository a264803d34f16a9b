"""Run the grid's runs with `python -m hf_attnres.cli.train` (one subprocess each), resumably.

Each finished run leaves `<out>/runs/<id>/result.json` (written atomically, last): a rerun skips the runs whose record
matches the current settings and redoes the others (never started, crashed, or made with other settings).
"""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

from ..folders.atomic_io import write_json_atomic
from ..folders.json_limits import loads_limited
from .analysis import training_flops
from .grid import MAX_LR, Grid, RunKey, best_lrs, load_grid, model_config

# The children run these command modules (`-m`, which python, torchrun and accelerate launch all take)
TRAIN_MODULE = "hf_attnres.cli.train"
PREPARE_MODULE = "hf_attnres.cli.prepare_data"
RESULT_FILE = "result.json"


def child_env(**overrides) -> dict:
    """The environment of a child process. Run from a source checkout, the checkout goes first on the child's path, so
    it runs this attnres even when it is not installed (or another one is), from any working folder."""
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, **overrides)
    if (root / "pyproject.toml").is_file():  # a checkout (an installed package's parent is site-packages: left alone)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH")) if p)
    return env


def ensure_data(grid: Grid) -> dict:
    """The prepared dataset's meta.json; prepares it first (`attnres prepare-data` with data.prepare) if missing."""
    data_dir = Path(grid.data["dir"])
    if not (data_dir / "meta.json").is_file():
        command = [sys.executable, "-m", PREPARE_MODULE, *grid.data.get("prepare", []), "--output-dir", str(data_dir)]
        print("preparing data:", " ".join(command), flush=True)
        code = subprocess.run(command, env=child_env()).returncode
        if code != 0 or not (data_dir / "meta.json").is_file():
            raise StudyError(f"data.prepare failed (prepare-data exited with {code}; its message is above): "
                             f"{data_dir} was not written; fix data.prepare in the grid or prepare the data yourself")
    return json.loads((data_dir / "meta.json").read_text())


def run_spec(grid: Grid, key: RunKey) -> dict:
    """Everything that determines a run's result: a record made with another spec is redone."""
    # (train.metric "eval-batches" is left out: the records made before the field existed used it, and still match)
    train = {k: v for k, v in grid.train.items() if k != "launcher" and (k, v) != ("metric", "eval-batches")}
    spec = dict(key=key.to_dict(), model=grid.model, train=train, data=grid.data["dir"])
    if key.arm is not None:  # an edited arm redoes its runs
        spec["arm"] = grid.arms[key.arm]
    return spec


def read_result(run_dir: Path, spec: dict) -> dict | None:
    path = run_dir / RESULT_FILE
    if not path.is_file():
        return None
    try:
        record = loads_limited(path.read_text())
    except (ValueError, UnicodeDecodeError):  # damaged (or nested 100,000 deep): not a result of this spec, redo it
        return None
    if not isinstance(record, dict) or record.get("spec") != spec:
        return None
    for field in RESULT_NUMBERS:  # a record of this spec is trusted by every report: its numbers must be numbers
        value = record.get(field)
        if field in record and (isinstance(value, bool) or not isinstance(value, (int, float))
                                or not math.isfinite(value)):
            raise StudyError(f"{path}: {field} is {value!r}, not a finite number (delete the file to redo the run)")
    return record


RESULT_NUMBERS = ("val_loss", "heldout_loss", "heldout_bpb", "train_loss")


def count_params(config) -> tuple[int, int]:
    """(all parameters, parameters that cost matmul FLOPs per token: all but the input embedding)."""
    import torch

    from ..families.registry import family_classes, family_of_model_type

    with torch.device("meta"):  # the causal LM of the config's own family
        model = family_classes(family_of_model_type(config.model_type))[1](config)
    total = sum(p.numel() for p in model.parameters())
    return total, total - model.get_input_embeddings().weight.numel()


def train_command(grid: Grid, key: RunKey, run_dir: Path, seq_len: int) -> list[str]:
    t = grid.train
    eval_every = max(1, t["max_steps"] // t["eval_points"])
    launcher = t["launcher"] or [sys.executable]
    lr = key.lr if key.lr is not None else t["lr"]
    arm = grid.arms[key.arm]["train"] if key.arm is not None else {}
    extra = []
    if "res_proj_lr_scale" in arm:
        extra += ["--res-proj-lr", str(lr * arm["res_proj_lr_scale"])]
    if "res_proj_weight_decay" in arm:
        extra += ["--res-proj-weight-decay", str(arm["res_proj_weight_decay"])]
    return [
        *launcher, "-m", TRAIN_MODULE, "--data", grid.data["dir"], "--config", str(run_dir / "config.json"),
        "--output-dir", str(run_dir / "train"), "--seed", str(key.seed), "--max-steps", str(t["max_steps"]),
        "--micro-batch-size", str(t["micro_batch_size"]), "--grad-accum", str(t["grad_accum"]), "--lr", str(lr),
        "--warmup-steps", str(arm.get("warmup_steps", t["warmup_steps"])), "--seq-len", str(seq_len),
        "--eval-every", str(eval_every), "--eval-batches", str(t["eval_batches"]), "--log-every", str(t["log_every"]),
        "--save-every", "0",
        # depth diagnostics of the last step only (one extra capture): the report's Figure-5 heatmaps read them
        "--diagnostics-every", str(t["max_steps"]),
        # the final model stays (train/final/) so that a run can be evaluated again on any split or task
        "--resume", "never", "--no-tensorboard", *extra, *t["extra_args"],
    ]


def collect(run_dir: Path, metric: str = "whole-split") -> dict:
    """From the run's metrics.jsonl: the validation curve (train's evals: the first eval_batches global batches,
    `curve_sequences` of them), the last train loss, the final model's loss on the whole split (`heldout_loss`), and
    `val_loss`, what the study compares: the whole split's, or the curve's last point for metric "eval-batches"."""
    records = [json.loads(line) for line in (run_dir / "train" / "metrics.jsonl").read_text().splitlines() if line]
    evals = [r for r in records if "val/loss" in r]
    train = [r["train/loss"] for r in records if "train/loss" in r]
    if not evals:
        raise RuntimeError(f"{run_dir}: no validation loss in metrics.jsonl")
    last = evals[-1]
    if metric == "whole-split" and "val/heldout_loss" not in last:
        raise RuntimeError(f"{run_dir}: no whole-split validation loss (val/heldout_loss) in metrics.jsonl")
    whole = metric == "whole-split"
    return dict(val_curve=[[r["step"], r["val/loss"]] for r in evals], curve_sequences=last.get("val/sequences"),
                val_loss=last["val/heldout_loss"] if whole else last["val/loss"],
                val_sequences=last["val/heldout_sequences"] if whole else last.get("val/sequences"),
                heldout_loss=last.get("val/heldout_loss"), heldout_sequences=last.get("val/heldout_sequences"),
                train_loss=train[-1] if train else None)


def run_one(grid: Grid, key: RunKey, out: Path, meta: dict, threads: int) -> dict:
    """Train one run from scratch and write its record; raises RuntimeError (with the log's tail) when it fails."""
    run_dir = out / "runs" / key.id
    shutil.rmtree(run_dir / "train", ignore_errors=True)  # a crashed attempt is redone from scratch
    run_dir.mkdir(parents=True, exist_ok=True)
    config = model_config(grid, key, meta["vocab_size"])
    config.to_json_file(str(run_dir / "config.json"))
    seq_len = grid.train["seq_len"] or meta["seq_len"]
    env = child_env(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM="false")
    started = time.time()
    with open(run_dir / "train.log", "w") as log:
        code = subprocess.run(train_command(grid, key, run_dir, seq_len), stdout=log, stderr=subprocess.STDOUT,
                              env=env, cwd=os.getcwd()).returncode
    wall = time.time() - started
    if code != 0:
        tail = (run_dir / "train.log").read_text().strip().splitlines()[-3:]
        raise RuntimeError(f"{key.id}: {TRAIN_MODULE} exited with {code} after {wall:.0f}s: " + " | ".join(tail))
    params, flop_params = count_params(config)
    tokens = grid.train["max_steps"] * grid.train["micro_batch_size"] * grid.train["grad_accum"] * seq_len
    record = dict(id=key.id, spec=run_spec(grid, key), **key.to_dict(), **collect(run_dir, grid.train["metric"]),
                  metric=grid.train["metric"], params=params, flop_params=flop_params, tokens=tokens,
                  flops=training_flops(flop_params, tokens),
                  wall_s=round(wall, 1), finished=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    write_json_atomic(run_dir / RESULT_FILE, record)
    # the record and the final model (train/final/) are what the study keeps: the last checkpoint repeats the model
    shutil.rmtree(run_dir / "train" / "checkpoints", ignore_errors=True)
    return record


def finished_records(grid: Grid, out: Path, keys) -> dict:
    """{run id: record} of the runs among `keys` whose record matches the current settings."""
    records = {k.id: read_result(out / "runs" / k.id, run_spec(grid, k)) for k in keys}
    return {i: r for i, r in records.items() if r is not None}


def grid_runs(grid: Grid, out: Path) -> tuple[list[RunKey], dict]:
    """(every run known now, their finished records): the runs at a best learning rate appear once their arm's sweep
    has finished, so this is asked again after each finished run."""
    best = best_lrs(grid, finished_records(grid, out, grid.sweep_runs()))
    keys = grid.runs(best_lrs=best)
    return keys, finished_records(grid, out, keys)


def run_grid(grid: Grid, out: Path, jobs: int = 1, threads: int = 1, only: list[RunKey] | None = None,
             runner=None) -> tuple[list[dict], list[str]]:
    """Run every pending run (`jobs` at a time) with `runner` (default `run_one`); returns (the records of the
    grid's runs that exist, error messages of the runs that failed). Runs at an arm's best learning rate start as
    soon as that arm's sweep has finished (the other runs keep the workers busy meanwhile)."""
    from tqdm.auto import tqdm

    runner = runner or run_one
    meta = ensure_data(grid)
    keys, done = (only, finished_records(grid, out, only)) if only is not None else grid_runs(grid, out)
    print(f"study {grid.name}: {len(keys)} runs known, {len(done)} already done, {len(keys) - len(done)} to train"
          + (f" (tuned runs of {', '.join(grid.waiting(best_lrs(grid, done)))} wait for their sweep)"
             if only is None and grid.waiting(best_lrs(grid, done)) else ""), flush=True)
    errors, failed, running = [], set(), {}
    progress = tqdm(total=len(keys), initial=len(done), desc="study runs", unit="run")
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        while True:
            for key in keys:
                if len(running) >= max(1, jobs):
                    break
                if key.id not in done and key.id not in failed and key not in running.values():
                    running[pool.submit(runner, grid, key, out, meta, threads)] = key
            if not running:
                break
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                key = running.pop(future)
                try:
                    done[key.id] = future.result()
                    progress.set_postfix_str(f"{key.id}: val {done[key.id]['val_loss']:.4f}")
                except Exception as error:  # one failed run must not stop the others: reported, redone on rerun
                    errors.append(str(error))
                    failed.add(key.id)
                    progress.write(f"FAILED {error}")
                progress.update(1)
            if only is None:  # a finished sweep adds its arm's tuned runs
                keys = grid.runs(best_lrs=best_lrs(grid, done))
                progress.total = len(keys)
    progress.close()
    return [done[k.id] for k in keys if k.id in done], errors


class StudyError(ValueError):
    """A study that cannot start (a bad grid file, impossible settings): one line naming the cause."""


def single_key(grid: Grid, arm: str, lr: float, seed: int, hidden: int | None) -> RunKey:
    """The run of one arm at one learning rate and seed (and width): its id and spec are the grid's own, so it counts
    as the grid's run when the grid lists it, and a rerun of the grid skips it. StudyError naming a bad value."""
    if arm not in grid.arms:
        raise StudyError(f"--only {arm}: not an arm of {grid.source} (known: {', '.join(sorted(grid.arms))})")
    if not 0 < lr <= MAX_LR:
        raise StudyError(f"--lr must be a number in (0, {MAX_LR:g}] (AdamW at a larger learning rate diverges on the "
                         f"first step), got {lr:g}")
    if seed < 0:
        raise StudyError(f"--seed must be >= 0, got {seed}")
    if hidden is not None and (hidden < 1 or hidden % (2 * grid.model["heads"])):
        raise StudyError(f"--hidden must be a positive multiple of 2 * model.heads ({2 * grid.model['heads']}), "
                         f"got {hidden}")
    return grid.arm_key(arm, lr, seed, hidden=hidden)


def run_single(grid_file: Path, output_dir: Path | None, arm: str, lr: float, seed: int, hidden: int | None = None,
               threads: int = 1) -> int:
    """Train one arm of the grid at one LR and seed (`attnres study --only ARM --lr X --seed N`), resumably like the
    grid: a finished run with a matching record is not trained again. Prints the record; the exit code."""
    try:
        grid = load_grid(grid_file)
    except ValueError as error:
        raise StudyError(str(error)) from None
    if threads < 1:
        raise StudyError(f"--threads must be >= 1, got {threads}")
    key = single_key(grid, arm, lr, seed, hidden)
    out = output_dir or Path("runs") / f"study-{grid.name}"
    records, errors = run_grid(grid, out, threads=threads, only=[key])
    if errors:
        print("error:", *errors, file=sys.stderr)
        return 1
    record = records[0]
    print(f"{key.id}: val loss {record['val_loss']:.4f} ({record.get('metric', 'eval-batches')}"
          f"{', whole split: ' + format(record['heldout_loss'], '.4f') if record.get('heldout_loss') else ''}); "
          f"record {out / 'runs' / key.id / RESULT_FILE}, model {out / 'runs' / key.id / 'train' / 'final'}")
    return 0


def run_study(grid_file: Path, output_dir: Path | None = None, report_dir: Path | None = None, *, jobs: int = 1,
              threads: int = 1, report_only: bool = False, dry_run: bool = False, note: str = "",
              command: str = "") -> int:
    """The whole study command: train the grid's missing runs (unless `report_only` / `dry_run`), then write the report
    (default folder: runs/study-<grid name>). Returns the exit code: 1 when some run failed (a rerun redoes it)."""
    from .report import header, write_report

    if jobs < 1 or threads < 1:
        raise StudyError(f"--jobs and --threads must be >= 1, got {jobs} and {threads}")
    try:
        grid = load_grid(grid_file)
    except ValueError as error:
        raise StudyError(str(error)) from None
    out = output_dir or Path("runs") / f"study-{grid.name}"
    started = time.time()
    if dry_run or report_only:
        keys, done = grid_runs(grid, out)
        records, errors = [done[k.id] for k in keys if k.id in done], []
        if dry_run:
            for key in keys:
                print(f"{'done ' if key.id in done else 'to do'}  {key.id}  ({out / 'runs' / key.id / RESULT_FILE})")
            for arm in grid.waiting(best_lrs(grid, done)):
                print(f"later  {arm} at its best learning rate (after its sweep)")
            return 0
    else:
        records, errors = run_grid(grid, out, jobs=jobs, threads=threads)
    text = header(command, started, records, jobs=jobs, threads=threads, report_only=report_only, note=note)
    path = write_report(grid, records, report_dir or out, text, runs_dir=out / "runs", expected=grid_runs(grid, out)[0])
    print(f"wrote {path} ({len(records)} of {len(grid_runs(grid, out)[0])} runs known now finished)")
    return exit_code(errors)


def exit_code(errors: list[str]) -> int:
    """1 (each failed run named on stderr: a rerun redoes them) or 0."""
    if errors:
        print(f"error: {len(errors)} run(s) failed (rerun the same command to redo them):", *errors, sep="\n  ",
              file=sys.stderr)
        return 1
    return 0
