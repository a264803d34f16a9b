"""Prepared-data folders (prepare-data's output) that disagree with their meta.json, or lack a part: each
damage edits a copy in place; the error must name the file or field."""
from __future__ import annotations

import shutil
from pathlib import Path

from tests.helpers.bad_input_fixtures import overwrite_json, truncate


def edit_rows(edit, split: str = "train"):
    """Rewrite `split`'s input_ids rows as `edit(rows)` returns them (datasets infers the column type)."""
    def damage(folder: Path) -> None:
        from datasets import Dataset, load_from_disk

        path = folder / "dataset" / split
        rows = load_from_disk(str(path))["input_ids"]
        rows = edit([list(row) for row in rows])
        shutil.rmtree(path)
        Dataset.from_dict({"input_ids": rows}).save_to_disk(str(path))
    return damage


def set_first(value):
    def edit(rows):
        rows[0][0] = value
        return rows
    return edit


def drop_validation(folder: Path) -> None:
    shutil.rmtree(folder / "dataset" / "validation")
    overwrite_json(folder / "dataset" / "dataset_dict.json", splits=["train"])


def train_shard(folder: Path) -> Path:
    return sorted((folder / "dataset" / "train").glob("*.arrow"))[0]


# name: (damage(folder), words the error must contain)
PREPARED_DAMAGE = {
    "meta_empty_object": (lambda f: (f / "meta.json").write_text("{}"), ["meta.json", "seq_len"]),
    "meta_a_list": (lambda f: (f / "meta.json").write_text("[512, 32]"), ["meta.json", "object"]),
    "meta_vocab_disagrees_with_tokenizer": (lambda f: overwrite_json(f / "meta.json", vocab_size=512),
                                            ["tokenizer", "512"]),
    "meta_seq_len_disagrees_with_rows": (lambda f: overwrite_json(f / "meta.json", seq_len=64), ["seq_len", "64"]),
    "no_tokenizer": (lambda f: shutil.rmtree(f / "tokenizer"), ["tokenizer/"]),
    "no_validation_split": (drop_validation, ["validation/"]),
    "truncated_arrow_shard": (lambda f: truncate(train_shard(f)), ["train", ".arrow", "truncated"]),
    "token_out_of_vocab": (edit_rows(set_first(1_000_000)), ["train", "1000000", "vocab_size"]),
    "token_negative": (edit_rows(set_first(-5)), ["train", "-5", "vocab_size"]),
    "token_rows_float": (edit_rows(lambda rows: [[float(x) for x in row] for row in rows]), ["train", "integer"]),
    "token_rows_ragged": (edit_rows(lambda rows: [rows[0][:-3], *rows[1:]]), ["train", "seq_len"]),
}
