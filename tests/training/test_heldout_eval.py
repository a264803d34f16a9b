"""The final evaluation covers the whole validation split (the held-out metric every report uses); the evals during
training are a subsample of it and say how many sequences they read."""
from __future__ import annotations

import pytest
import torch

from attnres.training.logs import read_jsonl
from tests.helpers.train_fixtures import train_args


def reference_heldout(final, data) -> tuple[float, int]:
    """Plain PyTorch: the saved model's mean loss per target token over every validation sequence, one at a time."""
    from transformers import AutoModelForCausalLM

    from attnres.training.data import load_prepared

    _, val_set, _ = load_prepared(data)
    model = AutoModelForCausalLM.from_pretrained(final).eval()
    total = tokens = 0.0
    with torch.no_grad():
        for i in range(len(val_set)):
            ids = val_set[i:i + 1]["input_ids"]
            total += float(model(input_ids=ids, labels=ids).loss) * (ids.shape[1] - 1)
            tokens += ids.shape[1] - 1
    return total / tokens, len(val_set)


def test_final_eval_is_the_whole_split(data, train, tmp_path):
    # micro-batch 3: the split does not divide into batches (the last one is partial) and eval_batches=1 subsamples
    train(train_args(data, tmp_path, max_steps=4, micro_batch_size=3, eval_every=2, eval_batches=1, save_every=0))
    evals = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if "val/loss" in r]
    assert [r["step"] for r in evals] == [2, 4] and all(r["val/sequences"] == 3 for r in evals)
    assert "val/heldout_loss" not in evals[0]
    loss, sequences = reference_heldout(tmp_path / "final", data)
    assert sequences % 3 and sequences > 3
    assert evals[-1]["val/heldout_sequences"] == sequences
    assert evals[-1]["val/heldout_loss"] == pytest.approx(loss, rel=1e-4)
    assert evals[-1]["val/heldout_loss"] != pytest.approx(evals[-1]["val/loss"], rel=1e-4)  # not the subsample
