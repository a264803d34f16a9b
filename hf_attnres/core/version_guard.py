"""The transformers range a saved folder's code supports, and the check its configuration runs at import.

A folder's code is frozen when it is generated, while transformers moves on under it: a release that renames an
argument the code passes (the cache argument, in 5.24) can make old code run and produce wrong tokens with no error.
So the code refuses a transformers outside the range it was generated for, before any weight is read, in one line
naming both versions and the fix. The package's general reading of ranges (pyproject's requirement, repair-folder's
notes) is hf_attnres.core.versions.
"""
from __future__ import annotations

import re

import transformers

# The one place the supported range is written: `>=MIN,<MAX`, MAX excluded, release numbers only
TRANSFORMERS_RANGE = ">=5.23,<5.26"
REPAIR_COMMAND = "pip install hf-attnres && attnres repair-folder FOLDER"


class UnsupportedTransformersError(ImportError):
    """The installed transformers is outside the range a folder's code was generated for. An ImportError: the code
    cannot be imported here, as with a missing package."""


def release_of(version: str) -> tuple[int, ...]:
    """The release numbers of a version ("5.25.0.dev0" -> (5, 25, 0)); ValueError for text that is no version.
    Read with a regular expression, not `packaging`: the folder's code imports only torch, transformers and the
    standard library. Release numbers only: a pre-release of 5.26 already carries 5.26's changes."""
    match = re.match(r"\s*v?(\d+(?:\.\d+)*)", str(version))  # PEP 440's release segment (an epoch is not used)
    if match is None:
        raise ValueError(f"not a version: {version!r}")
    return tuple(int(part) for part in match.group(1).split("."))


def unsupported_transformers(text: str = TRANSFORMERS_RANGE, generated_with: str | None = None,
                             installed: str | None = None) -> str | None:
    """The one-line refusal when the installed transformers (or `installed`) is outside the range `text`, written
    `>=MIN,<MAX`, else None. `generated_with`: the transformers the code was generated with, named in the line."""
    installed = transformers.__version__ if installed is None else installed
    low, high = (bound.strip().lstrip(">=<").strip() for bound in text.split(","))
    releases = [release_of(version) for version in (low, installed, high)]
    size = max(map(len, releases))  # padded: 5.23 is 5.23.0
    low_release, release, high_release = (r + (0,) * (size - len(r)) for r in releases)
    if low_release <= release < high_release:
        return None
    made = f" (generated with {generated_with})" if generated_with else ""
    if release < low_release:  # older than the code: only a newer transformers helps
        fix = f"Install transformers>={low}"
    else:
        fix = f"Repair the folder's code with `{REPAIR_COMMAND}`, or install transformers<{high}"
    return f"this model folder's code supports transformers {text}{made}; installed: {installed}. {fix}"


def require_supported_transformers(text: str = TRANSFORMERS_RANGE, generated_with: str | None = None) -> None:
    """Raise UnsupportedTransformersError (the one line of `unsupported_transformers`) outside the range `text`: frozen
    code under a transformers that renamed an argument it passes would otherwise run and give wrong tokens."""
    problem = unsupported_transformers(text, generated_with)
    if problem is not None:
        raise UnsupportedTransformersError(problem)
