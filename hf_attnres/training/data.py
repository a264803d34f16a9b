"""The prepared dataset: documents tokenized and packed into fixed-length sequences (prepare-data writes it), and
on the training side, which sequences every rank reads at every step.

Documents are split into train / validation *before* packing, so no document leaks across the split. Each document
ends with the EOS token; the token stream is cut into sequences of exactly `seq_len` tokens (the remainder of each
map batch is dropped), so every sequence is full and no padding or attention mask is needed. Instruction data (chat
or prompt/completion records, `chat.py`) is packed the same way with a `loss_mask` column: 1 on assistant tokens.

The batch plan is a pure function of (seed, step, micro-step, rank): resuming at step k reads exactly the sequences
the uninterrupted run would have read, with no data-loader state to save, and a global batch is the same set of
sequences whatever the number of processes (the ranks read consecutive slices of it).
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from datasets import Dataset, DatasetDict

from ..folders.atomic_io import claim_output, move_into_place, temporary_folder
from ..utils.safe_paths import write_failure
from .prepared_checks import (
    DATASET_DIR,
    META_FILE,
    TOKENIZER_DIR,
    check_prepared_folder,
    check_tokenizer_size,
    read_meta,
)

if TYPE_CHECKING:
    from .args import PrepareArgs


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
    return {
        "input_ids": [stream[i : i + seq_len] for i in kept],
        "loss_mask": [stream_mask[i : i + seq_len] for i in kept],
    }


def tokenize_and_pack_chat(splits: DatasetDict, tokenizer, seq_len: int, num_proc: int | None = None) -> DatasetDict:
    """Map conversations (column `messages`) -> packed `input_ids` + `loss_mask` (assistant tokens only)."""
    from .chat import tokenize_with_mask

    def pack(batch):
        encoded = [tokenize_with_mask(tokenizer, messages) for messages in batch["messages"]]
        return pack_masked([ids for ids, _ in encoded], [mask for _, mask in encoded], tokenizer.eos_token_id, seq_len)

    return DatasetDict(
        {
            name: split.map(pack, batched=True, batch_size=2000, remove_columns=split.column_names, num_proc=num_proc,
                            desc=f"pack {name}")
            for name, split in splits.items()
        }
    )


def tokenize_and_pack(splits: DatasetDict, tokenizer, seq_len: int, text_column: str = "text",
                      num_proc: int | None = None) -> DatasetDict:
    """Map text -> packed `input_ids` sequences of length `seq_len` (labels are the inputs: the model shifts them)."""

    def pack(batch):
        ids = tokenizer(batch[text_column], add_special_tokens=False)["input_ids"]
        return {"input_ids": pack_token_lists(ids, tokenizer.eos_token_id, seq_len)}

    # Large map batches keep the per-batch remainder small; the packed split is one column, no padding
    return DatasetDict(
        {
            name: split.map(pack, batched=True, batch_size=2000, remove_columns=split.column_names, num_proc=num_proc,
                            desc=f"pack {name}")
            for name, split in splits.items()
        }
    )


def save_prepared(output_dir: Path, packed: DatasetDict, tokenizer, meta: dict, replace: bool = False) -> None:
    """Write dataset, tokenizer and meta.json to `output_dir` atomically: a temp folder renamed at the end. An
    `output_dir` that appeared meanwhile is replaced only when `replace` (--force)."""
    output_dir = Path(output_dir)
    for name, split in packed.items():
        if len(split) == 0:
            raise ValueError(f"split {name!r} has no full sequence of {meta['seq_len']} tokens: "
                             "use a smaller --seq-len or more text")
    with temporary_folder(output_dir) as tmp:
        packed.save_to_disk(str(tmp / DATASET_DIR))
        tokenizer.save_pretrained(str(tmp / TOKENIZER_DIR))
        meta = dict(meta, num_sequences={name: len(split) for name, split in packed.items()})
        (tmp / META_FILE).write_text(json.dumps(meta, indent=2))
        move_into_place(tmp, output_dir, replace=replace)


# --- the training side: the prepared folder read back, and the batch plan ------------------------------------------


def check_prepared(data_dir: Path) -> dict:
    """meta.json of a prepared dataset folder, checked against the folder (prepared_checks.py), or a clear error
    before any work starts."""
    data_dir = Path(data_dir)
    meta_file = data_dir / META_FILE
    if not meta_file.is_file() or not (data_dir / DATASET_DIR).is_dir():
        raise FileNotFoundError(
            f"--data {data_dir}: no prepared dataset there (missing {META_FILE} or {DATASET_DIR}/). "
            f"Run `python scripts/prepare_data.py --output-dir {data_dir}` first."
        )
    return check_prepared_folder(data_dir)


def load_prepared(data_dir: Path):
    """(train, validation) as torch-formatted `datasets` splits, and the tokenizer saved beside them."""
    from datasets import load_from_disk
    from transformers import AutoTokenizer

    from .corpora import with_pad_token

    splits = load_from_disk(str(Path(data_dir) / DATASET_DIR)).with_format("torch")
    from ..utils.trust import load_kwargs

    folder = Path(data_dir) / TOKENIZER_DIR  # prepare-data writes a plain tokenizer: code there never runs
    tokenizer = AutoTokenizer.from_pretrained(str(folder), **load_kwargs(folder, False))
    check_tokenizer_size(data_dir, tokenizer, read_meta(data_dir))  # the rows were checked by check_prepared
    return splits["train"], splits["validation"], with_pad_token(tokenizer)  # data prepared before pad = EOS


@dataclass(frozen=True)
class BatchPlan:
    """Global batch = micro_batch * grad_accum * world sequences per optimizer step, drawn epoch by epoch from a
    seeded permutation of the `num_sequences` training sequences."""

    num_sequences: int
    micro_batch: int
    grad_accum: int
    world_size: int
    seed: int

    @property
    def global_batch(self) -> int:
        return self.micro_batch * self.grad_accum * self.world_size

    def indices(self, step: int, micro_step: int, rank: int) -> torch.Tensor:
        """Dataset indices of rank `rank`'s micro-batch `micro_step` at optimizer step `step` (0-based)."""
        start = step * self.global_batch + (micro_step * self.world_size + rank) * self.micro_batch
        positions = torch.arange(start, start + self.micro_batch)
        return torch.stack([self._permutation(int(p) // self.num_sequences)[int(p) % self.num_sequences]
                            for p in positions])

    @lru_cache(maxsize=4)
    def _permutation(self, epoch: int) -> torch.Tensor:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        return torch.randperm(self.num_sequences, generator=generator)


def batch_tensors(split, indices, seq_len: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, labels) of the rows `indices`, cut to `seq_len`. Labels are the inputs (the model shifts them), with
    -100 where instruction data's `loss_mask` is 0 (prompts: only assistant tokens are learned)."""
    rows = split[indices]
    ids = rows["input_ids"][:, :seq_len].to(device)
    if "loss_mask" not in rows:
        return ids, ids
    return ids, ids.masked_fill(rows["loss_mask"][:, :seq_len].to(device) == 0, -100)


def loss_normalizer(batches: list[tuple[torch.Tensor, torch.Tensor]], engine, grad_accum: int) -> dict:
    """Forward kwargs for a step's micro-batches (`batches`: their (input_ids, labels)). With a loss mask, micro-batches
    hold different numbers of target tokens: each one's summed loss is divided by its share of the step's global
    count (transformers' `num_items_in_batch`), so after the accumulation and data-parallel averages a step's loss and
    gradient are the token mean over the whole global batch, whatever the process count and accumulation. Without a
    mask every micro-batch has the same count: {} (the plain mean)."""
    if all(labels is ids for ids, labels in batches):
        return {}
    local = sum(int((labels[:, 1:] != -100).sum()) for _, labels in batches)  # the model predicts labels[:, 1:]
    share = engine.mean_tensor(torch.tensor(float(local))) / grad_accum
    return {"num_items_in_batch": torch.where(share > 0, share, torch.ones_like(share))}


# --- prepare-data: documents (or conversations) -> tokenizer -> packed folder ---------------------------------------


def prepare_dataset(args: PrepareArgs) -> dict:
    """The prepare-data command: check the flags (`args.check_prepare_args`), load the documents, split, build the
    tokenizer, pack, write; returns what was written. Raises SystemExit("error: ...") on bad input; nothing is
    written then."""
    from .args import check_prepare_args
    from .chat import ensure_chat_template, read_chat_template
    from .corpora import load_documents, load_tokenizer, training_texts

    check_prepare_args(args)
    start = time.time()
    try:
        with claim_output(args.output_dir):  # one writer of --output-dir, from the first document read to the rename
            splits = split_documents(load_documents(args), args.validation_fraction, args.seed)
            tokenizer = load_tokenizer(args, training_texts(splits["train"]))
            if args.chat:
                ensure_chat_template(tokenizer, read_chat_template(args.chat_template))
                packed = _pack_chat(splits, tokenizer, args)
            else:
                packed = tokenize_and_pack(splits, tokenizer, args.seq_len, num_proc=args.num_proc)
            source = args.hub or [str(p) for p in args.files or args.chat or ()] or {"offline": args.corpora}
            meta = dict(source=source, tokenizer=args.tokenizer, vocab_size=len(tokenizer), seq_len=args.seq_len,
                        seed=args.seed, num_documents={name: len(split) for name, split in splits.items()},
                        loss_mask=bool(args.chat))
            save_prepared(args.output_dir, packed, tokenizer, meta, replace=args.force)
    except ValueError as error:  # too little text for the split or the sequence length: nothing was written
        raise SystemExit(f"error: {error}") from None
    except OSError as error:  # disk full, no permission: the half-written folder is gone already
        message = write_failure(args.output_dir, error)
        if message is None:
            raise
        raise SystemExit(f"error: {message}; nothing was written") from None
    tokens = {name: len(split) * args.seq_len for name, split in packed.items()}
    print(f"wrote {args.output_dir}: {tokens['train']:,} train / {tokens['validation']:,} validation tokens, "
          f"vocab {len(tokenizer)}, {time.time() - start:.0f}s")
    return dict(output_dir=str(args.output_dir), tokens=tokens, vocab_size=len(tokenizer))


def _pack_chat(splits: DatasetDict, tokenizer, args: PrepareArgs) -> DatasetDict:
    """tokenize_and_pack_chat, with a template problem named as the flag (or tokenizer) it came from."""
    from jinja2 import TemplateError

    try:
        return tokenize_and_pack_chat(splits, tokenizer, args.seq_len, num_proc=args.num_proc)
    except ValueError as error:  # a template that cannot locate the assistant tokens
        raise SystemExit(f"error: --chat: {error}") from None
    except TemplateError as error:  # invalid Jinja, or a template that expects other fields
        where = f"--chat-template {args.chat_template}" if args.chat_template else "the tokenizer's chat template"
        raise SystemExit(f"error: {where}: cannot render the conversations ({type(error).__name__}: {error})") from None
