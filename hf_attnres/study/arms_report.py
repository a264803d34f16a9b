"""The report of a grid with arms: the learning-rate sweep, every arm at its own best learning rate, the screen
(each change at a reference arm's best LR: what moves Full AttnRes), the ablations and block sizes against the paper's
directions, the scaling fit with a bootstrap interval.

A fair comparison needs each arm at its own tuned setting: an LR tuned for one arm (or for none) can make any arm win.
Every delta here pairs seed s of one arm with seed s of the other, each at its own best LR (same seed = same data order
and init seed), so the seed noise both share cancels.
"""
from __future__ import annotations

import math
from pathlib import Path

from .analysis import bootstrap_multiplier, fit_power_law, mean_std
from .grid import Grid, best_lrs

# The paper's section 5.3 (Full 1.737, Block 1.746, baseline 1.766): the direction each change took there
PAPER_DIRECTIONS = {
    "static": "worse than Full (DenseFormer 1.767 vs 1.737)",
    "sigmoid": "worse than Full (content-dependent softmax selection wins)",
    "no_key_norm": "worse (the keys' RMSNorm keeps large outputs from dominating)",
}
PAPER_BLOCK_SIZES = "S = 2, 4, 8 near Block's 1.746; S = 16, 32 approach the baseline (1.766)"


def arm_losses(grid: Grid, records: dict, arm: str, lr: float, hidden=None, seeds=None) -> dict:
    """{seed: final val loss} of an arm at one LR, over `seeds` (default: every seed of the grid's groups)."""
    if seeds is None:
        seeds = {s for name in ("lr_sweep", "tuned", "scaling") for s in grid.groups.get(name, {}).get("seeds", [])}
    keys = [grid.arm_key(arm, lr, s, hidden=hidden) for s in sorted(seeds)]
    return {k.seed: records[k.id]["val_loss"] for k in keys if k.id in records}


def paired(base: dict, other: dict) -> str:
    deltas = [other[s] - base[s] for s in sorted(set(base) & set(other))]
    stat = mean_std(deltas)
    if stat.n == 0:
        return "-"
    if stat.n == 1:
        return f"{stat.mean:+.4f} (1 seed)"
    t = stat.mean / (stat.std / math.sqrt(stat.n)) if stat.std > 0 else math.nan
    return f"{stat.mean:+.4f} +- {stat.std:.4f} (n={stat.n}, t = {t:.2f})"


def table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]) + "\n"


def describe(grid: Grid, arm: str) -> str:
    a = grid.arms[arm]
    parts = [a["mode"] + (f" S={a['block_size']}" if a["mode"] == "block" else "")]
    parts += [f"ablation {a['ablation']}"] if a["ablation"] else []
    parts += [f"{k}={v}" for k, v in {**a["config"], **a["train"]}.items()]
    return ", ".join(parts)


def sweep_section(grid: Grid, records: dict, best: dict) -> str:
    g = grid.groups["lr_sweep"]
    rows = []
    for arm in g["arms"]:
        cells = []
        for lr in g["lrs"]:
            stat = mean_std(arm_losses(grid, records, arm, lr, seeds=g["seeds"]).values())
            text = "-" if stat.n == 0 else f"{stat.mean:.4f}"
            cells.append(f"**{text}**" if best.get(arm) == lr else text)
        edge = " (edge of the sweep: widen it)" if best.get(arm) in (min(g["lrs"]), max(g["lrs"])) else ""
        if arm in best and "-" in cells:
            edge += " (bracketed: both neighbours worse; the rest of the sweep not run yet)"
        rows.append([arm, describe(grid, arm), *cells, f"{best[arm]:g}{edge}" if arm in best else "(sweep unfinished)"])
    return (f"### Learning-rate sweep (final validation loss, seed(s) {g['seeds']}; best per arm in bold)\n\n"
            + table(["arm", "what it changes", *[f"lr {lr:g}" for lr in g["lrs"]], "best lr"], rows))


def tuned_section(grid: Grid, records: dict, best: dict) -> str:
    arms = [a for a in grid.groups["lr_sweep"]["arms"] if a in best]
    base = arm_losses(grid, records, "standard", best["standard"]) if "standard" in best else {}
    full = arm_losses(grid, records, "full", best["full"]) if "full" in best else {}
    rows = []
    for arm in arms:
        losses = arm_losses(grid, records, arm, best[arm])
        rows.append([arm, f"{best[arm]:g}", len(losses), mean_std(losses.values()),
                     paired(base, losses) if arm != "standard" else "",
                     paired(full, losses) if arm not in ("full", "standard") and grid.arms[arm]["mode"] == "full"
                     else ""])
    return ("### Every arm at its own best learning rate\n\n"
            "Deltas pair seed s of the arm with seed s of the reference, each at its own best LR.\n\n"
            + table(["arm", "best lr", "seeds", "val loss mean +- std", "paired delta vs standard",
                     "paired delta vs full (Full's variants)"], rows))


def depth_sharpness(runs_dir: Path | None, run_id: str) -> str:
    """How selective a run's depth softmax ended: over its last-step mix points with more than one source, the mean
    entropy relative to a uniform mix (1: uniform, 0: one source) and the mean largest weight. "-" without
    diagnostics."""
    from ..training.logs import read_jsonl

    path = runs_dir / run_id / "train" / "diagnostics.jsonl" if runs_dir else None
    records = read_jsonl(path) if path and path.is_file() else []
    points = [w for w in (records[-1].get("depth_weights") or [] if records else []) if len(w) > 1]
    if not points:
        return "-"
    entropy = sum(-sum(p * math.log(p) for p in w if p > 0) / math.log(len(w)) for w in points) / len(points)
    return f"{entropy:.2f} / {sum(max(w) for w in points) / len(points):.2f}"


def screen_section(grid: Grid, records: dict, best: dict, runs_dir: Path | None = None) -> str:
    """Each screened arm at the reference arm's best LR, paired with the reference at that LR (same seeds)."""
    g = grid.groups.get("screen")
    if not g:
        return ""
    ref = g["lr_of"]
    if ref not in best:
        return f"### Screen at {ref}'s best learning rate\n\nWaiting for {ref}'s sweep.\n"
    lr = best[ref]
    base = arm_losses(grid, records, ref, lr, seeds=g["seeds"])
    standard = arm_losses(grid, records, "standard", best["standard"], seeds=g["seeds"]) if "standard" in best else {}
    rows = []
    for arm in g["arms"]:
        losses = arm_losses(grid, records, arm, lr, seeds=g["seeds"])
        stat = mean_std(losses.values())
        rows.append([arm, describe(grid, arm), "-" if stat.n == 0 else f"{stat.mean:.4f}", paired(base, losses),
                     paired(standard, losses), depth_sharpness(runs_dir, grid.arm_key(arm, lr, g["seeds"][0]).id),
                     PAPER_DIRECTIONS.get(grid.arms[arm]["ablation"], "")])
    rows.insert(0, [f"({ref})", describe(grid, ref), "-" if not base else f"{mean_std(base.values()).mean:.4f}", "",
                    paired(standard, base), depth_sharpness(runs_dir, grid.arm_key(ref, lr, g["seeds"][0]).id), ""])
    spread = mean_std(arm_losses(grid, records, ref, lr).values())
    noise = (f"{ref}'s own seed-to-seed spread at this LR is {spread.std:.4f} (std over {spread.n} seeds, unpaired)"
             if spread.n >= 2 else f"{ref}'s seed-to-seed spread is not measured yet")
    return (f"### Screen: each change at {ref}'s best learning rate ({lr:g}), seed(s) {g['seeds']}\n\n"
            f"One LR for every screened arm, {ref}'s own: a change that moves {ref} here is a candidate, and gets a "
            f"sweep of its own before it counts as tuned (an arm that needs another LR can look worse here). {noise}; "
            "a delta inside that is no finding.\n\n"
            + table(["arm", "what it changes", "val loss", f"paired delta vs {ref} (same LR)",
                     "paired delta vs standard (its best LR)",
                     "depth weights at the end: entropy / uniform, mean top weight", "paper"], rows))


def ablation_section(grid: Grid, records: dict, best: dict) -> str:
    rows = []
    for arm in grid.groups["lr_sweep"]["arms"]:
        a = grid.arms[arm]
        if not a["ablation"] or arm not in best or a["mode"] not in best:
            continue
        base = arm_losses(grid, records, a["mode"], best[a["mode"]])
        rows.append([arm, paired(base, arm_losses(grid, records, arm, best[arm])), PAPER_DIRECTIONS[a["ablation"]]])
    sizes = []
    base = arm_losses(grid, records, "standard", best["standard"]) if "standard" in best else {}
    for arm in grid.groups["lr_sweep"]["arms"]:
        a = grid.arms[arm]
        if a["mode"] == "block" and not (a["ablation"] or a["config"] or a["train"]) and arm in best:
            losses = arm_losses(grid, records, arm, best[arm])
            sizes.append([a["block_size"], -(-grid.model["layers"] // a["block_size"]), f"{best[arm]:g}",
                          mean_std(losses.values()), paired(base, losses)])
    text = ""
    if rows:
        text += ("### The paper's ablations at each arm's best LR (paired delta vs the unablated mode)\n\n"
                 + table(["ablation", "paired delta (positive: the ablation hurts)", "paper"], rows) + "\n")
    if sizes:
        text += (f"### Block-size sweep at each size's best LR (paper: {PAPER_BLOCK_SIZES})\n\n"
                 + table(["S", "blocks", "best lr", "val loss", "paired delta vs standard"], sorted(sizes)))
    return text


def scaling_points(grid: Grid, records: dict, best: dict) -> dict:
    """{arm: {hidden: ([losses over seeds], flops, params)}} of the scaling group."""
    g = grid.groups["scaling"]
    points = {}
    for arm in g["arms"]:
        for hidden in g["hidden"]:
            lr = grid.scaling_lr(arm, hidden, best)
            if lr is None:
                continue
            runs = [records[k.id] for k in (grid.arm_key(arm, lr, s, hidden=hidden) for s in g["seeds"])
                    if k.id in records]
            if runs:
                points.setdefault(arm, {})[hidden] = ([r["val_loss"] for r in runs], runs[0]["flops"],
                                                      runs[0]["params"])
    return points


def scaling_section(grid: Grid, records: dict, best: dict) -> tuple[str, dict]:
    points = scaling_points(grid, records, best)
    rows, fits, lr = [], {}, grid.groups["scaling"]["lr"]
    for arm, sizes in points.items():
        fit = fit_power_law([p[1] for p in sizes.values()], [sum(p[0]) / len(p[0]) for p in sizes.values()]) \
            if len(sizes) >= 2 else None
        fits[arm] = (fit, [(p[1], sum(p[0]) / len(p[0]), p[2]) for p in sizes.values()])
        lrs = {h: f", lr {grid.scaling_lr(arm, h, best):g}" if lr == "swept" else "" for h in sizes}
        cells = ", ".join(f"h{h} ({p[2] / 1e6:.2f}M{lrs[h]}): {mean_std(p[0])}" for h, p in sizes.items())
        rows.append([arm, cells, f"L = {fit.a:.4g} * C^{fit.b:.4f}" if fit else "(needs two sizes)"])
    lr_rule = {"tuned": "each arm at its best LR of the sweep at the main size (LR transfer across width is assumed, "
                        "the same for every arm)",
               "swept": "each arm at its own best LR at each size (swept at the first seed; a size whose sweep has "
                        "not found it yet is left out)"}.get(lr, f"lr {lr}")
    text = (f"### Scaling fit (L = a * C^b, C = 6 N D; {lr_rule})\n\n"
            + table(["arm", "size: val loss over seeds", "fit"], rows))
    base = points.get("standard", {})
    for arm, sizes in points.items():
        common = sorted(set(base) & set(sizes))
        if arm == "standard" or len(common) < 2:
            continue
        compute_of = {h: sizes[h][1] for h in common}
        middle = math.exp(sum(math.log(c) for c in compute_of.values()) / len(compute_of))
        m, low, high = bootstrap_multiplier({h: base[h][0] for h in common}, {h: sizes[h][0] for h in common},
                                            compute_of, middle)
        text += (f"\nCompute multiplier, {arm} vs standard at C = {middle:.2e} (geometric middle): "
                 f"{multiplier_text(m, low, high, fits['standard'][0])} (seeds resampled per size, 2000 draws; the "
                 "paper: 1.25x for Block).\n")
    return text, fits


def multiplier_text(point: float, low: float, high: float, baseline) -> str:
    """The multiplier and its interval, or why none can be read: when the baseline's loss does not fall with compute
    (its exponent b >= 0 in the fit or in some resamples), no amount of compute makes it match and the point estimate
    (however many digits) means nothing."""
    if math.isnan(point) or not math.isfinite(high):
        detail = ("its loss rises with compute" if math.isnan(point) else
                  f"point estimate {point:.3g}x, 90% bootstrap interval [{low:.3g}, {high:.3g}]")
        return (f"**not measurable here**: the baseline's fit L ~ C^{baseline.b:.4f} does not fall measurably with "
                f"compute, so no compute makes it match ({detail})")
    return f"**{point:.3f}x**, 90% bootstrap interval [{low:.3f}, {high:.3f}]"


def lr_panels(grid: Grid) -> list[tuple[str, list[str]]]:
    """The LR figure's panels: the residuals and block sizes, then Full's variants beside Full (a panel of twenty
    curves cannot be read). Full is in both: it is what its variants are read against."""
    arms = grid.groups["lr_sweep"]["arms"]
    variants = [a for a in arms if grid.arms[a]["mode"] == "full" and a != "full"]
    rest = [a for a in arms if a not in variants]
    if not variants:
        return [("every arm", rest)]
    return [("residuals and block sizes", rest), ("Full AttnRes's variants", ["full", *variants] if "full" in arms
                                                  else variants)]


def lr_plot(grid: Grid, records: dict, best: dict, out: Path) -> Path:
    import matplotlib.pyplot as plt

    from .plots import _save

    g = grid.groups["lr_sweep"]
    panels = lr_panels(grid)
    fig, axes = plt.subplots(1, len(panels), figsize=(7 * len(panels), 4.5), sharey=True, squeeze=False)
    # the default cycle has 10 colours: past that, arms would share one. tab20's dark shades first (the default's
    # colours), then its light ones; an arm keeps its colour in every panel
    tab20 = plt.get_cmap("tab20").colors
    palette = tab20[0::2] + tab20[1::2]
    colors = {arm: palette[i % len(palette)] for i, arm in enumerate(g["arms"])}
    for ax, (title, arms) in zip(axes[0], panels):
        for arm in arms:
            points = [(lr, mean_std(arm_losses(grid, records, arm, lr, seeds=g["seeds"]).values())) for lr in g["lrs"]]
            points = [(lr, s.mean) for lr, s in points if s.n]
            if not points:
                continue
            style = "-" if arm in ("standard", "block", "full") else ":"
            ax.plot(*zip(*points), style, marker="o", label=arm, linewidth=2 if style == "-" else 1, color=colors[arm])
            if arm in best:
                ax.plot([best[arm]], [dict(points)[best[arm]]], "*", color=colors[arm], markersize=12)
        ax.set_xscale("log")
        ax.set_xticks(g["lrs"], [f"{lr:g}" for lr in g["lrs"]])  # the swept LRs, not log-axis minor labels that overlap
        ax.minorticks_off()
        ax.set(xlabel="peak learning rate", title=f"{title} (star: the arm's best LR)")
        ax.legend(fontsize=6, ncol=2)
    axes[0][0].set_ylabel("final validation loss")
    return _save(fig, out / "study_lr_sweep.png")


def scaling_lr_plot(grid: Grid, records: dict, best: dict, out: Path) -> Path:
    """A swept scaling group's LR curves: one panel per arm, one curve per size (first seed), a star at each size's
    best, so a reader sees whether the best LR moves with width."""
    import matplotlib.pyplot as plt

    from .plots import _save

    g = grid.groups["scaling"]
    fig, axes = plt.subplots(1, len(g["arms"]), figsize=(5 * len(g["arms"]), 4), sharey=True, squeeze=False)
    for ax, arm in zip(axes[0], g["arms"]):
        for hidden in g["hidden"]:
            ids = {lr: grid.arm_key(arm, lr, g["seeds"][0], hidden=hidden).id for lr in g["lrs"]}
            points = [(lr, records[i]["val_loss"]) for lr, i in ids.items() if i in records]
            if not points:
                continue
            line, = ax.plot(*zip(*points), marker="o", label=f"hidden {hidden}")
            if (arm, hidden) in best:
                ax.plot([best[(arm, hidden)]], [dict(points)[best[(arm, hidden)]]], "*", markersize=12,
                        color=line.get_color())
        ax.set_xscale("log")
        ax.set_xticks(g["lrs"], [f"{lr:g}" for lr in g["lrs"]])
        ax.minorticks_off()
        ax.set(xlabel="peak learning rate", title=f"{arm} (star: each size's best LR)")
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel(f"final validation loss (seed {g['seeds'][0]})")
    return _save(fig, out / "study_scaling_lr.png")


def heatmap_plot(grid: Grid, best: dict, runs_dir: Path, out: Path) -> Path | None:
    """Figure 5's view (output RMS, gradient norm per layer, depth-weight heatmaps) of standard, block and full at their
    best LR, seed 0, from the diagnostics of each run's last step."""
    from ..training.logs import plot_runs

    seed = grid.groups["lr_sweep"]["seeds"][0]
    runs = {f"{a} lr {best[a]:g}": runs_dir / grid.arm_key(a, best[a], seed).id / "train"
            for a in ("standard", "block", "full") if a in best}
    runs = {name: d for name, d in runs.items() if (d / "diagnostics.jsonl").is_file()}
    return plot_runs(list(runs.values()), out / "study_figure5.png", names=list(runs)) if runs else None


def arms_report(grid: Grid, records: dict, runs_dir: Path, out: Path) -> tuple[list[str], list[Path]]:
    """(markdown sections, PNGs) of a grid's arm groups."""
    import matplotlib

    matplotlib.use("Agg")
    from .plots import scaling_plot

    best = best_lrs(grid, records)
    parts, images = [sweep_section(grid, records, best)], [lr_plot(grid, records, best, out)]
    parts += [tuned_section(grid, records, best), screen_section(grid, records, best, runs_dir),
              ablation_section(grid, records, best)]
    if "arms" in grid.groups.get("scaling", {}):
        text, fits = scaling_section(grid, records, best)
        parts.append(text)
        images.append(scaling_plot(fits, out))
        if grid.groups["scaling"]["lr"] == "swept":
            images.append(scaling_lr_plot(grid, records, best, out))
    figure = heatmap_plot(grid, best, runs_dir, out)
    images += [figure] if figure else []
    return [p for p in parts if p], images
