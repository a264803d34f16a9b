"""What a saved model's weights were trained as, and saving a model folder without ever mixing two saves.

Two AttnRes configs can share every tensor name and shape (block size 2 vs 3, block vs full mode), so a config.json
that disagrees with the weights would load silently as a different model. Every save therefore writes
`attnres_weights.json` beside the weights: the fields that decide how the weights are used, and the size of each
weight file. `from_pretrained` compares the loaded config with it and refuses a mismatch, naming the fields.

`save_folder` writes through a hidden temporary folder: a save that fails (full disk, error, kill) leaves the existing
model untouched. Over an existing model, the new folder is completed first (it also takes the files of the old folder
that the save does not write, e.g. a tokenizer, but not the old weight shards), then swapped in by two renames: the
old folder steps aside, the new one takes its name. A kill at any moment leaves one complete model, at the name or
beside it, and the next save (or `recover_interrupted`) puts it back.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

from .atomic_io import move_into_place, recover_interrupted, temporary_folder, write_json_atomic

RECORD_FILE = "attnres_weights.json"
RECORD_FIELDS = ("attn_res_mode", "attn_res_block_size", "num_hidden_layers", "hidden_size", "vocab_size",
                 "layer_types", "mlp_layer_types")
_WEIGHT_SUFFIXES = (".safetensors", ".safetensors.index.json", ".bin", ".bin.index.json")
logger = logging.getLogger(__name__)


def weights_record(config, folder: str | Path | None = None) -> dict:
    record = {field: getattr(config, field, None) for field in RECORD_FIELDS}
    if folder is not None:
        record["files"] = {p.name: p.stat().st_size for p in sorted(Path(folder).glob("*.safetensors"))}
    return record


def write_weights_record(folder: str | Path, config) -> None:
    write_json_atomic(Path(folder) / RECORD_FILE, weights_record(config, folder))


def check_weights_record(config, folder: str | Path, explicit: set[str] = frozenset()) -> None:
    """Raise ValueError naming every field where `config` disagrees with what the weights in `folder` were saved as.
    Fields the caller set explicitly (`explicit`, e.g. from_pretrained keyword arguments) only warn."""
    if not isinstance(folder, (str, os.PathLike)):
        return  # from_pretrained(None, config=..., state_dict=...): no folder, no record
    path = Path(folder) / RECORD_FILE
    if not path.is_file():
        return  # saved by another tool (or before records existed): nothing to compare against
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ValueError(f"{path}: unreadable weights record ({error}); delete it to load without the check") from None
    changed = [f"{field}: weights saved as {record[field]!r}, config says {getattr(config, field, None)!r}"
               for field in RECORD_FIELDS if field in record and record[field] != getattr(config, field, None)]
    sizes = {name: (Path(folder) / name).stat().st_size if (Path(folder) / name).is_file() else "missing"
             for name in record.get("files", {})}
    resized = [f"{name}: {size} bytes when saved, now {sizes[name]}"
               for name, size in record.get("files", {}).items() if sizes[name] != size]
    if resized:
        logger.warning("%s: weight files changed since the model was saved (%s); the record may not describe them",
                       folder, "; ".join(resized))
    if not changed:
        return
    message = (f"{folder}: the config does not match what the weights were saved as ({RECORD_FILE}):\n  "
               + "\n  ".join(changed))
    if all(line.split(":")[0] in explicit for line in changed):
        logger.warning("%s\n(loading anyway: you set these fields explicitly)", message)
        return
    raise ValueError(message + f"\nFix config.json, pass the fields explicitly, or delete {RECORD_FILE} to load anyway")


def save_folder(write, save_directory: str | Path) -> None:
    """`write(folder)` (a model's files: `model_folder.write_model`) into a temporary sibling, the entries of an
    existing folder that the write did not replace carried over, then the whole folder swapped into place."""
    output = Path(save_directory)
    if output.exists() and not output.is_dir():
        raise ValueError(f"save_pretrained: {output} is a file, not a folder")
    if output.is_symlink():  # save into the folder it names: the link stays, its target is swapped atomically
        output = output.resolve()
    output.parent.mkdir(parents=True, exist_ok=True)
    recover_interrupted(output)
    with temporary_folder(output) as tmp:
        write(tmp)
        if output.exists():
            _carry_over(output, tmp)
        move_into_place(tmp, output, replace=True)  # save_pretrained overwrites, as transformers' does


def _carry_over(old: Path, new: Path) -> None:
    """Give `new` the entries of `old` that the save did not write (tokenizer, README, a user's files), hard-linked
    where possible; not the old weight shards or record, which describe other weights."""
    for entry in old.iterdir():
        target = new / entry.name
        if os.path.lexists(target) or entry.name == RECORD_FILE or entry.name.endswith(_WEIGHT_SUFFIXES):
            continue
        carry(entry, target)


def carry(entry: Path, target: Path) -> None:
    """`entry` into a new folder unchanged: a link as a link, a folder and a file hard-linked where possible."""
    if entry.is_symlink():
        os.symlink(os.readlink(entry), target)
    elif entry.is_dir():
        shutil.copytree(entry, target, symlinks=True, copy_function=_link_or_copy)
    else:
        _link_or_copy(entry, target)


def _link_or_copy(source, target) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def check_folder_before_load(path) -> None:
    """A local model folder: config.json and every weight file readable (damaged files named). Hub ids pass."""
    from .checkpoint_files import CONFIG_NAME, CheckpointFileError, read_json_file, weight_files

    if isinstance(path, (str, os.PathLike)) and Path(path).is_dir():
        if not (Path(path) / CONFIG_NAME).is_file():
            raise CheckpointFileError(f"{path}: no config.json there, so the model's size and AttnRes layout are "
                                      "unknown (a saved model folder holds config.json beside its weights)")
        read_json_file(Path(path) / CONFIG_NAME, "model config")
        weight_files(path)
