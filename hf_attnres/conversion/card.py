"""Model-card rows from eval/compare.py's report.json (scripts/push_to_hub.py --eval-results report.json)."""
from __future__ import annotations

import math


def report_rows(report: dict) -> list[tuple]:
    """(task, metric, value) per task metric: every model's mean ± s.e., then each delta with its paired p-value.
    ValueError naming the first entry that is missing or of the wrong kind (a file that only looks like a report)."""
    rows = []
    for task, metrics in entries(report, "tasks", dict, "tasks").items():
        for metric, entry in entries(metrics, None, dict, f"tasks.{task}").items():
            where = f"tasks.{task}.{metric}"
            models = entries(entry, "models", dict, where)
            values = "; ".join(f"{label} {number(s, 'mean', f'{where}.models.{label}'):.4g} ± "
                               f"{number(s, 'stderr', f'{where}.models.{label}'):.2g}" for label, s in models.items())
            for index, pair in enumerate(entries(entry, "paired", list, where)):
                at = f"{where}.paired[{index}]"
                values += (f"; {text(pair, 'model', at)} − {text(pair, 'reference', at)}: "
                           f"{number(pair, 'delta', at):+.4g} (p {number(pair, 'p_value', at):.2g}, "
                           f"{text(pair, 'test', at)})")
            lower = entry.get("lower_is_better")
            if not isinstance(lower, bool):
                raise ValueError(f"{where} has no boolean 'lower_is_better'")
            rows.append((task, metric.split(",")[0] + (" ↓" if lower else ""), values))
    return rows


def entries(container, key, kind: type, where: str):
    """`container[key]` (`key` None: `container` itself) when it is a `kind`, else ValueError naming `where`."""
    if not isinstance(container, dict):
        raise ValueError(f"{where} is {type(container).__name__}, not an object")
    value = container if key is None else container.get(key)
    if not isinstance(value, kind):
        name = where if key is None or key == where else f"{where}.{key}"
        raise ValueError(f"{name} is {'missing' if value is None else type(value).__name__}, not "
                         f"{'an object' if kind is dict else 'a list'}")
    return value


def number(container, key: str, where: str) -> float:
    """A finite number at `container[key]` (NaN: a model that scored no item reads as 'nan', allowed), else
    ValueError naming it."""
    value = container.get(key) if isinstance(container, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{where}.{key} is {'missing' if value is None else type(value).__name__}, not a number")
    if math.isinf(value):
        raise ValueError(f"{where}.{key} is {value}, not a score")
    return value


def text(container, key: str, where: str) -> str:
    value = container.get(key) if isinstance(container, dict) else None
    if not isinstance(value, str):
        raise ValueError(f"{where}.{key} is {'missing' if value is None else type(value).__name__}, not a string")
    return value
