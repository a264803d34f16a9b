"""The reproduction study: train a grid of runs (standard / block / full, block sizes, model sizes, seeds, the paper's
ablations) with `attnres train`, then write RESULTS.md, runs.csv and PNG plots: mean +- std over seeds, paired deltas
per seed (same seed = same data order and init seed), the ablation table, the block-size sweep, and the scaling fit
L = a * C^b per mode with the compute multiplier at which the baseline matches AttnRes.

Resumable: each finished run is recorded (<output-dir>/runs/<id>/result.json); rerunning the same command skips them
and redoes runs that crashed or were never started. Grids: configs/study/*.json (see attnres/study/grid.py).

  attnres study                                                      # the CPU grid, one run at a time
  attnres study --jobs 2 --report-dir results/study-cpu              # two at a time (31 runs: ~80 min on 2 cores)
  attnres study --grid configs/study/gpu-20m.json                    # the 20M-parameter / 1B-token replication (GPU)
  attnres study --report-only                                        # aggregate what has finished
"""
from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from ..study.runner import StudyError, run_study
from . import command_main
from .combos import check_study_flags

# The grids live in the checkout's configs/study/ (an installed package: pass --grid, or run from a checkout)
_CHECKOUT_GRID = Path(__file__).resolve().parents[2] / "configs" / "study" / "cpu.json"
DEFAULT_GRID = _CHECKOUT_GRID if _CHECKOUT_GRID.is_file() else Path("configs") / "study" / "cpu.json"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--grid", type=Path, default=DEFAULT_GRID, help="grid file (default configs/study/cpu.json)")
    p.add_argument("--output-dir", type=Path, default=None,
                   help="run records and logs (default runs/study-<grid name>)")
    p.add_argument("--report-dir", type=Path, default=None, help="RESULTS.md, runs.csv, PNGs (default: --output-dir)")
    p.add_argument("--jobs", type=int, default=1, help="runs trained at the same time (default 1)")
    p.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of each run (default 1)")
    p.add_argument("--report-only", action="store_true", help="train nothing: aggregate the finished runs")
    p.add_argument("--dry-run", action="store_true", help="list the runs (done / to train) and exit")
    p.add_argument("--note", default="", help="a line for the report's header (e.g. the machine's load)")
    return p


def main(argv=None) -> int:
    """The exit code: 0, or 1 when some run failed; a bad grid or setting exits with one `error:` line."""
    parser = build_parser()
    args = parser.parse_args(argv)
    check_study_flags(parser, argv, args)  # before any work: a flag another makes meaningless is refused
    command = shlex.join(["python", "scripts/study.py", *(sys.argv[1:] if argv is None else argv)])
    try:
        return run_study(args.grid, args.output_dir, args.report_dir, jobs=args.jobs, threads=args.threads,
                         report_only=args.report_only, dry_run=args.dry_run, note=args.note, command=command)
    except StudyError as error:
        sys.exit(f"error: {error}")


def run():
    sys.exit(command_main("study"))
