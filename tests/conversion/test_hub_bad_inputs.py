"""Bad input to `attnres push-to-hub` (hf_attnres.cli.push_to_hub, in-process main(), exit code and message): missing or
damaged --model folders, invalid repository ids (refused before the build), output folders overlapping the model, no
network."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from hf_attnres.cli import push_to_hub as push_cli
from tests.helpers.bad_input_fixtures import (
    CONFIG_DTYPE_DAMAGE,
    INDEX_DAMAGE,
    MODEL_FOLDER_DAMAGE,
    NONFINITE_DAMAGE,
    SENTINEL,
    damaged_copy,
    expect_script_refused,
)
from tests.helpers.remote_loading import write_tokenizer


@pytest.fixture(scope="module")
def push():
    return push_cli.main


run_refused = expect_script_refused


REPO_ID_CASES = {
    "no_slash": ("just-a-name", ["--repo-id", "just-a-name"]),
    "two_slashes": ("a/b/c", ["--repo-id"]),
    "spaces": ("me/my model", ["--repo-id"]),
    "double_dash": ("me/--x", ["--repo-id"]),
    "too_long": ("me/" + "x" * 100, ["--repo-id"]),
}


@pytest.mark.parametrize("repo_id, named", REPO_ID_CASES.values(), ids=REPO_ID_CASES.keys())
def test_invalid_repo_id_refused_before_the_build(push, capsys, saved_model, tmp_path, repo_id, named):
    out = tmp_path / "hub"
    run_refused(push, capsys, ["--model", saved_model, "--repo-id", repo_id, "--output", out, "--dry-run"], named,
                untouched=[saved_model], absent=[out])


MODEL_CASES = {
    **{name: MODEL_FOLDER_DAMAGE[name] for name in ("no_config", "config_invalid_json", "truncated_weights",
                                                    "weights_are_a_fifo", "header_offsets_gap",
                                                    "header_nested_200000_deep", "lm_head_int32")},
    **CONFIG_DTYPE_DAMAGE,
    **NONFINITE_DAMAGE,
}
# an index naming files outside the folder: checked on the sharded model (the others have no index)
SHARDED_CASES = {name: INDEX_DAMAGE[name] for name in ("index_names_parent_folder", "index_names_absolute_path")}


@pytest.mark.parametrize("damage, named, model", [
    *((damage, named, "saved_model") for damage, named in MODEL_CASES.values()),
    *((damage, named, "sharded_model") for damage, named in SHARDED_CASES.values()),
], ids=[*MODEL_CASES, *SHARDED_CASES])
def test_damaged_model_folder_refused(push, capsys, request, tmp_path, damage, named, model):
    folder = damaged_copy(request.getfixturevalue(model), tmp_path, damage)
    out = tmp_path / "hub"
    run_refused(push, capsys, ["--model", folder, "--output", out, "--dry-run"], named, untouched=[folder],
                absent=[out])


def test_missing_model_folder(push, capsys, tmp_path):
    run_refused(push, capsys, ["--model", tmp_path / "nowhere", "--repo-id", "me/x", "--output", tmp_path / "hub"],
                ["--model", "nowhere", "no such folder"], absent=[tmp_path / "hub"])


@pytest.mark.parametrize("dataset", ["a/b/c", "me/my data", "bad--name", ""])
def test_invalid_dataset_id_refused_before_the_build(push, capsys, saved_model, tmp_path, dataset):
    from hf_attnres.conversion.hub import check_repo_id

    check_repo_id("squad", "--dataset", owner=False)  # a legacy dataset id, no owner: taken
    out = tmp_path / "hub"
    run_refused(push, capsys, ["--model", saved_model, "--dataset", "HuggingFaceFW/fineweb-edu", "--dataset", dataset,
                               "--output", out, "--dry-run"], ["--dataset", repr(dataset)], untouched=[saved_model],
                absent=[out])


@pytest.mark.parametrize("base_model", ["a/b/c", "me/my model", "plain-name"])
def test_invalid_base_model_refused_before_the_build(push, capsys, saved_model, tmp_path, base_model):
    out = tmp_path / "hub"
    run_refused(push, capsys, ["--model", saved_model, "--base-model", base_model, "--output", out, "--dry-run"],
                ["--base-model"], untouched=[saved_model], absent=[out])


def test_existing_folder_push_to_hub_did_not_build_is_refused(push, capsys, saved_model, tmp_path):
    """Only a folder with push-to-hub's build record is reused or rebuilt without --force: another is the user's."""
    out = tmp_path / "hub"
    out.mkdir()
    (out / "notes.txt").write_text(SENTINEL)
    run_refused(push, capsys, ["--model", saved_model, "--output", out, "--dry-run"], ["--output", "already exists"],
                untouched=[saved_model, out])


OUTPUT_CASES = {
    "output_is_model": (lambda model: model, ["is the input"]),
    "output_contains_model": (lambda model: model.parent, ["contains the input"]),
    "output_inside_model": (lambda model: model / "hub", ["lies inside the input"]),
    "output_is_a_file": (lambda model: model.parent / "notes.txt", ["file"]),
}


@pytest.mark.parametrize("output, named", OUTPUT_CASES.values(), ids=OUTPUT_CASES.keys())
def test_output_overlapping_model_refused(push, capsys, saved_model, tmp_path, output, named):
    model = shutil.copytree(saved_model, tmp_path / "models" / "mine")
    (tmp_path / "models" / "notes.txt").write_text(SENTINEL)
    run_refused(push, capsys, ["--model", model, "--output", output(model), "--force", "--dry-run"],
                ["--output", *named], untouched=[tmp_path / "models"])


@pytest.mark.parametrize("make, named", [
    (lambda path: path.write_text("{nope"), ["invalid JSON"]),
    (lambda path: os.mkfifo(path), ["not a regular file"]),
    (lambda path: path.mkdir(), ["not a regular file"]),
    (lambda path: None, ["not found"]),
], ids=["invalid_json", "a_fifo", "a_folder", "missing"])
def test_bad_eval_results_named(push, capsys, saved_model, tmp_path, make, named):
    make(tmp_path / "eval.json")
    run_refused(push, capsys, ["--model", saved_model, "--output", tmp_path / "hub", "--eval-results",
                               tmp_path / "eval.json", "--dry-run"], ["--eval-results", "eval.json", *named],
                absent=[tmp_path / "hub"])


def test_no_network_is_one_message_and_keeps_the_folder(push, capsys, saved_model, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # what a machine without network sees
    out = tmp_path / "hub"
    assert push(["--model", str(saved_model), "--repo-id", "me/tiny", "--output", str(out)]) == 1
    err = capsys.readouterr().err
    assert "error: upload to me/tiny failed" in err and "Traceback" not in err, err
    assert (out / "config.json").is_file() and (out / "README.md").is_file()


# name -> (file content, words the error must contain besides the file): a JSON file that is no evaluation result
EVAL_RESULT_CASES = {
    "a_model_config": ({"model_type": "llama", "hidden_size": 64, "architectures": ["LlamaForCausalLM"]},
                       ["not an evaluation result", "architectures"]),
    "numbers_and_a_flag": ({"hidden_size": 64, "tie_word_embeddings": True}, ["tie_word_embeddings", "bool"]),
    "a_list_of_scores": ({"mmlu": [0.25, 0.5]}, ["mmlu", "list"]),
    "a_task_without_metrics": ({"mmlu": {}}, ["mmlu", "no metric"]),
    "a_nan_score": ({"mmlu": {"acc": float("nan")}}, ["mmlu.acc", "nan"]),
    "lm_eval_results_not_an_object": ({"results": [1, 2]}, ["'results'", "list"]),
    "lm_eval_task_not_an_object": ({"results": {"mmlu": 0.25}}, ["results.mmlu"]),
    "report_without_paired": ({"models": [], "tasks": {"heldout": {"loss": {"models": {"a": {"mean": 1.0,
                               "stderr": 0.1}}, "lower_is_better": True}}}}, ["tasks.heldout.loss.paired", "missing"]),
    "report_mean_a_word": ({"models": [], "tasks": {"heldout": {"loss": {"models": {"a": {"mean": "low",
                            "stderr": 0.1}}, "paired": [], "lower_is_better": True}}}}, ["models.a.mean", "str"]),
    "report_tasks_a_list": ({"models": [], "tasks": []}, ["tasks", "list"]),
    "a_json_list": ([0.25], ["JSON object"]),
}


@pytest.mark.parametrize("content, named", EVAL_RESULT_CASES.values(), ids=EVAL_RESULT_CASES.keys())
def test_eval_results_that_are_no_evaluation_result_are_refused(push, capsys, saved_model, tmp_path, content, named):
    """A config.json or a damaged report given as --eval-results: the file and its first entry that is no metric are
    named; its numbers never reach the card as scores."""
    (tmp_path / "config.json").write_text(json.dumps(content))
    run_refused(push, capsys, ["--model", saved_model, "--output", tmp_path / "hub", "--eval-results",
                               tmp_path / "config.json", "--dry-run"], ["--eval-results", "config.json", *named],
                absent=[tmp_path / "hub"])


TOKENIZER_FILE_DAMAGE = {
    "tokenizer_json_linked_to_a_binary": ("tokenizer.json", lambda path, tmp: path.symlink_to(make_binary(tmp))),
    "tokenizer_config_not_json": ("tokenizer_config.json", lambda path, tmp: path.write_text("not json")),
    "special_tokens_map_a_list": ("special_tokens_map.json", lambda path, tmp: path.write_text("[1]")),
    "tokenizer_json_a_fifo": ("tokenizer.json", lambda path, tmp: os.mkfifo(path)),
}


def make_binary(folder: Path) -> Path:
    (folder / "blob.bin").write_bytes(bytes(range(256)) * 4)
    return folder / "blob.bin"


@pytest.mark.parametrize("name, damage", TOKENIZER_FILE_DAMAGE.values(), ids=TOKENIZER_FILE_DAMAGE.keys())
@pytest.mark.parametrize("where", ["--tokenizer", "model folder"])
def test_damaged_tokenizer_json_is_named(push, capsys, saved_model, tmp_path, name, damage, where):
    """Every JSON file push-to-hub reads names itself when damaged, the tokenizer's included (given with --tokenizer
    or in the model folder), instead of the tokenizer library's bare `Expecting value: line 1 column 1`; a FIFO in
    its place is refused unopened (never a hang)."""
    model = shutil.copytree(saved_model, tmp_path / "model")
    tokenizer = write_tokenizer(model if where == "model folder" else tmp_path / "tok")
    (tokenizer / name).unlink(missing_ok=True)
    damage(tokenizer / name, tmp_path)
    argv = ["--model", model, "--output", tmp_path / "hub", "--dry-run"]
    run_refused(push, capsys, argv + (["--tokenizer", tokenizer] if where == "--tokenizer" else []), [name],
                absent=[tmp_path / "hub"])


@pytest.mark.parametrize("content", [b"\x00\x01 not json", b"[1]", b"{nope"], ids=["binary", "a_list", "invalid"])
@pytest.mark.parametrize("name", ["training_info.json", "generation_config.json"])
def test_damaged_model_json_is_named(push, capsys, saved_model, tmp_path, name, content):
    """The model folder's other JSON files feed the card (training_info.json: training data, base_model) or the
    saved folder (generation_config.json): a damaged one is named, never read as absent nor a raw TypeError."""
    model = shutil.copytree(saved_model, tmp_path / "model")
    (model / name).write_bytes(content)
    run_refused(push, capsys, ["--model", model, "--output", tmp_path / "hub", "--dry-run"], [name],
                untouched=[model], absent=[tmp_path / "hub"])


@pytest.mark.parametrize("license", ["Apache 2.0", "", "mit\nbase_model: evil/x"])
def test_a_license_the_hub_does_not_take_is_refused_before_the_build(push, capsys, saved_model, tmp_path, license):
    out = tmp_path / "hub"
    with pytest.raises(SystemExit) as info:
        push(["--model", str(saved_model), "--output", str(out), "--license", license, "--dry-run"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "--license" in err and "Traceback" not in err, err
    assert not out.exists()


TOKENIZER_SOURCE_CASES = {
    "missing_path": (lambda tmp: tmp / "nowhere", ["no such folder"]),
    "a_file": (lambda tmp: write_file(tmp / "tokenizer.json", "{}"), ["a file, not a tokenizer folder"]),
    "folder_without_tokenizer_files": (lambda tmp: make_folder(tmp / "tok"), ["without tokenizer files"]),
    "config_that_builds_no_tokenizer": (lambda tmp: write_file(make_folder(tmp / "tok") / "tokenizer_config.json",
                                                               "{}").parent, ["does not load as a tokenizer"]),
}


def write_file(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def make_folder(path: Path) -> Path:
    path.mkdir()
    return path


@pytest.mark.parametrize("make, named", TOKENIZER_SOURCE_CASES.values(), ids=TOKENIZER_SOURCE_CASES.keys())
def test_a_tokenizer_that_is_none_is_named(push, capsys, saved_model, tmp_path, make, named):
    """--tokenizer is a folder with tokenizer files or a Hub id: anything else is one line naming the flag."""
    tokenizer = make(tmp_path)
    run_refused(push, capsys, ["--model", saved_model, "--output", tmp_path / "hub", "--tokenizer", tokenizer,
                               "--dry-run"], ["--tokenizer", str(tokenizer), *named], absent=[tmp_path / "hub"])
