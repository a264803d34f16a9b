"""The transformers releases this package's code supports, defined once: pyproject's requirement says the same (a test
holds them equal), and a saved folder's generated code records it and checks it at import
(hf_attnres/folders/remote_code.py).

A folder's code is frozen when it is generated, while transformers moves on under it: a release that renames an
argument the code passes (the cache argument, in 5.24) can make old code run and produce wrong tokens with no error.
So the shipped code refuses a transformers outside the range it was generated for, at import of its configuration
(what `AutoConfig` imports first, before any weight is read), in one line naming both versions and the fix.

Versions are compared by their release numbers only: a pre-release of 5.26 (5.26.0.dev0) already carries 5.26's
changes, so it is outside `<5.26`. They are read with a regular expression rather than `packaging` (which
transformers depends on): the shipped code imports nothing but torch, transformers and the standard library, the set
transformers' loader and the folder tests hold it to.
"""
from __future__ import annotations

import re

import transformers

# The one place the supported range is written: `>=MIN,<MAX`, MAX excluded, release numbers only
TRANSFORMERS_RANGE = ">=5.23,<5.26"
REPAIR_COMMAND = "pip install hf-attnres && attnres repair-folder FOLDER"
_RELEASE = re.compile(r"\s*v?(\d+(?:\.\d+)*)")  # PEP 440's release segment, at the start (an epoch is not used)
_BOUND = re.compile(r"\s*(>=|<)\s*(\d+(?:\.\d+)*)\s*")


class UnsupportedTransformersError(ImportError):
    """The installed transformers is outside the range a folder's code was generated for. An ImportError: the code
    cannot be imported here, as with a missing package."""


def release_of(version: str) -> tuple[int, ...]:
    """The release numbers of a version ("5.25.0.dev0" -> (5, 25, 0)); ValueError for text that is no version."""
    match = _RELEASE.match(str(version))
    if match is None:
        raise ValueError(f"not a version: {version!r}")
    return tuple(int(part) for part in match.group(1).split("."))


def range_bounds(text: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(lowest supported release, first release no longer supported) of a range written `>=MIN,<MAX`."""
    clauses = [_BOUND.fullmatch(clause) for clause in text.split(",")]
    bounds = {clause.group(1): release_of(clause.group(2)) for clause in clauses if clause is not None}
    if None in clauses or len(clauses) != 2 or set(bounds) != {">=", "<"}:
        raise ValueError(f"a transformers range is written >=MIN,<MAX, not {text!r}")
    return bounds[">="], bounds["<"]


TRANSFORMERS_MIN, TRANSFORMERS_MAX = range_bounds(TRANSFORMERS_RANGE)


def _padded(release: tuple[int, ...], size: int) -> tuple[int, ...]:
    return release + (0,) * (size - len(release))


def in_range(version: str, text: str = TRANSFORMERS_RANGE) -> bool:
    """Whether transformers `version` is in the range `text` (release numbers compared, padded: 5.23 is 5.23.0)."""
    low, high = range_bounds(text)
    release = release_of(version)
    size = max(len(release), len(low), len(high))
    return _padded(low, size) <= _padded(release, size) < _padded(high, size)


def unsupported_transformers(text: str = TRANSFORMERS_RANGE, generated_with: str | None = None,
                             installed: str | None = None) -> str | None:
    """The one-line refusal when the installed transformers (or `installed`) is outside `text`, else None.
    `generated_with`: the transformers a folder's code was generated with, named in the line."""
    installed = transformers.__version__ if installed is None else installed
    if in_range(installed, text):
        return None
    made = f" (generated with {generated_with})" if generated_with else ""
    low, high = (".".join(map(str, bound)) for bound in range_bounds(text))
    if release_of(installed) < range_bounds(text)[0]:  # older than the code: only a newer transformers helps
        fix = f"Install transformers>={low}"
    else:
        fix = f"Repair the folder's code with `{REPAIR_COMMAND}`, or install transformers<{high}"
    return f"this model folder's code supports transformers {text}{made}; installed: {installed}. {fix}"


def require_supported_transformers(text: str = TRANSFORMERS_RANGE, generated_with: str | None = None) -> None:
    """Raise UnsupportedTransformersError (the one line of `unsupported_transformers`) outside the range `text`."""
    problem = unsupported_transformers(text, generated_with)
    if problem is not None:
        raise UnsupportedTransformersError(problem)
