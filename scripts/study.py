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
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from attnres.cli.study import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
