"""attnres compare (hf_attnres.evaluation) on two tiny models and self-written benchmark items (no network, no real
data): every benchmark's task loads and scores, BPB and held-out metrics equal hand computations from the logits, the
report is complete and resumable, bad input is one clear message."""
from __future__ import annotations

import json
import math

import pytest
import torch

from hf_attnres.cli.compare import main as compare_main
from hf_attnres.evaluation import compare, heldout_metrics
from hf_attnres.evaluation.tasks import TASKS
from tests.helpers.eval_fixtures import fixture_eval_data, tiny_pair

# lm-eval's task index and two tiny models over every benchmark: ~3 min on 2 CPU cores
pytestmark = pytest.mark.slow
ALL_TASKS = ["heldout", "attnres_mmlu", "attnres_mmlu_cloze", "attnres_mmlu_bpb", "attnres_gpqa", "attnres_gpqa_bpb",
             "attnres_triviaqa", "attnres_triviaqa_bpb", "attnres_minerva_math", "attnres_minerva_math_bpb",
             "attnres_humaneval", "attnres_humaneval_bpb"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("evaluation")
    data, standard, block = tiny_pair(root)
    return dict(root=root, data=data, standard=standard, block=block, eval_data=fixture_eval_data(root))


@pytest.fixture(scope="module")
def full_run(setup):
    """Every task of every benchmark, both models, two items per (sub)task, through the CLI."""
    out = setup["root"] / "report"
    compare_main([str(setup["standard"]), str(setup["block"]), "--tasks", *ALL_TASKS,
                                 "--data", str(setup["data"]), "--eval-data", str(setup["eval_data"]),
                                 "--output-dir", str(out), "--limit", "2", "--gen-kwargs", "max_gen_toks=4",
                                 "--allow-code-execution", "--device", "cpu"])
    return out


def test_every_benchmark_loads_from_local_files_and_scores(full_run):
    report = json.loads((full_run / "report.json").read_text())
    assert list(report["tasks"]) == ALL_TASKS
    assert report["skipped"] == []  # every metric of every benchmark has per-item values: none left unshown
    for task, metrics in report["tasks"].items():
        for metric, entry in metrics.items():
            for label in ("standard", "block"):
                stats = entry["models"][label]
                assert stats["n"] >= 1 and math.isfinite(stats["mean"]), (task, metric, label)
            assert entry["paired"][0]["model"] == "block" and entry["paired"][0]["n"] == entry["models"]["block"]["n"]
    assert set(report["tasks"]["attnres_minerva_math"]) == {"exact_match,none", "math_verify,none"}
    assert report["tasks"]["attnres_mmlu"]["acc,none"]["models"]["block"]["n"] == 4  # 2 subjects x limit 2
    # one meaning of --limit: the bits-per-byte task takes the same first items of each subject
    assert report["tasks"]["attnres_mmlu_bpb"]["bpb,none"]["models"]["block"]["n"] == 4
    assert report["tasks"]["attnres_mmlu_bpb"]["bpb,none"]["coverage"]["text"] == "2 subtasks x first 2: 4 of 6 items"
    assert report["tasks"]["heldout"]["bpb,none"]["coverage"]["text"] == "first 2 of 50 validation sequences"
    math_n = report["tasks"]["attnres_minerva_math"]["exact_match,none"]["models"]["block"]["n"]
    assert math_n == 14 and report["tasks"]["attnres_minerva_math_bpb"]["bpb,none"]["models"]["block"]["n"] == math_n
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
    assert "| attnres_mmlu_bpb | bpb (lower is better) | 4 | 2 subtasks x first 2: 4 of 6 items |" in markdown
    assert "## Matched?" in markdown
    # --limit cut the split: the pooled held-out numbers say so, never "the whole split"
    assert "Pooled over the whole split" not in markdown
    assert "Pooled over the first 2 of the split's 50 sequences" in markdown

    from hf_attnres.conversion.hub import read_eval_results  # scripts/push_to_hub.py --eval-results report.json

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

    from hf_attnres.evaluation import bpb

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

    from hf_attnres.training.data import load_prepared

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


def masked_copy(data, out):
    """The prepared corpus as instruction data: a loss_mask that scores the second half of each sequence only."""
    import shutil

    from datasets import load_from_disk

    shutil.copytree(data, out)
    splits = load_from_disk(str(data / "dataset"))
    masked = splits.map(lambda row: {"loss_mask": [int(i >= len(row["input_ids"]) // 2)
                                                   for i in range(len(row["input_ids"]))]})
    shutil.rmtree(out / "dataset")
    masked.save_to_disk(str(out / "dataset"))
    meta = json.loads((out / "meta.json").read_text())
    (out / "meta.json").write_text(json.dumps({**meta, "loss_mask": True}))
    return out


def test_heldout_scores_the_loss_mask_as_training_does(setup):
    """Chat data: heldout's loss is training's validation loss on the same rows (labels -100 where loss_mask is 0),
    not the loss over the prompt tokens too; the report says what it scored."""
    from transformers import AutoModelForCausalLM

    from hf_attnres.training.data import batch_tensors, load_prepared

    data = masked_copy(setup["data"], setup["root"] / "chat_data")
    model = AutoModelForCausalLM.from_pretrained(str(setup["standard"])).eval()
    _, val, _ = load_prepared(data)
    ids, labels = batch_tensors(val, list(range(3)), 32, "cpu")
    with torch.no_grad():
        expected = model(input_ids=ids, labels=labels).loss.item()  # train.py's val/heldout_loss
        everything = model(input_ids=ids, labels=ids).loss.item()
    result = heldout_metrics(setup["standard"], data, max_sequences=3, batch_size=2, progress=False)
    assert result["loss"] == pytest.approx(expected, rel=1e-5)
    assert abs(result["loss"] - everything) > 1e-3  # the mask changed what is scored
    assert result["tokens"] == 3 * (32 - 32 // 2) and result["scored"] == "supervised tokens (loss_mask)"
    out = setup["root"] / "chat_report"
    report = compare([setup["standard"], setup["block"]], ["heldout"], out, data_dir=data, limit=3, device="cpu",
                     progress=False)
    assert report["heldout"]["standard"]["loss"] == pytest.approx(expected, rel=1e-5)
    markdown = (out / "report.md").read_text()
    assert "scored: supervised tokens (loss_mask)" in markdown and "heldout scores the supervised tokens" in markdown


def test_quick_preset(setup, capsys):
    """--quick: heldout and MMLU bits per byte at --limit 4, on both models; its --help states the measured times."""
    import time

    from hf_attnres.cli.compare import build_parser
    from hf_attnres.evaluation.comparison import QUICK_LIMIT

    assert "--quick" in build_parser().format_help() and "Measured" in build_parser().format_help()
    out = setup["root"] / "quick"
    start = time.perf_counter()
    report = compare_main([str(setup["standard"]), str(setup["block"]), "--quick", "--data", str(setup["data"]),
                           "--eval-data", str(setup["eval_data"]), "--output-dir", str(out), "--device", "cpu"])
    seconds = time.perf_counter() - start
    print(f"compare --quick, two tiny models: {seconds:.1f} s")  # docs/BENCHMARKS.md cites this line (pytest -s)
    assert report["settings"]["tasks"] == ["heldout", "attnres_mmlu_bpb"] and report["settings"]["limit"] == QUICK_LIMIT
    assert report["tasks"]["heldout"]["bpb,none"]["models"]["block"]["n"] == QUICK_LIMIT
    assert report["tasks"]["attnres_mmlu_bpb"]["bpb,none"]["models"]["block"]["n"] == 6  # 2 subjects x 3 items: all
    assert seconds < 600


def test_quick_without_benchmark_data_says_what_it_skipped(setup, tmp_path, capsys):
    """--quick with no prepared MMLU: heldout runs, and both the output and report.md name the skipped bits-per-byte
    task, why, and the command that prepares it; the output gives the report's full path."""
    out = tmp_path / "quick"
    empty = tmp_path / "no_eval_data"
    report = compare_main([str(setup["standard"]), str(setup["block"]), "--quick", "--data", str(setup["data"]),
                           "--eval-data", str(empty), "--output-dir", str(out), "--device", "cpu"])
    assert report["settings"]["tasks"] == ["heldout"]
    [skipped] = report["skipped"]
    assert skipped["tasks"] == ["attnres_mmlu_bpb"] and str(empty) in skipped["reason"]
    assert skipped["how"] == f"attnres prepare-eval-data --benchmarks mmlu --output-dir {empty}"
    printed = capsys.readouterr().out.splitlines()
    line = f"skipped attnres_mmlu_bpb: mmlu: its data is not prepared in {empty}; to run it: {skipped['how']}"
    assert line in printed
    assert printed[-1] == f"wrote {(out / 'report.md').resolve()}"
    markdown = (out / "report.md").read_text()
    assert "## Skipped" in markdown and f"`{skipped['how']}`" in markdown


def test_include_path_runs_the_users_own_task(setup, tmp_path):
    """--include-path DIR: a task YAML of the user's (lm-eval's --include_path), with the paired report of ours; the
    same task name without the flag is unknown and the message names the flag."""
    rows = [{"q": f"The number {i} is", "a": f" {i}"} for i in range(3)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    tasks = tmp_path / "my_tasks"
    tasks.mkdir()
    (tasks / "my_numbers.yaml").write_text(
        "task: my_numbers\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
        f"    test: {tmp_path / 'rows.jsonl'}\ntest_split: test\noutput_type: loglikelihood\n"
        'doc_to_text: "{{q}}"\ndoc_to_target: "{{a}}"\nmetric_list:\n  - metric: acc\n    aggregation: mean\n'
        "    higher_is_better: true\n")
    models = [str(setup["standard"]), str(setup["block"])]
    with pytest.raises(Exception, match="--include-path"):
        compare_main([*models, "--tasks", "my_numbers", "--eval-data", str(setup["eval_data"]),
                      "--output-dir", str(tmp_path / "refused"), "--device", "cpu"])
    report = compare_main([*models, "--tasks", "my_numbers", "--include-path", str(tasks), "--eval-data",
                           str(setup["eval_data"]), "--output-dir", str(tmp_path / "out"), "--device", "cpu"])
    entry = report["tasks"]["my_numbers"]["acc,none"]
    assert entry["models"]["block"]["n"] == 3 and entry["paired"][0]["model"] == "block"
    assert entry["coverage"]["text"] == "all 3 items" and report["settings"]["include_path"] == str(tasks)


@pytest.mark.parametrize("signal_name, code", [(None, 130), ("SIGTERM", 143)])
def test_interrupt_is_one_line(setup, tmp_path, monkeypatch, capsys, signal_name, code):
    """Ctrl-C (or SIGTERM) during an evaluation: one line saying finished tasks are kept, the signal's exit code."""
    def stopped(*args, **kwargs):
        raise KeyboardInterrupt(*([signal_name] if signal_name else []))

    monkeypatch.setattr("hf_attnres.cli.compare.compare", stopped)
    out = tmp_path / "out"
    assert compare_main([str(setup["standard"]), str(setup["block"]), "--output-dir", str(out)]) == code
    err = capsys.readouterr().err
    assert err.strip() == f"interrupted: finished tasks are kept in {out}/results; the same command continues"


def test_rerun_resumes_finished_tasks(full_run, setup, monkeypatch):
    from hf_attnres.evaluation import runner

    removed = full_run / "results" / "standard" / "attnres_gpqa_bpb.json"
    before = json.loads(removed.read_text())
    removed.unlink()
    calls = []
    real = runner.run_lm_eval_task
    monkeypatch.setattr(runner, "run_lm_eval_task", lambda lm, task, *a: calls.append(task) or real(lm, task, *a))
    monkeypatch.setattr("hf_attnres.evaluation.comparison.run_lm_eval_task", runner.run_lm_eval_task)
    report = compare([setup["standard"], setup["block"]], ["attnres_mmlu_bpb", "attnres_gpqa_bpb"], full_run,
                     eval_data=setup["eval_data"], limit=2, gen_kwargs="max_gen_toks=4", device="cpu", progress=False)
    assert calls == ["attnres_gpqa_bpb"]  # only the missing result is recomputed
    [reused] = [note for note in report["notes"] if note.startswith("reused")]  # and the report says what it reused
    assert reused.endswith(": attnres_mmlu_bpb (standard), attnres_mmlu_bpb (block), attnres_gpqa_bpb (block)")
    assert json.loads(removed.read_text())["items"] == before["items"]
    compare([setup["standard"], setup["block"]], ["attnres_gpqa_bpb"], full_run, eval_data=setup["eval_data"],
            limit=1, device="cpu", progress=False)
    assert calls == ["attnres_gpqa_bpb"] * 3  # other settings: both models recomputed, not mixed with old items
    assert len(json.loads(removed.read_text())["items"]["bpb,none"]) == 1


def test_bad_inputs_give_one_clear_message(setup, tmp_path, capsys):
    models = [str(setup["standard"]), str(setup["block"])]
    common = ["--eval-data", str(setup["eval_data"]), "--output-dir", str(tmp_path / "out")]
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
            run_cli(compare_main, argv)
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




def test_readme_few_shot_benchmark_command_at_a_small_size(setup):
    """The README's `compare A B --tasks attnres_mmlu attnres_minerva_math --num-fewshot 4`, with the same flags at a
    smaller size on the self-written items (2 shots: a subject holds 3 items; `--limit 1`, four generated tokens):
    the few-shot prompts build and every metric scores."""
    out = setup["root"] / "few_shot"
    compare_main([str(setup["standard"]), str(setup["block"]), "--tasks", "attnres_mmlu", "attnres_minerva_math",
                  "--num-fewshot", "2", "--eval-data", str(setup["eval_data"]), "--output-dir", str(out),
                  "--limit", "1", "--gen-kwargs", "max_gen_toks=4", "--device", "cpu"])
    report = json.loads((out / "report.json").read_text())
    assert list(report["tasks"]) == ["attnres_mmlu", "attnres_minerva_math"]
    assert set(report["tasks"]["attnres_minerva_math"]) == {"exact_match,none", "math_verify,none"}
    for metrics in report["tasks"].values():
        for entry in metrics.values():
            assert all(math.isfinite(entry["models"][label]["mean"]) for label in ("standard", "block"))


def test_the_default_set_names_every_benchmark_it_cannot_run(tmp_path):
    """No --tasks: each non-generating task of an unprepared benchmark, and heldout without --data, is a skipped
    entry with its reason (a failed preparation's own) and the command that prepares it."""
    from hf_attnres.evaluation.comparison import planned_tasks
    from hf_attnres.evaluation.data import PREPARED_FILE

    (tmp_path / PREPARED_FILE).write_text(json.dumps({"mmlu": {"rows": 6}, "gpqa": {"error": "no CSV given"}}))
    tasks, skipped = planned_tasks(tmp_path, None)
    assert tasks == ["attnres_mmlu", "attnres_mmlu_cloze", "attnres_mmlu_bpb"]
    entries = {entry["tasks"][0]: entry for entry in skipped}
    assert set(entries) == {"heldout", "attnres_triviaqa_bpb", "attnres_minerva_math_bpb", "attnres_humaneval_bpb",
                            "attnres_gpqa"}
    assert "--data" in entries["heldout"]["how"]
    assert entries["attnres_gpqa"]["tasks"] == ["attnres_gpqa", "attnres_gpqa_bpb"]
    assert "no CSV given" in entries["attnres_gpqa"]["reason"] and "--gpqa-csv FILE" in entries["attnres_gpqa"]["how"]
    command = f"attnres prepare-eval-data --benchmarks triviaqa --output-dir {tmp_path}"
    assert entries["attnres_triviaqa_bpb"]["how"] == command
    ran = [task for entry in skipped for task in entry["tasks"]] + tasks
    assert sorted(ran) == sorted(["heldout", *(t for t, (_, generates) in TASKS.items() if not generates)])
