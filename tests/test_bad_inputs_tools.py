"""Bad input to scripts/plan_memory.py, scripts/train.py --init-from DIR and scripts/prepare_data.py --chat
[--chat-template] (in-process main()): unreadable configs, impossible sizes, folders that are not models, damaged
weights, flag conflicts, chat records of the wrong shape and templates that cannot render. Every case: one message
naming the flag or file, inputs untouched, nothing written."""
from __future__ import annotations

import json
import shutil

import pytest
from tests.helpers.bad_input_fixtures import expect_refused, expect_script_refused, first_shard, prepared_data, truncate  # noqa: F401
from tests.helpers.train_fixtures import load_script
from tests.helpers.toolchain_fixtures import finetune_args, prepare_chat, tiny_folder, write_chat_jsonl

from attnres.training.args import SetupError


# --- scripts/plan_memory.py ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def plan_memory():
    return load_script("plan_memory").main


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


# --- scripts/train.py --init-from DIR ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def init_env(tmp_path_factory):
    """A tiny model folder with its tokenizer and chat data prepared with that tokenizer."""
    root = tmp_path_factory.mktemp("bad_init_from")
    model = tiny_folder(root / "model", num_layers=2)
    return dict(model=model, data=prepare_chat(write_chat_jsonl(root / "sft.jsonl", count=24), model, root / "data"))


@pytest.fixture(scope="module")
def train():
    return load_script("train").main


def _weights_only_folder(folder):
    (folder / "config.json").unlink()


# name -> (damage(copy of the model folder), extra train flags, words the error must contain)
INIT_FROM_CASES = {
    "folder_missing": (lambda f: shutil.rmtree(f), {}, ["--init-from", "no config.json"]),
    "folder_without_config": (_weights_only_folder, {}, ["--init-from", "no config.json"]),
    "config_invalid_json": (lambda f: (f / "config.json").write_text("{"), {}, ["--init-from", "config.json"]),
    "config_not_utf8": (lambda f: (f / "config.json").write_bytes(b"\xff\xfe{}"), {}, ["--init-from", "config.json"]),
    "folder_without_weights": (lambda f: first_shard(f).unlink(), {}, ["--init-from"]),
    "truncated_weights": (lambda f: truncate(first_shard(f)), {}, [".safetensors", "truncated"]),
    "weights_not_safetensors": (lambda f: first_shard(f).write_bytes(b"PK\x03\x04 zip" * 20), {}, [".safetensors"]),
    "with_config_flag": (lambda f: None, dict(config="{root}/cfg.json"), ["--init-from", "drop --config"]),
    "with_model_size_flag": (lambda f: None, dict(model_size="tiny"), ["--init-from", "drop --model-size"]),
    "standard_on_attnres_model": (lambda f: None, dict(attn_res="standard"), ["--init-from", "--attn-res standard"]),
    "tokenizer_damaged": (lambda f: (f / "tokenizer.json").write_text('{"model": {"type": "BPE", "vocab": 1}}'), {},
                          ["--init-from", "tokenizer"]),
    "tokenizer_not_json": (lambda f: (f / "tokenizer.json").write_bytes(b"\xff\x00"), {}, ["--init-from", "tokenizer"]),
}


@pytest.mark.parametrize("damage, flags, named", INIT_FROM_CASES.values(), ids=INIT_FROM_CASES.keys())
def test_init_from_refused_before_training(init_env, train, tmp_path, damage, flags, named):
    folder = shutil.copytree(init_env["model"], tmp_path / "init")
    damage(folder)
    (tmp_path / "cfg.json").write_text("{}")
    flags = {k: str(v).format(root=tmp_path) for k, v in flags.items()}
    out = tmp_path / "run"
    expect_refused(lambda: train(finetune_args(init_env["data"], folder, out, **flags)), named,
                   untouched=[folder, init_env["data"]], absent=[out / "final", out / "checkpoints"],
                   errors=(SetupError, ValueError, OSError))


# --- scripts/prepare_data.py --chat F.jsonl [--chat-template FILE] -----------------------------------------------------
def test_init_from_with_data_of_another_tokenizer(init_env, train, prepared_data, tmp_path):
    expect_refused(lambda: train(finetune_args(prepared_data, init_env["model"], tmp_path / "run")),
                   ["--data", "another tokenizer", "--init-from"], untouched=[init_env["model"], prepared_data],
                   absent=[tmp_path / "run" / "final"], errors=SetupError)


@pytest.fixture(scope="module")
def prepare():
    return load_script("prepare_data").main


GOOD = '{"prompt": "a b", "completion": "c d"}\n' * 6
# name -> (bytes of the .jsonl, template bytes or None, words the error must contain)
CHAT_CASES = {
    "record_without_messages": (GOOD + '{"text": "x"}\n', None, ["sft.jsonl:7", "`messages`"]),
    "messages_not_a_list": (GOOD + '{"messages": "hi"}\n', None, ["sft.jsonl:7", "non-empty list"]),
    "messages_empty": (GOOD + '{"messages": []}\n', None, ["sft.jsonl:7", "non-empty list"]),
    "unknown_role": (GOOD + '{"messages": [{"role": "robot", "content": "x"}]}\n', None, ["sft.jsonl:7", "role"]),
    "content_not_a_string": (GOOD + '{"messages": [{"role": "user", "content": 3}, {"role": "assistant", "content": "x"}]}\n',
                             None, ["sft.jsonl:7", "messages[0]"]),
    "no_assistant_turn": (GOOD + '{"messages": [{"role": "user", "content": "x"}]}\n', None,
                          ["sft.jsonl:7", "no assistant"]),
    "invalid_json_line": (GOOD + "{oops\n", None, ["sft.jsonl:7", "JSON"]),
    "record_is_a_list": (GOOD + "[1]\n", None, ["sft.jsonl:7", "JSON object"]),
    "jsonl_not_utf8": (GOOD.encode() + b'{"prompt": "\xff\xfe", "completion": "x"}\n', None, ["sft.jsonl", "UTF-8"]),
    "template_syntax_error": (GOOD, b"{% for m in messages %}{{ m['content'] }", ["--chat-template", "t.jinja"]),
    "template_unknown_field": (GOOD, b"{{ messages[0].nope.deeper }}", ["--chat-template", "t.jinja"]),
    "template_not_utf8": (GOOD, b"\xff\xfe{{ x }}", ["--chat-template", "t.jinja", "UTF-8"]),
    "template_not_prefix_wise": (GOOD, b"{% for m in messages | reverse %}{{ m['content'] }}{% endfor %}",
                                 ["prefix by prefix"]),
}


@pytest.mark.parametrize("jsonl, template, named", CHAT_CASES.values(), ids=CHAT_CASES.keys())
def test_bad_chat_data_or_template_refused(init_env, prepare, tmp_path, jsonl, template, named):
    path = tmp_path / "sft.jsonl"
    path.write_bytes(jsonl.encode() if isinstance(jsonl, str) else jsonl)
    argv = ["--chat", str(path), "--tokenizer", str(init_env["model"]), "--seq-len", "8",
            "--output-dir", str(tmp_path / "out")]
    if template is not None:
        (tmp_path / "t.jinja").write_bytes(template)
        argv += ["--chat-template", str(tmp_path / "t.jinja")]
    expect_refused(lambda: prepare(argv), named, untouched=[tmp_path, init_env["model"]], absent=[tmp_path / "out"],
                   errors=SystemExit)


CHAT_FLAG_CASES = {
    "chat_file_missing": (["--chat", "{tmp}/none.jsonl"], ["--chat", "none.jsonl"]),
    "chat_file_not_jsonl": (["--chat", "{tmp}/data.json"], ["--chat", "data.json", ".jsonl"]),
    "template_missing": (["--chat", "{tmp}/ok.jsonl", "--chat-template", "{tmp}/none.jinja"],
                         ["--chat-template", "none.jinja"]),
    "template_is_a_folder": (["--chat", "{tmp}/ok.jsonl", "--chat-template", "{tmp}"], ["--chat-template"]),
    "template_without_chat": (["--files", "{tmp}/ok.jsonl", "--chat-template", "{tmp}/t.jinja"],
                              ["--chat-template", "needs --chat"]),
}


@pytest.mark.parametrize("argv, named", CHAT_FLAG_CASES.values(), ids=CHAT_FLAG_CASES.keys())
def test_bad_chat_flags_refused(init_env, prepare, tmp_path, argv, named):
    (tmp_path / "ok.jsonl").write_text(GOOD)
    (tmp_path / "data.json").write_text("{}")
    (tmp_path / "t.jinja").write_text("{{ messages }}")
    argv = [a.format(tmp=tmp_path) for a in argv]
    argv += ["--tokenizer", str(init_env["model"]), "--output-dir", str(tmp_path / "out")]
    expect_refused(lambda: prepare(argv), named, untouched=[tmp_path], absent=[tmp_path / "out"], errors=SystemExit)


def test_prepared_chat_data_is_usable(init_env):
    """The fixture the cases above start from is valid: the refusals come from the damage alone."""
    meta = json.loads((init_env["data"] / "meta.json").read_text())
    assert meta["loss_mask"] is True
