"""Tokenize documents and pack them into fixed-length training sequences with `datasets`.

Documents are split into train / validation *before* packing, so no document leaks across the split. Each document
ends with the EOS token; the token stream is cut into sequences of exactly `seq_len` tokens (the remainder of each
map batch is dropped), so every sequence is full and no padding or attention mask is needed. Instruction data (chat
or prompt/completion records, `chat.py`) is packed the same way with a `loss_mask` column: 1 on assistant tokens.
"""
from __future__ import annotations

import json
from pathlib import Path

from datasets import Dataset, DatasetDict

from ..atomic_io import move_into_place, temporary_folder

META_FILE = "meta.json"
DATASET_DIR = "dataset"
TOKENIZER_DIR = "tokenizer"


def split_documents(documents: Dataset, validation_fraction: float, seed: int) -> DatasetDict:
    """Hold out whole documents: at least one for validation, at least one for training."""
    if len(documents) < 2:
        raise ValueError(f"need at least 2 documents to hold out a validation split, got {len(documents)}")
    n_val = min(max(1, round(len(documents) * validation_fraction)), len(documents) - 1)
    split = documents.train_test_split(test_size=n_val, seed=seed, shuffle=True)
    return DatasetDict(train=split["train"], validation=split["test"])


def pack_token_lists(token_lists: list[list[int]], eos_id: int, seq_len: int) -> list[list[int]]:
    """Concatenate documents (each followed by EOS) and cut the stream into full `seq_len` chunks."""
    stream = [token for tokens in token_lists for token in (*tokens, eos_id)]
    return [stream[i : i + seq_len] for i in range(0, len(stream) - seq_len + 1, seq_len)]


def pack_masked(token_lists: list[list[int]], masks: list[list[int]], eos_id: int, seq_len: int) -> dict:
    """Instruction data: like `pack_token_lists`, with a `loss_mask` column (1 = a token the loss is taken on). An EOS
    separator is added only after an example that does not end with EOS (mask 0); sequences with no masked token are
    dropped (nothing to learn from them, and a loss over zero tokens is undefined)."""
    stream, stream_mask = [], []
    for tokens, mask in zip(token_lists, masks):
        stream += tokens
        stream_mask += mask
        if not tokens or tokens[-1] != eos_id:
            stream.append(eos_id)
            stream_mask.append(0)
    cuts = range(0, len(stream) - seq_len + 1, seq_len)
    kept = [i for i in cuts if any(stream_mask[i : i + seq_len])]
    return {"input_ids": [stream[i : i + seq_len] for i in kept], "loss_mask": [stream_mask[i : i + seq_len] for i in kept]}


def tokenize_and_pack_chat(splits: DatasetDict, tokenizer, seq_len: int, num_proc: int | None = None) -> DatasetDict:
    """Map conversations (column `messages`) -> packed `input_ids` + `loss_mask` (assistant tokens only)."""
    from .chat import tokenize_with_mask

    def pack(batch):
        encoded = [tokenize_with_mask(tokenizer, messages) for messages in batch["messages"]]
        return pack_masked([ids for ids, _ in encoded], [mask for _, mask in encoded], tokenizer.eos_token_id, seq_len)

    return DatasetDict(
        {
            name: split.map(pack, batched=True, batch_size=2000, remove_columns=split.column_names, num_proc=num_proc, desc=f"pack {name}")
            for name, split in splits.items()
        }
    )


def tokenize_and_pack(splits: DatasetDict, tokenizer, seq_len: int, text_column: str = "text", num_proc: int | None = None) -> DatasetDict:
    """Map text -> packed `input_ids` sequences of length `seq_len` (labels are the inputs: the model shifts them)."""

    def pack(batch):
        ids = tokenizer(batch[text_column], add_special_tokens=False)["input_ids"]
        return {"input_ids": pack_token_lists(ids, tokenizer.eos_token_id, seq_len)}

    # Large map batches keep the per-batch remainder small; the packed split is one column, no padding
    return DatasetDict(
        {
            name: split.map(pack, batched=True, batch_size=2000, remove_columns=split.column_names, num_proc=num_proc, desc=f"pack {name}")
            for name, split in splits.items()
        }
    )


def save_prepared(output_dir: Path, packed: DatasetDict, tokenizer, meta: dict) -> None:
    """Write dataset, tokenizer and meta.json to `output_dir` atomically: a temp folder renamed at the end."""
    output_dir = Path(output_dir)
    for name, split in packed.items():
        if len(split) == 0:
            raise ValueError(f"split {name!r} has no full sequence of {meta['seq_len']} tokens: use a smaller --seq-len or more text")
    with temporary_folder(output_dir) as tmp:
        packed.save_to_disk(str(tmp / DATASET_DIR))
        tokenizer.save_pretrained(str(tmp / TOKENIZER_DIR))
        meta = dict(meta, num_sequences={name: len(split) for name, split in packed.items()})
        (tmp / META_FILE).write_text(json.dumps(meta, indent=2))
        move_into_place(tmp, output_dir)
