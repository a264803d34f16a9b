"""Continued training of a pretrained checkpoint (SmolLM2-135M-Instruct by default): does AttnRes help a model that
already exists? Four arms, each swept to its own best learning rate, then seeds at the bests:

  standard  the original model, continued with its standard residual
  block     upcycled to Block AttnRes (`hf_attnres.upcycle`, about 8 blocks), continued identically
  full      upcycled to Full AttnRes
  frozen    upcycled to Block AttnRes, training only the pseudo-queries and key norms (the backbone frozen)

Same corpus (the offline English corpus, tokenized with the source's own tokenizer; a held-out split disjoint from
training), token budget, schedule and data order per seed for every arm. Reports the zero line (the pretrained model
and each upcycled model at step 0 on the whole held-out split), held-out loss and bits per byte after training with
paired per-seed deltas against the standard arm, an lm-eval subset before and after (paired per item), and the depth
diagnostics of the AttnRes arms (summary.md, summary.json, continued.png).

Resumable: each finished run leaves <output-dir>/runs/<id>/result.json (written last) and trainable.safetensors (the
tensors it trained: with the source they rebuild the model); rerunning skips finished runs.

  attnres continued-study                                                  # configs/study/continued-cpu.json
  attnres continued-study --grid configs/study/continued-gpu.json          # a larger budget on a CUDA device
  attnres continued-study --dry-run                                        # list the runs, done or to do
  attnres continued-study --only block --lr 3e-4 --seed 1                  # one arm at one LR and seed
"""
from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys

from ..study.runner import StudyError
from ..study.study_args import ContinuedStudyArgs
from ..utils.flags import parser_for
from . import command_main

DEFAULT_GRID = ContinuedStudyArgs.grid


def build_parser() -> argparse.ArgumentParser:
    return parser_for(ContinuedStudyArgs, description=__doc__)


INTERRUPTED = {signal.SIGINT: 130, signal.SIGTERM: 143}


def stop_on_signals(output_dir) -> None:
    """From a shell: Ctrl-C or SIGTERM ends the study at once with one line and exit 130 / 143. Every finished run's
    result.json was written atomically and stays; the run in progress is redone by the next invocation. (The exit
    is immediate: a run trains in a worker thread that a normal exit would wait for.)"""
    def handler(signum, _frame):
        where = output_dir or "the output folder"
        sys.stderr.write(f"\nattnres continued-study: interrupted ({signal.Signals(signum).name}); the finished runs "
                         f"stay in {where}: rerun the same command to continue\n")
        sys.stderr.flush()
        os._exit(INTERRUPTED[signum])

    for signum in INTERRUPTED:
        signal.signal(signum, handler)


def main(argv=None, resolve_source=None) -> int:
    """The exit code: 0, or 1 when some run failed; a bad grid or setting exits with one `error:` line."""
    from ..study.continued.study import run_continued, run_one

    args = ContinuedStudyArgs(**vars(build_parser().parse_args(argv)))
    if argv is None:
        stop_on_signals(args.output_dir)
    command = shlex.join(["attnres", "continued-study", *(sys.argv[1:] if argv is None else argv)])
    try:
        problem = args.one_run_problem()
        if problem:
            raise StudyError(problem)
        if args.only is not None:
            return run_one(args.grid, args.output_dir, args.only, args.lr, args.seed, threads=args.threads,
                           resolve_source=resolve_source, force=args.force)
        return run_continued(args.grid, args.output_dir, args.report_dir, threads=args.threads,
                             report_only=args.report_only, dry_run=args.dry_run, note=args.note, command=command,
                             resolve_source=resolve_source, force=args.force)
    except StudyError as error:
        sys.exit(f"error: {error}")


def run():
    sys.exit(command_main("continued-study"))


if __name__ == "__main__":
    run()
