"""What a training run records, and the plots made from it:

- metrics.jsonl (one record per step, the source of truth for tests and plots) and TensorBoard scalars.
- Depth diagnostics (the paper's Figure 5 view), recorded every N steps into `diagnostics.jsonl`:
  - layer_rms:        RMS of each decoder layer's output, i.e. the last depth source it leaves (standard: the
                      residual stream; block: the block's running sum; full: the layer's MLP output). PreNorm dilution
                      shows as growth with depth in standard mode.
  - layer_grad_norm:  L2 norm of the gradient of each decoder layer's parameters (before clipping).
  - depth_weights:    per mix point (layer 0 attention, layer 0 MLP, ..., output), the depth-softmax weight of each
                      source averaged over batch and positions (the model returns them with output_attn_res_weights).
- PNG plots of them: one run, or standard vs AttnRes runs side by side (the paper's Figure 5):

      python -m hf_attnres.cli.plot_diagnostics runs/small-standard runs/small-block runs/small-full --out figure5.png

- training_info.json in a run's final/ folder (provenance): what the model saw, so an evaluation can tell whether two
  models are matched (same tokens trained, same data) without the run folder around it, and how: the run's settings
  and one record per segment (a resumed run has several: start and end step, command line, time, data fingerprint).
"""
from __future__ import annotations

import hashlib
import json
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import torch

from ..folders.atomic_io import write_json_atomic, write_text_atomic
from ..folders.json_limits import loads_limited
from .data import DATASET_DIR, META_FILE

DIAGNOSTICS_FILE = "diagnostics.jsonl"
INFO_FILE = "training_info.json"


class JsonlLog:
    """Append-only JSONL file. On resume from step k, records after k (written by the interrupted run past its last
    checkpoint) are dropped first, so the file reads like one uninterrupted run."""

    def __init__(self, path: Path, resume_step: int = 0):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            kept = [line for line in self.path.read_text().splitlines()
                    if line and loads_limited(line)["step"] <= resume_step]
            write_text_atomic(self.path, "".join(line + "\n" for line in kept))

    def write(self, record: dict) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")


def read_jsonl(path: Path) -> list[dict]:
    """Every record of a JSONL log; a line nested past json_limits' depth is a ValueError, not a RecursionError."""
    return [loads_limited(line) for line in Path(path).read_text().splitlines() if line]


class MetricsLogger:
    """metrics.jsonl plus TensorBoard (when installed and wanted); only the main process writes."""

    def __init__(self, output_dir: Path, enabled: bool, resume_step: int, tensorboard: bool):
        self.enabled = enabled
        if not enabled:
            return
        self.jsonl = JsonlLog(Path(output_dir) / "metrics.jsonl", resume_step)
        self.writer = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(str(Path(output_dir) / "tensorboard"), purge_step=resume_step + 1)

    def log(self, step: int, **scalars: float) -> None:
        if not self.enabled:
            return
        self.jsonl.write(dict(step=step, **scalars))
        if self.writer is not None:
            for name, value in scalars.items():
                self.writer.add_scalar(name, value, step)

    def close(self) -> None:
        if self.enabled and self.writer is not None:
            self.writer.close()


# --- depth diagnostics ------------------------------------------------------------------------------------------


class DepthDiagnostics:
    """Wrap each forward of a diagnosed step in `capture()`; then `record()` after the last backward.

    Statistics are averaged over the step's micro-batches and processes: the global batch, as one process would see it.
    """

    def __init__(self, module, output_dir: Path, every: int, enabled_writer: bool, resume_step: int):
        self.model = module.model  # the decoder stack of a ForCausalLM
        self.mode = module.config.attn_res_mode
        self.every = every
        self.log = JsonlLog(Path(output_dir) / DIAGNOSTICS_FILE, resume_step) if enabled_writer else None
        self.capturing = False
        self._reset()
        for index, layer in enumerate(self.model.layers):
            layer.register_forward_hook(partial(self._record_rms, index))

    def _reset(self) -> None:
        self.square_sums: dict[int, torch.Tensor] = {}
        self.weight_sums: list[torch.Tensor] = []
        self.micro_batches = 0

    def due(self, step: int) -> bool:
        """`step` is 1-based (the step about to finish)."""
        return self.every > 0 and step % self.every == 0

    @contextmanager
    def capture(self, active: bool):
        """Around one forward. Only forwards are captured: gradient checkpointing reruns layers in backward."""
        self.capturing = active
        try:
            yield
        finally:
            self.capturing = False
        if active:
            self.micro_batches += 1

    def add_weights(self, attn_res_weights) -> None:
        means = [w.detach().float().mean(dim=(0, 1)) for w in attn_res_weights]
        self.weight_sums = means if not self.weight_sums else [a + b for a, b in zip(self.weight_sums, means)]

    def _record_rms(self, index, layer, inputs, outputs) -> None:
        if self.capturing:
            square = outputs[layer.num_new_sources - 1].detach().float().pow(2).mean()
            self.square_sums[index] = self.square_sums.get(index, 0.0) + square

    def record(self, step: int, full_grad, mean) -> None:
        """Called on every process after the step's last backward, before the optimizer step.

        `full_grad(param)` -> its full gradient; `mean(tensor)` -> its mean over processes."""
        n = self.micro_batches
        rms = [float(mean(self.square_sums[i] / n)) ** 0.5 for i in sorted(self.square_sums)]
        weights = [mean(w / n).tolist() for w in self.weight_sums]
        grad_norms = []
        for layer in self.model.layers:
            squares = [g.detach().float().pow(2).sum() for g in map(full_grad, layer.parameters()) if g is not None]
            grad_norms.append(float(torch.stack(squares).sum().sqrt()) if squares else 0.0)
        self._reset()
        if self.log is not None:
            self.log.write(dict(step=step, mode=self.mode, layer_rms=rms, layer_grad_norm=grad_norms,
                                depth_weights=weights))


# --- plots ------------------------------------------------------------------------------------------------------


def last_record(run_dir: Path) -> dict:
    path = Path(run_dir) / DIAGNOSTICS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no diagnostics (train with --diagnostics-every N > 0)")
    records = read_jsonl(path)
    if not records:
        raise ValueError(f"{path} is empty")
    return records[-1]


def plot_runs(run_dirs: list[Path], out: Path, names: list[str] | None = None) -> Path:
    """Output RMS and gradient norm per layer for every run (one line each), then one depth-weight heatmap per
    AttnRes run (rows: mix points, columns: sources). `names`: the runs' labels (default: their folder names).
    Written atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker
    import numpy as np

    records = [(name, last_record(d)) for name, d in zip(names or [Path(d).name for d in run_dirs], run_dirs)]
    heatmaps = [(name, r) for name, r in records if r["mode"] != "standard" and r["depth_weights"]]
    points = max([len(r["depth_weights"]) for _, r in heatmaps] or [0])
    height = max(4.0, 1.5 + 0.22 * points)  # readable heatmap rows (8 pt labels) however deep the model
    fig, axes = plt.subplots(1, 2 + len(heatmaps), figsize=(5 * (2 + len(heatmaps)), height), squeeze=False)
    rms_ax, grad_ax = axes[0][0], axes[0][1]
    steps = {r["step"] for _, r in records}
    if len(steps) == 1:  # one step for all: said once, not in every label
        fig.suptitle(f"step {steps.pop()}", fontsize=10)
    for name, r in records:
        label = run_label(name, r, with_step=len({x["step"] for _, x in records}) > 1)
        rms_ax.plot(range(1, len(r["layer_rms"]) + 1), r["layer_rms"], marker="o", label=label)
        grad_ax.plot(range(1, len(r["layer_grad_norm"]) + 1), r["layer_grad_norm"], marker="o", label=label)
    rms_ax.set(title="Output RMS per layer", xlabel="layer", ylabel="RMS")
    grad_ax.set(title="Gradient norm per layer", xlabel="layer", ylabel="||grad||", yscale="log")
    rms_ax.legend(fontsize=7)
    for ax in (rms_ax, grad_ax):
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    for ax, (name, r) in zip(axes[0][2:], heatmaps):
        weights = r["depth_weights"]
        grid = np.full((len(weights), max(len(w) for w in weights)), np.nan)
        for i, w in enumerate(weights):
            grid[i, : len(w)] = w
        image = ax.imshow(grid, aspect="auto", cmap="viridis", vmin=0, vmax=1)
        later = "block k's sum; last: the running partial sum" if r["mode"] == "block" else "k-th sub-layer output"
        ax.set(title=f"Depth weights: {run_label(name, r, with_step=False)}",
               xlabel=f"source (0: embedding, k: {later})", ylabel="sub-layer (mix point)")
        ax.set_yticks(range(len(weights)), sublayer_names(len(weights)), fontsize=8)
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        fig.colorbar(image, ax=ax)
    fig.tight_layout()
    return _save(fig, out)


def run_label(name: str, record: dict, with_step: bool) -> str:
    """A run's label: its name, its residual mode where the name does not already say it, its step if asked."""
    extra = [record["mode"]] if record["mode"] not in name else []
    extra += [f"step {record['step']}"] if with_step else []
    return f"{name} ({', '.join(extra)})" if extra else name


def sublayer_names(points: int) -> list[str]:
    """Mix points in order: layer 1 attention, layer 1 MLP, ..., the output mix (before the final norm); 1-based as
    the per-layer panels."""
    return [f"L{i // 2 + 1} {'attn' if i % 2 == 0 else 'mlp'}" for i in range(points - 1)] + ["output"]


def plot_loss_curves(run_dirs: list[Path], out: Path, window: int = 20, val_subset: str | None = None) -> Path:
    """Training loss (moving average over `window` logged records, raw in light) and validation loss of each run, from
    its metrics.jsonl: the same axes, so a matched pair reads at a glance. `val_subset`: what the logged validation
    loss covers (training evaluates a few batches, not the whole split), shown under the panel's title so its end
    labels are not read as the held-out result. Written atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, (train_ax, val_ax) = plt.subplots(1, 2, figsize=(11, 4))
    for i, run_dir in enumerate(run_dirs):
        records = read_jsonl(Path(run_dir) / "metrics.jsonl")
        name = Path(run_dir).name
        train = [(r["step"], r["train/loss"]) for r in records if "train/loss" in r]
        val = [(r["step"], r["val/loss"]) for r in records if "val/loss" in r]
        if train:
            steps, losses = map(np.asarray, zip(*train))
            train_ax.plot(steps, losses, color=f"C{i}", alpha=0.25, lw=0.8)
            k = max(1, min(window, len(losses) // 20))
            sums = np.concatenate([[0.0], np.cumsum(losses)])
            starts = np.maximum(np.arange(1, len(losses) + 1) - k, 0)  # trailing mean, shorter at the start
            smooth = (sums[1:] - sums[starts]) / (np.arange(1, len(losses) + 1) - starts)
            train_ax.plot(steps, smooth, color=f"C{i}", label=f"{name} (trailing mean of {k})")
        if val:
            val_ax.plot(*zip(*val), color=f"C{i}", marker="o", label=name)
            val_ax.annotate(f"{val[-1][1]:.3f}", val[-1], textcoords="offset points", xytext=(4, 4 - 12 * i),
                            color=f"C{i}", fontsize=8)
    train_ax.set(title="Training loss", xlabel="step", ylabel="loss (nats/token)")
    val_ax.set(xlabel="step", ylabel="loss (nats/token)")
    val_ax.set_title("Validation loss", pad=16 if val_subset else 6)
    if val_subset:
        val_ax.text(0.5, 1.01, val_subset, transform=val_ax.transAxes, ha="center", va="bottom", fontsize=8)
    for ax in (train_ax, val_ax):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, out)


def _save(fig, out: Path) -> Path:
    import matplotlib.pyplot as plt

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.stem + ".tmp.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    tmp.replace(out)
    return out


# --- provenance -------------------------------------------------------------------------------------------------


def data_fingerprint(data_dir: Path) -> str:
    """sha256 over the prepared folder's meta.json and the `datasets` fingerprints of its splits (cheap: no data
    is read; `datasets` already hashes the content that produced each split)."""
    data_dir = Path(data_dir)
    digest = hashlib.sha256((data_dir / META_FILE).read_bytes())
    for state in sorted((data_dir / DATASET_DIR).glob("*/state.json")):
        digest.update(json.loads(state.read_text()).get("_fingerprint", "").encode())
    return digest.hexdigest()[:16]


def write_training_info(folder: Path, args, global_batch: int, step: int, run: dict) -> None:
    """`run`: the checkpoint record (`resume.run_record`: settings, data fingerprint, model digest, process count)
    with its segments, one per command that trained the model (start and end step, command line, time, data)."""
    write_json_atomic(Path(folder) / INFO_FILE, dict(
        steps=step, tokens_trained=step * global_batch * args.seq_len, global_batch=global_batch, seq_len=args.seq_len,
        data=str(args.data), data_fingerprint=run["data_fingerprint"], settings=run["settings"],
        world_size=run["world_size"], model_config_digest=run["model"], recipe=run.get("recipe"),
        segments=run["segments"],
    ))
