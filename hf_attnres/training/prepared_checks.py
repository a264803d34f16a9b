"""A prepared-data folder checked against its own meta.json before training or evaluation reads it: meta.json an
object with a sequence length and a vocabulary size, the tokenizer/ and both splits there, every Arrow shard complete,
every token row `seq_len` integers inside the vocabulary, the tokenizer as large as meta.json says. Each problem is one
PreparedDataError naming the file or field, never a traceback from datasets or a model sized by the wrong tokenizer.
"""
from __future__ import annotations

from pathlib import Path

META_FILE = "meta.json"
DATASET_DIR = "dataset"
TOKENIZER_DIR = "tokenizer"
SPLITS = ("train", "validation")


class PreparedDataError(ValueError):
    """A prepared-data folder is incomplete or disagrees with its meta.json (the message names the file or field)."""


def read_meta(data_dir: Path) -> dict:
    """meta.json, with the fields training relies on checked."""
    from ..folders.checkpoint_files import CheckpointFileError, read_json_file

    try:
        meta = read_json_file(Path(data_dir) / META_FILE, "prepared-data description")
    except CheckpointFileError as error:
        raise PreparedDataError(f"--data: {error}") from None
    for field, minimum in (("seq_len", 2), ("vocab_size", 1)):
        value = meta.get(field)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise PreparedDataError(f"{Path(data_dir) / META_FILE}: field {field!r} must be an integer >= {minimum}, "
                                    f"got {value!r} (rerun prepare-data)")
    return meta


def check_folders(data_dir: Path) -> None:
    data_dir = Path(data_dir)
    for name in (TOKENIZER_DIR, *(f"{DATASET_DIR}/{split}" for split in SPLITS)):
        if not (data_dir / name).is_dir():
            raise PreparedDataError(f"--data {data_dir}: no {name}/ folder (an incomplete prepared dataset; rerun "
                                    "prepare-data)")


def load_splits(data_dir: Path) -> dict:
    """{split: datasets.Dataset}, each shard read completely (a truncated .arrow is named here)."""
    from datasets import load_from_disk

    splits = {}
    for split in SPLITS:
        folder = Path(data_dir) / DATASET_DIR / split
        try:
            splits[split] = load_from_disk(str(folder))
        except Exception as error:  # noqa: BLE001  pyarrow/datasets errors of a damaged shard: named, one line
            shards = ", ".join(sorted(p.name for p in folder.glob("*.arrow"))) or "no .arrow file"
            raise PreparedDataError(f"{folder}: cannot read the split ({shards}): {type(error).__name__}: "
                                    f"{str(error).splitlines()[0] if str(error) else ''} (truncated or damaged; "
                                    "rerun prepare-data)") from None
    return splits


def check_rows(folder: Path, split, meta: dict) -> None:
    """Every row of `input_ids` (and `loss_mask`) is seq_len integers; every id is in [0, vocab_size)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    table, seq_len, vocab = split.data.table, meta["seq_len"], meta["vocab_size"]
    if "input_ids" not in table.column_names:
        raise PreparedDataError(f"{folder}: no input_ids column (columns: {table.column_names})")
    column = table.column("input_ids")
    if not (pa.types.is_list(column.type) or pa.types.is_large_list(column.type)
            or pa.types.is_fixed_size_list(column.type)) or not pa.types.is_integer(column.type.value_type):
        raise PreparedDataError(f"{folder}: input_ids must be rows of integer token ids, got {column.type}")
    lengths = pc.min_max(pc.list_value_length(column)).as_py()
    if len(table) and (lengths["min"] != seq_len or lengths["max"] != seq_len):
        raise PreparedDataError(f"{folder}: input_ids rows hold {lengths['min']} to {lengths['max']} tokens, but "
                                f"{META_FILE} seq_len is {seq_len} (ragged or from another preparation)")
    ids = pc.min_max(pc.list_flatten(column)).as_py()
    if ids["min"] is not None and (ids["min"] < 0 or ids["max"] >= vocab):
        raise PreparedDataError(f"{folder}: token ids range {ids['min']}..{ids['max']}, outside the vocabulary of "
                                f"{META_FILE} vocab_size {vocab} (ids must be 0..{vocab - 1})")
    if "loss_mask" in table.column_names:
        mask = pc.min_max(pc.list_value_length(table.column("loss_mask"))).as_py()
        if len(table) and (mask["min"] != seq_len or mask["max"] != seq_len):
            raise PreparedDataError(f"{folder}: loss_mask rows differ in length from seq_len {seq_len}")
    expected = meta.get("num_sequences", {}).get(folder.name) if isinstance(meta.get("num_sequences"), dict) else None
    if expected is not None and expected != len(table):
        raise PreparedDataError(f"{folder}: {len(table)} sequences, but {META_FILE} num_sequences says {expected} "
                                "(a shard is missing or truncated)")
    if not len(table):
        raise PreparedDataError(f"{folder}: the split holds no sequence")


def check_prepared_folder(data_dir: Path) -> dict:
    """meta.json of `data_dir` after checking the folders and every split against it."""
    data_dir = Path(data_dir)
    meta = read_meta(data_dir)
    check_folders(data_dir)
    for split, dataset in load_splits(data_dir).items():
        check_rows(data_dir / DATASET_DIR / split, dataset, meta)
    return meta


def check_tokenizer_size(data_dir: Path, tokenizer, meta: dict) -> None:
    """The saved tokenizer sizes the model's vocabulary: it must be the one meta.json describes."""
    if len(tokenizer) != meta["vocab_size"]:
        raise PreparedDataError(f"{Path(data_dir) / TOKENIZER_DIR}: {len(tokenizer):,} tokens, but "
                                f"{Path(data_dir) / META_FILE} vocab_size is {meta['vocab_size']:,} (the model would "
                                "be sized by the wrong tokenizer; rerun prepare-data)")
