"""Fine-tuning: `train.py --init-from DIR` (our format, Moonshot's layout, an upcycled Kimi Linear) and instruction
data (`prepare_data.py --chat`: chat / prompt-completion JSONL, chat template, loss on assistant tokens only)."""
from __future__ import annotations

import json
import shutil

import pytest
import torch

from hf_attnres import KimiLinearAttnResForCausalLM
from hf_attnres.training.args import SetupError
from hf_attnres.training.chat import DEFAULT_CHAT_TEMPLATE, ensure_chat_template, tokenize_with_mask
from hf_attnres.training.data import BatchPlan, batch_tensors, load_prepared, pack_masked
from tests.helpers.toolchain_fixtures import finetune_args, prepare_chat, tiny_folder, tiny_tokenizer, write_chat_jsonl
from tests.helpers.train_fixtures import train_losses


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_folder(tmp_path_factory.mktemp("ft") / "model", "block")


@pytest.fixture(scope="module")
def chat_data(model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("chat")
    return prepare_chat(write_chat_jsonl(root / "sft.jsonl"), model_dir, root / "data")


def first_step_loss(model_dir, data, micro_batch_size=2, seed=0):
    """The loss train.py's first step must log: DIR's model on the first planned batch, prompt tokens masked."""
    train_set, _, _ = load_prepared(data)
    indices = BatchPlan(len(train_set), micro_batch_size, 1, 1, seed).indices(0, 0, 0)
    ids, labels = batch_tensors(train_set, indices, 32, "cpu")
    model = KimiLinearAttnResForCausalLM.from_pretrained(model_dir, dtype=torch.float32).train()
    with torch.no_grad():
        return model(input_ids=ids, labels=labels, use_cache=False).loss.item(), (labels == -100).any().item()


def test_assistant_tokens_only_are_learned():
    tokenizer = ensure_chat_template(tiny_tokenizer())
    assert tokenizer.chat_template == DEFAULT_CHAT_TEMPLATE
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "the river"},
                {"role": "assistant", "content": "runs under the bridge"}, {"role": "user", "content": "and the queen"},
                {"role": "assistant", "content": "sees the light"}]
    ids, mask = tokenize_with_mask(tokenizer, messages)
    learned = tokenizer.decode([i for i, m in zip(ids, mask) if m])
    assert learned.split() == "runs under the bridge<|endoftext|> sees the light<|endoftext|>".split()
    assert tokenizer.decode(ids).startswith("System: be brief\nUser: the river\nAssistant: runs")


def test_masked_packing_separates_and_drops_sequences_without_targets():
    packed = pack_masked([[5, 6, 0], [7, 8], [9, 9, 9, 9]], [[0, 1, 1], [0, 0], [1, 1, 0, 0]], eos_id=0, seq_len=3)
    # stream 5 6 0 | 7 8 0(separator) | 9 9 9 9 0: chunks [5 6 0] [7 8 0] [9 9 9] [9 0 -]; [7 8 0] has no target
    assert packed == {"input_ids": [[5, 6, 0], [9, 9, 9]], "loss_mask": [[0, 1, 1], [1, 1, 0]]}


def test_prepare_chat_saves_template_and_mask(chat_data, model_dir):
    meta = json.loads((chat_data / "meta.json").read_text())
    assert meta["loss_mask"] is True
    train_set, _, tokenizer = load_prepared(chat_data)
    assert tokenizer.chat_template == DEFAULT_CHAT_TEMPLATE and tokenizer.pad_token == tokenizer.eos_token
    row = train_set[0]
    assert 0 < int(row["loss_mask"].sum()) < len(row["loss_mask"])
    learned = tokenizer.decode(row["input_ids"][row["loss_mask"] == 1])
    assert "User:" not in learned and "Assistant:" not in learned


@pytest.mark.parametrize(
    "line, message",
    [
        ("{not json", "sft.jsonl:2: not valid JSON"),
        ('{"text": "x"}', "sft.jsonl:2: a record needs `messages`"),
        ('{"messages": [{"role": "user", "content": "hi"}]}', "sft.jsonl:2: no assistant message"),
        ('{"messages": [{"role": "robot", "content": "hi"}]}', "sft.jsonl:2: messages\\[0\\] must be"),
        ('[1, 2]', "sft.jsonl:2: a record must be a JSON object"),
    ],
)
def test_bad_chat_records_are_named(tmp_path, model_dir, line, message):
    jsonl = tmp_path / "sft.jsonl"
    jsonl.write_text('{"prompt": "a", "completion": "b"}\n' + line + "\n")
    with pytest.raises(SystemExit, match=message):
        prepare_chat(jsonl, model_dir, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_bad_chat_arguments(tmp_path, model_dir, prepare):
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(SystemExit, match="--chat: .*x.json is not an existing .jsonl file"):
        prepare(["--chat", str(tmp_path / "x.json"), "--output-dir", str(tmp_path / "o")])
    with pytest.raises(SystemExit, match="--chat-template .*needs --chat and an existing file"):
        prepare(["--chat-template", str(tmp_path / "none.jinja"), "--output-dir", str(tmp_path / "o")])
    jsonl = write_chat_jsonl(tmp_path / "sft.jsonl", count=4)
    template = tmp_path / "t.jinja"  # renders each conversation reversed: prefixes do not line up
    template.write_text("{% for m in messages | reverse %}{{ m['content'] }}{% endfor %}")
    with pytest.raises(SystemExit, match="prefix by prefix"):
        prepare(["--chat", str(jsonl), "--chat-template", str(template), "--tokenizer", str(model_dir),
                 "--seq-len", "8", "--output-dir", str(tmp_path / "o")])
    assert not (tmp_path / "o").exists()


def test_init_from_our_folder_trains_on_assistant_tokens(train, model_dir, chat_data, tmp_path):
    out = tmp_path / "run"
    train(finetune_args(chat_data, model_dir, out))
    expected, masked = first_step_loss(model_dir, chat_data)
    assert masked
    assert train_losses(out)[0] == pytest.approx(expected, rel=1e-5)  # DIR's weights, prompt tokens masked
    final = KimiLinearAttnResForCausalLM.from_pretrained(out / "final")
    assert final.config.attn_res_mode == "block"
    start = KimiLinearAttnResForCausalLM.from_pretrained(model_dir)
    assert not torch.equal(final.lm_head.weight, start.lm_head.weight)
    from transformers import AutoTokenizer

    assert AutoTokenizer.from_pretrained(out / "final").chat_template == DEFAULT_CHAT_TEMPLATE


def test_init_from_moonshot_layout_and_upcycled_kimi_linear(train, model_dir, chat_data, tmp_path):
    from transformers import KimiLinearConfig, KimiLinearForCausalLM

    from hf_attnres.conversion.kimi_linear.convert import convert_checkpoint
    from hf_attnres.conversion.kimi_linear.fixtures import write_moonshot_checkpoint

    model = KimiLinearAttnResForCausalLM.from_pretrained(model_dir)
    moonshot = write_moonshot_checkpoint(tmp_path / "moonshot", model)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(model_dir / name, moonshot / name)
    train(finetune_args(chat_data, moonshot, tmp_path / "run_ms", max_steps=2))
    assert train_losses(tmp_path / "run_ms")[0] == pytest.approx(first_step_loss(model_dir, chat_data)[0], rel=1e-5)

    fields = {k: v for k, v in model.config.to_dict().items()
              if not k.startswith("attn_res") and k not in ("model_type", "architectures", "auto_map")}
    torch.manual_seed(0)
    KimiLinearForCausalLM(KimiLinearConfig(**fields)).save_pretrained(tmp_path / "kimi")  # transformers' Kimi Linear
    convert_checkpoint(tmp_path / "kimi", tmp_path / "up", upcycle="full", progress=False)  # no tokenizer: the data's
    train(finetune_args(chat_data, tmp_path / "up", tmp_path / "run_up", max_steps=2))
    assert KimiLinearAttnResForCausalLM.from_pretrained(tmp_path / "run_up" / "final").config.attn_res_mode == "full"


@pytest.mark.parametrize(
    "flags, message",
    [
        (dict(config="cfg.json"), "takes the model (size and config) from that folder: drop --config"),
        (dict(model_size="tiny"), "drop --model-size"),
        (dict(attn_res="standard"), "is a block-residual model; --attn-res standard needs other tensors"),
        (dict(init_from="nowhere"), "--init-from nowhere: no config.json there"),
    ],
)
def test_init_from_conflicts_are_clear_errors(train, model_dir, chat_data, tmp_path, flags, message):
    (tmp_path / "cfg.json").write_text("{}")
    flags = {k: (tmp_path / v if v in ("cfg.json", "nowhere") else v) for k, v in flags.items()}
    message = message.replace("nowhere", str(tmp_path / "nowhere"))
    with pytest.raises(SetupError, match=message.replace("(", "\\(").replace(")", "\\)")):
        train(finetune_args(chat_data, flags.pop("init_from", model_dir), tmp_path / "run", **flags))
    assert not (tmp_path / "run").exists()


def test_init_from_with_data_of_another_tokenizer_is_refused(train, model_dir, tmp_path):
    from tests.helpers.train_fixtures import prepare_tiny_dataset

    other = prepare_tiny_dataset(tmp_path / "other")
    with pytest.raises(SetupError, match="tokenized with another tokenizer.*--tokenizer"):
        train(finetune_args(other, model_dir, tmp_path / "run"))


def test_init_from_changes_mode_consistently(train, model_dir, chat_data, tmp_path):
    train(finetune_args(chat_data, model_dir, tmp_path / "run", attn_res="full", max_steps=1, eval_every=0,
                        diagnostics_every=0, save_every=0))
    assert KimiLinearAttnResForCausalLM.from_pretrained(tmp_path / "run" / "final").config.attn_res_mode == "full"
