"""All-or-nothing output folders: build in a hidden sibling, rename into place at the end."""
from __future__ import annotations

import os
import shutil
from contextlib import contextmanager
from pathlib import Path

from .errors import ConversionError


def check_output(output: Path, force: bool) -> None:
    if output.exists() and not force:
        raise ConversionError(f"output {output} already exists (pass --force to replace it)")


@contextmanager
def temporary_folder(output: Path):
    """A hidden sibling of `output` (same filesystem, so the final rename is atomic), removed on any failure."""
    folder = output.parent / f".{output.name}.partial-{os.getpid()}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    try:
        yield folder
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


def move_into_place(folder: Path, output: Path) -> None:
    if not output.exists():
        os.rename(folder, output)
        return
    # --force: the old output steps aside first, so at every moment one complete model sits at `output` or beside it
    old = output.parent / f".{output.name}.replaced-{os.getpid()}"
    os.rename(output, old)
    os.rename(folder, output)
    shutil.rmtree(old) if old.is_dir() else old.unlink()
