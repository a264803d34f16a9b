"""The refusal lines of flags that another flag makes meaningless, as data: a command's argument dataclass declares
its rules with these beside its fields, and the CLI turns the first line into argparse's `error:` (usage, the line,
exit code 2). A flag counts as given when it is on the command line, whatever its value, so no default changes
meaning; `given` is the set of destinations given."""
from __future__ import annotations


def flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def below(args, dests, minimum) -> list[str]:
    """'--X must be >= MINIMUM, got V' for each of `dests` whose value on `args` is below `minimum` (None: left out,
    a default fills it)."""
    return [f"{flag(dest)} must be >= {minimum}, got {getattr(args, dest)}" for dest in dests
            if getattr(args, dest) is not None and getattr(args, dest) < minimum]


def combined(given: set[str], dests, other: str, why: str) -> str | None:
    """'--X cannot be combined with OTHER: WHY' for the first of `dests` given, else None."""
    for dest in dests:
        if dest in given:
            return f"{flag(dest)} cannot be combined with {other}: {why}"
    return None


def needs(given: set[str], dests, needed: str, why: str) -> str | None:
    """'--X needs NEEDED: WHY' for the first of `dests` given, else None."""
    for dest in dests:
        if dest in given:
            return f"{flag(dest)} needs {needed}: {why}"
    return None
