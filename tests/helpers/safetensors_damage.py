"""Safetensors files whose header lies: well-formed JSON describing offsets, names, dtypes or shapes that
do not add up, a header nested 200,000 deep, and a language-model weight stored as int32. Each damage rewrites the
folder's shard with the most tensors in place (the index still names it); the tensor it lies about is renamed
`model.liar`, so a test can check that the error names the right tensor."""
from __future__ import annotations

import json
import struct
from pathlib import Path

LIAR = "model.liar"


def first_shard(folder: Path) -> Path:
    """The shard with the most tensors (a sharded test checkpoint may hold a single tensor in its first)."""
    return max(sorted(Path(folder).glob("*.safetensors")), key=lambda path: len(read_parts(path)[0]))


def read_parts(path: Path) -> tuple[dict, bytes]:
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + length]), data[8 + length:]


def write_parts(path: Path, header_text: str, body: bytes) -> None:
    raw = header_text.encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + body)


def by_offset(header: dict) -> list[str]:
    """Tensor names in the order of their bytes, empty tensors left out."""
    names = [n for n, info in header.items()
             if n != "__metadata__" and info["data_offsets"][0] < info["data_offsets"][1]]
    return sorted(names, key=lambda n: header[n]["data_offsets"][0])


def lie(pick, edit):
    """Rename the tensor `pick(names in byte order)` to LIAR and apply `edit(its entry)`."""
    def damage(folder: Path) -> None:
        path = first_shard(folder)
        header, body = read_parts(path)
        name = pick(by_offset(header))
        entry = header.pop(name)
        edit(entry)
        header[LIAR] = entry
        write_parts(path, json.dumps(header), body)
    return damage


def duplicate_name(folder: Path) -> None:
    """Two entries named LIAR (json.loads would keep the last silently)."""
    path = first_shard(folder)
    header, body = read_parts(path)
    first, second = by_offset(header)[:2]
    pairs = [(LIAR if name in (first, second) else name, info) for name, info in header.items()]
    write_parts(path, "{" + ",".join(f"{json.dumps(k)}:{json.dumps(v)}" for k, v in pairs) + "}", body)


def nested_header(folder: Path) -> None:
    path = first_shard(folder)
    write_parts(path, '{"a":' * 200_000 + "1" + "}" * 200_000, read_parts(path)[1])


def extra_bytes(folder: Path) -> None:
    path = first_shard(folder)
    path.write_bytes(path.read_bytes() + bytes(64))


def other_size(entry: dict) -> None:
    entry["dtype"] = "F32" if entry["dtype"] in ("F16", "BF16") else "F16"


def reversed_offsets(entry: dict) -> None:
    entry["data_offsets"] = entry["data_offsets"][::-1]


def shifted(by: int):
    return lambda entry: entry.update(data_offsets=[x + by for x in entry["data_offsets"]])


def int32_weight(suffix: str = "lm_head.weight"):
    """The weight ending in `suffix` stored as int32 (same byte count when it was float32: the file stays valid)."""
    def damage(folder: Path) -> None:
        import torch
        from safetensors import safe_open
        from safetensors.torch import save_file

        for path in sorted(Path(folder).glob("*.safetensors")):
            with safe_open(path, "pt") as handle:
                tensors = {name: handle.get_tensor(name) for name in handle.keys()}
                metadata = handle.metadata()
            names = [name for name in tensors if name.endswith(suffix)]
            if names:
                tensors[names[0]] = tensors[names[0]].float().view(torch.int32)
                save_file(tensors, path, metadata=metadata)
                return
        raise AssertionError(f"no tensor ending in {suffix} in {folder}")
    return damage


# name: (damage(folder), words the error must contain)
HEADER_DAMAGE = {
    "header_offsets_reversed": (lie(lambda names: names[0], reversed_offsets), [LIAR, "reversed"]),
    "header_offsets_overlap": (lie(lambda names: names[1], shifted(-4)), [LIAR, "overlaps"]),
    "header_offsets_gap": (lie(lambda names: names[-1], shifted(4)), [LIAR, "gap"]),
    "header_duplicate_name": (duplicate_name, [LIAR, "twice"]),
    "header_dtype_disagrees_with_bytes": (lie(lambda names: names[0], other_size), [LIAR, "bytes"]),
    "header_shape_overflows": (lie(lambda names: names[0], lambda e: e.update(shape=[2**40, 2**40])),
                               [LIAR, "overflows"]),
    "header_unknown_dtype": (lie(lambda names: names[0], lambda e: e.update(dtype="Q7")), [LIAR, "Q7"]),
    "header_nested_200000_deep": (nested_header, [".safetensors", "nested"]),
    "bytes_after_the_last_tensor": (extra_bytes, [".safetensors", "belong to no tensor"]),
    "lm_head_int32": (int32_weight(), ["lm_head.weight", "I32", "not supported"]),
}
