"""report.json, report.md and PNG plots of a comparison: per task and metric, each model's mean with its standard
error, and each model against the reference (the first model): delta and a paired test over the shared items."""
from __future__ import annotations

import datetime
import json
import math
import os
from pathlib import Path

from ..folders.atomic_io import atomic_write, remove_path, temporary_folder
from .provenance import matched_check, matched_verdict
from .stats import mean_stderr, paired_test

ALPHA = 0.05
LOWER_IS_BETTER = ("bpb", "loss", "perplexity", "bits_per_byte")


def coverage(record: dict) -> dict:
    """What share of a task's split its items are: {"items", "of", "subtasks", "text"}; "text" is the report's words
    ("2 of 5 sequences", "57 subtasks x first 1: 57 of 14,042 items", "all 14,042 items"). lm-eval applies --limit to
    each subtask (MMLU: each subject), so a group's share is stated with its subtask count."""
    heldout = record.get("heldout")
    if heldout:
        items, total = heldout["sequences"], heldout.get("split_sequences", heldout["sequences"])
        unit, subtasks = "validation sequences", 1
    else:
        counts = [c for c in (record.get("n_samples") or {}).values() if isinstance(c, dict)]
        if not counts:
            return dict(items=None, of=None, subtasks=None, text="n/a")
        items, total = sum(c["effective"] for c in counts), sum(c["original"] for c in counts)
        unit, subtasks = "items", len(counts)
    if items >= total:
        text = f"all {total:,} {unit}"
    elif subtasks > 1:
        text = f"{subtasks} subtasks x first {math.ceil(items / subtasks)}: {items:,} of {total:,} {unit}"
    else:
        text = f"first {items:,} of {total:,} {unit}"
    return dict(items=items, of=total, subtasks=subtasks, text=text)


def metric_table(records: dict, labels: list[str]) -> dict:
    """{task: {metric: {"models": {label: {mean, stderr, n}}, "paired": [...], "coverage": {...}}}} from per-item
    records; "coverage" is the reference model's share of the split (every model ran the same settings)."""
    tasks = {}
    for task in records[labels[0]]:
        for metric in sorted(records[labels[0]][task]["items"]):
            per_model = {label: records[label][task]["items"].get(metric, {}) for label in labels}
            entry = {"models": {}, "paired": [], "coverage": coverage(records[labels[0]][task]),
                     "lower_is_better": metric.split(",")[0] in LOWER_IS_BETTER}
            for label, items in per_model.items():
                mean, stderr = mean_stderr(list(items.values()))
                entry["models"][label] = dict(mean=mean, stderr=stderr, n=len(items))
            ref = per_model[labels[0]]
            for label in labels[1:]:
                shared = sorted(set(ref) & set(per_model[label]))
                result = paired_test([ref[k] for k in shared], [per_model[label][k] for k in shared]).as_dict()
                entry["paired"].append(dict(reference=labels[0], model=label, significant=result["p_value"] < ALPHA,
                                            **result))
            tasks.setdefault(task, {})[metric] = entry
    return tasks


def build_report(models: list[dict], records: dict, settings: dict, prepared: dict, skipped=()) -> dict:
    """`skipped`: the default (or --quick) tasks that could not run, each {"tasks", "reason", "how"}."""
    labels = [m["label"] for m in models]
    from .tasks import TASKS

    benchmarks = {TASKS[t][0] for t in settings["tasks"] if t in TASKS}
    notes = [f"{bench}: {info['note']}" for bench, info in prepared.items()
             if bench in benchmarks and isinstance(info, dict) and info.get("note")]
    if settings.get("limit"):
        notes.append(f"--limit {settings['limit']}: the first {settings['limit']} items of each task and of each "
                     "subtask (lm-eval's rule; MMLU: of each of its subjects), a smoke run, not a benchmark score; "
                     "the Results table's 'covers' column gives each task's share of its split")
    heldout_scored = {r["heldout"]["heldout"].get("scored") for r in records.values() if "heldout" in r}
    if heldout_scored - {None, "every token"}:
        notes.append("heldout scores the supervised tokens only (the corpus's loss_mask: assistant turns), as "
                     "training's val/heldout_loss does")
    reused = [f"{task} ({label})" for label in labels for task, record in records[label].items()
              if record.get("reused")]
    if reused:
        notes.append("reused from an earlier run into this folder (same model files, task files and settings): "
                     + ", ".join(reused))
    heldout = {label: records[label]["heldout"].get("heldout") for label in labels if "heldout" in records[label]}
    return dict(
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        settings=settings, models=models, matched=matched_check(models),
        matched_verdict=matched_verdict(matched_check(models)), tasks=metric_table(records, labels),
        heldout=heldout or None, notes=notes, skipped=[*skipped, *unscored(records, labels)],
        lm_eval_results={label: {t: r.get("lm_eval_results") for t, r in records[label].items()} for label in labels},
    )


def unscored(records: dict, labels: list[str]) -> list[dict]:
    """Metrics lm-eval reported for a task that carry no per-item number (a corpus-level score such as BLEU, whose
    per-item values are pairs), and tasks that scored no item: the paired table cannot show them, so the report names
    them with lm-eval's own aggregate instead of leaving them out."""
    out = []
    for task, record in records[labels[0]].items():
        aggregate = {}
        for metrics in (record.get("lm_eval_results") or {}).values():
            for key, value in (metrics or {}).items():
                name = key.split(",")[0]
                if "," in key and not name.endswith("_stderr") and isinstance(value, (int, float)):
                    aggregate.setdefault(key, value)
        missing = sorted(set(aggregate) - set(record["items"]))
        if missing:
            out.append(dict(tasks=[task], reason=f"{', '.join(m.split(',')[0] for m in missing)} has no per-item "
                            "values to pair (a corpus-level metric); lm-eval's aggregate: "
                            + ", ".join(f"{m.split(',')[0]} {fmt(float(aggregate[m]))}" for m in missing),
                            see="report.json's lm_eval_results holds each model's aggregate"))
        elif not record["items"]:
            out.append(dict(tasks=[task], reason="no item was scored", see="check the task's data and --limit"))
    return out


def fmt(x: float, digits: int = 4) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def fmt_p(p: float) -> str:
    return "<0.001" if p is not None and p < 0.001 else fmt(p, 3)


def heldout_pooled_lines(heldout: dict | None, labels: list[str]) -> list[str]:
    """Held-out bits per byte both ways, each under its own name (two numbers under one name would disagree): the
    table's row is the mean of per-sequence values (what the paired test compares); pooled is all bits / all bytes of
    the split."""
    if not heldout:
        return []
    rows = [f"| {label} | {fmt(heldout[label]['bpb'])} | {fmt(heldout[label]['loss'])} | {heldout[label]['bytes']:,} "
            f"| {heldout[label]['sequences']:,} |" for label in labels if heldout.get(label)]
    first = next(heldout[label] for label in labels if heldout.get(label))
    total = first.get("split_sequences", first["sequences"])
    scope = ("over the whole split" if first["sequences"] >= total else
             f"over the first {first['sequences']:,} of the split's {total:,} sequences (--limit), not the whole split")
    scored = first.get("scored", "every token")
    return ["## Held-out, pooled", "",
            "The Results table's heldout rows are means over validation sequences of each sequence's value (the unit "
            f"of the paired test). Pooled {scope} (bits per byte: all bits / all bytes; loss: all nats / "
            f"all tokens; scored: {scored}), as the main job's summary reports them:", "",
            "| model | bits per byte (pooled) | loss (pooled, nats/token) | bytes | sequences |",
            "|---|---|---|---|---|",
            *rows, ""]


def render_markdown(report: dict) -> str:
    labels = [m["label"] for m in report["models"]]
    s = report["settings"]
    lines = [f"# Evaluation: {' vs '.join(labels)}", "",
             f"{report['created']}. Reference: **{labels[0]}**; deltas are model minus reference. Tasks {s['tasks']}, "
             f"shots {s['num_fewshot'] if s['num_fewshot'] is not None else 'task default'}, limit {s['limit']}, "
             f"seed {s['seed']}, max_length {s['max_length']}.", "", "## Models", "",
             "| model | residual | parameters (+ saved buffers) | of which AttnRes | tokens trained "
             "| data fingerprint | path |",
             "|---|---|---|---|---|---|---|"]
    for m in report["models"]:
        lines.append(f"| {m['label']} | {m['attn_res_mode']} | {m['parameters'] or 'n/a'} | {m['attn_res_parameters']} "
                     f"| {m['tokens_trained'] or 'unknown'} | {m['data_fingerprint'] or 'unknown'} | `{m['path']}` |")
    verdict = report.get("matched_verdict") or matched_verdict(report["matched"])
    lines += ["", "## Matched?", "", f"**{verdict[0].upper() + verdict[1:]}.**", "",
              "| property | values | status |", "|---|---|---|"]
    for row in report["matched"]:
        lines.append(f"| {row['property']} | {', '.join(map(str, row['values']))} | {row['status']} |")
    header = " | ".join(f"{label} (± s.e.)" for label in labels)
    lines += ["", "## Results", "",
              f"| task | metric | n | covers | {header} | delta vs {labels[0]} | paired test | p |",
              "|---|---|---|---|" + "---|" * len(labels) + "---|---|---|"]
    for task, metrics in report["tasks"].items():
        for metric, entry in metrics.items():
            cells = " | ".join(f"{fmt(entry['models'][label]['mean'])} ± {fmt(entry['models'][label]['stderr'])}"
                               for label in labels)
            arrow = "lower is better" if entry["lower_is_better"] else "higher is better"
            for pair in entry["paired"] or [None]:
                delta = "" if pair is None else f"{pair['model']}: {pair['delta']:+.4f}"
                star = "" if pair is None else f"{fmt_p(pair['p_value'])}{' *' if pair['significant'] else ''}"
                covers = entry.get("coverage", {}).get("text", "n/a")
                lines.append(f"| {task} | {metric.split(',')[0]} ({arrow}) | {entry['models'][labels[0]]['n']} "
                             f"| {covers} | {cells} | {delta} | {'' if pair is None else pair['test']} | {star} |")
    lines += ["", f"`*`: p < {ALPHA} (two-sided; exact McNemar for 0/1 metrics, paired t-test otherwise; "
              "no correction for multiple comparisons).", ""]
    if report.get("skipped"):
        lines += ["## Skipped", "", "What of the requested tasks and metrics this report does not show, and why:", ""]
        lines += [f"- {', '.join(s['tasks'])}: {s['reason']}; "
                  + (f"to run: `{s['how']}`" if s.get("how") else s.get("see", "")) for s in report["skipped"]] + [""]
    lines += heldout_pooled_lines(report.get("heldout"), labels)
    if report["notes"]:
        lines += ["## Notes", ""] + [f"- {n}" for n in report["notes"]] + [""]
    lines += ["Plots: metrics.png (means ± s.e.), deltas.png (delta ± 1.96 s.e. of the paired difference).", ""]
    return "\n".join(lines)


def plot_report(report: dict, out_dir: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [m["label"] for m in report["models"]]
    panels = [(t, m, e) for t, ms in report["tasks"].items() for m, e in ms.items()]
    if not panels:
        return
    cols = min(4, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.8 * rows), squeeze=False)
    for ax, (task, metric, entry) in zip(axes.flat, panels):
        means = [entry["models"][label]["mean"] for label in labels]
        errs = [0 if math.isnan(entry["models"][label]["stderr"]) else entry["models"][label]["stderr"]
                for label in labels]
        ax.bar(range(len(labels)), means, yerr=errs, color=[f"C{i}" for i in range(len(labels))], capsize=3)
        ax.set_xticks(range(len(labels)), labels, rotation=20, fontsize=7)
        ax.set_title(f"{task}\n{metric.split(',')[0]} ({'lower' if entry['lower_is_better'] else 'higher'} better)",
                     fontsize=8)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.tight_layout()
    atomic_write(out_dir / "metrics.png", lambda tmp: fig.savefig(tmp, dpi=120, format="png"))
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 0.4 * len(panels) * max(1, len(labels) - 1) + 1.2))
    y = 0
    names = []
    for task, metric, entry in panels:
        for pair in entry["paired"]:
            diffs_se = _diff_stderr(entry, pair)
            ax.errorbar(pair["delta"], y, xerr=1.96 * diffs_se, fmt="o", color="C3" if pair["significant"] else "C0")
            names.append(f"{task} {metric.split(',')[0]}: {pair['model']}")
            y += 1
    ax.axvline(0, color="grey", lw=0.8)
    ax.set_yticks(range(len(names)), names, fontsize=7)
    ax.set_xlabel(f"delta vs {labels[0]} (red: p < {ALPHA})")
    fig.tight_layout()
    atomic_write(out_dir / "deltas.png", lambda tmp: fig.savefig(tmp, dpi=120, format="png"))
    plt.close(fig)


def _diff_stderr(entry: dict, pair: dict) -> float:
    """Standard error of the mean paired difference, recovered from the t statistic (0 when undefined)."""
    stat = pair["statistic"]
    if pair["test"] == "paired-t" and stat and not math.isnan(stat):
        return abs(pair["delta"] / stat)
    n = pair["n"]
    if pair["test"] == "mcnemar-exact" and n:
        return math.sqrt(max(entry["models"][pair["reference"]]["stderr"] or 0, 0) ** 2
                         + max(entry["models"][pair["model"]]["stderr"] or 0, 0) ** 2)
    return 0.0


REPORT_FILES = ("report.json", "report.md", "metrics.png", "deltas.png")


def same_comparison(a: dict, b: dict) -> bool:
    """Whether two reports compare the same model folders under the same labels and settings (a rerun, or a resumed
    run, of one comparison)."""
    def key(report):
        return json.dumps([[(m.get("label"), m.get("path")) for m in report.get("models", [])],
                           report.get("settings")], sort_keys=True, default=str)

    return key(a) == key(b)


def previous_report_dir(report: dict, out_dir: Path) -> Path | None:
    """Where the report already in `out_dir` goes before this one is written: None when there is none or it is of
    the same comparison (replaced: the same question, answered again), else a new <out_dir>/previous/<its time>/."""
    old = out_dir / "report.json"
    if not any((out_dir / name).exists() for name in REPORT_FILES):
        return None
    try:
        previous = json.loads(old.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        previous = {}
    if isinstance(previous, dict) and same_comparison(previous, report):
        return None
    created = previous.get("created") if isinstance(previous, dict) else None
    name = "".join(c if c.isalnum() or c in "-_" else "-" for c in str(created or "unknown"))[:40]
    target, n = out_dir / "previous" / name, 1
    while target.exists():
        n += 1
        target = out_dir / "previous" / f"{name}-{n}"
    return target


def write_report(report: dict, out_dir: Path) -> None:
    """Every report file is written into a hidden staging folder first and renamed into place only when all are
    complete: a full disk leaves the earlier report as it was (never a new report.md beside old plots). An earlier
    report of another comparison is moved to <out_dir>/previous/<its time>/ first (`report["previous_report"]`)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    archive = previous_report_dir(report, out_dir)
    report["previous_report"] = str(archive) if archive else None
    with temporary_folder(out_dir / "report") as stage:
        (stage / "report.json").write_text(json.dumps(report, indent=2))
        (stage / "report.md").write_text(render_markdown(report))
        plot_report(report, stage)
    if archive is not None:
        archive.mkdir(parents=True)
        for name in REPORT_FILES:
            if (out_dir / name).exists():
                os.replace(out_dir / name, archive / name)
    for name in REPORT_FILES:  # renames in one folder: no space needed, nothing half-written
        if (stage / name).exists():
            os.replace(stage / name, out_dir / name)
    remove_path(stage)
