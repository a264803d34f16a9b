"""All-or-nothing output folders (build in a hidden sibling, rename into place) and the checks of a convert's output
flags, with the conversion's error type."""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

from ..folders.atomic_io import OutputConflictError, move_into_place, temporary_folder  # noqa: F401  (re-exported)
from ..utils.safe_paths import UnsafeOutputError, check_output_folder, write_failure
from .errors import ConversionError


def check_output(output: Path, force: bool, inputs=(), flag: str = "output") -> Path:
    """The output folder as a literal absolute path (a link stays the link), or a ConversionError: see
    `attnres.utils.safe_paths.check_output_folder`."""
    try:
        return check_output_folder(output, inputs, force, flag)
    except UnsafeOutputError as error:
        raise ConversionError(str(error)) from None


@contextmanager
def output_folder(output: Path):
    """`temporary_folder(output)` (a hidden sibling to build in, removed on any failure; the caller renames it with
    `move_into_place`) where a filesystem error while building (disk full, no permission) becomes one
    ConversionError naming the error and the output: nothing half-written stays behind."""
    try:
        with temporary_folder(output) as folder:
            yield folder
    except ConversionError:
        raise
    except OutputConflictError as error:  # another writer of the same output (`claim_output`, `move_into_place`)
        raise ConversionError(str(error)) from None
    except Exception as error:  # OSError, or safetensors' own error type for a failed write
        message = write_failure(output, error)
        if message is None:
            raise
        raise ConversionError(message) from None


def check_max_shard_size(max_shard_size: int | str) -> int:
    """Bytes of --max-shard-size ("5GB", "500MB", an int), or a ConversionError naming the flag."""
    from huggingface_hub.serialization._base import parse_size_to_int

    try:
        size = max_shard_size if isinstance(max_shard_size, int) else parse_size_to_int(max_shard_size)
    except (ValueError, TypeError, AttributeError):
        size = 0
    if size <= 0:
        raise ConversionError(f"--max-shard-size {max_shard_size!r}: expected a positive size such as 5GB or 500MB")
    return size
