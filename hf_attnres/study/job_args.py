"""`attnres main-job`'s flags as one dataclass, one field per flag (hf_attnres/cli/main_job.py parses them; a test holds
fields and flags equal), with the rule that refuses a flag another one makes meaningless beside the fields."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..utils.refusals import combined

DEFAULT_TASKS = ("attnres_mmlu_bpb", "attnres_triviaqa_bpb")


@dataclass
class MainJobArgs:
    data: Path = Path("data/main-job")
    vocab_size: int = 4096
    seq_len: int = 128
    files: list[str] | None = None
    layers: int = 12
    hidden_size: int = 128
    block_size: int = 3
    steps: int = 500
    micro_batch_size: int = 16
    lr_standard: float | None = None
    lr_block: float | None = None
    lr: float | None = None
    warmup_steps: int | None = None
    eval_every: int | None = None
    seed: int = 0
    sequential: bool = False
    tasks: list[str] = field(default_factory=lambda: list(DEFAULT_TASKS))
    task_limit: int = 20
    no_tasks: bool = False
    eval_data: Path = Path("data/eval")
    output_dir: Path = Path("runs/main-job")

    def conflicts(self, given: set[str]) -> list[str | None]:
        """--no-tasks makes the task flags meaningless (`given`: the flags on the command line)."""
        return [combined(given, ("tasks", "task_limit"), "--no-tasks", "no benchmark task runs")
                if self.no_tasks else None]
