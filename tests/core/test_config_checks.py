"""The config checks the installed package hands to the config classes (hf_attnres.core.config_checks): a folder
without config.json refused by name, `@strict`'s type errors and the AttnRes fields' types raised as ValueErrors naming
the field, in the package's classes and in a config class defined after its import."""
import pytest

import hf_attnres  # noqa: F401  (hands the checks to the classes)
from hf_attnres.families.llama.configuration_llama_attnres import LlamaAttnResConfig


@pytest.mark.parametrize("config_json", [None, "{}"], ids=["no file", "empty"])
def test_a_folder_without_a_config_is_refused_naming_it(tmp_path, config_json):
    if config_json is not None:
        (tmp_path / "config.json").write_text(config_json)
    with pytest.raises(OSError, match="no config.json there"):
        LlamaAttnResConfig.from_pretrained(tmp_path)


class LaterConfig(LlamaAttnResConfig):
    """A config class built after the package's import: its `__init__` is wrapped at its creation."""

    model_type = "later_llama_attnres"


@pytest.mark.parametrize("cls", [LlamaAttnResConfig, LaterConfig], ids=lambda cls: cls.__name__)
@pytest.mark.parametrize("fields, message", [
    (dict(vocab_size="4"), r"^vocab_size must be of the type its config declares \(int\), got '4' \(str\)"),
    (dict(attn_res_block_size=2.5), r"^attn_res_block_size must be an integer >= 0, got 2.5"),
    (dict(attn_res_fuse_norm="no"), r"^attn_res_fuse_norm must be True or False, got 'no' \(str\)"),
    (dict(attn_res_key_norm_init=float("nan")), r"^attn_res_key_norm_init must be a finite number > 0"),
    (dict(attn_res_mode=2), r"^attn_res_mode must be a string, got 2 \(int\)"),
])
def test_a_field_of_the_wrong_type_is_one_value_error_naming_it(cls, fields, message):
    with pytest.raises(ValueError, match=message):
        cls(**fields)


@pytest.mark.parametrize("mode, block_size, blocks", [("block", 2, 3), ("block", 5, 1), ("full", 0, 5),
                                                      ("standard", 0, 1)])
def test_the_block_count_is_the_layouts(mode, block_size, blocks):
    config = LlamaAttnResConfig(num_hidden_layers=5, attn_res_mode=mode, attn_res_block_size=block_size)
    assert config.attn_res_num_blocks == blocks
