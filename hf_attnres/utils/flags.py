"""argparse types and checks shared by the commands, so a bad flag is argparse's one `error:` line naming it (exit 2)
before any work: a seed numpy cannot take, a size the kernels cannot use, an output file that is a folder."""
from __future__ import annotations

import argparse
from pathlib import Path

SEED_MAX = 2**32 - 1  # numpy's (and so transformers.set_seed's) range; torch's is wider


def seed(text: str) -> int:
    """--seed: an integer from 0 to 2**32 - 1 (numpy refuses the rest with a traceback mid-run)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
    if not 0 <= value <= SEED_MAX:
        raise argparse.ArgumentTypeError(f"must be from 0 to {SEED_MAX} (2**32 - 1), got {text}")
    return value


def multiple_of(step: int, why: str):
    """An argparse type: a positive integer divisible by `step` (`why` says which kernel needs it)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
        if value < step or value % step:
            raise argparse.ArgumentTypeError(f"must be a positive multiple of {step} ({why}), got {value}")
        return value
    parse.__name__ = f"multiple of {step}"  # argparse names the type in its own messages
    return parse


def check_output_file(parser: argparse.ArgumentParser, flag: str, path) -> None:
    """A results file the command writes at its end: refused now if it is a folder or its folder cannot exist, not
    after minutes of work."""
    path = Path(path)
    if path.is_dir():
        parser.error(f"{flag} {path}: is a folder; give a file name (e.g. {path / 'results.json'})")
    parent = next((p for p in path.parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        parser.error(f"{flag} {path}: {parent} is a file, so the results cannot be written there")


__all__ = ["SEED_MAX", "seed", "multiple_of", "check_output_file"]
