"""Bad input to train --init-from DIR and prepare-data --chat [--chat-template] (in-process main()): folders that
are not models, damaged weights, flag conflicts, chat records of the wrong shape and templates that cannot render.
Every case: one message naming the flag or file, inputs untouched, nothing written."""
from __future__ import annotations

import json
import shutil

import pytest

from hf_attnres.training.args import SetupError
from tests.helpers.bad_input_fixtures import expect_refused, first_shard, truncate
from tests.helpers.toolchain_fixtures import finetune_args, prepare_chat, tiny_folder, write_chat_jsonl


# --- scripts/train.py --init-from DIR ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def init_env(tmp_path_factory):
    """A tiny model folder with its tokenizer and chat data prepared with that tokenizer."""
    root = tmp_path_factory.mktemp("bad_init_from")
    model = tiny_folder(root / "model", num_layers=2)
    return dict(model=model, data=prepare_chat(write_chat_jsonl(root / "sft.jsonl", count=24), model, root / "data"))


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


def test_init_from_with_data_of_another_tokenizer(init_env, train, prepared_data, tmp_path):
    expect_refused(lambda: train(finetune_args(prepared_data, init_env["model"], tmp_path / "run")),
                   ["--data", "another tokenizer", "--init-from"], untouched=[init_env["model"], prepared_data],
                   absent=[tmp_path / "run" / "final"], errors=SetupError)


# --- scripts/prepare_data.py --chat F.jsonl [--chat-template FILE] ----------------------------------------------------
GOOD = '{"prompt": "a b", "completion": "c d"}\n' * 6
# name -> (bytes of the .jsonl, template bytes or None, words the error must contain)
CHAT_CASES = {
    "record_without_messages": (GOOD + '{"text": "x"}\n', None, ["sft.jsonl:7", "`messages`"]),
    "messages_not_a_list": (GOOD + '{"messages": "hi"}\n', None, ["sft.jsonl:7", "non-empty list"]),
    "messages_empty": (GOOD + '{"messages": []}\n', None, ["sft.jsonl:7", "non-empty list"]),
    "unknown_role": (GOOD + '{"messages": [{"role": "robot", "content": "x"}]}\n', None, ["sft.jsonl:7", "role"]),
    "content_not_a_string": (GOOD + '{"messages": [{"role": "user", "content": 3}, '
                                    '{"role": "assistant", "content": "x"}]}\n', None, ["sft.jsonl:7", "messages[0]"]),
    "no_assistant_turn": (GOOD + '{"messages": [{"role": "user", "content": "x"}]}\n', None,
                          ["sft.jsonl:7", "no assistant"]),
    "invalid_json_line": (GOOD + "{oops\n", None, ["sft.jsonl:7", "JSON"]),
    "record_is_a_list": (GOOD + "[1]\n", None, ["sft.jsonl:7", "JSON object"]),
    "record_nested_100000_deep": (GOOD + '{"messages": ' * 100_000 + "1" + "}" * 100_000 + "\n", None,
                                  ["sft.jsonl:7", "nested more than"]),
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


def test_init_from_a_gguf_file_suggests_convert(init_env, train, tmp_path):
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    out = tmp_path / "run"
    expect_refused(lambda: train(finetune_args(init_env["data"], gguf, out)),
                   ["--init-from", "model.gguf", f"attnres convert {gguf} OUT"], untouched=[gguf], absent=[out],
                   errors=(SetupError, ValueError, OSError))
