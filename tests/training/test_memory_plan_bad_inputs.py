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

    config = tiny_config("block", 2) if family == "kimi_linear" else source_config(family)
    fields = {key: value for key, value in config.to_dict().items() if key not in ("layer_types", "mlp_layer_types")}
    fields["num_hidden_layers"] = 10**9
    (tmp_path / "config.json").write_text(json.dumps(fields))
    expect_script_refused(plan_memory, capsys, [tmp_path], ["config.json", "num_hidden_layers=1000000000"],
                          untouched=[tmp_path])
