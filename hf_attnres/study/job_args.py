"""`attnres main-job`'s flags as one dataclass, one field per flag (hf_attnres/cli/main_job.py parses them; each field
declares its flag), with the rule that refuses a flag another one makes meaningless beside the fields."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..utils.flags import flag
from ..utils.flags import seed as seed_flag
from ..utils.refusals import combined

DEFAULT_TASKS = ("attnres_mmlu_bpb", "attnres_triviaqa_bpb")


@dataclass
class MainJobArgs:
    data: Path = flag(
        Path("data/main-job"), group="data", type=Path, help="prepared corpus folder (default data/main-job)")
    vocab_size: int = flag(4096, group="data", type=int, help="BPE vocabulary trained on the corpus (default 4096)")
    seq_len: int = flag(128, group="data", type=int, help="tokens per training sequence (default 128)")
    files: list[str] | None = flag(
        None, group="data", nargs="+", help="text files to use instead of the offline corpus")
    layers: int = flag(
        12, group="model (both runs)", type=int, help="decoder layers (default 12: deep enough for depth to matter)")
    hidden_size: int = flag(128, group="model (both runs)", type=int, help="hidden size (default 128)")
    block_size: int = flag(
        3, group="model (both runs)", type=int, help="layers per AttnRes block (default 3, as the paper's 48B model)")
    steps: int = flag(500, group="training (both runs)", type=int, help="optimizer steps (default 500)")
    micro_batch_size: int = flag(16, group="training (both runs)", type=int, help="sequences per step (default 16)")
    lr_standard: float | None = flag(
        None, group="training (both runs)", type=float,
        help="peak LR of the standard run (default: the LR study's best for it, 1.2e-2 at the defaults; "
             "summary.json's learning_rates says where it came from)")
    lr_block: float | None = flag(
        None, group="training (both runs)", type=float,
        help="peak LR of the Block AttnRes run (default: the LR study's best for it, 3e-3 at the defaults)")
    lr: float | None = flag(
        None, group="training (both runs)", type=float,
        help="one shared peak LR for both runs instead (labelled 'shared LR' in the summary: not each "
             "arm's own best; not with --lr-standard / --lr-block)")
    warmup_steps: int | None = flag(None, group="training (both runs)", type=int, help="default: a tenth of --steps")
    eval_every: int | None = flag(
        None, group="training (both runs)", type=int, help="validation loss every N steps (default: --steps / 5)")
    seed: int = flag(
        0, group="training (both runs)", type=seed_flag, help="init and data order of both runs (default 0)")
    sequential: bool = flag(
        False, group="training (both runs)", action="store_true",
        help="train one run after the other, with 2 threads each")
    tasks: list[str] = flag(
        factory=lambda: list(DEFAULT_TASKS), group="evaluation", nargs="+",
        help=f"lm-eval tasks (eval/compare.py's names; default {' '.join(DEFAULT_TASKS)})")
    task_limit: int = flag(
        20, group="evaluation", type=int, help="items per (sub)task (default 20: a smoke-size subset)")
    no_tasks: bool = flag(
        False, group="evaluation", action="store_true", help="held-out loss / bits per byte only (no download)")
    eval_data: Path = flag(
        Path("data/eval"), group="evaluation", type=Path, help="benchmark data folder (default data/eval)")
    output_dir: Path = flag(
        Path("runs/main-job"), group="output", type=Path, help="everything goes here (default runs/main-job)")

    def conflicts(self, given: set[str]) -> list[str | None]:
        """--no-tasks makes the task flags meaningless (`given`: the flags on the command line)."""
        return [combined(given, ("tasks", "task_limit"), "--no-tasks", "no benchmark task runs")
                if self.no_tasks else None]
