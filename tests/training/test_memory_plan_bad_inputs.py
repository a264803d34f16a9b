"""Bad input to `attnres plan-memory` (hf_attnres.cli.plan_memory, in-process main()): unreadable configs, impossible
sizes. Every case: one message naming the flag or file, inputs untouched, nothing written. (train --init-from DIR and
prepare-data --chat: tests/training/test_finetune_bad_inputs.py.)"""
from __future__ import annotations

import json

import pytest

from hf_attnres.cli.plan_memory import main as plan_memory_main
from tests.helpers.bad_input_fixtures import expect_script_refused


@pytest.fixture(scope="module")
def plan_memory():
    return plan_memory_main


# name -> (config file content, or None for no file; words the error must contain)
PLAN_CONFIG_CASES = {
    "missing_file": (None, ["config.json", "neither a config.json"]),
    "invalid_json": (b"{not json", ["config.json", "JSON"]),
    "not_utf8": (b"\xff\xfe{}", ["config.json", "UTF-8"]),
    "json_list": (b"[1, 2]", ["config.json", "JSON object"]),
    "field_wrong_type": (b'{"num_hidden_layers": "x"}', ["num_hidden_layers"]),
    "no_layers": (b'{"num_hidden_layers": 0}', ["num_hidden_layers"]),
}


@pytest.mark.parametrize("content, named", PLAN_CONFIG_CASES.values(), ids=PLAN_CONFIG_CASES.keys())
def test_plan_memory_bad_config_file(plan_memory, capsys, tmp_path, content, named):
    config = tmp_path / "config.json"
    if content is not None:
        config.write_bytes(content)
    expect_script_refused(plan_memory, capsys, [config], named, untouched=[tmp_path])


def test_plan_memory_folder_without_config_and_unknown_preset(plan_memory, capsys, tmp_path):
    expect_script_refused(plan_memory, capsys, [tmp_path], [str(tmp_path), "preset"], untouched=[tmp_path])
    expect_script_refused(plan_memory, capsys, ["k4"], ["k4", "preset", "tiny-k3"])


PLAN_FLAG_CASES = {
    "batch_zero": (["--batch", "0"], "--batch must be >= 1"),
    "batch_negative": (["--batch", "-2"], "--batch must be >= 1"),
    "context_word": (["--context", "long"], "--context: invalid int value"),
    "context_zero": (["--context", "0"], "--context must be >= 1"),
    "stages_negative": (["--stages", "-1"], "--stages must be >= 1"),
    "micro_batch_zero": (["--micro-batch", "0"], "--micro-batch must be >= 1"),
    "activation_dtype_unknown": (["--activation-dtype", "fp8"], "--activation-dtype: invalid choice"),
    "micro_batch_over_batch": (["--micro-batch", "5", "--batch", "2"], "--micro-batch 5 must divide --batch 2"),
    "micro_batch_not_a_divisor": (["--batch", "6", "--micro-batch", "4"], "--micro-batch 4 must divide --batch 6"),
    "micro_batch_over_the_default_batch": (["--micro-batch", "2"], "--micro-batch 2 must divide --batch 1"),
    "stages_over_the_layers": (["--stages", "100000"], "--stages 100000: the model has 5 decoder layers"),
    "stages_one_over_the_layers": (["--stages", "6"], "at most 5 stages"),
}


@pytest.mark.parametrize("argv, message", PLAN_FLAG_CASES.values(), ids=PLAN_FLAG_CASES.keys())
def test_plan_memory_bad_flags(plan_memory, capsys, argv, message):
    with pytest.raises(SystemExit) as info:
        plan_memory(["tiny", *argv])
    err = capsys.readouterr().err
    assert info.value.code == 2 and message in err and "Traceback" not in err, err


@pytest.mark.parametrize("family", ["llama", "gemma3_text", "kimi_linear"])
def test_plan_memory_refuses_a_billion_layers_without_building_them(plan_memory, capsys, tmp_path, family):
    from hf_attnres.utils.tiny import tiny_config
    from tests.families.tiny import source_config

    config = tiny_config("block", 2, family="kimi_linear") if family == "kimi_linear" else source_config(family)
    fields = {key: value for key, value in config.to_dict().items() if key not in ("layer_types", "mlp_layer_types")}
    fields["num_hidden_layers"] = 10**9
    (tmp_path / "config.json").write_text(json.dumps(fields))
    expect_script_refused(plan_memory, capsys, [tmp_path], ["config.json", "num_hidden_layers=1000000000"],
                          untouched=[tmp_path])


def test_plan_memory_default_stages_on_a_shallow_model_say_they_were_fitted(plan_memory, capsys):
    """The default 8 stages on the 5-layer tiny model: one stage a layer, and a note says so (an explicit --stages
    over the layer count is refused above)."""
    assert plan_memory(["tiny"]) == 0
    captured = capsys.readouterr()
    assert "note: --stages 5: one stage a decoder layer (the default 8" in captured.err
    assert "pipeline boundaries, 5 stages" in captured.out
    assert plan_memory(["tiny", "--stages", "5"]) == 0 and "note" not in capsys.readouterr().err


# name -> (family of the config, the damage to its fields, words of the error besides the file given)
NAMED_FILE_CASES = {
    "kimi_no_layers": ("kimi_linear", {"num_hidden_layers": 0}, ["num_hidden_layers"]),
    "kimi_field_wrong_type": ("kimi_linear", {"hidden_size": "wide"}, ["hidden_size"]),
    "llama_no_layers": ("llama", {"num_hidden_layers": 0}, ["num_hidden_layers"]),
    "llama_field_wrong_type": ("llama", {"hidden_size": "wide"}, ["hidden_size"]),
}


@pytest.mark.parametrize("family, damage, named", NAMED_FILE_CASES.values(), ids=NAMED_FILE_CASES.keys())
def test_plan_memory_names_the_config_file_given(plan_memory, capsys, tmp_path, family, damage, named):
    """A config file given by its own name is named as given, whatever the family's reader calls it."""
    from hf_attnres.utils.tiny import tiny_config
    from tests.families.tiny import source_config

    config = tiny_config("block", 2, family="kimi_linear") if family == "kimi_linear" else source_config(family)
    fields = {key: value for key, value in config.to_dict().items() if key not in ("layer_types", "mlp_layer_types")}
    (tmp_path / "my-model.json").write_text(json.dumps({**fields, **damage}))
    err = expect_script_refused(plan_memory, capsys, [tmp_path / "my-model.json"],
                                [str(tmp_path / "my-model.json"), *named], untouched=[tmp_path])
    assert "config.json" not in err, err
