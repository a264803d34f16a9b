"""Write-then-rename: a reader (or a crash) never sees a half-written file."""
from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path


def atomic_write(path: str | os.PathLike, write: Callable[[Path], None]) -> None:
    """Call `write(tmp)` for a hidden sibling of `path`, then rename it into place (same folder: atomic)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(text))


def write_json_atomic(path: str | os.PathLike, payload) -> None:
    write_text_atomic(path, json.dumps(payload, indent=2))
