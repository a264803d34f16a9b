"""hf_attnres.utils.trust: a folder's own code (an auto_map naming its modules) runs only with --trust-remote-code; our
own
saved folders load without it, through the registered classes, even when a planted module sits beside the weights.
Each planted module writes a marker file when imported: the marker proves whether it ran."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

import hf_attnres  # noqa: F401  registers our classes, as every command does
from hf_attnres.utils.trust import UntrustedCodeError, check_folder_code, folder_code, load_kwargs, trust_kwargs
from tests.helpers.toolchain_fixtures import tiny_folder


def planted_module(folder: Path, module: str, marker: Path, body: str = "") -> None:
    (folder / f"{module}.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n{body}")


def edit_json(path: Path, **fields) -> None:
    data = json.loads(path.read_text()) if path.is_file() else {}
    path.write_text(json.dumps({**data, **fields}))


@pytest.fixture(scope="module")
def ours(tmp_path_factory):
    return tiny_folder(tmp_path_factory.mktemp("trust") / "ours", num_layers=2)


@pytest.fixture
def foreign_config(tmp_path):
    """A folder whose config.json auto_map names its own config and model modules (a type no installed class has)."""
    folder, marker = tmp_path / "foreign_model", tmp_path / "config_marker"
    folder.mkdir()
    planted_module(folder, "configuration_evil", marker,
                   "from transformers import PretrainedConfig\n"
                   "class EvilConfig(PretrainedConfig):\n    model_type = 'evil_planted'\n")
    edit_json(folder / "config.json", model_type="evil_planted",
              auto_map={"AutoConfig": "configuration_evil.EvilConfig", "AutoModelForCausalLM": "modeling_evil.Foo"})
    return folder, marker


@pytest.fixture
def planted_tokenizer(ours, tmp_path):
    """Our own saved model with a tokenizer_config.json auto_map naming a planted tokenizer module."""
    folder, marker = shutil.copytree(ours, tmp_path / "planted_tokenizer"), tmp_path / "tokenizer_marker"
    planted_module(folder, "tokenization_evil", marker,
                   "from transformers import PreTrainedTokenizerFast\nclass EvilTokenizer(PreTrainedTokenizerFast):\n"
                   "    pass\n")
    edit_json(folder / "tokenizer_config.json", auto_map={"AutoTokenizer": [None, "tokenization_evil.EvilTokenizer"]})
    return folder, marker


def test_config_auto_map_is_refused_by_name_and_never_runs(foreign_config):
    folder, marker = foreign_config
    with pytest.raises(UntrustedCodeError) as info:
        load_kwargs(folder, trust_remote_code=False)
    message = str(info.value)
    for word in [str(folder), "config.json auto_map AutoConfig -> configuration_evil.EvilConfig",
                 "configuration_evil.py", "modeling_evil.py, not in the folder", "--trust-remote-code"]:
        assert word in message, (word, message)
    with pytest.raises(ValueError):  # transformers itself, told not to trust, refuses too
        AutoConfig.from_pretrained(folder, **trust_kwargs(False))
    assert not marker.exists()


def test_config_auto_map_runs_with_the_flag(foreign_config):
    folder, marker = foreign_config
    assert len(check_folder_code(folder, trust_remote_code=True)) == 2
    config = AutoConfig.from_pretrained(folder, **load_kwargs(folder, trust_remote_code=True))
    assert type(config).__name__ == "EvilConfig" and marker.read_text() == "ran"


def test_tokenizer_auto_map_is_refused_and_never_runs(planted_tokenizer):
    folder, marker = planted_tokenizer
    with pytest.raises(UntrustedCodeError, match=r"tokenizer_config.json auto_map AutoTokenizer -> "
                                                 r"tokenization_evil.EvilTokenizer \(tokenization_evil.py\)"):
        check_folder_code(folder, trust_remote_code=False)
    tokenizer = AutoTokenizer.from_pretrained(folder, **trust_kwargs(False))  # transformers' own class instead
    assert type(tokenizer).__name__ != "EvilTokenizer" and not marker.exists()


def test_tokenizer_auto_map_runs_with_the_flag(planted_tokenizer):
    folder, marker = planted_tokenizer
    tokenizer = AutoTokenizer.from_pretrained(folder, **load_kwargs(folder, trust_remote_code=True))
    assert type(tokenizer).__name__ == "EvilTokenizer" and marker.read_text() == "ran"


def test_our_saved_folder_loads_without_the_flag_and_never_imports_its_copy(ours, tmp_path):
    """Our folders carry auto_map -> their generated code files (for machines without attnres); here the registered
    classes load instead, so a planted modeling_kimi_linear_attnres.py beside the weights never runs, with or without
    the flag."""
    assert json.loads((ours / "config.json").read_text())["auto_map"]  # the case under test
    assert folder_code(ours) == []
    folder, marker = shutil.copytree(ours, tmp_path / "ours_planted"), tmp_path / "model_marker"
    planted_module(folder, "modeling_kimi_linear_attnres", marker)
    planted_module(folder, "configuration_kimi_linear_attnres", marker)
    for trust in (False, True):
        model = AutoModelForCausalLM.from_pretrained(folder, **load_kwargs(folder, trust))
        assert type(model) is hf_attnres.KimiLinearAttnResForCausalLM
        AutoTokenizer.from_pretrained(folder, **load_kwargs(folder, trust))
    assert not marker.exists()


def test_not_a_folder_and_odd_auto_maps(tmp_path):
    assert folder_code(tmp_path / "missing") == [] and folder_code("org/repo-id") == []
    (tmp_path / "config.json").write_text('{"model_type": "kimi_linear_attnres", "auto_map": '
                                          '{"AutoTokenizer": "org/other--tok.Tok", '
                                          '"AutoModel": "modeling_kimi_linear_attnres.X"}}')
    # AutoModel is replaced by our registered class; an AutoTokenizer entry in config.json is not ours
    assert folder_code(tmp_path) == ["config.json auto_map AutoTokenizer -> org/other--tok.Tok "
                                     "(from the Hub repository org/other)"]
    (tmp_path / "tokenizer_config.json").write_text('{"auto_map": ["tok_slow.Slow", "tok_fast.Fast"]}')  # old layout
    assert len(folder_code(tmp_path)) == 3
    (tmp_path / "config.json").write_text("{not json")
    assert len(folder_code(tmp_path)) == 2  # an unreadable config: nothing follows its auto_map either


# --- every command that loads a folder's tokenizer goes through the same rule ----------------------------------------
def test_push_to_hub_refuses_a_planted_tokenizer_and_runs_it_only_with_the_flag(ours, planted_tokenizer, tmp_path,
                                                                                capsys):
    from hf_attnres.cli.push_to_hub import main

    folder, marker = planted_tokenizer
    argv = ["--model", str(ours), "--tokenizer", str(folder), "--output", str(tmp_path / "hub"), "--dry-run"]
    assert main(argv) != 0
    assert "tokenization_evil" in capsys.readouterr().err and not marker.exists() and not (tmp_path / "hub").exists()
    assert main([*argv, "--trust-remote-code"]) == 0 and marker.exists()


def test_prepare_data_refuses_a_planted_tokenizer(planted_tokenizer, tmp_path):
    from hf_attnres.cli.prepare_data import main

    folder, marker = planted_tokenizer
    for name in ("a", "b", "c"):
        (tmp_path / f"{name}.txt").write_text("the king walks under the river\n" * 50)
    with pytest.raises((UntrustedCodeError, SystemExit)) as info:
        main(["--files", *(str(tmp_path / f"{n}.txt") for n in "abc"), "--tokenizer", str(folder), "--output-dir",
              str(tmp_path / "data")])
    assert "tokenization_evil" in str(info.value) and "--trust-remote-code" in str(info.value)
    assert not marker.exists() and not (tmp_path / "data").exists()
