"""The reproduction study: train a grid of runs (standard / block / full, block sizes, model sizes, seeds, the paper's
ablations) with `attnres train`, then write RESULTS.md, runs.csv and PNG plots: mean +- std over seeds, paired deltas
per seed (same seed = same data order and init seed), the ablation table, the block-size sweep, and the scaling fit
L = a * C^b per mode with the compute multiplier at which the baseline matches AttnRes.

Resumable: each finished run is recorded (<output-dir>/runs/<id>/result.json); rerunning the same command skips them
and redoes runs that crashed or were never started. Grids: configs/study/*.json (see hf_attnres/study/grid.py).

  attnres study                                                      # the CPU grid, one run at a time
  attnres study --jobs 2 --report-dir docs/results/study-cpu         # two at a time (31 runs: ~80 min on 2 cores)
  attnres study --grid configs/study/gpu-20m.json                    # the 20M-parameter / 1B-token replication (GPU)
  attnres study --report-only                                        # aggregate what has finished
  attnres study --grid configs/study/cpu-lr.json --output-dir runs/check \
      --only block --lr 3e-3 --seed 11                               # one arm at one LR and seed

Each run keeps its record (result.json), its logs and its final model (runs/<id>/train/final/, about 13 MB at the
CPU grids' size): evaluate it again with `attnres compare`. The compared loss is the grid's train.metric: the final
model on the whole validation split (the default), or, for the committed grids cpu.json and cpu-lr.json whose records
were made so, the final eval's first eval_batches global batches (the report's header says which).
"""
from __future__ import annotations

import argparse
import shlex
import sys

from ..study.runner import StudyError, run_single, run_study
from ..study.study_args import StudyArgs
from ..utils.flags import parser_for
from . import command_main
from .combos import refuse_conflicts

DEFAULT_GRID = StudyArgs.grid


def build_parser() -> argparse.ArgumentParser:
    return parser_for(StudyArgs, description=__doc__)


def main(argv=None) -> int:
    """The exit code: 0, or 1 when some run failed; a bad grid or setting exits with one `error:` line."""
    parser = build_parser()
    args = StudyArgs(**vars(parser.parse_args(argv)))
    refuse_conflicts(parser, argv, args)  # before any work: a flag another makes meaningless is refused
    command = shlex.join(["python", "scripts/study.py", *(sys.argv[1:] if argv is None else argv)])
    try:
        problem = args.one_run_problem()
        if problem:
            raise StudyError(problem)
        if args.only is not None:
            return run_single(args.grid, args.output_dir, args.only, args.lr, args.seed, args.hidden,
                              threads=args.threads)
        return run_study(args.grid, args.output_dir, args.report_dir, jobs=args.jobs, threads=args.threads,
                         report_only=args.report_only, dry_run=args.dry_run, note=args.note, command=command)
    except StudyError as error:
        sys.exit(f"error: {error}")


def run():
    sys.exit(command_main("study"))
