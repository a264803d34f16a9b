"""The main job's pieces (scripts/main_job.py): a model config deep enough for depth to matter on a CPU, a matched
pair of scripts/train.py runs (standard and Block AttnRes: same config, data order, seed and tokens) in parallel
with live progress, and the summary (table, summary.md, summary.json).

CPU layout, chosen by measurement (issue 9, 2 CPU cores, fp32, 12 layers x hidden 128, 16 x 128 tokens):
transformers' PyTorch KDA fallback made one forward+backward 8.3 s in Kimi Linear's KDA/MLA hybrid against 0.83 s
with MLA in every layer, and the MoE routing costs another ~25% at this size; so every layer is MLA with a dense MLP.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from .metrics import read_jsonl

MODES = ("standard", "block")


def pair_config(vocab_size: int, layers: int, hidden_size: int, block_size: int, eos_token_id: int) -> dict:
    """The model config JSON shared by both runs (train.py's --attn-res picks the residual). MLA everywhere, dense
    MLP (see the module docstring); the `tiny` preset's head shapes, scaled with the hidden size."""
    from ..tiny import tiny_config

    config = tiny_config(
        "block", block_size, layers, vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=2 * hidden_size,
        layer_types=["full_attention"] * layers, first_k_dense_replace=layers,
        pad_token_id=eos_token_id, bos_token_id=eos_token_id, eos_token_id=eos_token_id,
    )
    return config.to_dict()


def train_argv(data: Path, config_file: Path, mode: str, run_dir: Path, options: dict) -> list[str]:
    """scripts/train.py's command line for one run of the pair; `options` are the shared training flags."""
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
    """Run scripts/train.py once per mode (both at once when `parallel`, one thread each) with a progress bar per run
    (read from its metrics.jsonl); each run's output goes to <run_dir>/train.log. Returns {mode: wall seconds}.
    Raises RuntimeError naming the run and its log when one fails."""
    from tqdm.auto import tqdm

    script = Path(__file__).resolve().parents[2] / "scripts" / "train.py"
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    walls, pending = {}, list(runs)
    while pending:
        batch = pending if parallel else pending[:1]
        pending = [mode for mode in pending if mode not in batch]
        bars, procs, started = {}, {}, {}
        for position, mode in enumerate(batch):
            run_dirs[mode].mkdir(parents=True, exist_ok=True)
            log = open(run_dirs[mode] / "train.log", "w")
            procs[mode] = (subprocess.Popen([sys.executable, str(script), *runs[mode]], stdout=log,
                                            stderr=subprocess.STDOUT, env=env), log)
            started[mode] = time.time()
            bars[mode] = tqdm(total=steps, desc=f"train {mode:8s}", position=position, unit="step", dynamic_ncols=True)
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
                    for other_mode, (other, other_log) in procs.items():
                        other.terminate()
                        other.wait()
                        other_log.close()
                        bars[other_mode].close()
                    tail = (run_dirs[mode] / "train.log").read_text()[-2000:]
                    raise RuntimeError(f"training {mode} failed (exit code {proc.returncode}); "
                                       f"log: {run_dirs[mode] / 'train.log'}\n{tail}")
    return walls


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
        f"{summary['parameters']['block']['total']:,} (block: +{summary['parameters']['block']['attn_res']:,} AttnRes). "
        f"Data: {s['data']} (BPE {s['vocab_size']}, {s['seq_len']}-token sequences); {s['steps']} steps x "
        f"{s['micro_batch_size']} sequences = {summary['tokens_per_model']:,} tokens per model, same order and seed.", "",
        "| | standard | block AttnRes | block - standard |", "|---|---|---|---|",
        *[f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} |" for r in rows], "",
        "Lower is better for loss and bits per byte. One seed at this scale: a difference is a hint, not a result "
        "(the reproduction study, RESULTS.md, repeats it over seeds).", "",
        "Plots: `loss_curves.png` (train and validation loss), `figure5.png` (per-layer output RMS, per-layer gradient "
        "norm, Block AttnRes depth weights: sub-layer x source). Evaluation reports: `eval/heldout/report.md`"
        + (", `eval/tasks/report.md`." if summary.get("tasks") else "."), "",
    ]
    return "\n".join(lines)
