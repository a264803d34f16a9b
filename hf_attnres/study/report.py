"""RESULTS.md and PNG plots from the study's run records (what `runner` wrote), group by group."""
from __future__ import annotations

import csv
import io
import json
import math
import os
import platform
import time
from pathlib import Path

from ..folders.atomic_io import write_text_atomic
from .analysis import compute_multiplier, fit_power_law, mean_std, paired_deltas, paired_t
from .grid import Grid, RunKey, best_lrs


def by_seed(grid: Grid, records: dict, keys: list[RunKey]) -> dict:
    """{seed: final val loss} of the finished runs among `keys`."""
    return {k.seed: records[k.id]["val_loss"] for k in keys if k.id in records}


def fmt(value: float, digits: int = 4) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:+.{digits}f}"


def delta_cells(base: dict, other: dict) -> list[str]:
    deltas = paired_deltas(base, other)
    per_seed = ", ".join(f"{fmt(d)} (s{s})" for s, d in deltas.items()) or "-"
    stat = mean_std(deltas.values())
    if stat.n == 0:
        return ["-", per_seed]
    t = paired_t(deltas.values())
    t_text = "" if math.isnan(t) else f" (t = {t:.2f})"
    return [fmt(stat.mean) + ("" if stat.n == 1 else f" +- {stat.std:.4f}{t_text}"), per_seed]


def table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]) + "\n"


def main_section(grid: Grid, records: dict) -> tuple[str, dict]:
    g = grid.groups["main"]
    losses = {m: by_seed(grid, records, [grid.key(m, s) for s in g["seeds"]]) for m in g["modes"]}
    base = losses.get("standard", {})
    rows = []
    for mode in g["modes"]:
        label = f"block (S={grid.model['block_size']})" if mode == "block" else mode
        deltas = delta_cells(base, losses[mode]) if mode != "standard" and base else ["", ""]
        rows.append([label, f"{len(losses[mode])}/{len(g['seeds'])}", mean_std(losses[mode].values()), *deltas])
    text = "### Main comparison (final validation loss)\n\n" + table(
        ["mode", "seeds done", "val loss mean +- std", "paired delta vs standard, mean +- std (paired t)",
         "per-seed deltas"], rows)
    return text, losses


def ablation_section(grid: Grid, records: dict) -> str:
    g = grid.groups["ablations"]
    base = by_seed(grid, records, [grid.key(g["base"], s) for s in g["seeds"]])
    rows = [[f"{g['base']} (reference)", mean_std(base.values()), "", ""]]
    for name in g["ablations"]:
        losses = by_seed(grid, records, [grid.key(g["base"], s, ablation=name) for s in g["seeds"]])
        rows.append([name, mean_std(losses.values()), *delta_cells(base, losses)])
    return f"### Ablations (on {g['base']} AttnRes)\n\n" + table(
        ["variant", "val loss", f"paired delta vs {g['base']}", "per-seed deltas"], rows)


def block_size_section(grid: Grid, records: dict) -> tuple[str, list]:
    g = grid.groups["block_size"]
    base = by_seed(grid, records, [grid.key("standard", s) for s in g["seeds"]])
    rows, points = [], []
    for size in g["block_sizes"]:
        losses = by_seed(grid, records, [grid.key("block", s, block_size=size) for s in g["seeds"]])
        blocks = -(-grid.model["layers"] // size)
        rows.append([size, blocks, mean_std(losses.values()), *(delta_cells(base, losses) if base else ["-", "-"])])
        points.append((size, mean_std(losses.values())))
    return "### Block-size sweep\n\n" + table(
        ["block size S", "blocks N", "val loss", "paired delta vs standard", "per-seed deltas"], rows), points


def scaling_fits(grid: Grid, records: dict) -> dict:
    """{mode: (PowerLaw or None, [(compute, mean loss), ...])} over the scaling group's sizes."""
    g = grid.groups["scaling"]
    fits = {}
    for mode in g["modes"]:
        points = []
        for hidden in g["hidden"]:
            runs = [records[k.id] for k in (grid.key(mode, s, hidden=hidden) for s in g["seeds"]) if k.id in records]
            if runs:
                points.append((runs[0]["flops"], mean_std(r["val_loss"] for r in runs).mean, runs[0]["params"]))
        fit = (fit_power_law([p[0] for p in points], [p[1] for p in points])
               if len({p[0] for p in points}) >= 2 else None)
        fits[mode] = (fit, points)
    return fits


def scaling_section(grid: Grid, records: dict) -> tuple[str, dict]:
    fits = scaling_fits(grid, records)
    rows = []
    for mode, (fit, points) in fits.items():
        sizes = ", ".join(f"{p[2] / 1e6:.2f}M: {p[1]:.4f} @ {p[0]:.2e}" for p in points)
        law = f"L = {fit.a:.4g} * C^{fit.b:.4f}" if fit else "(needs two sizes)"
        rows.append([mode, sizes, law])
    text = "### Scaling fit (L = a * C^b, C = 6 N D training FLOPs)\n\n" + table(
        ["mode", "params: val loss @ C", "fit"], rows)
    base = fits.get("standard", (None, []))[0]
    if base is not None:
        computes = sorted({p[0] for _, pts in fits.values() for p in pts})
        middle = math.exp(sum(map(math.log, computes)) / len(computes))
        for mode, (fit, _) in fits.items():
            if mode != "standard" and fit is not None:
                m = compute_multiplier(base, fit, middle)
                ends = ", ".join(f"{compute_multiplier(base, fit, c):.3f}x at C = {c:.2e}"
                                 for c in (computes[0], computes[-1]))
                text += (f"\nCompute multiplier, {mode} vs standard at C = {middle:.2e} "
                         "(geometric middle of the grid): "
                         f"**{'undefined (baseline fit does not decrease)' if math.isnan(m) else f'{m:.3f}x'}** "
                         f"(the baseline needs this much compute to reach {mode}'s loss; the paper: 1.25x for Block); "
                         f"at the ends of the grid: {ends}.\n")
    return text, fits


def runs_csv(records: list[dict]) -> str:
    fields = ["id", "arm", "lr", "mode", "block_size", "layers", "hidden", "seed", "ablation", "val_loss", "train_loss",
              "params", "flop_params", "tokens", "flops", "wall_s", "finished", "metric", "val_sequences",
              "heldout_loss", "heldout_sequences"]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=fields, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for record in sorted(records, key=lambda r: r["id"]):
        writer.writerow(record)
    return buffer.getvalue()


def metric_text(grid: Grid, records: list[dict]) -> str:
    """What every 'val loss' of the report is (grid's train.metric), and how many sequences it covers."""
    t = grid.train
    split = next((r["heldout_sequences"] for r in records if r.get("heldout_sequences")), None)
    meta = Path(grid.data["dir"]) / "meta.json"
    if split is None and meta.is_file():  # the prepared data, where the report is written beside it
        split = json.loads(meta.read_text())["num_sequences"]["validation"]
    of_split = f" of the split's {split}" if split else ""
    if t["metric"] == "whole-split":
        return (f"Metric: every 'val loss' is the final model's mean loss per token on the whole validation split"
                f"{f' ({split} sequences)' if split else ''} (train's final evaluation); the curves' points during "
                f"training cover the first {t['eval_batches']} global batches only.\n")
    batch = t["micro_batch_size"] * t["grad_accum"]
    return (f"Metric: every 'val loss' is the final validation loss on the **first {t['eval_batches'] * batch}"
            f"{of_split} validation sequences** (train's eval: {t['eval_batches']} global batches of {batch}; "
            f"train.metric \"eval-batches\", as the grid's records were made), not the whole split. "
            f"{sum(r.get('heldout_loss') is not None for r in records)} of {len(records)} records also hold the "
            f"whole-split loss (heldout_loss in runs.csv).\n")


def write_report(grid: Grid, records: list[dict], report_dir: Path, header: str = "", runs_dir: Path | None = None,
                 expected: list[RunKey] | None = None) -> Path:
    """RESULTS.md, runs.csv and the PNGs in `report_dir` (atomically); returns the RESULTS.md path. `runs_dir`: the
    run folders (for the depth diagnostics); `expected`: every run known now (default `grid.runs()`)."""
    report_dir = Path(report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    by_id = {r["id"]: r for r in records}
    expected = expected if expected is not None else grid.runs()
    parts = [f"## Reproduction study: grid `{grid.name}`\n\n{header}",
             f"Runs finished: {sum(k.id in by_id for k in expected)} of {len(expected)} known now"
             + (f" (the runs at the best LR of {', '.join(grid.waiting(best_lrs(grid, by_id)))} are known once their "
                "sweep has finished)" if grid.waiting(best_lrs(grid, by_id)) else "") + ". "
             f"Model: {grid.model}. Training: { {k: v for k, v in grid.train.items() if v not in ([], None)} }.\n",
             metric_text(grid, records)]
    plots = {}
    if "main" in grid.groups:
        text, plots["main"] = main_section(grid, by_id)
        parts.append(text)
    if "ablations" in grid.groups:
        parts.append(ablation_section(grid, by_id))
    if "block_size" in grid.groups:
        text, plots["block_size"] = block_size_section(grid, by_id)
        parts.append(text)
    if "scaling" in grid.groups and "modes" in grid.groups["scaling"]:
        text, plots["scaling"] = scaling_section(grid, by_id)
        parts.append(text)
    from .plots import write_plots

    images = write_plots(grid, by_id, plots, report_dir)
    if "lr_sweep" in grid.groups:
        from .arms_report import arms_report

        texts, more = arms_report(grid, by_id, runs_dir or report_dir / "runs", report_dir)
        parts += texts
        images += more
    parts.append("Plots: " + ", ".join(f"[{p.name}]({p.name})" for p in images)
                 + "; every run: [runs.csv](runs.csv).\n")
    write_text_atomic(report_dir / "runs.csv", runs_csv(records))
    path = report_dir / "RESULTS.md"
    write_text_atomic(path, "\n".join(parts))
    return path


def hardware() -> str:
    import torch

    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"CPU only, {os.cpu_count()} cores"
    return (f"{platform.machine()} {platform.system()}, {device}, torch {torch.__version__}, "
            f"Python {platform.python_version()}")


def header(command: str, started: float, records: list[dict], *, jobs: int, threads: int, report_only: bool,
           note: str = "") -> str:
    """The report's header: the command, when and where it ran, how the runs were scheduled, the machine's load."""
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    wall = sum(r.get("wall_s", 0) for r in records)
    finished = [r["finished"] for r in records if "finished" in r]
    lines = [
        f"- Command: `{command}`",
        f"- Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(started))}"
        + (f" (runs finished between {min(finished)} and {max(finished)})" if finished else "")
        + f"; hardware: {hardware()}",
        ("- " if report_only else f"- Runs: {jobs} at a time, OMP_NUM_THREADS={threads} each; ")
        + f"summed run wall time {wall / 60:.1f} min; load average (1/5/15 min) when the report was written: {load}",
    ]
    if note:
        lines.append(f"- Note: {note}")
    return "\n".join(lines) + "\n\n"
