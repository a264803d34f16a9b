"""The recipe's depth groups (hf_attnres/training/recipe.py): the depth parameters' own LR (attn_res_lr_multiplier),
the gradient norm per group, and clipping per group against global clipping; then `train` with both flags: the
optimizer's groups, the per-group norms in metrics.jsonl, and per-group clipping leaving the backbone alone."""
from __future__ import annotations

import math

import pytest
import torch

from hf_attnres.training.args import SetupError
from hf_attnres.training.logs import read_jsonl
from hf_attnres.training.recipe import Recipe, clip_by_group, depth_group
from tests.helpers.bad_input_fixtures import expect_refused
from tests.helpers.train_fixtures import train_args


def _named(backbone=3.0, queries=40.0, key_norms=0.5):
    """A backbone matrix, a pseudo-query and a key norm with gradients of the given norms."""
    named = [("model.layers.0.mlp.up.weight", torch.nn.Parameter(torch.ones(4, 4))),
             ("model.layers.0.attn_res_proj.weight", torch.nn.Parameter(torch.zeros(1, 4))),
             ("model.layers.0.attn_res_norm.weight", torch.nn.Parameter(torch.ones(4)))]
    for (_, param), norm in zip(named, (backbone, queries, key_norms)):
        param.grad = torch.full_like(param, norm / math.sqrt(param.numel()))
    return named


def _grad_norms(named) -> dict:
    return {depth_group(n): float(p.grad.norm()) for n, p in named}


def test_depth_groups_by_name():
    assert [depth_group(n) for n, _ in _named()] == ["backbone", "queries", "key_norms"]


def test_multiplier_sets_the_depth_parameters_lr():
    groups = {g["name"]: g for g in Recipe(lr=1e-4, max_steps=1, attn_res_lr_multiplier=10).param_groups(_named())}
    assert groups["decay"]["lr"] == 1e-4
    assert groups["res_proj"]["lr"] == pytest.approx(1e-3) and groups["res_norm"]["lr"] == pytest.approx(1e-3)
    assert groups["res_norm"]["weight_decay"] == 0.0 and groups["res_proj"]["weight_decay"] == 0.0


def test_res_proj_lr_wins_over_the_multiplier_for_the_queries():
    groups = {g["name"]: g for g in Recipe(lr=1e-4, max_steps=1, res_proj_lr=5e-2,
                                           attn_res_lr_multiplier=10).param_groups(_named())}
    assert groups["res_proj"]["lr"] == 5e-2 and groups["res_norm"]["lr"] == pytest.approx(1e-3)


def test_the_gated_reads_gates_train_and_clip_with_the_queries():
    """A gate scales its point's depth read: it takes the queries' LR (the multiplier's) and their clipping group."""
    gate = ("model.layers.0.mlp_res_gate.weight", torch.nn.Parameter(torch.zeros(4)))
    assert depth_group(gate[0]) == "queries"
    groups = {g["name"]: g for g in Recipe(lr=1e-4, max_steps=1, attn_res_lr_multiplier=10).param_groups(
        [*_named(), gate])}
    assert any(p is gate[1] for p in groups["res_proj"]["params"]) and groups["res_proj"]["lr"] == pytest.approx(1e-3)
    assert not any(p is gate[1] for g in groups.values() if g["name"] != "res_proj" for p in g["params"])


def test_without_a_multiplier_the_groups_are_unchanged():
    """Key norms stay among the undecayed vectors: a checkpoint's optimizer state keeps its three groups."""
    groups = Recipe(lr=1e-4, max_steps=1).param_groups(_named())
    assert [g["name"] for g in groups] == ["decay", "no_decay", "res_proj"]
    assert all(g["lr"] == 1e-4 for g in groups)


def test_per_group_clipping_clips_each_group_by_its_own_norm():
    named = _named(backbone=3.0, queries=40.0, key_norms=0.5)
    total, norms = clip_by_group(named, 1.0, per_group=True)
    assert norms == pytest.approx(dict(backbone=3.0, queries=40.0, key_norms=0.5), rel=1e-5)
    assert float(total) == pytest.approx(math.sqrt(9 + 1600 + 0.25), rel=1e-5)
    after = _grad_norms(named)
    assert after["backbone"] == pytest.approx(1.0, rel=1e-4) and after["queries"] == pytest.approx(1.0, rel=1e-4)
    assert after["key_norms"] == pytest.approx(0.5, rel=1e-5)  # under the limit: untouched


def test_global_clipping_scales_every_group_by_one_factor():
    named = _named(backbone=3.0, queries=40.0, key_norms=0.5)
    total, _ = clip_by_group(named, 1.0, per_group=False)
    factor = 1.0 / float(total)
    after = _grad_norms(named)
    assert after["backbone"] == pytest.approx(3.0 * factor, rel=1e-4)  # the queries shrink the backbone's update
    assert after["queries"] == pytest.approx(40.0 * factor, rel=1e-4)
    reference = _named(backbone=3.0, queries=40.0, key_norms=0.5)
    torch.nn.utils.clip_grad_norm_([p for _, p in reference], 1.0)
    for (_, mine), (_, torchs) in zip(named, reference):
        torch.testing.assert_close(mine.grad, torchs.grad)


@pytest.mark.parametrize("max_norm", [0.0, math.inf])
def test_no_clip_measures_only(max_norm):
    named = _named()
    clip_by_group(named, max_norm, per_group=True)
    assert _grad_norms(named) == pytest.approx(dict(backbone=3.0, queries=40.0, key_norms=0.5), rel=1e-5)


def test_train_logs_group_norms_and_uses_the_multiplier(prepared_data, train, tmp_path):
    out = tmp_path / "run"
    train(train_args(prepared_data, out, max_steps=2, eval_every=0, save_every=0, diagnostics_every=0,
                     no_final_model=True, attn_res="block", lr=1e-3, attn_res_lr_multiplier=10,
                     grad_clip_groups="per-group"))
    steps = [r for r in read_jsonl(out / "metrics.jsonl") if "train/loss" in r]
    assert len(steps) == 2
    for record in steps:
        assert {"grad_norm/backbone", "grad_norm/queries", "grad_norm/key_norms"} <= set(record)
        assert record["lr/res_proj"] == pytest.approx(10 * record["lr/decay"])
        assert record["lr/res_norm"] == pytest.approx(10 * record["lr/decay"])
        parts = [record[f"grad_norm/{g}"] for g in ("backbone", "queries", "key_norms")]
        assert record["train/grad_norm"] == pytest.approx(math.sqrt(sum(p * p for p in parts)), rel=1e-4)


def test_standard_model_logs_only_the_backbone(prepared_data, train, tmp_path):
    out = tmp_path / "run"
    train(train_args(prepared_data, out, max_steps=1, eval_every=0, save_every=0, diagnostics_every=0,
                     no_final_model=True, attn_res="standard"))
    record = next(r for r in read_jsonl(out / "metrics.jsonl") if "train/loss" in r)
    assert record["grad_norm/backbone"] == pytest.approx(record["train/grad_norm"], rel=1e-4)
    assert "grad_norm/queries" not in record


BAD = {
    "multiplier_zero": (dict(attn_res_lr_multiplier=0), ["--attn-res-lr-multiplier", "> 0"]),
    "multiplier_nan": (dict(attn_res_lr_multiplier="nan"), ["--attn-res-lr-multiplier", "finite"]),
    "multiplier_on_standard": (dict(attn_res="standard", attn_res_lr_multiplier=10),
                               ["--attn-res-lr-multiplier", "standard"]),
    "per_group_with_deepspeed": (dict(grad_clip_groups="per-group", deepspeed="configs/deepspeed/zero1.json"),
                                 ["--grad-clip-groups", "--deepspeed"]),
}


@pytest.mark.parametrize("flags, named", BAD.values(), ids=BAD.keys())
def test_bad_depth_flags_refused(prepared_data, train, tmp_path, flags, named):
    out = tmp_path / "run"
    expect_refused(lambda: train(train_args(prepared_data, out, max_steps=2, eval_every=0, **flags)), named,
                   untouched=[prepared_data], absent=[out], errors=SetupError)


def test_every_problem_reported_at_once(prepared_data, train, tmp_path):
    """Warm-up beyond max steps, a zero LR and a missing --config: one refusal naming all three."""
    out = tmp_path / "run"
    message = expect_refused(
        lambda: train(train_args(prepared_data, out, max_steps=2, warmup_steps=5, lr=0, config=tmp_path / "no.json")),
        ["3 problems", "--warmup-steps 5 exceeds --max-steps 2", "--lr must be > 0", "--config"],
        untouched=[prepared_data], absent=[out], errors=SetupError)
    assert message.count("\n") == 3


def test_missing_data_reported_beside_flag_problems(train, tmp_path):
    out = tmp_path / "run"
    expect_refused(lambda: train(train_args(tmp_path / "nodata", out, max_steps=2, lr=0)),
                   ["2 problems", "nodata", "--lr"], absent=[out], errors=SetupError)


@pytest.mark.parametrize("flags, named", [
    (dict(lr=1e-3, attn_res_lr_multiplier=1e30), "--attn-res-lr-multiplier"),
    (dict(lr=2.0, attn_res_lr_multiplier=None), "--lr"),
    (dict(lr=1e-3, attn_res_lr_multiplier=None, weight_decay=1e4), "--weight-decay"),
])
def test_pipeline_recipe_check_bounds_each_groups_rate(flags, named):
    """The pipeline trainers' recipe check (check_recipe_args) refuses an absurd group rate as `train` does."""
    from types import SimpleNamespace

    from hf_attnres.training.recipe import check_recipe_args

    settings = dict(weight_decay=0.0, res_proj_weight_decay=0.0, grad_clip=1.0, warmup_steps=0, res_proj_lr=None,
                    min_lr_ratio=0.1)
    settings.update(flags)
    with pytest.raises(SystemExit) as refused:
        check_recipe_args(SimpleNamespace(**settings), steps=10)
    assert str(refused.value).startswith(f"error: {named}")
    sane = dict(settings, lr=1e-3, attn_res_lr_multiplier=10.0, weight_decay=0.1)
    check_recipe_args(SimpleNamespace(**sane), steps=10)
