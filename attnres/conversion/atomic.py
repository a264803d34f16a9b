"""All-or-nothing output folders (build in a hidden sibling, rename into place), with the conversion's error type."""
from __future__ import annotations

from pathlib import Path

from ..atomic_io import move_into_place, temporary_folder  # noqa: F401  (re-exported)
from ..safe_paths import UnsafeOutputError, check_output_folder
from .errors import ConversionError


def check_output(output: Path, force: bool, inputs=(), flag: str = "output") -> Path:
    """The resolved output folder, or a ConversionError: see `attnres.safe_paths.check_output_folder`."""
    try:
        return check_output_folder(output, inputs, force, flag)
    except UnsafeOutputError as error:
        raise ConversionError(str(error)) from None
