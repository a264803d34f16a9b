"""The flags of the training package's two small tools as dataclasses, one field per flag (hf_attnres/cli parses them;
each field declares its flag): `attnres plan-memory` (over `memory_plan`) and the depth-diagnostics plot (over
`logs`, hf_attnres/cli/plot_diagnostics.py), with the rules that refuse a value beside the fields."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..utils.flags import flag
from ..utils.refusals import below
from .memory_plan import PRESETS

DEFAULT_CONTEXT = 32768  # tokens per sequence a plan assumes, unless the model's positions are fewer


@dataclass
class PlanMemoryArgs:
    config: str = flag("k3", positional=True, nargs="?", help=f"config.json, a folder, or a preset {PRESETS}")
    batch: int = flag(1, type=int, help="sequences in the forward (default 1)")
    # None: the CLI fills it from the config (hf_attnres/cli/plan_memory.default_context)
    context: int | None = flag(
        None, type=int,
        help=f"tokens per sequence (default {DEFAULT_CONTEXT:,}, or the model's "
             "max_position_embeddings when smaller, with a note)")
    stages: int = flag(
        8, type=int,
        help="pipeline stages, decoder layers split evenly, at most one a layer (default 8, or one "
             "a layer when the model has fewer, with a note)")
    micro_batch: int = flag(1, type=int, help="sequences per pipeline micro-batch, a divisor of --batch (default 1)")
    activation_dtype: str = flag(
        "bf16", choices=("bf16", "fp32"), help="dtype of the depth sources and boundary tensors (default bf16)")

    def problems(self) -> list[str]:
        """The refusal line of each count below 1 (a count left out has a valid default)."""
        return below(self, ("batch", "context", "stages", "micro_batch"), 1)


@dataclass
class DiagnosticsPlotArgs:
    run_dirs: list[Path] = flag(
        positional=True, nargs="+", type=Path, help="run folders of scripts/train.py (with diagnostics.jsonl)")
    out: Path = flag(Path("depth_diagnostics.png"), type=Path, help="PNG to write")
