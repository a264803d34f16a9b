"""All-or-nothing output folders (build in a hidden sibling, rename into place), with the conversion's error type."""
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
