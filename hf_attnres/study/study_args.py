"""The flags of `attnres study` and `attnres continued-study` as dataclasses, one field per flag (hf_attnres/cli parses
them; a test holds fields and flags equal), with the rules that refuse a flag another one makes meaningless beside the
fields: flags given with --dry-run or --report-only (`conflicts`, refused as argparse's `error:` line), and the one-run
flags (`one_run_problem`: --only needs --lr and --seed, those need --only, and --only writes no report)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

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
    grid: Path = default_grid("cpu.json")
    output_dir: Path | None = None
    report_dir: Path | None = None
    jobs: int = 1
    threads: int = 1
    report_only: bool = False
    dry_run: bool = False
    note: str = ""
    only: str | None = None
    lr: float | None = None
    seed: int | None = None
    hidden: int | None = None

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
    grid: Path = default_grid("continued-cpu.json")
    output_dir: Path | None = None
    report_dir: Path | None = None
    threads: int = 1
    report_only: bool = False
    dry_run: bool = False
    note: str = ""
    force: bool = False
    only: str | None = None
    lr: float | None = None
    seed: int | None = None

    def one_run_problem(self) -> str | None:
        return one_run_problem(self.only, {"--lr": self.lr, "--seed": self.seed},
                               {"--report-only": self.report_only, "--dry-run": self.dry_run,
                                "--report-dir": self.report_dir is not None})
