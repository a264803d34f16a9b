"""Check the text / JSON files given to scripts/prepare_data.py before any work: each problem is reported with the
file (and line) it is in, instead of a traceback from the datasets loaders."""
from __future__ import annotations

import json
from pathlib import Path

SUFFIXES = (".txt", ".jsonl", ".json")


def _lines(path: Path):
    """(line number, text) of a UTF-8 text file; a binary or non-UTF-8 file raises ValueError naming it."""
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, 1):
            if b"\0" in raw:
                raise ValueError(f"--files: {path} line {number}: binary data (NUL byte); expected UTF-8 text")
            try:
                yield number, raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise ValueError(f"--files: {path} line {number}: not UTF-8 text ({error.reason} at byte "
                                 f"{error.start}); re-encode it as UTF-8") from None


def _check_record(record, path: Path, where: str, column: str) -> None:
    if not isinstance(record, dict):
        raise ValueError(f"--files: {path} {where}: expected a JSON object with a {column!r} field, got "
                         f"{type(record).__name__}")
    if not isinstance(record.get(column), str):
        if column not in record:
            raise ValueError(f"--files: {path} {where}: no column {column!r} (fields: {sorted(record)}); use "
                             "--text-column")
        raise ValueError(f"--files: {path} {where}: column {column!r} is a {type(record[column]).__name__}, "
                         "expected a string")


def check_input_file(path: Path, column: str = "text") -> None:
    """Raise ValueError naming `path` (and the line) when it cannot be read as a corpus file."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"--files: {path} does not exist" if not path.exists() else f"--files: {path} is not a file")
    if path.suffix not in SUFFIXES:
        raise ValueError(f"--files: {path} is not .txt, .jsonl or .json")
    with open(path, "rb") as handle:
        if b"\0" in handle.read(8192):
            raise ValueError(f"--files: {path}: binary data (NUL bytes), not text")
    lines = list(_lines(path))
    if not any(text.strip() for _, text in lines):
        raise ValueError(f"--files: {path} is empty")
    if path.suffix == ".txt":
        return
    if path.suffix == ".json":
        try:
            whole = json.loads("".join(text for _, text in lines))
        except json.JSONDecodeError:
            whole = None  # datasets also reads JSON Lines from a .json file
        if isinstance(whole, list):
            for i, record in enumerate(whole):
                _check_record(record, path, f"record {i}", column)
            return
        if isinstance(whole, dict) and column in whole:  # column-oriented {"text": [...]}
            return
    for number, text in lines:
        if not text.strip():
            continue
        try:
            record = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"--files: {path} line {number}: invalid JSON ({error.msg}); expected one JSON object "
                             "per line") from None
        _check_record(record, path, f"line {number}", column)
