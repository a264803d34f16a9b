"""A folder's family read from its config.json (tools side), a GGUF file's from the config transformers reads out of
it (`family_of_source`, the one resolver of a convert), and an AttnRes folder's config read by its family's class."""
import json
import re

import pytest

from hf_attnres.folders.checkpoint_files import CheckpointFileError
from hf_attnres.folders.model_family import attn_res_config_of_folder, family_of_folder, family_of_source


def folder_with(tmp_path, config) -> str:
    tmp_path.mkdir(exist_ok=True)
    if config is not None:
        (tmp_path / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    return tmp_path


@pytest.mark.parametrize(("config", "expected"), [
    ({"model_type": "llama"}, ("llama", "llama")),
    ({"model_type": "llama_attnres"}, ("llama", "llama_attnres")),
    ({"model_type": "kimi_linear_attnres"}, ("kimi_linear", "kimi_linear_attnres")),
    ({}, ("kimi_linear", None)),
])
def test_family_of_folder(tmp_path, config, expected):
    assert family_of_folder(folder_with(tmp_path, config)) == expected


@pytest.mark.parametrize(("config", "error", "named"), [
    (None, CheckpointFileError, "config.json"),
    ("{not json", CheckpointFileError, "config.json"),
    ({"model_type": "no_such_family"}, ValueError, "no_such_family"),
])
def test_family_of_a_bad_folder_named(tmp_path, config, error, named):
    with pytest.raises(error, match=named):
        family_of_folder(folder_with(tmp_path, config))


def test_attn_res_config_of_folder_reads_any_family_and_refuses_a_plain_one(tmp_path):
    from tests.families.tiny import attn_res_config, source_config

    for family in ("llama", "qwen3"):
        attn_res_config(family, "block").save_pretrained(tmp_path / family)
        config = attn_res_config_of_folder(tmp_path / family, "--model")
        assert (config.model_type, config.attn_res_mode) == (f"{family}_attnres", "block")
    source_config("llama").save_pretrained(tmp_path / "plain")
    with pytest.raises(ValueError, match=r"^--model .*plain: a plain llama checkpoint.*--upcycle block"):
        attn_res_config_of_folder(tmp_path / "plain", "--model")
    with pytest.raises(ValueError, match=r"^--model .*config\.json"):
        attn_res_config_of_folder(folder_with(tmp_path / "none", None), "--model")


def test_family_of_source_reads_a_folder_or_a_gguf_file(tmp_path):
    from tests.families.tiny import source_model
    from tests.helpers.tiny_gguf import write_llama_gguf

    assert family_of_source(folder_with(tmp_path / "q", {"model_type": "qwen3"})) == ("qwen3", None)
    gguf = write_llama_gguf(source_model("llama"), tmp_path / "tiny.gguf")
    family, config = family_of_source(gguf)
    assert family == "llama" and config.model_type == "llama" and config.num_hidden_layers == 4


@pytest.mark.parametrize(("damage", "named"), [
    (lambda path: None, "not found (a GGUF file)"),
    (lambda path: path.write_bytes(b"GGUF\x03\x00"), "not a readable GGUF file"),
])
def test_family_of_a_bad_gguf_file_named(tmp_path, damage, named):
    path = tmp_path / "bad.gguf"
    damage(path)
    with pytest.raises(ValueError, match="^" + re.escape(f"{path}: {named}")):
        family_of_source(path)
