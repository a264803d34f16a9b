"""The flags of `attnres compare` and `attnres prepare-eval-data` as dataclasses, one field per flag (the parsers in
hf_attnres/cli build them; a test holds fields and flags equal), with the rules that refuse a flag another one makes
meaningless beside the fields."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..training.corpora import DEFAULT_CACHE
from ..utils.refusals import combined
from .comparison import DEFAULT_MAX_LENGTH
from .data import BENCHMARKS, DEFAULT_EVAL_DATA


@dataclass
class CompareArgs:
    models: list[Path]
    tasks: list[str] | None = None
    labels: list[str] | None = None
    data: Path | None = None
    eval_data: Path = DEFAULT_EVAL_DATA
    output_dir: Path = Path("outputs/eval")
    limit: int | None = None
    quick: bool = False
    include_path: Path | None = None
    num_fewshot: int | None = None
    seed: int = 1234
    batch_size: str = "1"
    device: str | None = None
    max_length: int = DEFAULT_MAX_LENGTH
    model_args: str = ""
    gen_kwargs: str | None = None
    allow_code_execution: bool = False
    trust_remote_code: bool = False

    def conflicts(self, given: set[str]) -> list[str | None]:
        """--data feeds the heldout task only; --allow-code-execution matters to a code task only (the default tasks
        have none: they need no text generation); --quick picks its own tasks (`given`: the flags on the command
        line)."""
        from .runner import HELDOUT
        from .tasks import CODE_TASKS

        tasks = f"--tasks {' '.join(self.tasks)}" if self.tasks is not None else "the default tasks (no --tasks)"
        return [
            combined(given, ("data",), tasks, f"it feeds the {HELDOUT} task only")
            if self.tasks is not None and HELDOUT not in self.tasks else None,
            combined(given, ("allow_code_execution",), tasks, f"no code task runs ({', '.join(CODE_TASKS)})")
            if not any(task in CODE_TASKS for task in self.tasks or ()) else None,
            "--quick picks its tasks: drop --tasks (or drop --quick and pass --limit)"
            if self.quick and self.tasks is not None else None,
        ]


@dataclass
class PrepareEvalArgs:
    output_dir: Path = DEFAULT_EVAL_DATA
    cache_dir: Path = DEFAULT_CACHE
    gpqa_csv: Path | None = None
    benchmarks: list[str] = field(default_factory=lambda: list(BENCHMARKS))
    force: bool = False

    def conflicts(self, given: set[str]) -> list[str | None]:
        """--gpqa-csv feeds GPQA only (`given`: the flags on the command line)."""
        return [combined(given, ("gpqa_csv",), f"--benchmarks {' '.join(self.benchmarks)}", "GPQA is not prepared")
                if "gpqa" not in self.benchmarks else None]
