"""The budget curve: does an upcycled model's gap to its standard residual close, or turn, as continued training gets
longer? One continued grid per token budget (configs/study/curve-*.json: the same arms, corpus, held-out split and
seeds, the steps and warmup scaled), each trained with `attnres continued-study`; this reads their finished runs and
reports, per budget and AttnRes arm, the paired held-out loss deltas against the standard arm:

- per seed, the delta with its per-sequence 95% CI (the held-out sequences paired between the two arms' models);
- over seeds, the Student-t 95% CI of the mean delta and the verdict it gives (`report.verdict`);
- where the deltas move with log(tokens), the budget at which the fitted line crosses zero, with a bootstrap interval
  (seeds resampled within each budget), and whether a given budget (the GPU grid's) lies past it.

A budget whose runs are missing is reported as such, never filled in."""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from pathlib import Path

from ...folders.atomic_io import write_json_atomic, write_text_atomic
from ..analysis import mean_std
from ..grid import arm_lrs, best_lrs
from ..plots import _save
from ..report import table
from ..runner import finished_records
from .config import ContinuedGrid, load_continued
from .report import paired_ci, verdict

PLOT_NAME = "curve.png"
BOOTSTRAP_SAMPLES = 4000


@dataclass
class Budget:
    """One grid's finished runs: {arm: {seed: record}} at each arm's LR, and what the arms are."""
    name: str
    tokens: int
    runs: dict
    labels: dict  # arm: its mode and depth-parameter multiplier, for the table
    base_arm: str | None


@dataclass
class ArmDelta:
    """One AttnRes arm against the standard arm at one budget."""
    arm: str
    label: str
    tokens: int
    seeds: dict = field(default_factory=dict)  # seed: (delta, per-sequence low, high)

    @property
    def deltas(self) -> list[float]:
        return [d for d, _, _ in self.seeds.values()]

    @property
    def ci(self):
        return paired_ci(self.deltas)


def budget_tokens(cg: ContinuedGrid) -> int:
    t = cg.grid.train
    return t["max_steps"] * t["micro_batch_size"] * t.get("grad_accum", 1) * t["seq_len"]


def arm_label(cg: ContinuedGrid, arm: str) -> str:
    spec = cg.grid.arms[arm]
    multiplier = (spec.get("train") or {}).get("attn_res_lr_multiplier")
    return spec["mode"] + (f", depth x{multiplier:g}" if multiplier is not None and spec["mode"] != "standard" else "")


def read_budget(grid_file: Path, runs_root: Path, resolve_source=None) -> Budget:
    """The grid's finished runs in <runs_root>/<grid name> (its continued-study --output-dir), at each arm's LR of the
    sweep (one LR per arm in the curve grids: the best of an earlier sweep), every seed of the sweep and tuned
    groups."""
    cg = load_continued(Path(grid_file), resolve_source)
    grid = cg.grid
    runs_dir = Path(runs_root) / grid.name
    sweep = grid.groups.get("lr_sweep", {})
    best = best_lrs(grid, finished_records(grid, runs_dir, grid.sweep_runs()))
    arms = list(dict.fromkeys(sweep.get("arms", []) + grid.groups.get("tuned", {}).get("arms", [])))
    seeds = sorted(set(sweep.get("seeds", [])) | set(grid.groups.get("tuned", {}).get("seeds", [])))
    runs = {}
    for arm in arms:
        lr = best.get(arm) or (arm_lrs(sweep, arm) or [None])[0]
        keys = [grid.arm_key(arm, lr, s) for s in seeds] if lr is not None else []
        found = finished_records(grid, runs_dir, keys)
        runs[arm] = {k.seed: found[k.id] for k in keys if k.id in found}
    base = next((a for a in arms if grid.arms[a]["mode"] == "standard"), None)
    return Budget(grid.name, budget_tokens(cg), runs, {a: arm_label(cg, a) for a in arms}, base)


def per_sequence_ci(base: list[float], other: list[float], level: float = 0.95) -> tuple[float, float]:
    """The Student-t CI of the mean per-sequence loss delta (other - base), the sequences paired (`paired_ci` over
    sequences instead of seeds); (nan, nan) when the records lack per-sequence losses."""
    if not base or not other or len(base) != len(other):
        return math.nan, math.nan
    ci = paired_ci([o - b for b, o in zip(base, other) if math.isfinite(b) and math.isfinite(o)], level)
    return (ci[1], ci[2]) if ci else (math.nan, math.nan)


def arm_deltas(budget: Budget) -> list[ArmDelta]:
    """Each AttnRes arm's paired deltas against the standard arm, at the seeds both finished."""
    out = []
    base = budget.runs.get(budget.base_arm, {})
    for arm, runs in budget.runs.items():
        if arm == budget.base_arm or not runs:
            continue
        row = ArmDelta(arm, budget.labels[arm], budget.tokens)
        for seed in sorted(set(runs) & set(base)):
            low, high = per_sequence_ci(base[seed].get("item_loss"), runs[seed].get("item_loss"))
            row.seeds[seed] = (runs[seed]["heldout_loss"] - base[seed]["heldout_loss"], low, high)
        if row.seeds:
            out.append(row)
    return out


def _line(points: list[tuple[float, float]]) -> tuple[float, float] | None:
    """Least squares (intercept, slope) of delta on log10(tokens); None without two distinct budgets."""
    xs = [x for x, _ in points]
    if len(set(xs)) < 2:
        return None
    mx, my = sum(xs) / len(xs), sum(y for _, y in points) / len(points)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx
    return my - slope * mx, slope


def trend(rows: list[ArmDelta]) -> dict | None:
    """The least-squares line of one arm's per-seed deltas on log10(tokens): {"intercept", "slope" (nats per
    decade), "mean" (of every per-seed delta)}; None without two budgets."""
    points = [(math.log10(r.tokens), d) for r in rows for d in r.deltas]
    fit = _line(points)
    if fit is None:
        return None
    return dict(intercept=fit[0], slope=fit[1], mean=sum(d for _, d in points) / len(points))


def crossing(rows: list[ArmDelta], samples: int = BOOTSTRAP_SAMPLES, seed: int = 0) -> dict | None:
    """Where the line of the per-seed deltas on log10(tokens) crosses zero, for one arm's rows (two budgets or more):
    {"tokens": the point estimate, "low"/"high": the 2.5/97.5 percentiles over bootstrap refits (each budget's seeds
    resampled with replacement; a refit that never crosses, its slope 0 or of the other sign, counts as beyond either
    end), "slope": nats per decade}. None when the fitted slope does not point towards zero (the gap widens)."""
    by_budget = {r.tokens: r.deltas for r in rows if r.deltas}
    found = trend(rows)
    if found is None:
        return None
    intercept, slope, mean_delta = found["intercept"], found["slope"], found["mean"]
    if slope == 0 or (mean_delta > 0) == (slope > 0):  # moving away from zero: no crossing ahead
        return None
    rng = random.Random(seed)
    direction = -1 if mean_delta > 0 else 1
    crossings = []
    for _ in range(samples):
        resampled = [(math.log10(t), rng.choice(ds)) for t, ds in by_budget.items() for _ in ds]
        refit = _line(resampled)
        if refit is None or refit[1] == 0 or (refit[1] > 0) == (direction < 0):
            crossings.append(math.inf)  # this refit does not approach zero: beyond any budget
        else:
            crossings.append(-refit[0] / refit[1])
    crossings.sort()

    def at(q):
        x = crossings[min(len(crossings) - 1, int(q * len(crossings)))]
        return 10 ** x if math.isfinite(x) else math.inf

    return dict(tokens=10 ** (-intercept / slope), low=at(0.025), high=at(0.975), slope=slope)


def _tokens(n: float) -> str:
    if not math.isfinite(n):
        return "never (within the fit)"
    return f"{n:.2g}" if n >= 1e9 else f"{n / 1e6:.2g}M" if n >= 1e6 else f"{n / 1e3:.3g}k"


def _ci(low: float, high: float) -> str:
    return f"[{low:+.4f}, {high:+.4f}]" if math.isfinite(low) else "-"


def crossing_line(arm: str, found: dict | None, past: int | None, line: dict | None = None) -> str:
    """The report's sentence on one arm's crossing; `line` (its `trend`) says, where there is no crossing, on which
    side of zero the arm lies: a widening gap and a growing lead are opposite findings."""
    if found is None:
        if line is None or line["slope"] == 0:
            return f"- {arm}: the curve does not point to a crossing (its deltas do not move towards zero with tokens)."
        side = ("above zero (a higher loss than the standard arm's), and the fitted line rises: the gap widens"
                if line["mean"] > 0 else
                "below zero (a lower loss than the standard arm's), and the fitted line falls: the lead grows")
        return (f"- {arm}: no crossing ahead: its mean delta lies {side} ({line['slope']:+.4f} nats per tenfold "
                "tokens; whether each budget's delta is measurable is the verdict above).")
    if not math.isfinite(found["high"]):
        # over 2.5% of the refits do not approach zero: the direction itself is not resolved, so a point estimate
        # (which a nearly flat line puts at any distance) would claim what the data do not show
        past_too = f", or to say whether {_tokens(past)} tokens lies past one" if past is not None else ""
        return (f"- {arm}: no crossing resolved: the fitted line moves towards zero ({found['slope']:+.4f} nats per "
                f"tenfold tokens), but its 95% bootstrap interval runs from {_tokens(found['low'])} to never: the "
                f"deltas are too flat or too noisy to place one{past_too}.")
    where = ""
    if past is not None:
        if found["high"] < past:
            where = f"; {_tokens(past)} tokens lies past it (past the whole interval)"
        elif found["tokens"] < past:
            where = f"; {_tokens(past)} tokens lies past the estimate, inside its interval"
        else:
            where = f"; {_tokens(past)} tokens lies before it"
    return (f"- {arm}: the fitted line ({found['slope']:+.4f} nats per tenfold tokens) crosses zero at about "
            f"{_tokens(found['tokens'])} tokens, 95% bootstrap interval {_tokens(found['low'])} to "
            f"{_tokens(found['high'])}{where}.")


def _by_label(rows: list[ArmDelta]) -> dict[str, list[ArmDelta]]:
    by_label: dict[str, list[ArmDelta]] = {}
    for r in rows:
        by_label.setdefault(r.label, []).append(r)
    return by_label


def report_text(budgets: list[Budget], rows: list[ArmDelta], found: dict[str, dict | None], past: int | None = None,
                plot_file: str | None = None) -> str:
    """The markdown report of `rows` (every budget's `arm_deltas`), with each arm's `crossing` in `found`."""
    missing = [f"{b.name} ({_tokens(b.tokens)} tokens): "
               + ", ".join(f"{arm} {len(runs)} run(s)" for arm, runs in b.runs.items()) for b in budgets]
    cells, verdicts = [], []
    for r in rows:
        ci = r.ci
        per_seed = "; ".join(f"s{s} {d:+.4f} {_ci(lo, hi)}" for s, (d, lo, hi) in r.seeds.items())
        line = verdict(r.deltas, f"{r.tokens:,} tokens")
        decided = line.startswith("**")  # a verdict, which names its budget; "no verdict" names none
        word = line.split("**")[1].split(" at ")[0] if decided else "no verdict (one seed)"
        cells.append([f"{r.tokens:,}", r.label, len(r.seeds), per_seed, f"{mean_std(r.deltas).mean:+.4f}",
                      _ci(ci[1], ci[2]) if ci else "-", word])
        verdicts.append(f"- {r.label}: {line}" if decided else f"- {r.label} at {r.tokens:,} tokens: {line}")
    crossings = [crossing_line(label, found[label], past, trend(rs)) for label, rs in _by_label(rows).items()
                 if len({r.tokens for r in rs}) >= 2]
    parts = ["## The budget curve: AttnRes arm - standard, held-out loss (lower is better)", "",
             "Runs found: " + "; ".join(missing), "",
             table(["tokens per run", "arm", "seeds", "per-seed delta (per-sequence 95% CI)", "mean delta",
                    "95% CI over seeds", "verdict"], cells), "### Verdict per budget", "", *verdicts]
    if crossings:
        parts += ["", "### Where the curve crosses zero", "", *crossings]
    if plot_file:
        parts += ["", f"![the delta against tokens]({plot_file})"]
    return "\n".join(parts) + "\n"


def plot(rows: list[ArmDelta], path: Path, past: int | None = None) -> Path | None:
    """The delta against tokens (log scale): each arm's per-seed deltas as dots, its mean with the over-seed 95% CI
    (a one-seed budget: hollow, with its per-sequence CI); the arms measured at two seeds or more somewhere (a
    sweep's single-seed arms are the table's), and `past` as a dashed line (the budget the report asks about)."""
    import matplotlib.pyplot as plt

    seeded = {r.label for r in rows if len(r.seeds) >= 2}
    rows = [r for r in rows if r.label in seeded]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    labels = list(dict.fromkeys(r.label for r in rows))
    any_lone = False
    for i, label in enumerate(labels):
        mine = sorted((r for r in rows if r.label == label), key=lambda r: r.tokens)
        shift = 1 + 0.04 * (i - (len(labels) - 1) / 2)  # side by side on the log axis, not on top of each other
        xs = [r.tokens * shift for r in mine]
        means = [mean_std(r.deltas).mean for r in mine]
        # a budget with one seed has no interval over seeds: its bar is that seed's per-sequence interval, and its
        # marker is hollow, so a lone point never reads as a precise one
        cis = [(ci[1:] if (ci := r.ci) else next(iter(r.seeds.values()))[1:]) for r in mine]
        low = [m - c[0] if math.isfinite(c[0]) else 0 for m, c in zip(means, cis)]
        high = [c[1] - m if math.isfinite(c[1]) else 0 for m, c in zip(means, cis)]
        line = ax.errorbar(xs, means, yerr=[low, high], marker="o", capsize=4, label=label)
        color = line[0].get_color()
        for x, r in zip(xs, mine):
            ax.scatter([x] * len(r.deltas), r.deltas, s=10, alpha=0.4, color=color)
        lone = [(x, m) for x, m, r in zip(xs, means, mine) if len(r.seeds) == 1]
        if lone:
            ax.scatter(*zip(*lone), s=40, facecolors="white", edgecolors=color, zorder=3)
            any_lone = True
    if any_lone:
        ax.annotate("hollow: one seed, its per-sequence 95% CI", (0.01, 0.01), xycoords="axes fraction", fontsize=7,
                    color="grey")
    ax.axhline(0, color="grey", linewidth=0.8)
    ax.set_xscale("log")
    ends = [r.tokens for r in rows] + ([past] if past else [])
    ax.set_xlim(min(ends) / 2, max(ends) * 2)
    if past:
        ax.axvline(past, color="grey", linestyle="--", linewidth=0.8)
        ax.annotate(f"{_tokens(past)} tokens", (past, 0), textcoords="offset points", xytext=(-4, 6), rotation=90,
                    ha="right", va="bottom", fontsize=8, color="grey")
    ax.set_xlabel("continued-training tokens per run")
    ax.set_ylabel("held-out loss, arm - standard (nats)")
    ax.set_title("Upcycled SmolLM2-135M: the gap to the standard residual")
    ax.legend()
    path.parent.mkdir(parents=True, exist_ok=True)
    return _save(fig, path)


def write_curve(budgets: list[Budget], report_dir: Path, past: int | None = None) -> Path:
    """curve.md, curve.json and curve.png in `report_dir`; the markdown's path."""
    report_dir.mkdir(parents=True, exist_ok=True)
    per_budget = {b.name: arm_deltas(b) for b in budgets}
    rows = [r for b in budgets for r in per_budget[b.name]]
    # the bootstrap runs once per arm: the markdown and the JSON report the same crossing
    found = {label: crossing(rs) for label, rs in _by_label(rows).items()}
    png = plot(rows, report_dir / PLOT_NAME, past)
    text = report_text(budgets, rows, found, past, png.name if png else None)
    summary = {b.name: dict(tokens=b.tokens, rows=[dict(arm=r.arm, label=r.label, seeds={
        str(s): dict(delta=d, per_sequence_ci=[lo, hi]) for s, (d, lo, hi) in r.seeds.items()}, ci=r.ci)
        for r in per_budget[b.name]]) for b in budgets}
    summary["crossings"] = {label: found[label] for label in sorted(found)}
    write_json_atomic(report_dir / "curve.json", _finite(summary))
    write_text_atomic(report_dir / "curve.md", text)
    return report_dir / "curve.md"


def _finite(value):
    """JSON has no NaN or infinity: an unmeasured interval or a crossing beyond every refit becomes null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value
