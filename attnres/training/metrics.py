"""Run logs: JSON lines (one record per step, the source of truth for tests and plots) and TensorBoard scalars."""
from __future__ import annotations

import json
from pathlib import Path

from ..atomic_io import write_text_atomic


class JsonlLog:
    """Append-only JSONL file. On resume from step k, records after k (written by the interrupted run past its last
    checkpoint) are dropped first, so the file reads like one uninterrupted run."""

    def __init__(self, path: Path, resume_step: int = 0):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            kept = [line for line in self.path.read_text().splitlines() if line and json.loads(line)["step"] <= resume_step]
            write_text_atomic(self.path, "".join(line + "\n" for line in kept))

    def write(self, record: dict) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line]


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
