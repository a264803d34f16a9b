"""The flags of the training package's two small tools as dataclasses, one field per flag (hf_attnres/cli parses them; a
test holds fields and flags equal): `attnres plan-memory` (over `memory_plan`) and the depth-diagnostics plot (over
`logs`, hf_attnres/cli/plot_diagnostics.py), with the rules that refuse a value beside the fields."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..utils.refusals import below


@dataclass
class PlanMemoryArgs:
    config: str = "k3"
    batch: int = 1
    context: int | None = None  # None: the CLI fills it from the config (hf_attnres/cli/plan_memory.default_context)
    stages: int = 8
    micro_batch: int = 1
    activation_dtype: str = "bf16"

    def problems(self) -> list[str]:
        """The refusal line of each count below 1 (a count left out has a valid default)."""
        return below(self, ("batch", "context", "stages", "micro_batch"), 1)


@dataclass
class DiagnosticsPlotArgs:
    run_dirs: list[Path]
    out: Path = Path("depth_diagnostics.png")
