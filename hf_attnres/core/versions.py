"""The transformers releases this package's code supports: the range is defined once
(hf_attnres.core.version_guard, which a saved folder's configuration ships and checks at import), pyproject's
requirement says the same (a test holds them equal), and this module reads ranges written `>=MIN,<MAX` for the
package's tools (the generator, repair-folder).

Versions are compared by their release numbers only: a pre-release of 5.26 (5.26.0.dev0) already carries 5.26's
changes, so it is outside `<5.26`.
"""
from __future__ import annotations

import re

from hf_attnres.core.version_guard import (
    REPAIR_COMMAND,
    TRANSFORMERS_RANGE,
    UnsupportedTransformersError,
    release_of,
    require_supported_transformers,
    unsupported_transformers,
)

__all__ = ["REPAIR_COMMAND", "TRANSFORMERS_MAX", "TRANSFORMERS_MIN", "TRANSFORMERS_RANGE",
           "UnsupportedTransformersError", "in_range", "range_bounds", "release_of", "require_supported_transformers",
           "unsupported_transformers"]
_BOUND = re.compile(r"\s*(>=|<)\s*(\d+(?:\.\d+)*)\s*")


def range_bounds(text: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(lowest supported release, first release no longer supported) of a range written `>=MIN,<MAX`."""
    clauses = [_BOUND.fullmatch(clause) for clause in text.split(",")]
    bounds = {clause.group(1): release_of(clause.group(2)) for clause in clauses if clause is not None}
    if None in clauses or len(clauses) != 2 or set(bounds) != {">=", "<"}:
        raise ValueError(f"a transformers range is written >=MIN,<MAX, not {text!r}")
    return bounds[">="], bounds["<"]


TRANSFORMERS_MIN, TRANSFORMERS_MAX = range_bounds(TRANSFORMERS_RANGE)


def in_range(version: str, text: str = TRANSFORMERS_RANGE) -> bool:
    """Whether transformers `version` is in the range `text` (release numbers compared, padded: 5.23 is 5.23.0)."""
    range_bounds(text)  # a range not written `>=MIN,<MAX` is refused
    return unsupported_transformers(text, installed=version) is None
