"""The one writer of a conversion's output folder (convert, export, push-to-hub): built in a hidden sibling, renamed
into place all at once, so a failure or a kill leaves no half-written folder. The model is written into it by
`folders.model_folder.write_model`, the writer `hf_attnres.save` uses too."""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

from ..folders.atomic_io import OutputConflictError, move_into_place, temporary_folder  # noqa: F401  (re-exported)
from ..utils.safe_paths import write_failure
from .errors import ConversionError


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
