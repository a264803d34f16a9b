"""The flags of `attnres study` and `attnres continued-study` as dataclasses, one field per flag (hf_attnres/cli parses
them; each field declares its flag), with the rules that refuse a flag another one makes meaningless beside the
fields: flags given with --dry-run or --report-only (`conflicts`, refused as argparse's `error:` line), and the one-run
flags (`one_run_problem`: --only needs --lr and --seed, those need --only, and --only writes no report)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..utils.flags import flag
from ..utils.flags import seed as seed_flag
from ..utils.refusals import combined

# The grids live in the checkout's configs/study/ (an installed package: pass --grid, or run from a checkout)
_CHECKOUT_GRIDS = Path(__file__).resolve().parents[2] / "configs" / "study"


def default_grid(name: str) -> Path:
    """The checkout's configs/study/NAME, or the relative configs/study/NAME where the package has no checkout."""
    checkout = _CHECKOUT_GRIDS / name
    return checkout if checkout.is_file() else Path("configs") / "study" / name


def one_run_problem(only: str | None, one: dict, clash: dict) -> str | None:
    """The line refusing a one-run setting, or None. `one`: the one-run flags and their values (None: not given);
    `clash`: the report flags and whether each is set."""
    if only is None:
        given = [flag for flag, value in one.items() if value is not None]
        return f"{', '.join(given)} apply to one run: give --only ARM too" if given else None
    missing = [flag for flag in ("--lr", "--seed") if one[flag] is None]
    if missing:
        return f"--only {only} needs {' and '.join(missing)}"
    clashing = [flag for flag, on in clash.items() if on]
    return f"--only trains one run and writes no report: drop {', '.join(clashing)}" if clashing else None


@dataclass
class StudyArgs:
    grid: Path = flag(default_grid("cpu.json"), type=Path, help="grid file (default configs/study/cpu.json)")
    output_dir: Path | None = flag(None, type=Path, help="run records and logs (default runs/study-<grid name>)")
    report_dir: Path | None = flag(None, type=Path, help="RESULTS.md, runs.csv, PNGs (default: --output-dir)")
    jobs: int = flag(1, type=int, help="runs trained at the same time (default 1)")
    threads: int = flag(1, type=int, help="OMP_NUM_THREADS of each run (default 1)")
    report_only: bool = flag(False, action="store_true", help="train nothing: aggregate the finished runs")
    dry_run: bool = flag(False, action="store_true", help="list the runs (done / to train) and exit")
    note: str = flag("", help="a line for the report's header (e.g. the machine's load)")
    only: str | None = flag(
        None, group="one run: one arm at one learning rate and seed (e.g. to add a seed, or to check a run)",
        metavar="ARM",
        help="train only this arm of the grid (standard, block, full or a named arm of its 'arms'); "
             "with --lr and --seed. Its record and model land where the grid's own run would")
    lr: float | None = flag(
        None, group="one run: one arm at one learning rate and seed (e.g. to add a seed, or to check a run)",
        type=float, help="its peak learning rate (with --only)")
    seed: int | None = flag(
        None, group="one run: one arm at one learning rate and seed (e.g. to add a seed, or to check a run)", type=int,
        help="its seed: init and data order (with --only)")
    hidden: int | None = flag(
        None, group="one run: one arm at one learning rate and seed (e.g. to add a seed, or to check a run)", type=int,
        help="its hidden size (with --only; default: the grid's)")

    def conflicts(self, given: set[str]) -> list[str | None]:
        """A dry run trains and reports nothing; a report-only run trains nothing (`given`: the flags on the command
        line)."""
        return [
            combined(given, ("report_only", "jobs", "threads", "report_dir", "note"), "--dry-run",
                     "a dry run lists the runs and trains or reports nothing") if self.dry_run else None,
            combined(given, ("jobs", "threads"), "--report-only", "nothing is trained") if self.report_only else None,
        ]

    def one_run_problem(self) -> str | None:
        return one_run_problem(self.only, {"--lr": self.lr, "--seed": self.seed, "--hidden": self.hidden},
                               {"--report-only": self.report_only, "--dry-run": self.dry_run,
                                "--report-dir": self.report_dir is not None, "--jobs": self.jobs != 1})


@dataclass
class ContinuedStudyArgs:
    grid: Path = flag(
        default_grid("continued-cpu.json"), type=Path,
        help="continued grid file (default configs/study/continued-cpu.json)")
    output_dir: Path | None = flag(None, type=Path, help="run records (default runs/study-<grid name>)")
    report_dir: Path | None = flag(None, type=Path, help="summary.md, .json, PNG (default: --output-dir)")
    threads: int = flag(1, type=int, help="torch threads of the runs (default 1)")
    report_only: bool = flag(
        False, action="store_true", help="train nothing: report the finished runs (lm-eval: the last comparison made)")
    dry_run: bool = flag(False, action="store_true", help="list the runs (done / to train) and exit")
    note: str = flag("", help="a line for the report's header (e.g. the machine's load)")
    force: bool = flag(
        False, action="store_true",
        help="train an edited grid into an --output-dir that holds another grid's runs (refused without: "
             "the differing fields are named; runs of the old settings are then redone)")
    only: str | None = flag(
        None, group="one run: one arm at one learning rate and seed", metavar="ARM",
        help="train only this arm (standard, block, full, frozen)")
    lr: float | None = flag(
        None, group="one run: one arm at one learning rate and seed", type=float,
        help="its peak learning rate (with --only)")
    seed: int | None = flag(
        None, group="one run: one arm at one learning rate and seed", type=seed_flag,
        help="its seed: data order (with --only)")

    def one_run_problem(self) -> str | None:
        return one_run_problem(self.only, {"--lr": self.lr, "--seed": self.seed},
                               {"--report-only": self.report_only, "--dry-run": self.dry_run,
                                "--report-dir": self.report_dir is not None})


CURVE_GRIDS = ("curve-40k.json", "curve-160k.json", "curve-640k.json")
GPU_GRID_TOKENS = 300 * 16 * 512  # configs/study/continued-gpu.json's budget per run (a test holds them equal)


@dataclass
class ContinuedCurveArgs:
    grids: list[Path] = flag(
        factory=lambda: [default_grid(name) for name in CURVE_GRIDS], positional=True, nargs="*", type=Path,
        help="the budget's continued grids, any order (default configs/study/curve-{40k,160k,640k}.json)")
    runs_root: Path = flag(
        Path("runs"), type=Path,
        help="where each grid's runs are: <runs-root>/<grid name>/runs/ (continued-study's --output-dir; default runs)")
    report_dir: Path = flag(Path("runs/curve"), type=Path, help="curve.md, curve.json, curve.png (default runs/curve)")
    past: int = flag(
        GPU_GRID_TOKENS, type=int,
        help="say whether this many tokens per run lies past the crossing (default 2457600, the GPU grid's budget)")
