"""Flags that another flag makes meaningless are refused by name, before any work: a flag that silently
does nothing (`train-interleaved --model DIR --layers 4`: the folder's config wins) makes a user believe they ran
what they did not. Each rule names both flags in one argparse-style line (`parser.error`: usage, then the line,
exit code 2).

A flag counts as given when it is on the command line, whatever its value (its default included), so no default
changes meaning.
"""
from __future__ import annotations

import argparse
import copy
import sys


def given_flags(parser: argparse.ArgumentParser, argv=None) -> set[str]:
    """The destinations of the options given on the command line `argv` (None: sys.argv[1:])."""
    quiet = copy.deepcopy(parser)
    for action in quiet._actions:  # a default never appears in the namespace: only what was given does
        action.default = argparse.SUPPRESS
    namespace, _ = quiet.parse_known_args(sys.argv[1:] if argv is None else argv)
    return set(vars(namespace))


def flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def refuse_with(parser, given: set[str], dests, other: str, why: str) -> None:
    """parser.error for the first of `dests` given: '--X cannot be combined with OTHER: WHY'."""
    for dest in dests:
        if dest in given:
            parser.error(f"{flag(dest)} cannot be combined with {other}: {why}")


def refuse_without(parser, given: set[str], dests, needed: str, why: str) -> None:
    """parser.error for the first of `dests` given: '--X needs NEEDED: WHY'."""
    for dest in dests:
        if dest in given:
            parser.error(f"{flag(dest)} needs {needed}: {why}")


def check_pipeline_flags(parser, argv, args) -> None:
    """train-pipeline and train-interleaved: the tiny model's flags against --model, --seq-len against --data."""
    given = given_flags(parser, argv)
    if args.model is not None:
        refuse_with(parser, given, ("mode", "block_size", "layers"), f"--model {args.model}",
                    "the folder's config decides the model (these flags shape the tiny random model only)")
    elif args.mode != "block":
        refuse_with(parser, given, ("block_size",), f"--mode {args.mode}", "blocks exist in block mode only")
    if args.data is not None:
        refuse_with(parser, given, ("seq_len",), f"--data {args.data}", "the prepared data's own sequence length "
                    "is used")
    if args.model is None:
        refuse_without(parser, given, ("trust_remote_code",), "--model", "it allows the --model folder's code")


def check_demo_flags(parser, argv, args) -> None:
    if args.mode != "block":
        refuse_with(parser, given_flags(parser, argv), ("block_size",), f"--mode {args.mode}",
                    "blocks exist in block mode only")


def check_train_flags(parser, argv, args) -> None:
    """`attnres train`'s CLI-level rules; the ones that need the resolved model (--block-size, --res-proj-* against
    the model's mode, from --config or --init-from too) are in attnres/training/loop.py."""
    if args.init_from is None:
        refuse_without(parser, given_flags(parser, argv), ("trust_remote_code",), "--init-from",
                       "it allows the --init-from folder's code")


def check_bench_model_flags(parser, argv, args) -> None:
    given = given_flags(parser, argv)
    if not any("block" in mode for mode in args.modes):
        refuse_with(parser, given, ("block_size",), f"--modes {','.join(args.modes)}", "no block mode is benchmarked")
    if "decode" not in args.phases:
        refuse_with(parser, given, ("decode_steps",), f"--phases {','.join(args.phases)}",
                    "the decode phase is not run")
    if "long_prefill" not in args.phases:
        refuse_with(parser, given, ("long_prompt", "chunk"), f"--phases {','.join(args.phases)}",
                    "the long_prefill phase is not run")


def check_bench_kernels_flags(parser, argv, args) -> None:
    if args.device == "cuda":
        refuse_with(parser, given_flags(parser, argv), ("clock",), "a GPU run (--device cuda, or auto on a GPU)",
                    "--clock picks the clock of CPU runs")


def check_prepare_data_flags(parser, argv, args) -> None:
    given = given_flags(parser, argv)
    if args.hub is None:
        refuse_without(parser, given, ("hub_config", "hub_split"), "--hub", "they pick the Hub dataset's config "
                       "and split")
    if args.tokenizer != "bpe":
        refuse_with(parser, given, ("vocab_size",), f"--tokenizer {args.tokenizer}",
                    "only a BPE trained here (--tokenizer bpe) takes a vocabulary size")
    source = "--files" if args.files else "--hub" if args.hub else "--chat" if args.chat else None
    if source is not None:
        refuse_with(parser, given, ("corpora",), source, "the offline corpora are read only when no other source "
                    "is given")
    else:
        refuse_without(parser, given, ("text_column",), "--files or --hub", "the offline corpora have no columns")


def check_prepare_eval_data_flags(parser, argv, args) -> None:
    if "gpqa" not in args.benchmarks:
        refuse_with(parser, given_flags(parser, argv), ("gpqa_csv",), f"--benchmarks {' '.join(args.benchmarks)}",
                    "GPQA is not prepared")


def check_push_to_hub_flags(parser, argv, args) -> None:
    given = given_flags(parser, argv)
    if args.repo_id is None:
        refuse_without(parser, given, ("private", "commit_message"), "--repo-id", "without it nothing is uploaded")
    elif args.dry_run:
        refuse_with(parser, given, ("private", "commit_message"), "--dry-run", "nothing is uploaded")


def check_study_flags(parser, argv, args) -> None:
    given = given_flags(parser, argv)
    if args.dry_run:
        refuse_with(parser, given, ("report_only", "jobs", "threads", "report_dir", "note"), "--dry-run",
                    "a dry run lists the runs and trains or reports nothing")
    if args.report_only:
        refuse_with(parser, given, ("jobs", "threads"), "--report-only", "nothing is trained")


def check_main_job_flags(parser, argv, args) -> None:
    if args.no_tasks:
        refuse_with(parser, given_flags(parser, argv), ("tasks", "task_limit"), "--no-tasks",
                    "no benchmark task runs")


def check_compare_flags(parser, argv, args) -> None:
    """--data feeds the heldout task only; --allow-code-execution matters to a code task only (the default tasks
    have none: they need no text generation)."""
    from ..evaluation.runner import HELDOUT
    from ..evaluation.tasks import CODE_TASKS

    given = given_flags(parser, argv)
    tasks = f"--tasks {' '.join(args.tasks)}" if args.tasks is not None else "the default tasks (no --tasks)"
    if args.tasks is not None and HELDOUT not in args.tasks:
        refuse_with(parser, given, ("data",), tasks, f"it feeds the {HELDOUT} task only")
    if not any(task in CODE_TASKS for task in args.tasks or ()):
        refuse_with(parser, given, ("allow_code_execution",), tasks,
                    f"no code task runs ({', '.join(CODE_TASKS)})")
