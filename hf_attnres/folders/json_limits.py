"""JSON parsed with a nesting limit checked first, without recursion: `json.loads` recurses once per level, so a
file nested 100,000 deep (a grid, a JSONL row, a safetensors header) would end in RecursionError instead of a message
naming the file. Imports only the standard library: the model core (checkpoint_files.py) uses it."""
from __future__ import annotations

import json
import re
from itertools import accumulate

# Deeper than any config, grid, record or header this package reads (a safetensors header is 3 deep)
MAX_DEPTH = 64
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')  # a JSON string, escapes included (brackets inside do not count)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


class JSONDepthError(ValueError):
    """The text nests objects or arrays deeper than the limit."""


def json_depth(text: str) -> int:
    """The deepest nesting of objects and arrays in JSON `text` (a running sum over its brackets: no recursion)."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


def loads_limited(text: str | bytes, limit: int = MAX_DEPTH, **kwargs):
    """`json.loads(text, **kwargs)`, or JSONDepthError when `text` nests deeper than `limit` (checked first)."""
    if isinstance(text, (bytes, bytearray)):
        text = text.decode("utf-8")
    if json_depth(text) > limit:
        raise JSONDepthError(f"JSON nested more than {limit} deep")
    return json.loads(text, **kwargs)


__all__ = ["MAX_DEPTH", "JSONDepthError", "json_depth", "loads_limited"]
