"""The train command on every family of the registry (tests/families/tiny.py; Kimi Linear is test_train.py's):
from scratch with `--family`, and `--init-from` a family's own standard checkpoint (trained as it is), an upcycled
one (block <-> full as the Kimi path allows), with the refusals named."""
from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from hf_attnres import upcycle
from hf_attnres.training.args import SetupError
from hf_attnres.training.data import BatchPlan, batch_tensors, load_prepared
from tests.families.tiny import FAMILIES, source_model
from tests.helpers.toolchain_fixtures import finetune_args
from tests.helpers.train_fixtures import train_args, train_losses

QUICK = dict(max_steps=1, micro_batch_size=2, eval_every=0, save_every=0, diagnostics_every=0)


def plain_folder(family, data, path):
    """The family's own transformers checkpoint (e.g. a plain LlamaForCausalLM) over the data's tokenizer, saved with
    its tokenizer; returned with the model."""
    _, _, tokenizer = load_prepared(data)
    model = source_model(family, vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    with torch.no_grad():  # the pad row starts at zero in transformers' init: train.py would re-draw it
        model.get_input_embeddings().weight[tokenizer.pad_token_id].normal_(0, 0.02)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path, model


def first_loss(model, data) -> float:
    """The loss train.py's first step logs: the model on the first planned batch (micro-batch 2, seed 0)."""
    train_set, _, _ = load_prepared(data)
    ids, labels = batch_tensors(train_set, BatchPlan(len(train_set), 2, 1, 1, 0).indices(0, 0, 0), 32, "cpu")
    with torch.no_grad():
        return model.train()(input_ids=ids, labels=labels, use_cache=False).loss.item()


@pytest.mark.parametrize("family", FAMILIES)
def test_from_scratch_builds_the_family(train, data, tmp_path, family):
    train(train_args(data, tmp_path / "run", family=family, model_size="tiny", attn_res="full", **QUICK))
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "final")
    assert model.config.model_type == f"{family}_attnres" and model.config.attn_res_mode == "full"
    assert model.config.num_hidden_layers == 4 and model.config.hidden_size == 64
    assert len(train_losses(tmp_path / "run")) == 1


@pytest.mark.parametrize("family", FAMILIES)
def test_init_from_the_family_own_and_upcycled_checkpoints(train, data, tmp_path, family):
    plain, model = plain_folder(family, data, tmp_path / "plain")
    expected = first_loss(model, data)
    # the family's own checkpoint trains as it is, with the standard residual: its weights, its loss
    train(finetune_args(data, plain, tmp_path / "std", **QUICK))
    assert train_losses(tmp_path / "std")[0] == pytest.approx(expected, rel=1e-5)
    # ... and saves as the family's own plain folder: no remote code, no AttnRes fields, loadable by anyone
    final = tmp_path / "std" / "final"
    config = json.loads((final / "config.json").read_text())
    assert config["model_type"] == family and "auto_map" not in config and "attn_res_mode" not in config
    assert not list(final.glob("*.py")) and not (final / "attnres_weights.json").exists()
    tuned = AutoModelForCausalLM.from_pretrained(final)
    assert type(tuned) is type(model) and (final / "training_info.json").is_file()
    with pytest.raises(SetupError, match=f"standard-residual model.*attnres convert {plain} OUT --upcycle block"):
        train(finetune_args(data, plain, tmp_path / "refused", attn_res="block", **QUICK))
    assert not (tmp_path / "refused").exists()
    # the upcycled Block copy, switched to Full as the Kimi path allows: the same function up to the RMSNorm epsilon
    upcycle(model, "block", 2).save_pretrained(tmp_path / "up")
    train(finetune_args(data, tmp_path / "up", tmp_path / "full", attn_res="full", **QUICK))
    # Full's n^2 eps on a tiny random model's small stream: 1.5e-4 off at most; another seed's weights are 2e-3 off
    assert train_losses(tmp_path / "full")[0] == pytest.approx(expected, rel=5e-4)
    assert AutoModelForCausalLM.from_pretrained(tmp_path / "full" / "final").config.attn_res_mode == "full"


def test_family_flag_conflicts_are_named(train, data, tmp_path):
    with pytest.raises(SetupError, match="--model-size k3-small is Kimi Linear's only: --family llama takes tiny"):
        train(train_args(data, tmp_path / "a", family="llama", model_size="k3-small", **QUICK))
    with pytest.raises(SetupError, match="drop --family"):
        train(finetune_args(data, tmp_path, tmp_path / "b", family="llama", **QUICK))
    config = tmp_path / "qwen3.json"
    config.write_text('{"model_type": "qwen3_attnres", "vocab_size": 512}')
    with pytest.raises(SetupError, match="--family llama contradicts --config .*qwen3.json.*qwen3: drop --family"):
        train(train_args(data, tmp_path / "c", family="llama", model_size=None, config=config, **QUICK))
    config.write_text('{"model_type": "gpt_neox"}')
    with pytest.raises(SetupError, match="gpt_neox.*parallel residual"):
        train(train_args(data, tmp_path / "d", model_size=None, config=config, **QUICK))
    plain, _ = plain_folder("llama", data, tmp_path / "plain")
    (plain / "config.json").write_text('{"model_type": 5}')
    with pytest.raises(SetupError, match="--init-from .*plain: model_type must be a string, got 5"):
        train(finetune_args(data, plain, tmp_path / "e", **QUICK))
    for name in "abcde":
        assert not (tmp_path / name).exists()


MISMATCH_WARNING = "to instantiate a model of type"


@pytest.mark.parametrize("family", FAMILIES)
def test_init_from_the_family_own_checkpoint_warns_of_no_type_mismatch(train, data, tmp_path, family):
    """A family's own checkpoint is read by the family's own config class: transformers' warning that a `llama`
    checkpoint may not suit a `llama_attnres` model (untrue of a standard fine-tune) never appears. The negative
    control, reading it with the AttnRes config class, shows the line is caught where transformers logs it."""
    import logging

    from hf_attnres.families.registry import family_classes

    records = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: records.append(record.getMessage())
    logging.getLogger("transformers").addHandler(handler)
    try:
        plain, _ = plain_folder(family, data, tmp_path / "plain")
        records.clear()
        train(finetune_args(data, plain, tmp_path / "std", **QUICK))
        assert not [line for line in records if MISMATCH_WARNING in line]
        assert json.loads((tmp_path / "std" / "final" / "config.json").read_text())["model_type"] == family
        family_classes(family)[0].from_pretrained(plain)
        assert [line for line in records if MISMATCH_WARNING in line]
    finally:
        logging.getLogger("transformers").removeHandler(handler)


@pytest.mark.parametrize(("family", "model_size", "built"), [
    (None, "tiny", "llama"), (None, "small", "llama"), (None, "k3-small", "kimi_linear"), ("qwen3", "tiny", "qwen3"),
    ("kimi_linear", "base", "kimi_linear"),
])
def test_a_preset_without_family_is_llama_unless_it_has_one_family(family, model_size, built):
    from hf_attnres.families.registry import family_of_model_type
    from hf_attnres.training.models import PRESETS, build_config

    class Tokenizer:
        pad_token_id, bos_token_id, eos_token_id = 0, 1, 2

        def __len__(self):
            return 300

    tokenizer = Tokenizer()
    config = build_config(model_size, None, None, None, tokenizer, family)
    assert family_of_model_type(config.model_type) == built
    assert config.num_hidden_layers == PRESETS[model_size].num_layers
    assert config.attn_res_block_size == PRESETS[model_size].block_size
