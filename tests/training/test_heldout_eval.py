"""The final evaluation covers the whole validation split (the held-out metric every report uses); the evals during
training are a subsample of it and say how many sequences they read."""
from __future__ import annotations

import pytest
import torch

from hf_attnres.training.logs import read_jsonl
from tests.helpers.train_fixtures import train_args


def reference_heldout(final, data) -> tuple[float, int]:
    """Plain PyTorch: the saved model's mean loss per target token over every validation sequence, one at a time."""
    from transformers import AutoModelForCausalLM

    from hf_attnres.training.data import load_prepared

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


class FakeSplit:
    """A validation split of `n` sequences whose rows are their own index (row i: all tokens = i)."""

    def __init__(self, n: int, seq_len: int = 4):
        self.ids = torch.arange(n).repeat_interleave(seq_len).view(n, seq_len)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, rows):
        return {"input_ids": self.ids[rows]}


class FakeEngine:
    """One process of `world` (no communication: mean_tensor returns its input; the test reduces by hand). The
    'model's' loss on a batch is the mean of its sequence indices, so the exact whole-split mean is known."""

    device = "cpu"

    def __init__(self, rank: int, world: int):
        self.rank, self.world_size, self.forwards = rank, world, 0

    def evaluation(self):
        import contextlib

        return contextlib.nullcontext()

    def forward(self, ids, labels):
        from types import SimpleNamespace

        self.forwards += 1
        return SimpleNamespace(loss=ids.float().mean())

    def mean_tensor(self, value):
        self.reduced = value
        return value


@pytest.mark.parametrize("n,batch,world", [(11, 3, 1), (11, 3, 2), (10, 2, 3), (5, 4, 2)])
def test_whole_split_over_processes(n, batch, world):
    """Every sequence counted once over the processes (the last partial batch too), each process making the same
    number of forward passes (ZeRO-3's collective weights), a spare one weighted 0."""
    from types import SimpleNamespace

    from hf_attnres.training.loop import evaluate_whole

    args = SimpleNamespace(micro_batch_size=batch, seq_len=4)
    engines = [FakeEngine(rank, world) for rank in range(world)]
    for engine in engines:
        evaluate_whole(engine, FakeSplit(n), args)
    total = sum(float(e.reduced[0]) for e in engines)
    tokens = sum(float(e.reduced[1]) for e in engines)
    assert tokens == n * 3 and total / tokens == pytest.approx(sum(range(n)) / n)
    assert len({e.forwards for e in engines}) == 1
