"""The continued-training study's report: summary.md, summary.json and continued.png in the report folder.

Sections: the zero lines (the pretrained model, and each upcycled mode at step 0), each arm's LR sweep, the arms at
their best LRs (held-out loss and bits per byte after training, paired per seed against the standard arm), the
lm-eval subset before and after (hf_attnres.evaluation.comparison: a paired test per model against the pretrained one),
and the depth diagnostics of the AttnRes arms (the paper's Figure 5 view).
"""
from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

from ...folders.atomic_io import write_json_atomic, write_text_atomic
from ...folders.model_folder import save as save_model_folder
from ..analysis import mean_std, paired_deltas
from ..grid import arm_lrs, best_lrs
from ..report import delta_cells, hardware, table
from ..runner import grid_runs
from .config import ContinuedGrid

SUMMARY = "summary.md"
LM_EVAL_REPORT = Path("lm_eval") / "report" / "report.json"
PLOT = "continued.png"
HEATMAP = "depth_heatmap.png"


def f4(value) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.4f}"


def arm_label(cg: ContinuedGrid, arm: str) -> str:
    a = cg.grid.arms[arm]
    size = cg.grid.arm_key(arm, 1.0, 0).block_size
    kind = {"standard": "original, standard residual", "block": f"upcycled Block AttnRes S={size}",
            "full": "upcycled Full AttnRes", "gated": f"upcycled gated read S={size}"}[a["mode"]]
    return f"{arm} ({kind}{', backbone frozen' if arm in cg.continued['frozen_arms'] else ''})"


def zero_section(cg: ContinuedGrid, zero: dict) -> str:
    base = zero.get("standard", {})
    rows = []
    for name, z in zero.items():
        check = z.get("upcycle_check")
        rows.append([name, f4(z["loss"]), f4(z["bpb"]), f"{z['loss'] - base['loss']:+.2e}" if base else "-",
                     f"{check['max_abs_diff']:.2e} / {check['tolerance']:.2e}, top-1 {check['top1_agreement']:.3f}"
                     if check else "(the pretrained model)", z["sequences"], z["tokens"]])
    return ("### Zero line: held-out split before training (whole split)\n\n" + table(
        ["model at step 0", "held-out loss", "bpb", "loss - pretrained", "upcycle check: max abs logit diff / "
         "tolerance", "sequences", "tokens"], rows))


def sweep_section(cg: ContinuedGrid, records: dict, best: dict) -> str:
    g = cg.grid.groups.get("lr_sweep")
    if not g:
        return ""
    parts = ["### LR sweep (seed " + ", ".join(map(str, g["seeds"])) + "; held-out loss after training)\n"]
    for arm in g["arms"]:
        lrs = arm_lrs(g, arm)
        rows = []
        for lr in lrs:
            runs = [records.get(cg.grid.arm_key(arm, lr, s).id) for s in g["seeds"]]
            done = [r for r in runs if r]
            rows.append([f"{lr:g}" + (" **best**" if best.get(arm) == lr else ""),
                         f4(mean_std([r["heldout_loss"] for r in done]).mean) if done else "running/waiting",
                         f4(mean_std([r["heldout_bpb"] for r in done]).mean) if done else "-",
                         f4(done[-1]["train_loss"]) if done else "-",
                         f"{done[-1]['tokens_per_s']:.0f}" if done else "-"])
        edge = len(lrs) > 1 and best.get(arm) in (lrs[0], lrs[-1])  # one LR: fixed from an earlier sweep
        note = " (best at an edge of the sweep: extend it)" if edge else " (LR fixed)" if len(lrs) == 1 else ""
        parts.append(f"\n{arm_label(cg, arm)}{note}\n\n" + table(
            ["LR", "held-out loss", "bpb", "last train loss", "train tokens/s"], rows))
    return "\n".join(parts)


def tuned(cg: ContinuedGrid, records: dict, best: dict) -> dict:
    """{arm: {seed: record}} of the runs at each arm's best LR."""
    g = cg.grid.groups.get("tuned", {})
    out = {}
    for arm in g.get("arms", []):
        if arm in best:
            runs = {s: records.get(cg.grid.arm_key(arm, best[arm], s).id) for s in g["seeds"]}
            out[arm] = {s: r for s, r in runs.items() if r}
    return out


def tuned_section(cg: ContinuedGrid, at_best: dict, zero: dict, best: dict) -> str:
    base_arm = next((a for a in at_best if cg.grid.arms[a]["mode"] == "standard"), None)
    before = zero.get("standard", {})
    rows = []
    for metric in ("heldout_loss", "heldout_bpb"):
        base = {s: r[metric] for s, r in at_best.get(base_arm, {}).items()}
        zero_value = before.get(metric.removeprefix("heldout_"))
        for arm, runs in at_best.items():
            values = {s: r[metric] for s, r in runs.items()}
            stat = mean_std(values.values())
            per_seed = ", ".join(f"{v:.4f} (s{s})" for s, v in values.items())
            deltas = delta_cells(base, values) if arm != base_arm and base else ["", ""]
            rows.append([metric.removeprefix("heldout_"), arm, f"{best[arm]:g}", per_seed, str(stat),
                         f"{stat.mean - zero_value:+.4f}" if zero_value is not None and stat.n else "-", *deltas])
    return ("### At each arm's best LR: held-out split after training (whole split)\n\n" + table(
        ["metric", "arm", "LR", "per seed", "mean +- std", "after - before (pretrained zero line)",
         f"paired delta vs {base_arm}, mean +- std (t)", "per-seed deltas"], rows))


def paired_ci(deltas: list[float], level: float = 0.95) -> tuple[float, float, float] | None:
    """(mean, low, high): the Student-t confidence interval of the mean of paired per-seed deltas (n - 1 degrees of
    freedom); None with fewer than two deltas."""
    from scipy.stats import t

    stat = mean_std(deltas)
    if stat.n < 2:
        return None
    half = t.ppf(0.5 + level / 2, stat.n - 1) * stat.std / math.sqrt(stat.n)
    return stat.mean, stat.mean - half, stat.mean + half


def verdict(deltas: list[float], budget: str) -> str:
    """The one-line answer from the 95% CI of the paired held-out loss deltas (arm - standard; lower is better):
    helps when the whole interval is below 0, hurts when above, no measurable difference when it holds 0."""
    ci = paired_ci(deltas)
    if ci is None:
        return f"no verdict: {len(deltas)} paired seed(s), a confidence interval needs at least 2"
    mean, low, high = ci
    word = "helps" if high < 0 else "hurts" if low > 0 else "no measurable difference"
    return f"**{word} at {budget}** (paired held-out loss delta {mean:+.4f}, 95% CI [{low:+.4f}, {high:+.4f}], " \
           f"n = {len(deltas)} seeds)"


def query_movement(runs: dict) -> str:
    """How far the pseudo-queries moved from zero (their starting point): mean / max L2 norm over the mix points,
    the first seed's run."""
    norms = runs[min(runs)].get("query_norms") if runs else None
    if not norms:
        return "-"
    return f"{sum(norms) / len(norms):.4g} / {max(norms):.4g}"


def verdict_section(cg: ContinuedGrid, at_best: dict, found: dict) -> str:
    """Each AttnRes arm against the standard arm, paired per seed: the verdict line, the queries' movement (norm,
    depth-softmax entropy per mix point) beside it."""
    base_arm = next((a for a in at_best if cg.grid.arms[a]["mode"] == "standard"), None)
    if base_arm is None:
        return ""
    t = cg.grid.train
    budget = f"this budget ({t['max_steps'] * t['micro_batch_size'] * t['grad_accum'] * (t['seq_len'] or 0):,} " \
             "training tokens per run)"
    base = {s: r["heldout_loss"] for s, r in at_best[base_arm].items()}
    rows = []
    for arm, runs in at_best.items():
        if arm == base_arm or cg.grid.arms[arm]["mode"] == "standard":
            continue
        deltas = list(paired_deltas(base, {s: r["heldout_loss"] for s, r in runs.items()}).values())
        entropy = found.get(arm, {}).get("entropy_ratio")
        rows.append([arm_label(cg, arm), verdict(deltas, budget), query_movement(runs),
                     f"{min(entropy):.4f} / {sum(entropy) / len(entropy):.4f}" if entropy else "-"])
    if not rows:
        return ""
    return (f"### Verdict against {base_arm} (95% CI of the paired held-out deltas)\n\n" + table(
        ["arm", "verdict", "pseudo-query L2 norm: mean / max over mix points (0 at upcycling)",
         "depth-softmax entropy / uniform: min / mean"], rows))


def lm_eval_section(report: dict | None) -> str:
    if not report:
        return ""
    rows = []
    for task, metrics in report["tasks"].items():
        for metric, entry in metrics.items():
            for p in entry["paired"]:
                ref, model = entry["models"][p["reference"]], entry["models"][p["model"]]
                rows.append([task, metric, p["model"], f4(ref["mean"]), f4(model["mean"]), model["n"],
                             f"{model['mean'] - ref['mean']:+.4f}", f"{p['p_value']:.3f} ({p.get('test', '')})"])
    notes = "".join(f"\n- {n}" for n in report.get("notes", []))
    return ("### lm-eval subset, 0-shot: before (the pretrained model) and after, paired per item\n\n"
            + table(["task", "metric", "model (after)", "before", "after", "items", "after - before",
                     "paired p (test)"], rows) + notes + "\n")


def depth_summary(record: dict) -> dict:
    """Entropy of each mix point's mean depth softmax over its sources, relative to uniform (log n), and its top
    weight (the mix points with two or more sources); per-layer output RMS and gradient norms (the last step)."""
    entropy, top = [], []
    for weights in record["depth_weights"]:
        if len(weights) < 2:
            continue  # a mix point with one source (the first layer's attention reads the embedding only): no choice
        total = sum(weights)
        probs = [w / total for w in weights]
        entropy.append(-sum(p * math.log(p) for p in probs if p > 0) / math.log(len(probs)))
        top.append(max(probs))
    return dict(entropy_ratio=entropy, top_weight=top, layer_rms=record["layer_rms"],
                layer_grad_norm=record["layer_grad_norm"], depth_weights=record["depth_weights"])


def diagnostics(cg: ContinuedGrid, out: Path, at_best: dict) -> dict:
    """{arm: depth_summary} of each AttnRes arm's first tuned seed."""
    from ...training.logs import read_jsonl

    found = {}
    for arm, runs in at_best.items():
        if not runs or cg.grid.arms[arm]["mode"] == "standard":
            continue
        path = out / "runs" / runs[min(runs)]["id"] / "diagnostics.jsonl"
        if path.is_file():
            found[arm] = depth_summary(read_jsonl(path)[-1])
    return found


def diagnostics_section(found: dict) -> str:
    if not found:
        return ""
    rows = []
    for arm, d in found.items():
        e, t = d["entropy_ratio"], d["top_weight"]
        rms, grad = d["layer_rms"], d["layer_grad_norm"]
        rows.append([arm, f"{min(e):.4f} / {sum(e) / len(e):.4f}", f"{sum(t) / len(t):.4f} / {max(t):.4f}",
                     f"{rms[0]:.3g} .. {rms[-1]:.3g} (max {max(rms):.3g})",
                     f"{grad[0]:.3g} .. {grad[-1]:.3g} (max/min {max(grad) / max(min(grad), 1e-30):.3g})"])
    return ("### Depth diagnostics at the last step (best LR, first seed; the paper's Figure 5 view)\n\n" + table(
        ["arm", "depth-softmax entropy / uniform: min / mean over mix points", "top weight: mean / max",
         "layer output RMS: first .. last", "layer grad norm: first .. last"], rows)
        + "\nEntropy 1.0 and top weight 1/n are the uniform mix the upcycled model starts from (mix points with one "
        "source left out).\n")


def plot(found: dict, path: Path) -> Path | None:
    """Four panels over depth: entropy ratio and top weight per mix point, output RMS and grad norm per layer."""
    if not found:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..plots import _save

    fig, axes = plt.subplots(1, 4, figsize=(16, 3.5))
    panels = [("entropy_ratio", "depth-softmax entropy / log n", "mix point"),
              ("top_weight", "top depth weight", "mix point"),
              ("layer_rms", "layer output RMS", "layer"), ("layer_grad_norm", "layer gradient norm", "layer")]
    for ax, (field, title, xlabel) in zip(axes, panels):
        for arm, d in found.items():
            ax.plot(d[field], marker=".", label=arm)
        ax.set(title=title, xlabel=xlabel)
        if field == "layer_grad_norm":
            ax.set_yscale("log")
    axes[0].legend()
    return _save(fig, path)


def heatmap(found: dict, path: Path) -> Path | None:
    """The depth heatmap: one panel per AttnRes arm, the mean depth-softmax weight of every source (columns, the
    embedding first) at every mix point (rows), the last training step."""
    if not found:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from ..plots import _save

    fig, axes = plt.subplots(1, len(found), figsize=(5 * len(found), 6), squeeze=False)
    for ax, (arm, d) in zip(axes[0], found.items()):
        rows = d["depth_weights"]
        grid = np.full((len(rows), max(map(len, rows))), np.nan)
        for i, weights in enumerate(rows):
            total = sum(weights) or 1.0
            grid[i, :len(weights)] = [w / total for w in weights]
        image = ax.imshow(grid, aspect="auto", cmap="viridis", interpolation="nearest")
        ax.set(title=f"{arm}: depth weights", xlabel="source (0 = embedding)", ylabel="mix point")
        fig.colorbar(image, ax=ax)
    return _save(fig, path)


def lm_eval(cg: ContinuedGrid, out: Path, at_best: dict, progress: bool = True) -> dict | None:
    """compare() of the pretrained model (reference) with each tuned run's trained model (saved under
    <out>/lm_eval/models/ first); resumable like compare itself. None when the grid names no task."""
    from transformers import AutoTokenizer

    from ...evaluation.comparison import compare
    from .train import restore_model

    e = cg.lm_eval
    if not e["tasks"]:
        return None
    dirs, labels = [cg.folder], ["pretrained"]
    for arm, runs in at_best.items():
        for seed, record in runs.items():
            folder = out / "lm_eval" / "models" / record["id"]
            if not (folder / "config.json").is_file():
                key = cg.grid.arm_key(arm, record["lr"], seed)
                model = restore_model(cg, key, out / "runs" / record["id"])
                partial = folder.with_name(folder.name + ".partial")
                save_model_folder(model, partial)
                AutoTokenizer.from_pretrained(cg.folder).save_pretrained(partial)
                os.replace(partial, folder)
            dirs.append(folder)
            labels.append(f"{arm}-s{seed}")
    return compare(dirs, e["tasks"], out / LM_EVAL_REPORT.parent, labels=labels, eval_data=Path(e["eval_data"]),
                   limit=e["limit"], batch_size=e["batch_size"], device=cg.continued["device"], progress=progress)


def write_report(cg: ContinuedGrid, out: Path, report_dir: Path, zero: dict, *, started: float, note: str = "",
                 command: str = "", threads: int = 1, evaluate: bool = True) -> Path:
    """summary.md and summary.json (and continued.png when there are diagnostics); the summary path."""
    keys, records = grid_runs(cg.grid, out)
    best = best_lrs(cg.grid, records)
    at_best = tuned(cg, records, best)
    report_dir.mkdir(parents=True, exist_ok=True)
    lm_report = None
    complete = all(k.id in records for k in keys) and not cg.grid.waiting(best)
    if cg.lm_eval["tasks"] and complete and evaluate:
        lm_report = lm_eval(cg, out, at_best)
    elif (out / LM_EVAL_REPORT).is_file():  # --report-only: the last lm-eval comparison made, as it stands
        lm_report = json.loads((out / LM_EVAL_REPORT).read_text())
    found = diagnostics(cg, out, at_best)
    png = plot(found, report_dir / PLOT)
    heat = heatmap(found, report_dir / HEATMAP)
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    train_s = sum(r.get("train_s", 0) for r in records.values())
    header = [f"## Continued training from {cg.source} ({cg.grid.name})\n",
              f"- Command: `{command}`" if command else "",
              f"- Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(started))}; hardware: {hardware()}; "
              f"threads per run {threads}; load average (1/5/15) at report time: {load}",
              f"- Runs: {len(records)} of {len(keys)} known finished"
              + (f" (tuned runs of {', '.join(cg.grid.waiting(best))} wait for their sweep)" if cg.grid.waiting(best)
                 else "") + f"; summed training time {train_s / 60:.1f} min",
              f"- Budget per run: {cg.grid.train['max_steps']} steps x {cg.grid.train['micro_batch_size']} x "
              f"{cg.grid.train['grad_accum']} sequences x {cg.grid.train['seq_len']} tokens; block size "
              f"{cg.grid.model['block_size']} of {cg.grid.model['layers']} layers",
              f"- Note: {note}" if note else ""]
    parts = ["\n".join(line for line in header if line) + "\n", verdict_section(cg, at_best, found),
             f"![depth heatmap]({HEATMAP})\n" if heat else "", zero_section(cg, zero),
             sweep_section(cg, records, best), tuned_section(cg, at_best, zero, best), lm_eval_section(lm_report),
             diagnostics_section(found), f"![depth diagnostics]({PLOT})\n" if png else ""]
    path = report_dir / SUMMARY
    write_text_atomic(path, "\n".join(p for p in parts if p))
    slim = {i: {k: v for k, v in r.items() if k not in ("item_loss", "spec")} for i, r in records.items()}
    write_json_atomic(report_dir / "summary.json", dict(
        grid=cg.grid.name, source=cg.source, best_lrs={str(k): v for k, v in best.items()}, runs=slim,
        zero={k: {f: v for f, v in z.items() if f not in ("items", "item_loss", "spec")} for k, z in zero.items()},
        diagnostics=found, lm_eval=lm_report and lm_report["tasks"]))
    return path


__all__ = ["write_report", "depth_summary"]
