"""Depth diagnostics: what the callback records equals an independent forward pass, and the PNG plots."""
from __future__ import annotations

import pytest
import torch

from hf_attnres.training.data import BatchPlan, load_prepared
from hf_attnres.training.logs import plot_runs, read_jsonl
from tests.families.tiny import FAMILIES
from tests.helpers.train_fixtures import prepare_tiny_dataset, train_args

MODES = ("standard", "block", "full")


@pytest.fixture(scope="module")
def runs(train, tmp_path_factory):
    """One training step per mode, diagnostics on that step."""
    root = tmp_path_factory.mktemp("diagnostics")
    data = prepare_tiny_dataset(root)
    for mode in MODES:
        train(train_args(data, root / mode, attn_res=mode, max_steps=1, diagnostics_every=1, eval_every=0,
                         save_every=0, no_final_model=True))
    return data, root


@pytest.fixture(scope="module")
def family_runs(train, runs):
    """One training step per other family of the registry (tests/families/tiny.py), Full AttnRes, diagnosed."""
    data, root = runs
    for family in FAMILIES:
        train(train_args(data, root / family, family=family, attn_res="full", max_steps=1, diagnostics_every=1,
                         eval_every=0, save_every=0, no_final_model=True))
    return data, root


@pytest.mark.parametrize("mode", MODES)
def test_recorded_statistics_match_an_independent_forward(runs, mode):
    """Rebuild the step-1 model (same seed) and batch: layer output RMS and depth weights must be what was logged."""
    check_record(*runs, mode, mode)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_records_what_an_independent_forward_gives(family_runs, family):
    check_record(*family_runs, family, "full", family)


def check_record(data, root, run, mode, family=None):
    """The step-1 diagnostics of `root / run` against the rebuilt step-1 model (same seed) on the same batch."""
    from transformers import set_seed

    from hf_attnres.training.models import build_config, data_token_ids, model_class_of, reinit_zero_embedding_rows

    (record,) = read_jsonl(root / run / "diagnostics.jsonl")
    train_set, _, tokenizer = load_prepared(data)
    set_seed(0)
    family = family or "kimi_linear"  # what train_args trains a preset in unless told
    config = build_config("tiny", None, mode, None, tokenizer, family)
    model = model_class_of(config)(config)
    assert model.config.model_type == f"{family}_attnres"
    # the families' embeddings zero the pad row (padding_idx) at init: train.py re-draws it before step 1
    reinit_zero_embedding_rows(model, data_token_ids(train_set), seed=0, log=lambda _: None)
    ids = train_set[BatchPlan(len(train_set), 4, 1, 1, seed=0).indices(0, 0, 0)]["input_ids"]
    with torch.no_grad():
        out = model(input_ids=ids, output_hidden_states=True, output_attn_res_weights=True)
    layers = model.config.num_hidden_layers
    assert record["mode"] == mode and len(record["layer_rms"]) == len(record["layer_grad_norm"]) == layers
    # hidden_states[i + 1] is layer i's last depth source (the last entry is replaced by the final norm's output)
    expected_rms = [float(h.pow(2).mean().sqrt()) for h in out.hidden_states[1:layers]]
    assert record["layer_rms"][: layers - 1] == pytest.approx(expected_rms, rel=1e-5)
    assert len(record["depth_weights"]) == 2 * layers + 1  # two mix points per layer, then the output
    for logged, weights in zip(record["depth_weights"], out.attn_res_weights, strict=True):
        assert logged == pytest.approx(weights.mean(dim=(0, 1)).tolist(), abs=1e-6)
        assert sum(logged) == pytest.approx(1.0, abs=1e-5)
    assert all(g > 0 for g in record["layer_grad_norm"])


def test_source_counts_per_mode(runs):
    _, root = runs
    counts = {mode: [len(w) for w in read_jsonl(root / mode / "diagnostics.jsonl")[0]["depth_weights"]]
              for mode in MODES}
    assert set(counts["standard"]) == {1}
    assert counts["full"] == [1, 2, 3, 4, 5, 6, 7, 8, 9]  # embedding + every sub-layer output so far
    assert counts["block"][-1] == 3  # embedding, one completed block, the partial sum of the last block


def test_plots_compare_standard_and_attnres_runs(runs, tmp_path):
    _, root = runs
    png = plot_runs([root / mode for mode in MODES], tmp_path / "figure5.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    with pytest.raises(FileNotFoundError, match="diagnostics.jsonl"):
        plot_runs([tmp_path], tmp_path / "none.png")


def test_figure5_plots_every_family(family_runs, tmp_path):
    _, root = family_runs
    png = plot_runs([root / family for family in FAMILIES], tmp_path / "figure5.png", names=list(FAMILIES))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_figure5_labels_say_each_thing_once():
    """`figure5.png` read "standard (standard, step 4)" and "Depth weights: block (block)"."""
    from hf_attnres.training.logs import run_label

    assert run_label("standard", {"mode": "standard", "step": 4}, with_step=False) == "standard"
    assert run_label("block", {"mode": "block", "step": 4}, with_step=True) == "block (step 4)"
    assert run_label("s12-seed0", {"mode": "block", "step": 9}, with_step=False) == "s12-seed0 (block)"


def test_a_log_line_nested_100000_deep_is_a_value_error_not_a_recursion_error(tmp_path):
    """A metrics.jsonl line nested 100,000 deep raised RecursionError in read_jsonl (resume and reports)."""
    from hf_attnres.training.logs import JsonlLog, read_jsonl

    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n' + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(ValueError, match="nested more than"):
        read_jsonl(path)
    with pytest.raises(ValueError, match="nested more than"):
        JsonlLog(path, resume_step=1)
    assert path.read_text().startswith('{"step": 1}\n')  # nothing rewritten
