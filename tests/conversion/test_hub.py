"""Hub packaging: the built folder holds everything, its card says what the model is, and it loads with
`trust_remote_code=True` in a fresh process where attnres is not installed, with identical logits - a Kimi Linear
folder and an upcycled Llama's alike (every family ships its generated code)."""
from __future__ import annotations

import json
import os
import shutil

import pytest
import torch
from huggingface_hub import ModelCard

from hf_attnres.conversion import ConversionError
from hf_attnres.conversion.hub import build_hub_folder, read_eval_results
from hf_attnres.conversion.kimi_linear.fixtures import random_model, write_moonshot_checkpoint
from hf_attnres.utils.tiny import tiny_config
from tests.families.tiny import FAMILIES, random_ids, source_model
from tests.helpers.model_factory import perturb_attn_res
from tests.helpers.remote_loading import auto_map, code_files, fake_hub_repo, load_all_in_clean_process, write_tokenizer


@pytest.fixture(scope="module")
def hub_folder(tmp_path_factory):
    """(model, folder): a block-mode model given in Moonshot's layout, packaged with tokenizer and evaluation."""
    root = tmp_path_factory.mktemp("hub")
    model = random_model(tiny_config("block", 2, family="kimi_linear"))
    source = write_moonshot_checkpoint(root / "ms", model)
    (root / "eval.json").write_text(json.dumps({"results": {
        "arc_easy": {"alias": "arc_easy", "acc,none": 0.4321, "acc_stderr,none": 0.01},
        "hellaswag": {"acc_norm,none": 0.2875},
    }}))
    folder = build_hub_folder(source, root / "hub", tokenizer=write_tokenizer(root / "tok"), repo_id="me/tiny-attnres",
                              training_data="FineWeb-Edu sample, 2M tokens", datasets=["HuggingFaceFW/fineweb-edu"],
                              eval_results=root / "eval.json")
    return model, folder


@pytest.fixture(scope="module")
def llama_hub_folder(tmp_path_factory):
    """(model, folder): an upcycled tiny Llama (pseudo-queries off zero: the mix is no average), packaged with a
    tokenizer."""
    from hf_attnres import upcycle

    root = tmp_path_factory.mktemp("llama-hub")
    model = perturb_attn_res(upcycle(source_model("llama"), "block", block_size=2))
    model.save_pretrained(root / "model")
    return model, build_hub_folder(root / "model", root / "hub", tokenizer=write_tokenizer(root / "tok"),
                                   repo_id="me/tiny-llama-attnres")


def test_folder_has_weights_config_code_tokenizer_card(hub_folder):
    _, folder = hub_folder
    names = {p.name for p in folder.iterdir()}
    assert {"model.safetensors", "config.json", "configuration_kimi_linear_attnres.py",
            "modeling_kimi_linear_attnres.py", "README.md", "tokenizer.json", "tokenizer_config.json"} <= names
    assert {name for name in names if name.endswith(".py")} == code_files("kimi_linear")["files"]  # nothing else
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "kimi_linear_attnres"
    assert config["auto_map"]["AutoModelForCausalLM"] == "modeling_kimi_linear_attnres.KimiLinearAttnResForCausalLM"
    assert config["auto_map"]["AutoConfig"] == "configuration_kimi_linear_attnres.KimiLinearAttnResConfig"
    assert "linear_attn_config" not in config  # Moonshot's fields do not leak into the HF-native config
    assert not any(p.name.startswith(".") for p in folder.parent.iterdir())


def test_model_card_describes_the_model(hub_folder):
    model, folder = hub_folder
    card = ModelCard.load(folder / "README.md")
    assert card.data.library_name == "transformers" and card.data.datasets == ["HuggingFaceFW/fineweb-edu"]
    text = card.text
    assert ("model_type `kimi_linear_attnres`" in text and "| AttnRes mode | `block` |" in text
            and "3 blocks: 2 of 2 layers and 1 of 1" in text)  # 5 layers
    assert f"{model.num_parameters():,}" in text
    assert "FineWeb-Edu sample, 2M tokens" in text
    assert "| arc_easy | acc | 0.4321 |" in text and "| hellaswag | acc_norm | 0.2875 |" in text
    assert "stderr" not in text
    assert "pip install hf-attnres" not in text and "only `torch` and `transformers" in text
    assert "trust_remote_code=True" in text


def test_loads_with_remote_code_where_attnres_is_not_installed(hub_folder, llama_hub_folder, tmp_path):
    """As a Hub user: a fresh process without attnres (or triton), model and tokenizer through the Auto classes, for
    the Kimi Linear folder and a family's (one interpreter start-up for both)."""
    models, repos = [], []
    for (model, folder), repo_id in zip((hub_folder, llama_hub_folder), ("someone/kimi", "someone/llama")):
        models.append(model)
        repos.append(fake_hub_repo(folder, tmp_path / "hf" / "hub", repo_id))
    ids = random_ids()  # below both vocabularies
    results = load_all_in_clean_process(repos, ids, tmp_path / "run", tmp_path / "hf", tokenizer=True)
    # the clean process runs one thread: the same reduction order only at one thread here too; and its copy of the
    # kernels has no C++ CPU kernel (the installed package registers it): it mixes as backend "torch" does
    backends = [model.config.attn_res_backend for model in models]
    with torch.no_grad():
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            for model in models:
                model.config.attn_res_backend = "torch"
            expected = [model(ids).logits for model in models]
        finally:
            torch.set_num_threads(threads)
            for model, backend in zip(models, backends):
                model.config.attn_res_backend = backend
    for repo, result, logits in zip(repos, results, expected):
        assert torch.equal(result["logits"], logits), repo
        assert result["tokens"] == [5, 7, 9], repo


def test_eval_results_formats_and_errors(tmp_path):
    (tmp_path / "plain.json").write_text(json.dumps({"mmlu": 0.25, "gsm8k": {"exact_match": 0.125}}))
    assert read_eval_results(tmp_path / "plain.json") == [("gsm8k", "exact_match", "0.125"), ("mmlu", "score", "0.25")]
    (tmp_path / "counts.json").write_text(json.dumps({"results": {"mmlu": {"acc,none": 0.25, "sample_len": 14042}}}))
    assert read_eval_results(tmp_path / "counts.json") == [("mmlu", "acc", "0.25")]  # sample_len is no metric
    (tmp_path / "empty.json").write_text(json.dumps({"results": {"mmlu": {"alias": "mmlu"}}}))
    with pytest.raises(ConversionError, match="empty.json: no numeric metrics"):
        read_eval_results(tmp_path / "empty.json")


def test_script_dry_run_and_refusals(hub_folder, tmp_path, capsys, monkeypatch):
    from hf_attnres.cli import push_to_hub as script
    uploads = []
    monkeypatch.setattr("hf_attnres.conversion.hub.upload_folder", lambda *a, **k: uploads.append(a) or "url")
    _, built = hub_folder
    out = tmp_path / "out"
    assert script.main(["--model", str(built), "--repo-id", "me/x", "--output", str(out), "--dry-run"]) == 0
    assert "dry run" in capsys.readouterr().out and not uploads and (out / "model.safetensors").is_file()
    reviewed = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    # the upload after a dry run: the reviewed folder itself, not rebuilt, never "already exists"
    assert script.main(["--model", str(built), "--repo-id", "me/x", "--output", str(out)]) == 0
    assert uploads == [(out.resolve(), "me/x")] and {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == reviewed
    # another card setting: that folder (push-to-hub's own) is rebuilt in place, without --force
    assert script.main(["--model", str(built), "--repo-id", "me/x", "--output", str(out), "--training-data",
                        "a new corpus"]) == 0
    assert "a new corpus" in (out / "README.md").read_text() and len(uploads) == 2
    assert script.main(["--model", str(built), "--repo-id", "me/x", "--output", str(out), "--force"]) == 0
    assert len(uploads) == 3
    (out / ".attnres_hub_build.json").unlink()  # no build record: not push-to-hub's folder
    assert script.main(["--model", str(built), "--repo-id", "me/x", "--output", str(out)]) == 1
    assert "already exists" in capsys.readouterr().err


def test_tokenizer_of_the_model_folder_base_model_and_training_info(tmp_path):
    """No --tokenizer: the model folder's own is packaged, and the card's `AutoTokenizer.from_pretrained(repo)` works
    on the output folder; base_model and "Training data" come from training_info.json (train's record); the blocks
    are described as they are when the block size does not divide the depth."""
    from transformers import AutoTokenizer

    from hf_attnres import upcycle

    model = upcycle(source_model("llama"), "block", block_size=3)  # 4 layers: blocks of 3 and 1
    model.save_pretrained(tmp_path / "model")
    tokenizer = AutoTokenizer.from_pretrained(str(write_tokenizer(tmp_path / "tok")))
    tokenizer.save_pretrained(tmp_path / "model")
    (tmp_path / "model" / "training_info.json").write_text(json.dumps(dict(
        steps=10, tokens_trained=10 * 8 * 64, global_batch=8, seq_len=64, data="/data/chat-packed",
        data_fingerprint="abc123", settings={"init_from": "HuggingFaceTB/SmolLM2-135M-Instruct"})))
    folder = build_hub_folder(tmp_path / "model", tmp_path / "hub", repo_id="me/llama-attnres")
    loaded = AutoTokenizer.from_pretrained(str(folder))
    assert loaded("hello world")["input_ids"] == tokenizer("hello world")["input_ids"]
    card = ModelCard.load(folder / "README.md")
    assert card.data.base_model == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert "2 blocks: 1 of 3 layers and 1 of 1" in card.text and "blocks of 3 layers" not in card.text
    assert "5,120 tokens (10 steps x 8 sequences x 64 tokens) of the prepared corpus `chat-packed`" in card.text
    assert "Not stated" not in card.text
    given = build_hub_folder(tmp_path / "model", tmp_path / "hub2", base_model="me/other", training_data="told")
    card = ModelCard.load(given / "README.md")
    assert card.data.base_model == "me/other" and "told" in card.text  # the flags win over the record


def test_block_layout_words():
    from hf_attnres.conversion.hub import block_layout

    assert block_layout(30, 4) == "8 blocks: 7 of 4 layers and 1 of 2"
    assert block_layout(24, 4) == "6 blocks of 4 layers"


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_builds_a_folder_with_its_code(family, tmp_path, capsys):
    """An upcycled model of each other family, by the command (dry run): weights, config with auto_map, the family's
    three code files, tokenizer, and the card Kimi Linear's has (trust_remote_code=True, or `import hf_attnres`); with
    attnres imported it loads without the flag, the same logits back (the clean process: test above, Llama)."""
    from transformers import AutoModelForCausalLM

    from hf_attnres import upcycle
    from hf_attnres.cli import push_to_hub as script

    model = upcycle(source_model(family), "full")
    model.save_pretrained(tmp_path / "model")
    out = tmp_path / "hub"
    assert script.main(["--model", str(tmp_path / "model"), "--output", str(out), "--dry-run",
                        "--tokenizer", str(write_tokenizer(tmp_path / "tok"))]) == 0
    assert "dry run" in capsys.readouterr().out
    want = code_files(family)
    names = {p.name for p in out.iterdir()}
    assert {"model.safetensors", "config.json", "README.md", "tokenizer.json"} <= names
    assert {name for name in names if name.endswith(".py")} == want["files"]
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == f"{family}_attnres"
    assert {key: auto_map(out)[key] for key in ("AutoConfig", "AutoModelForCausalLM")} == {
        key: want[key] for key in ("AutoConfig", "AutoModelForCausalLM")}
    card = ModelCard.load(out / "README.md")
    assert family in card.data.tags and "custom_code" in card.data.tags
    assert "| AttnRes mode | `full` |" in card.text and f"{model.num_parameters():,}" in card.text
    assert all(f"`{name}`" in card.text for name in want["files"])
    assert 'from_pretrained("hub", trust_remote_code=True)' in card.text and "after `import hf_attnres`" in card.text
    assert "pip install hf-attnres" not in card.text
    ids = random_ids()
    with torch.no_grad():
        torch.testing.assert_close(AutoModelForCausalLM.from_pretrained(out)(ids).logits, model(ids).logits,
                                   rtol=0, atol=0)


def test_a_family_own_checkpoint_is_refused_with_the_upcycle_command(tmp_path):
    source_model("llama").save_pretrained(tmp_path / "llama")
    with pytest.raises(ConversionError, match="own llama checkpoint, without AttnRes: upcycle it first "
                                              r"\(attnres convert .*llama OUT --upcycle block\)"):
        build_hub_folder(tmp_path / "llama", tmp_path / "hub")
    assert not (tmp_path / "hub").exists()


def test_base_model_is_found_through_the_init_from_folders_or_said_unknown(saved_model, tmp_path, capsys):
    """The README's path: a fine-tune (runs/block/final) whose --init-from was a local upcycled folder. base_model is
    followed through the records (training_info.json's init_from, config.json's _name_or_path) to the first Hub id;
    with none, the card has no base_model and both the card and the output say it is unknown and how to set it."""
    from hf_attnres.cli import push_to_hub as script

    upcycled = shutil.copytree(saved_model, tmp_path / "smollm2-block")
    tuned = shutil.copytree(saved_model, tmp_path / "runs" / "final")
    (tuned / "training_info.json").write_text(json.dumps({"settings": {"init_from": str(upcycled)}}))
    assert script.main(["--model", str(tuned), "--output", str(tmp_path / "unknown"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    card = ModelCard.load(tmp_path / "unknown" / "README.md")
    assert card.data.base_model is None and "## Base model\n\nNot recorded" in card.text
    assert "--base-model OWNER/NAME" in card.text and str(upcycled) in card.text  # the folders it looked in
    assert "note: base_model unknown" in out and "--base-model" in out, out
    assert "license: apache-2.0 (the default" in out, out
    assert "note: the card's training data reads \"Not stated.\"" in out, out

    config = json.loads((upcycled / "config.json").read_text())
    (upcycled / "config.json").write_text(json.dumps({**config, "_name_or_path": "HuggingFaceTB/SmolLM2-135M"}))
    assert script.main(["--model", str(tuned), "--output", str(tmp_path / "named"), "--license", "mit"]) == 0
    out = capsys.readouterr().out
    card = ModelCard.load(tmp_path / "named" / "README.md")
    assert card.data.base_model == "HuggingFaceTB/SmolLM2-135M" and "## Base model" not in card.text
    assert card.data.license == "mit" and "license: mit (--license)" in out, out
    assert f"base_model: HuggingFaceTB/SmolLM2-135M (from config.json's _name_or_path in {upcycled})" in out, out
    assert script.main(["--model", str(tuned), "--output", str(tmp_path / "told"), "--training-data", "a corpus"]) == 0
    assert "training data" not in capsys.readouterr().out


def test_a_dry_run_folder_is_rebuilt_when_a_weight_changed_with_size_and_mtime_kept(saved_model, tmp_path):
    """The reuse of a dry-run folder is keyed on the inputs' content: a weight rewritten with the same size and its
    mtime put back is a new build, never the old weights uploaded."""
    from safetensors.torch import load_file, save_file

    model = shutil.copytree(saved_model, tmp_path / "model")
    weights = model / "model.safetensors"
    first = build_hub_folder(model, tmp_path / "hub")
    built = (first / "model.safetensors").read_bytes()
    assert build_hub_folder(model, tmp_path / "hub") == first  # unchanged: reused
    assert (first / "model.safetensors").read_bytes() == built
    stat = weights.stat()
    tensors = load_file(weights)
    name = next(n for n in sorted(tensors) if "embed" in n)
    tensors[name] = tensors[name] + 1
    save_file(tensors, weights, metadata={"format": "pt"})
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert (weights.stat().st_size, weights.stat().st_mtime_ns) == (stat.st_size, stat.st_mtime_ns)
    rebuilt = build_hub_folder(model, tmp_path / "hub")
    assert (rebuilt / "model.safetensors").read_bytes() != built
    assert torch.equal(load_file(rebuilt / "model.safetensors")[name], tensors[name])


def test_eval_results_of_compare_report(tmp_path):
    """compare's report.json: every model's mean, each delta and its test, lower-is-better marked."""
    report = {"models": [{"label": "plain"}, {"label": "block"}], "tasks": {"heldout": {"loss,none": {
        "models": {"plain": {"mean": 2.5, "stderr": 0.01, "n": 4}, "block": {"mean": 2.25, "stderr": 0.02, "n": 4}},
        "paired": [{"model": "block", "reference": "plain", "delta": -0.25, "p_value": 0.03, "test": "t-test"}],
        "lower_is_better": True}}}}
    (tmp_path / "report.json").write_text(json.dumps(report))
    assert read_eval_results(tmp_path / "report.json") == [
        ("heldout", "loss ↓", "plain 2.5 ± 0.01; block 2.25 ± 0.02; block − plain: -0.25 (p 0.03, t-test)")]


@pytest.mark.parametrize("damage", [
    lambda out: (out / "model.safetensors").write_bytes((out / "model.safetensors").read_bytes()[:-8] + bytes(8)),
    lambda out: (out / "config.json").unlink(),
    lambda out: (out / "stray.bin").write_bytes(b"x"),
], ids=["weights_edited", "config_deleted", "file_added"])
def test_a_dry_run_folder_changed_since_its_build_is_rebuilt_and_said_so(saved_model, tmp_path, capsys, damage):
    """The upload after a dry run sends the folder as built: one whose files changed since (by content) is built
    again, and the output says which changed."""
    from hf_attnres.cli import push_to_hub as script

    out = tmp_path / "hub"
    assert script.main(["--model", str(saved_model), "--output", str(out), "--dry-run"]) == 0
    built = {p.name: p.read_bytes() for p in out.iterdir() if p.name != ".attnres_hub_build.json"}
    damage(out)
    capsys.readouterr()
    assert script.main(["--model", str(saved_model), "--output", str(out), "--dry-run"]) == 0
    assert "rebuilt" in capsys.readouterr().out
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.name != ".attnres_hub_build.json"} == built
