"""PNG plots of depth diagnostics: one run, or standard vs AttnRes runs side by side (the paper's Figure 5).

    python -m attnres.training.plots runs/small-standard runs/small-block runs/small-full --out figure5.png
"""
from __future__ import annotations

import argparse
from pathlib import Path

from .diagnostics import DIAGNOSTICS_FILE
from .metrics import read_jsonl


def last_record(run_dir: Path) -> dict:
    path = Path(run_dir) / DIAGNOSTICS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no diagnostics (train with --diagnostics-every N > 0)")
    records = read_jsonl(path)
    if not records:
        raise ValueError(f"{path} is empty")
    return records[-1]


def plot_runs(run_dirs: list[Path], out: Path) -> Path:
    """Output RMS and gradient norm per layer for every run (one line each), then one depth-weight heatmap per
    AttnRes run (rows: mix points, columns: sources). Written atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker
    import numpy as np

    records = [(Path(d).name, last_record(d)) for d in run_dirs]
    heatmaps = [(name, r) for name, r in records if r["mode"] != "standard" and r["depth_weights"]]
    fig, axes = plt.subplots(1, 2 + len(heatmaps), figsize=(5 * (2 + len(heatmaps)), 4), squeeze=False)
    rms_ax, grad_ax = axes[0][0], axes[0][1]
    for name, r in records:
        label = f"{name} ({r['mode']}, step {r['step']})"
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
        ax.set(title=f"Depth weights: {name} ({r['mode']})", xlabel=f"source (0: embedding, k: {later})",
               ylabel="sub-layer (mix point)")
        ax.set_yticks(range(len(weights)), sublayer_names(len(weights)), fontsize=6 if len(weights) > 12 else 8)
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        fig.colorbar(image, ax=ax)
    fig.tight_layout()
    return _save(fig, out)


def sublayer_names(points: int) -> list[str]:
    """Mix points in order: layer 1 attention, layer 1 MLP, ..., the output mix (before the final norm); 1-based as
    the per-layer panels."""
    return [f"L{i // 2 + 1} {'attn' if i % 2 == 0 else 'mlp'}" for i in range(points - 1)] + ["output"]


def plot_loss_curves(run_dirs: list[Path], out: Path, window: int = 20) -> Path:
    """Training loss (moving average over `window` logged records, raw in light) and validation loss of each run, from
    its metrics.jsonl: the same axes, so a matched pair reads at a glance. Written atomically."""
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
    val_ax.set(title="Validation loss", xlabel="step", ylabel="loss (nats/token)")
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


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dirs", nargs="+", type=Path, help="run folders of scripts/train.py (with diagnostics.jsonl)")
    parser.add_argument("--out", type=Path, default=Path("depth_diagnostics.png"), help="PNG to write")
    args = parser.parse_args(argv)
    print(f"wrote {plot_runs(args.run_dirs, args.out)}")


if __name__ == "__main__":
    main()
