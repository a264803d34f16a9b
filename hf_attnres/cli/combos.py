"""Flags that another flag makes meaningless are refused by name, before any work: a flag that silently
does nothing (`train-interleaved --model DIR --layers 4`: the folder's config wins) makes a user believe they ran
what they did not. Each rule names both flags in one argparse-style line (`parser.error`: usage, then the line,
exit code 2).

A flag counts as given when it is on the command line, whatever its value (its default included), so no default
changes meaning. A command whose flags are a dataclass declares its rules beside its fields (`conflicts(given)`,
refused by `refuse_conflicts`); here are the parsing pieces they share.
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


def refuse_first(parser, lines) -> None:
    """parser.error with the first refusal line of `lines` that is not None."""
    for line in lines:
        if line is not None:
            parser.error(line)


def refuse_conflicts(parser, argv, args) -> None:
    """The rules a command's argument dataclass declares beside its fields (`conflicts(given)`)."""
    refuse_first(parser, args.conflicts(given_flags(parser, argv)))


