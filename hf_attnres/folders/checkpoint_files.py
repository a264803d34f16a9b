"""Cheap checks of the files a checkpoint folder holds (config.json, safetensors headers, the shard index), run before
any loading so a damaged or missing file gets one message naming it instead of a traceback from a parser. Nothing
here unpickles: JSON and safetensors headers are plain data."""
from __future__ import annotations

import json
import os
import stat
import struct
from pathlib import Path, PurePosixPath

from .json_limits import JSONDepthError, loads_limited

CONFIG_NAME = "config.json"
INDEX_NAME = "model.safetensors.index.json"
# A safetensors header is JSON, small even for huge models (K3: well under 10 MB); more means a corrupt length field
_MAX_HEADER_BYTES = 100 * 2**20
_MAX_HEADER_DEPTH = 4  # {name: {"shape": [...]}} is 3 deep
# safetensors' dtype codes (0.8) and their bits per element
DTYPE_BITS = {"BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "I16": 16, "U16": 16, "F16": 16,
              "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "C64": 64, "F64": 64, "I64": 64, "U64": 64, "F4": 4,
              "F6_E2M3": 6, "F6_E3M2": 6}


# The weight dtypes a model folder may hold: the float types the model computes in (config_checks.DTYPES), and
# Kimi K3's MXFP4 experts as uint8 parts (dequantized on load); the multimodal wrapper's vision parts are not loaded
WEIGHT_DTYPES = ("BF16", "F16", "F32")
PACKED_SUFFIXES, PACKED_DTYPES = (".weight_packed", ".weight_scale"), ("U8",)
NON_LANGUAGE_PREFIXES = ("vision_tower.", "mm_projector.")


class CheckpointFileError(ValueError):
    """A checkpoint file is missing, truncated or not what its name says. The message names the file."""


def read_json_file(path: str | Path, what: str = "JSON file") -> dict:
    """A JSON object from `path`, or CheckpointFileError naming the file and what is wrong."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointFileError(f"{path}: not found ({what})")
    try:
        value = loads_limited(path.read_bytes())
    except UnicodeDecodeError:
        raise CheckpointFileError(f"{path}: not UTF-8 text ({what} expected)") from None
    except json.JSONDecodeError as error:
        raise CheckpointFileError(f"{path}: invalid JSON ({error})") from None
    except JSONDepthError as error:
        raise CheckpointFileError(f"{path}: {error}: nested too deeply to be a {what}") from None
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
    """The header of a safetensors file (tensor name -> dtype/shape/offsets), checked the way safetensors will read it
    (CheckpointFileError naming the file and the tensor): JSON nested at most a few levels (checked without
    recursion), unique names, known dtypes, byte counts = elements x dtype size, offsets tiling the data from 0 with
    no gap or overlap, and the file exactly as long as the header says. safetensors' own errors name neither the file
    nor the tensor, and a deeply nested header ends in RecursionError."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as handle:
            prefix = handle.read(8)
            (length,) = struct.unpack("<Q", prefix) if len(prefix) == 8 else (None,)
            if length is None or not 2 <= length <= min(size - 8, _MAX_HEADER_BYTES):
                raise CheckpointFileError(f"{path}: not a safetensors file, or truncated (wrong header length)")
            raw = handle.read(length)
    except OSError as error:
        raise CheckpointFileError(f"{path}: cannot read ({error.strerror or error})") from None
    header = _parse_header(path, raw)
    check_header_layout(path, header, size - 8 - length)
    return header


def _unique_names(pairs: list) -> dict:
    names = [name for name, _ in pairs]
    if len(set(names)) != len(names):
        twice = sorted({name for name in names if names.count(name) > 1})
        raise _DuplicateName(twice)
    return dict(pairs)


class _DuplicateName(ValueError):
    pass


def _parse_header(path: Path, raw: bytes) -> dict:
    try:
        header = loads_limited(raw, limit=_MAX_HEADER_DEPTH, object_pairs_hook=_unique_names)
    except JSONDepthError:
        raise CheckpointFileError(f"{path}: corrupt safetensors header (JSON nested more than {_MAX_HEADER_DEPTH} "
                                  "deep; a header is a flat table of tensors)") from None
    except _DuplicateName as error:
        raise CheckpointFileError(f"{path}: tensor {error.args[0][0]!r} is listed twice in the safetensors header "
                                  "(names must be unique)") from None
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise CheckpointFileError(f"{path}: corrupt safetensors header (not JSON)") from None
    if not isinstance(header, dict):
        raise CheckpointFileError(f"{path}: corrupt safetensors header (not a JSON object)")
    return header


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _tensor_span(path: Path, name: str, info) -> tuple[int, int]:
    """(begin, end) of one tensor's bytes after checking its entry against itself: known dtype, a shape of
    non-negative integers whose byte count fits and equals end - begin."""
    where = f"{path}: tensor {name!r}"
    if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
        raise CheckpointFileError(f"{where}: its header entry must hold exactly dtype, shape and data_offsets")
    dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        raise CheckpointFileError(f"{where}: unknown dtype {dtype!r} (safetensors knows {sorted(DTYPE_BITS)})")
    if not isinstance(shape, list) or not all(map(_is_count, shape)):
        raise CheckpointFileError(f"{where}: shape must be a list of non-negative integers, got {shape!r}")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(map(_is_count, offsets))):
        raise CheckpointFileError(f"{where}: data_offsets must be [begin, end] byte positions, got {offsets!r}")
    begin, end = offsets
    if begin > end:
        raise CheckpointFileError(f"{where}: data_offsets {offsets} are reversed (begin after end)")
    bits = DTYPE_BITS[dtype]
    for size in shape:  # stops at the first overflow: a hostile shape of a million huge sizes costs nothing
        bits *= size
        if bits >= 8 * 2**64:
            break
    if bits >= 8 * 2**64:
        raise CheckpointFileError(f"{where}: shape {shape} x {dtype} overflows (more than 2**64 bytes)")
    if bits % 8:
        raise CheckpointFileError(f"{where}: shape {shape} x {dtype} is not a whole number of bytes")
    if end - begin != bits // 8:
        raise CheckpointFileError(f"{where}: dtype {dtype} x shape {shape} is {bits // 8} bytes, but data_offsets "
                                  f"{offsets} hold {end - begin}")
    return begin, end


def check_header_layout(path: Path, header: dict, data_size: int) -> None:
    """Every tensor entry valid, and the entries tiling the `data_size` bytes after the header exactly."""
    metadata = header.get("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise CheckpointFileError(f"{path}: __metadata__ of the safetensors header must map names to strings")
    spans = sorted((*_tensor_span(path, name, info), name) for name, info in header.items() if name != "__metadata__")
    position, previous = 0, None
    for begin, end, name in spans:
        if begin < position:
            raise CheckpointFileError(f"{path}: tensor {name!r} (bytes {begin}-{end}) overlaps tensor {previous!r} "
                                      f"(bytes up to {position}) in the safetensors header")
        if begin > position:
            raise CheckpointFileError(f"{path}: a gap in the safetensors header: bytes {position}-{begin}, before "
                                      f"tensor {name!r}, belong to no tensor")
        position, previous = end, name
    if position > data_size:
        raise CheckpointFileError(f"{path}: truncated ({data_size} bytes of tensor data, its header describes "
                                  f"{position}); copy it again")
    if position < data_size:
        raise CheckpointFileError(f"{path}: {data_size - position} bytes after the last tensor belong to no tensor "
                                  "(the safetensors header does not describe the whole file)")


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
        check_weight_dtypes(file, check_safetensors(file))
    return files


def check_weight_dtypes(path: Path, header: dict) -> None:
    """The one dtype rule of every loader (from_pretrained, convert, export, push-to-hub, compare): a language-model
    weight is stored in a float type the model computes in, or as Kimi K3's uint8 MXFP4 parts. Anything else (an
    `I32` lm_head) would be cast to meaningless floats by transformers' loader."""
    problems = []
    for name, info in header.items():
        if name == "__metadata__" or name.startswith(NON_LANGUAGE_PREFIXES):
            continue
        if not name.endswith((".weight", ".bias", *PACKED_SUFFIXES)):
            continue  # not a parameter (an integer buffer, a stray key): transformers names it unexpected or loads it
        packed = name.endswith(PACKED_SUFFIXES)
        if info["dtype"] not in (PACKED_DTYPES if packed else WEIGHT_DTYPES):
            expected = "MXFP4 parts are U8" if packed else f"expected one of {WEIGHT_DTYPES}"
            problems.append(f"{name}: dtype {info['dtype']} is not supported ({expected}; other quantized or packed "
                            "weights, e.g. 4-bit experts, must be dequantized first)")
    if problems:
        shown = problems[:10] + ([f"... and {len(problems) - 10} more"] if len(problems) > 10 else [])
        raise CheckpointFileError(f"{path}: " + "\n  ".join(shown))


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
