"""Bad input to `attnres compare` (in-process main()): model folders that are not models, unknown tasks, impossible
settings, an output folder that is a file or lies in an input, damaged prepared data, and damaged per-task results on
resume (redone, never a crash). Every refused case: one message naming the flag or file, inputs untouched, nothing
written."""
from __future__ import annotations

import errno
import json
import shutil

import pytest
import torch

from hf_attnres.cli.compare import main as compare_main
from hf_attnres.evaluation.comparison import CompareError
from hf_attnres.evaluation.data import DataError
from tests.helpers.bad_input_fixtures import expect_refused, nan_weight, snapshot, truncate
from tests.helpers.eval_fixtures import fixture_eval_data
from tests.helpers.processes import output_held
from tests.helpers.safetensors_damage import HEADER_DAMAGE
from tests.helpers.toolchain_fixtures import tiny_folder

TASK = "attnres_mmlu_bpb"  # no generation, two tiny MMLU subjects: the fastest real task


@pytest.fixture(scope="module")
def env(tmp_path_factory, offline):
    """Two tiny models with their tokenizer, prepared benchmark items, and a few non-model folders."""
    root = tmp_path_factory.mktemp("bad_eval")
    a, b = tiny_folder(root / "a", num_layers=2), tiny_folder(root / "b", num_layers=2, seed=1)
    (root / "a_file").write_text("not a folder")
    (root / "empty").mkdir()
    (root / "my_tasks").mkdir()  # a user's --include-path folder
    (root / "my_tasks" / "my_task.yaml").write_text("task: my_task\n")
    configs = {"bad_json": "{not json", "not_model": "{}", "no_weights": '{"model_type": "kimi_linear"}'}
    for name, text in configs.items():
        (root / name).mkdir()
        (root / name / "config.json").write_text(text)
    planted = shutil.copytree(a, root / "planted")  # our model, plus a tokenizer module of the folder's own
    (planted / "tokenization_evil.py").write_text(f"open({str(root / 'ran')!r}, 'w')\n")
    config = json.loads((planted / "tokenizer_config.json").read_text())
    (planted / "tokenizer_config.json").write_text(json.dumps({**config, "auto_map": {
        "AutoTokenizer": [None, "tokenization_evil.Tok"]}}))
    nan_weight(shutil.copytree(a, root / "nan_weights"))  # a diverged model: named, never evaluated to `n/a`
    for name in ("header_offsets_gap", "lm_head_int32"):  # weights whose header lies, an int32 lm_head
        HEADER_DAMAGE[name][0](shutil.copytree(a, root / name))
    no_tokenizer = shutil.copytree(a, root / "no_tokenizer")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (no_tokenizer / name).unlink()
    damaged = fixture_eval_data(root / "damaged_eval")
    (damaged / "prepared.json").write_text("{")
    return dict(root=root, a=a, b=b, eval=fixture_eval_data(root), damaged_eval=damaged)


ABSENT_DEVICE = "cuda" if not torch.cuda.is_available() else f"cuda:{torch.cuda.device_count()}"
# name -> (argv: {a} {b} {root} {eval} {out} are filled in; words the error must contain)
COMPARE_CASES = {
    "model_missing": (["{root}/missing", "{b}"], ["missing", "does not exist"]),
    "model_is_a_file": (["{root}/a_file", "{b}"], ["a_file", "not a folder"]),
    "folder_without_config": (["{root}/empty", "{b}"], ["empty", "config.json"]),
    "config_invalid_json": (["{root}/bad_json", "{b}"], ["config.json", "JSON"]),
    "config_not_a_model": (["{root}/not_model", "{b}"], ["config.json", "model_type"]),
    "folder_without_weights": (["{root}/no_weights", "{b}"], ["no_weights", ".safetensors"]),
    "weights_header_lies": (["{root}/header_offsets_gap", "{b}"], ["header_offsets_gap", "model.liar", "gap"]),
    "weights_int32_lm_head": (["{a}", "{root}/lm_head_int32"], ["lm_head_int32", "lm_head.weight", "I32"]),
    "model_without_tokenizer": (["{a}", "{root}/no_tokenizer"], ["no_tokenizer", "no tokenizer"]),
    "one_model": (["{a}"], ["at least two"]),
    "model_weights_nan": (["{a}", "{root}/nan_weights"], ["nan_weights", "model.safetensors", "non-finite", "NaN"]),
    "unknown_task": (["{a}", "{b}", "--tasks", "no_such_task"], ["no_such_task", "unknown task"]),
    "heldout_without_data": (["{a}", "{b}", "--tasks", "heldout"], ["heldout", "--data"]),
    "code_task_without_opt_in": (["{a}", "{b}", "--tasks", "attnres_humaneval"], ["--allow-code-execution"]),
    "task_data_not_prepared": (["{a}", "{b}", "--eval-data", "{root}/nothing"], ["not available", "prepare_eval_data"]),
    # --data feeds the heldout task only (without it, --data is refused: tests/cli/test_flag_combinations.py)
    "data_not_prepared": (["{a}", "{b}", "--data", "{root}/empty", "--tasks", "heldout"], ["empty"]),
    "labels_count": (["{a}", "{b}", "--labels", "x"], ["--labels"]),
    "labels_not_unique": (["{a}", "{b}", "--labels", "x", "x"], ["not unique"]),
    "limit_zero": (["{a}", "{b}", "--limit", "0"], ["--limit", ">= 1"]),
    "limit_negative": (["{a}", "{b}", "--limit", "-3"], ["--limit", "-3"]),
    "num_fewshot_negative": (["{a}", "{b}", "--num-fewshot", "-1"], ["--num-fewshot", ">= 0"]),
    "max_length_zero": (["{a}", "{b}", "--max-length", "0"], ["--max-length", ">= 1"]),
    "batch_size_word": (["{a}", "{b}", "--batch-size", "abc"], ["--batch-size", "abc"]),
    "batch_size_zero": (["{a}", "{b}", "--batch-size", "0"], ["--batch-size"]),
    "output_dir_is_a_file": (["{a}", "{b}", "--output-dir", "{root}/a_file"], ["--output-dir", "is a file"]),
    "output_dir_is_a_model": (["{a}", "{b}", "--output-dir", "{a}"], ["--output-dir", "inside"]),
    "output_dir_inside_a_model": (["{a}", "{b}", "--output-dir", "{b}/report"], ["--output-dir", "inside", "b"]),
    "output_dir_inside_eval_data": (["{a}", "{b}", "--output-dir", "{eval}/report"], ["--output-dir", "inside"]),
    "prepared_json_damaged": (["{a}", "{b}", "--eval-data", "{root}/damaged_eval/eval"], ["prepared.json", "damaged"]),
    "folder_carries_code": (["{a}", "{root}/planted"], ["planted", "tokenizer_config.json", "tokenization_evil.py",
                                                        "--trust-remote-code"]),
    "device_not_a_device": (["{a}", "{b}", "--device", "banana"], ["--device", "banana", "not a device"]),
    "device_not_on_this_machine": (["{a}", "{b}", "--device", ABSENT_DEVICE], ["--device", ABSENT_DEVICE]),
    "gen_kwargs_no_name": (["{a}", "{b}", "--gen-kwargs", "==="], ["--gen-kwargs", "===", "name=value"]),
    "gen_kwargs_no_value": (["{a}", "{b}", "--gen-kwargs", "max_gen_toks"], ["--gen-kwargs", "max_gen_toks"]),
    "model_args_no_name": (["{a}", "{b}", "--model-args", "=1"], ["--model-args", "name=value"]),
    "model_args_set_by_a_flag": (["{a}", "{b}", "--model-args", "trust_remote_code=True"],
                                 ["--model-args", "trust_remote_code", "--trust-remote-code"]),
    "model_args_unknown_option": (["{a}", "{b}", "--model-args", "nonsense=1"], ["--model-args", "nonsense"]),
    "include_path_missing": (["{a}", "{b}", "--include-path", "{root}/missing"], ["--include-path", "missing"]),
    "include_path_is_a_file": (["{a}", "{b}", "--include-path", "{root}/a_file"], ["--include-path", "not a folder"]),
    "include_path_without_yaml": (["{a}", "{b}", "--include-path", "{root}/empty"], ["--include-path", "*.yaml"]),
    "output_dir_inside_include_path": (["{a}", "{b}", "--include-path", "{root}/my_tasks", "--output-dir",
                                        "{root}/my_tasks/report"], ["--output-dir", "inside", "my_tasks"]),
    "own_task_without_include_path": (["{a}", "{b}", "--tasks", "my_own_task"], ["my_own_task", "--include-path"]),
}


def test_heldout_with_another_tokenizer_refused_before_any_work(env, prepared_data, tmp_path):
    """--data prepared with another tokenizer than the models': named before the first model is evaluated."""
    out = tmp_path / "out"
    argv = [str(env["a"]), str(env["b"]), "--data", str(prepared_data), "--tasks", "heldout", "--output-dir",
            str(out), "--device", "cpu"]
    expect_refused(lambda: compare_main(argv), ["--data", "tokenizer differs", str(env["a"])],
                   untouched=[env["a"], prepared_data], absent=[out], errors=(CompareError, DataError))


def test_heldout_with_a_model_without_tokenizer_named(env, prepared_data, tmp_path):
    """heldout scores the corpus's ids, yet lm-eval's HF wrapper loads each model's own tokenizer: a folder without
    one is named before any work, never a tokenizers traceback."""
    out = tmp_path / "out"
    argv = [str(env["a"]), str(env["root"] / "no_tokenizer"), "--data", str(prepared_data), "--tasks", "heldout",
            "--output-dir", str(out), "--device", "cpu"]
    expect_refused(lambda: compare_main(argv), ["no_tokenizer", "no tokenizer"], untouched=[env["a"], prepared_data],
                   absent=[out], errors=(CompareError, DataError))


def test_quick_with_tasks_refused(env, capsys, tmp_path):
    with pytest.raises(SystemExit) as info:
        compare_main([str(env["a"]), str(env["b"]), "--quick", "--tasks", TASK, "--output-dir", str(tmp_path / "o")])
    assert info.value.code == 2 and "--quick picks its tasks" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def fill(argv, env, out):
    return [a.format(out=out, **{k: v for k, v in env.items()}) for a in argv]


@pytest.mark.parametrize("argv, named", COMPARE_CASES.values(), ids=COMPARE_CASES.keys())
def test_compare_refuses_before_any_work(env, tmp_path, argv, named):
    out = tmp_path / "out"
    argv = fill(argv, env, out)
    defaults = {"--tasks": [TASK], "--eval-data": [str(env["eval"])], "--output-dir": [str(out)], "--device": ["cpu"]}
    argv += [x for flag, value in defaults.items() if flag not in argv for x in (flag, *value)]
    inputs = [env["a"], env["b"], env["eval"], env["root"] / "a_file"]
    absent = [out, env["a"] / "results", env["b"] / "report", env["eval"] / "report"]
    expect_refused(lambda: compare_main(argv), named, untouched=inputs, absent=absent, errors=(CompareError, DataError))
    assert not (env["root"] / "ran").exists()  # the planted tokenizer module never ran


def test_second_compare_into_one_output_dir_refused(env, tmp_path):
    """Another process writes the same --output-dir (`hf_attnres.folders.atomic_io.claim_output`): refused at once,
    by name."""
    out = tmp_path / "out"
    argv = [str(env["a"]), str(env["b"]), "--tasks", TASK, "--eval-data", str(env["eval"]), "--limit", "1",
            "--device", "cpu", "--output-dir", str(out)]
    with output_held(out):
        expect_refused(lambda: compare_main(argv), ["--output-dir", str(out), "another process"],
                       untouched=[env["a"], env["b"]], absent=[out], errors=CompareError)


def test_planted_code_runs_only_with_the_flag(env, tmp_path):
    """The same folder with --trust-remote-code: its module is imported (the marker appears)."""
    marker = env["root"] / "ran"
    # the planted module defines no tokenizer: loading fails after it ran
    with pytest.raises(Exception, match="tokenization_evil"):
        compare_main([str(env["a"]), str(env["root"] / "planted"), "--trust-remote-code", "--tasks", TASK,
                      "--eval-data", str(env["eval"]), "--limit", "1", "--device", "cpu",
                      "--output-dir", str(tmp_path / "out")])
    assert marker.exists()
    marker.unlink()


ARGPARSE_CASES = {
    "limit_not_a_number": (["--limit", "ten"], "--limit"),
    "num_fewshot_float": (["--num-fewshot", "1.5"], "--num-fewshot"),
    "max_length_word": (["--max-length", "big"], "--max-length"),
}


@pytest.mark.parametrize("argv, flag", ARGPARSE_CASES.values(), ids=ARGPARSE_CASES.keys())
def test_compare_flag_types_named_by_argparse(env, capsys, tmp_path, argv, flag):
    with pytest.raises(SystemExit) as info:
        compare_main([str(env["a"]), str(env["b"]), *argv, "--output-dir", str(tmp_path / "out")])
    assert info.value.code == 2 and flag in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def finished(env, tmp_path_factory):
    """A finished two-model comparison on one task (one item): what a resumed run finds."""
    out = tmp_path_factory.mktemp("bad_eval_run") / "report"
    compare_main([str(env["a"]), str(env["b"]), "--tasks", TASK, "--eval-data", str(env["eval"]), "--limit", "1",
                  "--device", "cpu", "--output-dir", str(out)])
    return out


# damage to results/b/<task>.json -> the rerun must redo that task and finish (never a crash, never a stale reuse)
RESUME_CASES = {
    "not_utf8": lambda f: f.write_bytes(b"\xff\xfe\x00garbage"),
    "invalid_json": lambda f: f.write_text('{"settings": '),
    "a_json_list": lambda f: f.write_text("[1, 2]"),
    "items_missing": lambda f: f.write_text(json.dumps({"settings": json.loads(f.read_text())["settings"]})),
    "truncated": lambda f: truncate(f),
}


@pytest.mark.parametrize("damage", RESUME_CASES.values(), ids=RESUME_CASES.keys())
def test_damaged_result_file_is_redone_on_resume(env, finished, tmp_path, damage):
    out = shutil.copytree(finished, tmp_path / "report")
    result = out / "results" / "b" / f"{TASK}.json"
    damage(result)
    kept = snapshot(out / "results" / "a")
    report = compare_main([str(env["a"]), str(env["b"]), "--tasks", TASK, "--eval-data", str(env["eval"]),
                           "--limit", "1", "--device", "cpu", "--output-dir", str(out)])
    redone = json.loads(result.read_text())
    assert redone["items"] == json.loads((finished / "results" / "b" / f"{TASK}.json").read_text())["items"]
    assert snapshot(out / "results" / "a") == kept  # the intact result was reused, not recomputed
    assert report["models"][1]["label"] == "b" and (out / "report.md").is_file()


DISK_FULL = {"plots": ("matplotlib.figure.Figure.savefig", "1"),
             "results": ("hf_attnres.evaluation.runner.write_json_atomic", "2")}


@pytest.mark.parametrize("target, limit", DISK_FULL.values(), ids=DISK_FULL.keys())
def test_disk_full_while_writing_the_report(env, finished, tmp_path, monkeypatch, target, limit):
    """One message naming --output-dir; the earlier report and results stay as they were, nothing half-written."""
    out = shutil.copytree(finished, tmp_path / "report")
    before = snapshot(out)

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(target, full)
    argv = [str(env["a"]), str(env["b"]), "--tasks", TASK, "--eval-data", str(env["eval"]), "--limit", limit,
            "--device", "cpu", "--output-dir", str(out)]
    message = expect_refused(lambda: compare_main(argv), ["--output-dir", str(out), "No space left on device"],
                             untouched=[out], errors=CompareError)
    assert snapshot(out) == before and not list(out.rglob(".*")), message


def test_code_planted_in_the_eval_data_folder_never_runs(env, tmp_path):
    """lm-eval resolves `!function hf_attnres.evaluation.bpb.f` first as hf_attnres/evaluation/bpb.py beside the task
    YAML:
    a module planted in <eval-data>/tasks ran during compare (exit 0, a normal report), and so did one an edited YAML
    named. compare reads no task file from the data folder: the data is used, the planted code never runs."""
    eval_data = shutil.copytree(env["eval"], tmp_path / "eval")
    marker = tmp_path / "ran"
    payload = f"open({str(marker)!r}, 'a').write(__name__)\nfrom hf_attnres.evaluation.bpb import *  # noqa\n"
    for where in ("tasks", "tasks/humaneval"):  # beside the task's YAML and beside the _bpb_template_yaml it includes
        (eval_data / where / "hf_attnres" / "evaluation").mkdir(parents=True)
        (eval_data / where / "hf_attnres" / "evaluation" / "bpb.py").write_text(payload)
    (eval_data / "tasks" / "humaneval" / "evil.py").write_text(payload)
    yaml_file = eval_data / "tasks" / "humaneval" / "attnres_humaneval_bpb.yaml"
    yaml_text = yaml_file.read_text().replace("hf_attnres.evaluation.bpb.humaneval_docs", "evil.humaneval_docs")
    yaml_file.write_text(yaml_text)
    out = tmp_path / "report"
    report = compare_main([str(env["a"]), str(env["b"]), "--tasks", "attnres_humaneval_bpb", "--eval-data",
                           str(eval_data), "--limit", "1", "--device", "cpu", "--output-dir", str(out)])
    assert not marker.exists(), marker.read_text()
    assert report["tasks"]["attnres_humaneval_bpb"]["bpb,none"]["models"]["b"]["n"] == 1  # the prepared data was used


def test_a_subject_folder_name_cannot_write_into_a_task_yaml(env, tmp_path):
    """MMLU's subject folder names go into the rendered YAML's text: a name holding a newline could add a line such
    as `process_docs: !function ...`. Only plain names are subjects; the folder is named."""
    eval_data = shutil.copytree(env["eval"], tmp_path / "eval")
    (eval_data / "mmlu" / "anatomy\nprocess_docs: !function os.getcwd").mkdir()
    argv = [str(env["a"]), str(env["b"]), "--tasks", TASK, "--eval-data", str(eval_data), "--device", "cpu",
            "--output-dir", str(tmp_path / "out")]
    expect_refused(lambda: compare_main(argv), ["--eval-data", "mmlu", "not an MMLU subject"],
                   untouched=[eval_data], absent=[tmp_path / "out"], errors=CompareError)
