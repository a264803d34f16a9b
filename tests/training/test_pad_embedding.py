"""No token that occurs in the data may have an embedding frozen at zero (an embedding
padding_idx on pad = EOS), a deep model trains finite at a high learning rate, and old zero rows are repaired."""
from __future__ import annotations

import json
import math
import shutil

import pytest
import torch

from hf_attnres import KimiLinearAttnResForCausalLM
from hf_attnres.training import loop
from hf_attnres.training.data import DATASET_DIR, META_FILE, load_prepared
from hf_attnres.training.models import build_config, data_token_ids, reinit_zero_embedding_rows
from hf_attnres.utils.tiny import tiny_config
from tests.helpers.train_fixtures import train_args, train_losses


def deep_mla_fields(vocab_size: int, layers: int = 12) -> dict:
    """The issue's diverging shape, narrower: 12+ layers, MLA in every layer (KDA's CPU fallback is slow)."""
    return dict(num_layers=layers, vocab_size=vocab_size, hidden_size=64, layer_types=["full_attention"] * layers,
                first_k_dense_replace=layers)


def covering_rows(rows: torch.Tensor) -> torch.Tensor:
    """The rows that each add a token not seen in earlier rows: together they hold every token of `rows` (fast)."""
    seen, kept = set(), []
    for row in rows:
        if not seen.issuperset(row.tolist()):
            seen.update(row.tolist())
            kept.append(row)
    return torch.stack(kept)


@pytest.mark.parametrize("mode", ["standard", "block"])
def test_every_token_in_the_data_gets_a_gradient(data, mode):
    train_set, _, tokenizer = load_prepared(data)
    config = build_config("tiny", None, mode, None, tokenizer, "kimi_linear")  # the trainer's own preset path
    used = data_token_ids(train_set)
    assert config.pad_token_id in used.tolist()  # pad is EOS, a real token that ends every document: the bug's case
    torch.manual_seed(0)
    model = KimiLinearAttnResForCausalLM(config)
    ids = covering_rows(train_set[:]["input_ids"])
    model(input_ids=ids, labels=ids, use_cache=False).loss.backward()
    grad = model.get_input_embeddings().weight.grad
    assert torch.isfinite(grad).all()
    assert (grad[used].abs().amax(-1) > 0).all(), "tokens whose embedding receives no gradient"


def eos_first(rows: torch.Tensor, eos_id: int) -> torch.Tensor:
    """Rows rolled to start at their first EOS. A sequence that starts with EOS (packing cuts right before one) is the
    bug's trigger: with a zero EOS embedding its residual stream stays zero through every layer."""
    return torch.stack([row.roll(-int((row == eos_id).nonzero()[0])) for row in rows if (row == eos_id).any()])


def eos_first_dataset(data, out):
    """A copy of the prepared dataset whose training rows all start with EOS."""
    from datasets import Dataset, load_from_disk

    shutil.copytree(data, out)
    splits = load_from_disk(str(data / DATASET_DIR))
    _, _, tokenizer = load_prepared(data)
    rows = eos_first(torch.tensor(splits["train"]["input_ids"]), tokenizer.eos_token_id)
    splits["train"] = Dataset.from_dict({"input_ids": rows.tolist()})
    shutil.rmtree(out / DATASET_DIR)
    splits.save_to_disk(str(out / DATASET_DIR))
    meta = json.loads((out / META_FILE).read_text())
    meta["num_sequences"]["train"] = len(rows)
    (out / META_FILE).write_text(json.dumps(meta))
    return out


def test_gradient_at_an_eos_first_sequence_stays_bounded(data):
    """With the padding index, dL/d inputs_embeds at a leading EOS grew ~300x per layer (1e32 at 12 layers)."""
    train_set, _, tokenizer = load_prepared(data)
    ids = eos_first(train_set[:]["input_ids"], tokenizer.eos_token_id)[:4]
    config = build_config("tiny", None, "standard", None, tokenizer)
    config = tiny_config("standard", 0, **deep_mla_fields(len(tokenizer)), pad_token_id=config.pad_token_id,
        family="kimi_linear")
    torch.manual_seed(0)
    model = KimiLinearAttnResForCausalLM(config)
    embeds = model.get_input_embeddings()(ids).detach().requires_grad_()
    model(inputs_embeds=embeds, labels=ids, use_cache=False).loss.backward()
    assert float(embeds.grad.abs().max()) < 10


@pytest.mark.parametrize("old_zero_row", [False, True])
def test_deep_model_at_high_lr_stays_finite(data, train, tmp_path, monkeypatch, caplog, old_zero_row):
    """16 layers at a high LR stay finite: EOS (the padding token) keeps a trainable embedding row; were it the
    padding index, the first step's gradient would be NaN (fp32 overflow). `old_zero_row`: the model comes with EOS's
    row at zero, as a checkpoint saved with it as the padding index does: the trainer repairs it."""
    if old_zero_row:
        build = loop.build_model

        def build_with_zero_eos_row(config, args):
            model = build(config, args)
            with torch.no_grad():
                model.get_input_embeddings().weight[config.eos_token_id] = 0
            return model

        monkeypatch.setattr(loop, "build_model", build_with_zero_eos_row)
    data = eos_first_dataset(data, tmp_path / "eos_first")
    _, _, tokenizer = load_prepared(data)
    config = tiny_config("standard", 0, **deep_mla_fields(len(tokenizer), layers=16),
                         pad_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id, family="kimi_linear")
    config_file = tmp_path / "deep.json"
    config_file.write_text(json.dumps(config.to_dict()))
    out = tmp_path / "run"
    train(train_args(data, out, config=config_file, attn_res="standard", max_steps=8, lr=1e-2, warmup_steps=1,
                     eval_every=8, save_every=0, diagnostics_every=0, no_final_model=True))
    losses, norms = train_losses(out), train_losses(out, "train/grad_norm")
    assert len(losses) == 8 and all(math.isfinite(x) for x in losses + norms), (losses, norms)
    assert max(norms) < 1e3, norms
    assert losses[-1] < losses[0]
    assert ("re-initialised 1 all-zero input-embedding row" in caplog.text) == old_zero_row


def test_zero_rows_of_used_tokens_are_reinitialised():
    torch.manual_seed(0)
    model = KimiLinearAttnResForCausalLM(tiny_config("block", 2, 2, family="kimi_linear"))
    weight = model.get_input_embeddings().weight
    with torch.no_grad():
        weight[[0, 5, 7]] = 0  # 0 and 5 occur in the data, 7 does not
    before = weight.detach().clone()
    notes = []
    repaired = reinit_zero_embedding_rows(model, torch.tensor([0, 3, 5, 9]), seed=1, log=notes.append)
    assert repaired == [0, 5] and len(notes) == 1 and "[0, 5]" in notes[0]
    assert (weight[[0, 5]].abs().amax(-1) > 0).all()
    assert torch.equal(weight[7], before[7])  # unused: left alone
    untouched = [i for i in range(len(weight)) if i not in (0, 5)]
    assert torch.equal(weight[untouched], before[untouched])
    # the scale of the other rows, and the same rows on every process (seeded)
    rms = weight[[0, 5]].detach().pow(2).mean().sqrt()
    assert 0.5 < float(rms / before[[3, 9]].pow(2).mean().sqrt()) < 2
    again = KimiLinearAttnResForCausalLM(model.config)
    again.load_state_dict({**model.state_dict(), "model.embed_tokens.weight": before})
    reinit_zero_embedding_rows(again, torch.tensor([0, 3, 5, 9]), seed=1, log=notes.append)
    assert torch.equal(again.get_input_embeddings().weight, weight)
    assert reinit_zero_embedding_rows(model, torch.tensor([0, 5]), log=notes.append) == []  # nothing left to repair


def test_data_token_ids_reads_every_chunk():
    rows = {"input_ids": torch.tensor([[4, 4, 1], [9, 2, 4], [0, 0, 0]])}
    dataset = type("Rows", (), {"__len__": lambda self: 3,
                                "__getitem__": lambda self, s: {"input_ids": rows["input_ids"][s]}})()
    assert data_token_ids(dataset, chunk=1).tolist() == [0, 1, 2, 4, 9]
