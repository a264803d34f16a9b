"""Cheap checks of the files a checkpoint folder holds (config.json, safetensors headers, the shard index), run before
any loading so a damaged or missing file gets one message naming it instead of a traceback from a parser. Nothing
here unpickles: JSON and safetensors headers are plain data."""
from __future__ import annotations

import json
import os
import stat
import struct
from pathlib import Path, PurePosixPath

CONFIG_NAME = "config.json"
INDEX_NAME = "model.safetensors.index.json"
# A safetensors header is JSON, small even for huge models (K3: well under 10 MB); more means a corrupt length field
_MAX_HEADER_BYTES = 100 * 2**20


class CheckpointFileError(ValueError):
    """A checkpoint file is missing, truncated or not what its name says. The message names the file."""


def read_json_file(path: str | Path, what: str = "JSON file") -> dict:
    """A JSON object from `path`, or CheckpointFileError naming the file and what is wrong."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointFileError(f"{path}: not found ({what})")
    try:
        value = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError:
        raise CheckpointFileError(f"{path}: not UTF-8 text ({what} expected)") from None
    except json.JSONDecodeError as error:
        raise CheckpointFileError(f"{path}: invalid JSON ({error})") from None
    except RecursionError:
        raise CheckpointFileError(f"{path}: JSON nested too deeply to be a {what}") from None
    if not isinstance(value, dict):
        raise CheckpointFileError(f"{path}: expected a JSON object, got {type(value).__name__}")
    return value


def read_weight_map(index: str | Path) -> dict[str, str]:
    """The `weight_map` (tensor name -> shard file) of a sharded checkpoint's index."""
    weight_map = read_json_file(index, "shard index").get("weight_map")
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise CheckpointFileError(f"{index}: no valid 'weight_map' (an object mapping tensor names to shard files)")
    return weight_map


def check_safetensors(path: str | Path) -> dict:
    """The header of a safetensors file (tensor name -> dtype/shape/offsets), or CheckpointFileError when the file is
    truncated or not safetensors."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as handle:
            prefix = handle.read(8)
            (length,) = struct.unpack("<Q", prefix) if len(prefix) == 8 else (None,)
            if length is None or not 2 <= length <= min(size - 8, _MAX_HEADER_BYTES):
                raise CheckpointFileError(f"{path}: not a safetensors file, or truncated (wrong header length)")
            header = json.loads(handle.read(length).decode("utf-8"))
    except OSError as error:
        raise CheckpointFileError(f"{path}: cannot read ({error.strerror or error})") from None
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise CheckpointFileError(f"{path}: corrupt safetensors header (not JSON)") from None
    if not isinstance(header, dict):
        raise CheckpointFileError(f"{path}: corrupt safetensors header")
    offsets = [info.get("data_offsets") for name, info in header.items()
               if name != "__metadata__" and isinstance(info, dict)]
    ends = [pair[1] for pair in offsets if isinstance(pair, list) and len(pair) == 2 and isinstance(pair[1], int)]
    needed = 8 + length + max(ends, default=0)
    if needed > size:
        raise CheckpointFileError(f"{path}: truncated ({size} bytes, its header describes {needed}); copy it again")
    return header


def is_plain_name(name: str) -> bool:
    """A relative path that stays inside its folder: not empty, not absolute, no `..` part."""
    parts = PurePosixPath(name.replace("\\", "/"))
    return bool(name) and not parts.is_absolute() and not os.path.isabs(name) and ".." not in parts.parts


def regular_file(path: Path, named_by: Path | str) -> Path:
    """`path` if it is a regular file: a FIFO or device would hang a reader. A link is followed (the Hub cache links
    snapshots to blobs) but must end at a regular file. `named_by`: the file or folder that named it."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        raise CheckpointFileError(f"{named_by}: lists {path.name}, which is not in the folder") from None
    if not stat.S_ISREG(mode):
        raise CheckpointFileError(f"{path}: not a regular file (a pipe, device or folder cannot be a weight file)")
    return path


def weight_files(folder: str | Path) -> list[Path]:
    """The safetensors files of a model folder (from the index when there is one), each header checked."""
    folder = Path(folder)
    index = folder / INDEX_NAME
    if index.is_file():
        names = sorted(set(read_weight_map(index).values()))
        bad = [name for name in names if not is_plain_name(name)]
        if bad:
            raise CheckpointFileError(f"{index}: weight_map names {bad}, not files inside {folder}")
        missing = [name for name in names if not os.path.exists(folder / name)]
        if missing:
            raise CheckpointFileError(f"{index}: lists shard(s) {missing} that are not in the folder")
        files = [regular_file(folder / name, index) for name in names]
    else:
        files = [regular_file(path, folder) for path in sorted(folder.glob("*.safetensors"))]
    for file in files:
        check_safetensors(file)
    return files


def check_model_folder(folder: str | Path, flag: str = "model folder") -> dict:
    """config.json of a local model folder, after checking that it and its weight files are readable."""
    folder = Path(folder)
    if not folder.exists():
        raise CheckpointFileError(f"{flag} {folder}: no such folder")
    if not folder.is_dir():
        raise CheckpointFileError(f"{flag} {folder}: is a file, expected a model folder")
    if not (folder / CONFIG_NAME).is_file():
        raise CheckpointFileError(
            f"{flag} {folder}: no {CONFIG_NAME} there, so the model's size and AttnRes layout are unknown "
            "(a saved model folder holds config.json beside its *.safetensors)")
    config = read_json_file(folder / CONFIG_NAME, "model config")
    if not weight_files(folder):
        raise CheckpointFileError(f"{flag} {folder}: no *.safetensors weights")
    return config
