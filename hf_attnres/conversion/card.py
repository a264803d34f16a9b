"""Model-card rows from eval/compare.py's report.json (scripts/push_to_hub.py --eval-results report.json)."""
from __future__ import annotations


def report_rows(report: dict) -> list[tuple]:
    """(task, metric, value) per task metric: every model's mean ± s.e., then each delta with its paired p-value."""
    rows = []
    for task, metrics in report["tasks"].items():
        for metric, entry in metrics.items():
            values = "; ".join(f"{label} {s['mean']:.4g} ± {s['stderr']:.2g}" for label, s in entry["models"].items())
            for pair in entry["paired"]:
                values += (f"; {pair['model']} − {pair['reference']}: {pair['delta']:+.4g} "
                           f"(p {pair['p_value']:.2g}, {pair['test']})")
            rows.append((task, metric.split(",")[0] + (" ↓" if entry["lower_is_better"] else ""), values))
    return rows
