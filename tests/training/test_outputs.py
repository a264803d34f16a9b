"""What `attnres train` says about its outputs and time (hf_attnres/training/outputs.py, loop.py): where it writes
what and how big, final weights only or resumable checkpoints (a fine-tune's default is final weights only), the
training bar closed at the last step, and the evaluations and writes after it each with their own bar or line."""
from __future__ import annotations

import pytest

from hf_attnres.training import loop
from hf_attnres.training.data import load_prepared
from hf_attnres.training.outputs import folder_bytes, show_bytes, weight_bytes
from hf_attnres.utils.tiny import tiny_config
from tests.helpers.toolchain_fixtures import finetune_args
from tests.helpers.train_fixtures import train_args

QUICK = dict(max_steps=2, eval_every=2, eval_batches=1, diagnostics_every=0)


@pytest.mark.parametrize(("count", "shown"), [(0, "0 B"), (1023, "1023 B"), (1536, "1.5 KiB"),
                                              (5 * 2**20, "5 MiB"), (int(1.6 * 2**30), "1.6 GiB")])
def test_show_bytes(count, shown):
    assert show_bytes(count) == shown


def test_folder_bytes_counts_every_file(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.bin").write_bytes(b"0" * 100)
    (tmp_path / "y.bin").write_bytes(b"0" * 23)
    assert folder_bytes(tmp_path) == 123 and folder_bytes(tmp_path / "missing") == 0


def test_weight_bytes_counts_a_tied_head_once():
    from hf_attnres.families.registry import family_classes

    config = tiny_config("block", 2, num_layers=2, vocab_size=64, family="kimi_linear")
    model = family_classes("kimi_linear")[1](config)
    distinct = {id(p): p for p in [*model.parameters(), *model.buffers()]}
    assert weight_bytes(model) == sum(t.numel() * t.element_size() for t in distinct.values())
    untied = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    if model.get_output_embeddings().weight is model.get_input_embeddings().weight:
        assert weight_bytes(model) < untied


def _saved_final(data, train, tmp_path):
    out = tmp_path / "from-scratch"
    train(train_args(data, out, **QUICK, save_every=0))
    return out / "final"


def test_fine_tune_keeps_final_weights_only_by_default_and_says_so(data, train, tmp_path, capsys):
    init = _saved_final(data, train, tmp_path)
    capsys.readouterr()
    out = tmp_path / "tuned"
    argv = finetune_args(data, init, out, **QUICK, save_every=None)  # no checkpoint flag: the default
    train(argv)
    err = capsys.readouterr().err
    assert (out / "final" / "model.safetensors").is_file() and not (out / "checkpoints").exists()
    assert f"final weights: {out / 'final'}" in err and "no checkpoints (--checkpoints final-only" in err
    assert f"wrote {out / 'final'} ({show_bytes(folder_bytes(out / 'final'))})" in err


def test_resumable_checkpoints_are_announced_with_their_size(data, train, tmp_path, capsys):
    init = _saved_final(data, train, tmp_path)
    capsys.readouterr()
    out = tmp_path / "tuned"
    argv = finetune_args(data, init, out, **QUICK, save_every=None)  # no checkpoint flag: the default
    train([*argv, "--checkpoints", "resumable"])
    err = capsys.readouterr().err
    saved = out / "checkpoints" / "step-00000002"
    assert (saved / "optimizer.bin").is_file()
    assert f"resumable checkpoints: {out / 'checkpoints'}" in err
    assert f"checkpoint {saved} ({show_bytes(folder_bytes(saved))};" in err


def test_from_scratch_keeps_resumable_checkpoints_by_default(data, train, tmp_path):
    train(train_args(data, tmp_path / "run", **QUICK))
    assert (tmp_path / "run" / "checkpoints" / "step-00000002" / "optimizer.bin").is_file()


def test_training_bar_is_closed_before_the_final_evaluation(data, train, tmp_path, monkeypatch, capsys):
    """The held-out loss over the whole split runs after the last step under its own bar; the training bar (whose
    clock would otherwise keep counting) is closed by then."""
    from tqdm.std import tqdm

    seen = {}
    whole = loop.evaluate_whole
    earlier = set(tqdm._instances)  # bars another test left open are not this run's

    def watched(engine, val_set, args):
        seen["open bars"] = [bar.desc for bar in list(tqdm._instances) if not bar.disable and bar not in earlier]
        return whole(engine, val_set, args)

    monkeypatch.setattr(loop, "evaluate_whole", watched)
    train(train_args(data, tmp_path / "run", **QUICK))
    assert "open bars" in seen and not [desc for desc in seen["open bars"] if desc.startswith("train")], seen
    assert "held-out loss" in capsys.readouterr().err


def test_evaluations_advance_a_bar_per_batch(data, train, tmp_path, monkeypatch):
    updates = []
    bar = loop.eval_bar

    def counted(total, desc, engine):
        made = bar(total, desc, engine)
        update = made.update
        made.update = lambda n=1: (updates.append(desc), update(n))
        return made

    monkeypatch.setattr(loop, "eval_bar", counted)
    train(train_args(data, tmp_path / "run", **QUICK))
    sequences = len(load_prepared(data)[1])
    # every micro-batch of 4 of the whole split once; the periodic evaluation's one batch (eval_batches 1)
    assert updates.count(f"held-out loss, {sequences} sequences") == -(-sequences // 4)
    assert updates.count("validation") == 1
