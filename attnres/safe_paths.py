"""Which folder a tool may create or replace: never its input, a folder holding its input, the current folder or
home (or a folder holding them), never a file. Checked before any work starts; `--force` replaces the output itself
and nothing else."""
from __future__ import annotations

import os
from pathlib import Path


class UnsafeOutputError(ValueError):
    """The output folder would overwrite or delete something the user did not give as the output."""


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def check_output_folder(output, inputs=(), force: bool = False, flag: str = "output") -> Path:
    """Return `output` resolved, or raise UnsafeOutputError naming the flag and the path.

    `inputs`: files or folders the run reads (must neither contain nor lie inside the output). `force`: an existing
    output folder may be replaced (otherwise it is refused)."""
    given = output
    output = Path(output).expanduser().resolve()
    for source in inputs:
        source_path = Path(source).expanduser().resolve()
        if source_path == output:
            raise UnsafeOutputError(f"{flag} {given} is the input {source}: write to another folder")
        if _inside(source_path, output):
            raise UnsafeOutputError(
                f"{flag} {given} contains the input {source}: replacing it would delete the input; write elsewhere")
        if _inside(output, source_path):
            raise UnsafeOutputError(f"{flag} {given} lies inside the input {source}: write outside it")
    for name, protected in (("the current folder", Path.cwd()), ("your home folder", Path.home())):
        if _inside(protected.resolve(), output):
            raise UnsafeOutputError(f"{flag} {given} is or contains {name} ({protected}): choose a new folder")
    if output.exists() and not output.is_dir():
        raise UnsafeOutputError(f"{flag} {given} exists and is a file, not a folder: choose a folder path")
    if output.exists() and not force:
        raise UnsafeOutputError(f"{flag} {given} already exists (pass --force to replace it)")
    parent = output.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise UnsafeOutputError(f"{flag} {given}: {parent} is a file, so the folder cannot be created")
    if not os.access(parent, os.W_OK):
        raise UnsafeOutputError(f"{flag} {given}: {parent} is not writable")
    return output
