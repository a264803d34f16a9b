"""The study's PNGs: validation curves of the main comparison, the block-size sweep, the scaling fit."""
from __future__ import annotations

from pathlib import Path

from ..folders.atomic_io import atomic_write
from .analysis import mean_std
from .grid import Grid


def _save(fig, path: Path) -> Path:
    import matplotlib.pyplot as plt

    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=80, bbox_inches="tight"))
    plt.close(fig)
    return path


def main_plot(grid: Grid, records: dict, losses: dict, out: Path) -> Path:
    """Left: validation loss over steps, mean +- std over seeds per mode. Right: final loss per seed (paired lines)."""
    import matplotlib.pyplot as plt
    import numpy as np

    fig, (curves, seeds) = plt.subplots(1, 2, figsize=(11, 4))
    g = grid.groups["main"]
    for mode in g["modes"]:
        runs = [records[grid.key(mode, s).id] for s in g["seeds"] if grid.key(mode, s).id in records]
        if not runs:
            continue
        steps = [step for step, _ in runs[0]["val_curve"]]
        values = np.array([[loss for _, loss in r["val_curve"]] for r in runs if len(r["val_curve"]) == len(steps)])
        mean, std = values.mean(0), values.std(0, ddof=1) if len(values) > 1 else np.zeros(len(steps))
        curves.plot(steps, mean, marker="o", label=f"{mode} (n={len(values)})")
        curves.fill_between(steps, mean - std, mean + std, alpha=0.2)
    curves.set(xlabel="step", ylabel="validation loss", title="validation loss, mean +- std over seeds")
    curves.legend()
    for seed in g["seeds"]:
        xs = [i for i, m in enumerate(g["modes"]) if seed in losses[m]]
        seeds.plot(xs, [losses[g["modes"][i]][seed] for i in xs], marker="o", label=f"seed {seed}")
    seeds.set_xticks(range(len(g["modes"])), g["modes"])
    seeds.set(ylabel="final validation loss", title="per seed (same seed = same data order and init seed)")
    seeds.legend()
    return _save(fig, out / "study_main.png")


def block_size_plot(grid: Grid, records: dict, points: list, out: Path) -> Path:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 4))
    sizes = [s for s, stat in points if stat.n]
    stats = [stat for _, stat in points if stat.n]
    ax.errorbar(sizes, [s.mean for s in stats], yerr=[0 if s.n < 2 else s.std for s in stats], marker="o",
                label="block")
    seeds = grid.groups["block_size"]["seeds"]
    for mode, style in (("standard", "--"), ("full", ":")):
        ref = mean_std(records[k.id]["val_loss"] for k in (grid.key(mode, s) for s in seeds) if k.id in records)
        if ref.n:
            ax.axhline(ref.mean, linestyle=style, color="gray", label=f"{mode} (n={ref.n})")
    ax.set_xscale("log", base=2)
    ax.set(xlabel="block size S (layers per block)", ylabel="final validation loss", title="block-size sweep")
    ax.legend()
    return _save(fig, out / "study_block_size.png")


def scaling_plot(fits: dict, out: Path) -> Path:
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(5.5, 4))
    for mode, (fit, points) in fits.items():
        if not points:
            continue
        line = ax.plot([p[0] for p in points], [p[1] for p in points], "o", label=mode)[0]
        if fit is not None:
            c = np.geomspace(min(p[0] for p in points), max(p[0] for p in points), 50)
            ax.plot(c, fit.a * c**fit.b, "-", color=line.get_color(), label=f"{mode}: {fit.a:.3g} C^{fit.b:.3f}")
    ax.set_xscale("log")  # loss stays linear: over a few percent of loss a log axis shows no tick labels
    ax.set(xlabel="training compute C = 6 N D (FLOPs)", ylabel="final validation loss", title="scaling fit")
    ax.legend(fontsize=8)
    return _save(fig, out / "study_scaling.png")


def write_plots(grid: Grid, records: dict, data: dict, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    images = []
    if "main" in data:
        images.append(main_plot(grid, records, data["main"], out))
    if "block_size" in data:
        images.append(block_size_plot(grid, records, data["block_size"], out))
    if "scaling" in data:
        images.append(scaling_plot(data["scaling"], out))
    return images
