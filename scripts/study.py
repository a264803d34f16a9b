#!/usr/bin/env python3
"""The reproduction study: train a grid of runs (standard / block / full, block sizes, model sizes, seeds, the paper's
ablations) with scripts/train.py, then write RESULTS.md, runs.csv and PNG plots: mean +- std over seeds, paired deltas
per seed (same seed = same data order and init seed), the ablation table, the block-size sweep, and the scaling fit
L = a * C^b per mode with the compute multiplier at which the baseline matches AttnRes.

Resumable: each finished run is recorded (<output-dir>/runs/<id>/result.json); rerunning the same command skips them
and redoes runs that crashed or were never started. Grids: configs/study/*.json (see attnres/study/grid.py).

  python scripts/study.py                                            # the CPU grid, one run at a time
  python scripts/study.py --jobs 2 --report-dir results/study-cpu    # two at a time (31 runs: ~80 min on 2 cores)
  python scripts/study.py --grid configs/study/gpu-20m.json          # the 20M-parameter / 1B-token replication (GPU)
  python scripts/study.py --report-only                              # aggregate what has finished
"""
from __future__ import annotations

import argparse
import os
import platform
import shlex
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

DEFAULT_GRID = Path(__file__).resolve().parent.parent / "configs" / "study" / "cpu.json"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--grid", type=Path, default=DEFAULT_GRID, help="grid file (default configs/study/cpu.json)")
    p.add_argument("--output-dir", type=Path, default=None, help="run records and logs (default runs/study-<grid name>)")
    p.add_argument("--report-dir", type=Path, default=None, help="RESULTS.md, runs.csv, PNGs (default: --output-dir)")
    p.add_argument("--jobs", type=int, default=1, help="runs trained at the same time (default 1)")
    p.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of each run (default 1)")
    p.add_argument("--report-only", action="store_true", help="train nothing: aggregate the finished runs")
    p.add_argument("--dry-run", action="store_true", help="list the runs (done / to train) and exit")
    p.add_argument("--note", default="", help="a line for the report's header (e.g. the machine's load)")
    return p


def hardware() -> str:
    import torch

    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"CPU only, {os.cpu_count()} cores"
    return f"{platform.machine()} {platform.system()}, {device}, torch {torch.__version__}, Python {platform.python_version()}"


def header(args, started: float, records: list[dict]) -> str:
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    wall = sum(r.get("wall_s", 0) for r in records)
    finished = [r["finished"] for r in records if "finished" in r]
    lines = [
        f"- Command: `{shlex.join(['python', 'scripts/study.py', *sys.argv[1:]])}`",
        f"- Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(started))}"
        + (f" (runs finished between {min(finished)} and {max(finished)})" if finished else "")
        + f"; hardware: {hardware()}",
        ("- " if args.report_only else f"- Runs: {args.jobs} at a time, OMP_NUM_THREADS={args.threads} each; ")
        + f"summed run wall time {wall / 60:.1f} min; load average (1/5/15 min) when the report was written: {load}",
    ]
    if args.note:
        lines.append(f"- Note: {args.note}")
    return "\n".join(lines) + "\n\n"


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    from attnres.study.grid import load_grid
    from attnres.study.report import write_report
    from attnres.study.runner import RESULT_FILE, read_result, run_grid, run_spec

    if args.jobs < 1 or args.threads < 1:
        sys.exit(f"error: --jobs and --threads must be >= 1, got {args.jobs} and {args.threads}")
    try:
        grid = load_grid(args.grid)
    except ValueError as error:
        sys.exit(f"error: {error}")
    out = args.output_dir or Path("runs") / f"study-{grid.name}"
    report_dir = args.report_dir or out
    started = time.time()
    if args.dry_run or args.report_only:
        records = [r for k in grid.runs() if (r := read_result(out / "runs" / k.id, run_spec(grid, k)))]
        errors = []
        if args.dry_run:
            done = {r["id"] for r in records}
            for key in grid.runs():
                print(f"{'done ' if key.id in done else 'to do'}  {key.id}  ({out / 'runs' / key.id / RESULT_FILE})")
            return 0
    else:
        records, errors = run_grid(grid, out, jobs=args.jobs, threads=args.threads)
    path = write_report(grid, records, report_dir, header(args, started, records))
    print(f"wrote {path} ({len(records)} of {len(grid.runs())} runs finished)")
    if errors:
        print(f"error: {len(errors)} run(s) failed (rerun the same command to redo them):", *errors, sep="\n  ",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
