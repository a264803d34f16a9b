"""Bad input to scripts/prepare_data.py (in-process main()): corpus files it cannot read (each named, with the line),
output folders that overlap the corpus or exist without --force. Every case: SystemExit with one message, the corpus
untouched, no output."""
from __future__ import annotations

import json

import pytest

from tests.helpers.bad_input_fixtures import SENTINEL, expect_refused
from tests.helpers.train_fixtures import write_documents

BPE = ["--tokenizer", "bpe", "--vocab-size", "260", "--seq-len", "8", "--validation-fraction", "0.5"]

# name -> (file name, bytes, words the message must contain besides the file name)
FILE_CASES = {
    "txt_not_utf8": ("latin1.txt", "caf\xe9 au lait\n".encode("latin-1"), ["line 1", "UTF-8"]),
    "txt_binary": ("image.txt", b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR", ["binary"]),
    "txt_empty": ("empty.txt", b"   \n", ["empty"]),
    "jsonl_bad_line": ("docs.jsonl", b'{"text": "one"}\n{"text": "two"\n', ["line 2", "invalid JSON"]),
    "jsonl_not_object": ("docs.jsonl", b'{"text": "one"}\n["text"]\n', ["line 2", "JSON object"]),
    "jsonl_text_not_string": ("docs.jsonl", b'{"text": 5}\n', ["line 1", "'text'", "int"]),
    "jsonl_no_text_column": ("docs.jsonl", b'{"body": "x"}\n', ["no column 'text'", "--text-column"]),
    "json_array_bad_record": ("docs.json", b'[{"text": "a"}, {"txt": "b"}]', ["record 1", "no column 'text'"]),
    "jsonl_not_utf8": ("docs.jsonl", b'{"text": "\xff"}\n', ["line 1", "UTF-8"]),
    "jsonl_nested_100000_deep": ("docs.jsonl", b'{"text": "a"}\n' + b'{"text": ' * 100_000 + b"1" + b"}" * 100_000,
                                 ["line 2", "nested more than"]),
    "json_nested_100000_deep": ("docs.json", b"[" * 100_000 + b"]" * 100_000, ["nested more than"]),
    "wrong_suffix": ("notes.md", b"# hi\n", ["not .txt, .jsonl or .json"]),
}


@pytest.mark.parametrize("name, content, named", FILE_CASES.values(), ids=FILE_CASES.keys())
def test_unreadable_corpus_file_named(prepare, tmp_path, name, content, named):
    good = write_documents(tmp_path / "corpus", count=2)
    bad = tmp_path / "corpus" / name
    bad.write_bytes(content)
    out = tmp_path / "out"
    expect_refused(lambda: prepare(["--files", *map(str, good), str(bad), *BPE, "--output-dir", str(out)]),
                   [str(bad), *named], untouched=[tmp_path / "corpus"], absent=[out], errors=SystemExit)


def test_missing_file_named(prepare, tmp_path):
    out = tmp_path / "out"
    expect_refused(lambda: prepare(["--files", str(tmp_path / "nope.txt"), *BPE, "--output-dir", str(out)]),
                   ["nope.txt", "does not exist"], absent=[out], errors=SystemExit)


# name -> (output dir from (corpus folder, tmp), extra flags, words)
OUTPUT_CASES = {
    "output_is_corpus_folder": (lambda corpus, tmp: corpus, ["--force"], ["contains the input"]),
    "output_is_corpus_folder_no_force": (lambda corpus, tmp: corpus, [], ["contains the input"]),
    "output_is_parent_of_corpus": (lambda corpus, tmp: tmp, ["--force"], ["contains the input"]),
    "output_is_an_input_file": (lambda corpus, tmp: corpus / "doc0.txt", ["--force"], ["is the input"]),
    "output_exists_without_force": (lambda corpus, tmp: tmp / "previous", [], ["already exists", "--force"]),
    "output_is_a_file": (lambda corpus, tmp: tmp / "notes.txt", ["--force"], ["is a file"]),
}


@pytest.mark.parametrize("output, flags, named", OUTPUT_CASES.values(), ids=OUTPUT_CASES.keys())
def test_output_overlapping_corpus_refused(prepare, tmp_path, output, flags, named):
    corpus = tmp_path / "corpus"
    files = write_documents(corpus, count=2)
    (corpus / "notes.txt").write_text(SENTINEL)
    (tmp_path / "previous").mkdir()
    (tmp_path / "previous" / "meta.json").write_text("{}")
    (tmp_path / "notes.txt").write_text(SENTINEL)
    out = output(corpus, tmp_path)
    expect_refused(lambda: prepare(["--files", *map(str, files), *BPE, "--output-dir", str(out), *flags]),
                   ["--output-dir", *named], untouched=[tmp_path], errors=SystemExit)


FLAG_CASES = {
    "validation_fraction_nan": (["--validation-fraction", "nan"], ["--validation-fraction"]),
    "validation_fraction_inf": (["--validation-fraction", "inf"], ["--validation-fraction"]),
    "seq_len_one": (["--seq-len", "1"], ["--seq-len"]),
    "vocab_too_small": (["--vocab-size", "10"], ["--vocab-size"]),
    # the BPE trainer allocated for 10**12 entries and aborted the interpreter (exit 134): refused before any work
    "vocab_too_large": (["--vocab-size", "1000000000000"], ["--vocab-size", "1,048,576", "1000000000000"]),
}


@pytest.mark.parametrize("flags, named", FLAG_CASES.values(), ids=FLAG_CASES.keys())
def test_bad_flags_refused(prepare, tmp_path, flags, named):
    files = write_documents(tmp_path / "corpus", count=2)
    out = tmp_path / "out"
    expect_refused(lambda: prepare(["--files", *map(str, files), *BPE, *flags, "--output-dir", str(out)]), named,
                   untouched=[tmp_path / "corpus"], absent=[out], errors=SystemExit)


def test_force_replaces_only_the_output(prepare, tmp_path):
    files = write_documents(tmp_path / "corpus", count=4)
    out = tmp_path / "data"
    out.mkdir()
    (out / "old.txt").write_text("old")
    (tmp_path / "sibling.txt").write_text(SENTINEL)
    prepare(["--files", *map(str, files), *BPE, "--output-dir", str(out), "--force"])
    assert json.loads((out / "meta.json").read_text())["seq_len"] == 8 and not (out / "old.txt").exists()
    assert (tmp_path / "sibling.txt").read_text() == SENTINEL and all(f.is_file() for f in files)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus", "data", "sibling.txt"]  # no temp left
