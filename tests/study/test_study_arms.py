"""The study's arms: each arm swept over learning rates, then trained with more seeds at its own best one;
the arm switches reach the model and the optimizer; the report of a fair comparison, on synthetic records with a known
answer; the bootstrap interval of the compute multiplier."""
from __future__ import annotations

import json
import math

import pytest
import torch

from hf_attnres.families.kimi_linear.modeling_kimi_linear_attnres import KimiLinearAttnResForCausalLM
from hf_attnres.study import runner as study_runner
from hf_attnres.study.analysis import bootstrap_multiplier, fit_power_law
from hf_attnres.study.arms_report import lr_panels, multiplier_text
from hf_attnres.study.grid import best_lrs, grid_from_dict, load_grid, model_config
from hf_attnres.study.report import write_report
from hf_attnres.study.runner import RESULT_FILE, run_grid, run_spec, train_command
from hf_attnres.training.loop import param_groups
from hf_attnres.utils.tiny import tiny_config
from tests.helpers.train_fixtures import REPO

GRID = {
    "name": "arms", "data": {"dir": "data/x"},
    "model": {"layers": 3, "hidden": 16, "block_size": 2, "heads": 2},
    "train": {"max_steps": 4, "micro_batch_size": 2, "warmup_steps": 1},
    "arms": {"full-qlr": {"mode": "full", "train": {"res_proj_lr_scale": 10, "res_proj_weight_decay": 0.1,
                                                    "warmup_steps": 2}},
             "full-init": {"mode": "full", "config": {"attn_res_query_init_std": 0.1, "attn_res_key_norm_init": 4.0}},
             "full-static": {"mode": "full", "ablation": "static"},
             "block-S1": {"mode": "block", "block_size": 1}},
    "groups": {"lr_sweep": {"arms": ["standard", "block", "full", "full-qlr", "full-static", "block-S1"],
                            "lrs": [0.001, 0.002, 0.004, 0.008], "seeds": [0]},
               "tuned": {"arms": ["standard", "block", "full", "full-qlr"], "seeds": [1, 2]},
               "scaling": {"arms": ["standard", "block"], "hidden": [8, 16, 24, 32], "seeds": [0, 1], "lr": "tuned"}},
}
# the synthetic truth: each arm's best LR and its loss there
BEST = {"standard": 0.002, "block": 0.004, "full": 0.004, "full-qlr": 0.002, "full-static": 0.001, "block-S1": 0.008}
OFFSET = {"standard": 0.0, "block": -0.05, "full": -0.03, "full-qlr": -0.06, "full-static": 0.01, "block-S1": -0.04}


def synthetic_loss(key) -> float:
    """A parabola in log LR around the arm's best, a power law in width, seed noise 0.01 per seed."""
    size = 3.0 * ((key.hidden / 8) ** 2) ** -0.05
    return size + OFFSET[key.arm] + 0.05 * math.log2(key.lr / BEST[key.arm]) ** 2 + 0.01 * key.seed


def loss_whose_best_lr_falls_with_width(key) -> float:
    """synthetic_loss with each arm's best LR at BEST * 16 / hidden (the main size is 16), as with Adam in standard
    parametrisation: the LR tuned at one width is wrong at the others."""
    best = BEST[key.arm] * 16 / key.hidden
    return synthetic_loss(key) + 0.05 * (math.log2(key.lr / best) ** 2 - math.log2(key.lr / BEST[key.arm]) ** 2)


class SyntheticRunner:
    def __init__(self, loss=synthetic_loss):
        self.calls, self.loss = [], loss

    def __call__(self, grid, key, out, meta, threads):
        self.calls.append(key.id)
        flops = 1e12 * (key.hidden / 8) ** 2
        loss = self.loss(key)
        record = dict(id=key.id, spec=run_spec(grid, key), **key.to_dict(), val_loss=loss, val_curve=[[4, loss]],
                      train_loss=loss, params=int(flops / 6e3), flop_params=int(flops / 6e3), tokens=1000,
                      flops=flops, wall_s=0.1)
        (out / "runs" / key.id).mkdir(parents=True, exist_ok=True)
        (out / "runs" / key.id / RESULT_FILE).write_text(json.dumps(record))
        return record


@pytest.fixture
def out(tmp_path, monkeypatch):
    monkeypatch.setattr(study_runner, "ensure_data", lambda grid: {"vocab_size": 300, "seq_len": 16})
    return tmp_path / "study"


def test_tuned_runs_follow_each_arms_sweep(out):
    grid = grid_from_dict(GRID)
    sweep = grid.runs("lr_sweep")
    assert len(sweep) == 6 * 4 and grid.runs("tuned") == []  # nothing is tuned before its sweep
    assert grid.waiting({}) == ["block", "full", "full-qlr", "standard"]
    runner = SyntheticRunner()
    records, errors = run_grid(grid, out, jobs=2, runner=runner)
    assert not errors
    by_id = {r["id"]: r for r in records}
    assert best_lrs(grid, by_id) == BEST
    # each arm's tuned seeds ran after the last run of its sweep, at its best LR
    for arm in GRID["groups"]["tuned"]["arms"]:
        last_sweep = max(runner.calls.index(grid.arm_key(arm, lr, 0).id) for lr in GRID["groups"]["lr_sweep"]["lrs"])
        for seed in (1, 2):
            assert runner.calls.index(grid.arm_key(arm, BEST[arm], seed).id) > last_sweep
    # scaling at each arm's best LR; the main size's seeds 0 and 1 are the sweep's and tuned runs, trained once
    assert grid.arm_key("block", BEST["block"], 1, hidden=16).id in by_id
    assert len(runner.calls) == len(set(runner.calls)) == 24 + 4 * 2 + 2 * 4 * 2 - 2 * 2
    assert SyntheticRunner().calls == [] and run_grid(grid, out, runner=(again := SyntheticRunner()))[1] == []
    assert again.calls == []  # a rerun trains nothing


def test_report_of_a_fair_comparison(out, tmp_path):
    grid = grid_from_dict(GRID)
    records, _ = run_grid(grid, out, runner=SyntheticRunner())
    text = write_report(grid, records, tmp_path / "report", runs_dir=out / "runs").read_text()
    # the sweep table marks each arm's best LR; the edges are flagged
    row = [f"{synthetic_loss(grid.arm_key('block', lr, 0)):.4f}" for lr in GRID["groups"]["lr_sweep"]["lrs"]]
    row[2] = f"**{row[2]}**"
    assert f"| block | block S=2 | {' | '.join(row)} | 0.004 |" in text
    assert "0.008 (edge of the sweep: widen it)" in text and "0.001 (edge of the sweep: widen it)" in text
    # every arm at its own best LR: the paired delta is the offset difference, exactly, over three seeds
    block = synthetic_loss(grid.arm_key("block", 0.004, 1))  # the mean over seeds 0, 1, 2 is seed 1's loss
    assert f"| block | 0.004 | 3 | {block:.4f} +- 0.0100 | -0.0500 +- 0.0000" in text
    assert "| full-qlr | 0.002 | 3 |" in text and "-0.0600 +- 0.0000" in text and "-0.0300 +- 0.0000" in text
    assert "| full-static | +0.0400 (1 seed) | worse than Full" in text
    s1 = synthetic_loss(grid.arm_key("block-S1", 0.008, 0))
    assert f"| 1 | 3 | 0.008 | {s1:.4f} | -0.0400 (1 seed) |" in text  # block-size rows from the block arms
    # the scaling fit: block sits 0.05 below standard at every size -> a compute multiplier > 1 with an interval
    assert "Compute multiplier, block vs standard" in text and "90% bootstrap interval" in text
    for name in ("study_lr_sweep.png", "study_scaling.png"):
        assert (tmp_path / "report" / name).stat().st_size > 0


def test_lr_figure_puts_fulls_variants_beside_full():
    panels = lr_panels(grid_from_dict(GRID))
    assert panels == [("residuals and block sizes", ["standard", "block", "full", "block-S1"]),
                      ("Full AttnRes's variants", ["full", "full-qlr", "full-static"])]
    plain = {**GRID, "groups": {"lr_sweep": {**GRID["groups"]["lr_sweep"], "arms": ["standard", "block", "full"]}}}
    assert lr_panels(grid_from_dict(plain)) == [("every arm", ["standard", "block", "full"])]


SWEPT = {**GRID, "groups": {**GRID["groups"], "scaling": {**GRID["groups"]["scaling"], "lr": "swept",
                                                            "lrs": [0.001, 0.002, 0.004, 0.008]}}}


def test_a_swept_scaling_group_finds_each_sizes_own_best_lr(out, tmp_path):
    grid = grid_from_dict(SWEPT)
    assert "standard (hidden 8)" in grid.waiting({})  # its seed 1 waits for the hidden-8 sweep
    runner = SyntheticRunner(loss_whose_best_lr_falls_with_width)
    records, errors = run_grid(grid, out, runner=runner)
    assert not errors
    best = best_lrs(grid, {r["id"]: r for r in records})
    # the parabola's minimum at BEST * 16 / hidden, to the nearest swept LR in log distance (hidden 24: 2/3 of BEST)
    assert {k: v for k, v in best.items() if isinstance(k, tuple)} == {
        ("standard", 8): 0.004, ("standard", 16): 0.002, ("standard", 24): 0.001, ("standard", 32): 0.001,
        ("block", 8): 0.008, ("block", 16): 0.004, ("block", 24): 0.002, ("block", 32): 0.002}
    # seed 1 at each size's own best; the main size's sweep and seed 1 are lr_sweep's and tuned's runs, trained once
    assert grid.arm_key("standard", 0.001, 1, hidden=32).id in runner.calls
    assert grid.arm_key("standard", 0.002, 1, hidden=32).id not in runner.calls
    assert len(runner.calls) == len(set(runner.calls)) == 24 + 4 * 2 + 3 * 2 * 4 + 3 * 2
    # within a size, the sweep starts at the arm's best LR of the main size and goes outwards
    at_8 = [i for i in runner.calls if i.startswith("standard-") and "-h8-seed0" in i]
    assert at_8[0] == grid.arm_key("standard", 0.002, 0, hidden=8).id
    text = write_report(grid, records, tmp_path / "report", runs_dir=out / "runs").read_text()
    assert "each arm at its own best LR at each size" in text
    assert "h32 (" in text and "lr 0.001): " in text.split("| standard |")[-1]
    assert (tmp_path / "report" / "study_scaling_lr.png").stat().st_size > 0


SCREEN = {**GRID, "groups": {"lr_sweep": {"arms": ["standard", "full"], "lrs": [0.001, 0.002, 0.004, 0.008],
                                          "seeds": [0]},
                             "screen": {"arms": ["full-qlr", "full-static"], "seeds": [0], "lr_of": "full"}}}


def test_the_screen_runs_each_change_at_the_reference_arms_best_lr(out, tmp_path):
    grid = grid_from_dict(SCREEN)
    assert grid.runs("screen") == [] and grid.waiting({}) == ["full"]  # nothing to screen before full's sweep
    runner = SyntheticRunner()
    records, errors = run_grid(grid, out, jobs=2, runner=runner)
    assert not errors
    last_sweep = max(runner.calls.index(grid.arm_key("full", lr, 0).id) for lr in SCREEN["groups"]["lr_sweep"]["lrs"])
    for arm in ("full-qlr", "full-static"):  # at full's best LR (0.004), not their own, after full's sweep
        assert runner.calls.index(grid.arm_key(arm, BEST["full"], 0).id) > last_sweep
    assert len(runner.calls) == 8 + 2
    text = write_report(grid, records, tmp_path / "report", runs_dir=out / "runs").read_text()
    assert "### Screen: each change at full's best learning rate (0.004), seed(s) [0]" in text
    # the parabola's answer: full-qlr is 0.06 below standard's best at its own LR, 0.05 above that at full's LR
    assert "| full-qlr | full, res_proj_lr_scale=10, res_proj_weight_decay=0.1, warmup_steps=2 |" in text
    assert "| +0.0200 (1 seed) | -0.0100 (1 seed) |" in text
    assert "| +0.2400 (1 seed) | +0.2100 (1 seed) | - | worse than Full" in text  # full-static, far from its best LR
    assert "full's seed-to-seed spread is not measured yet" in text
    assert f"| (full) | full | {synthetic_loss(grid.arm_key('full', 0.004, 0)):.4f} |  | -0.0300 (1 seed) | - |" in text


def test_depth_sharpness_from_the_last_diagnostics(tmp_path):
    """The screen's mechanism column: over mix points with more than one source, entropy relative to uniform and
    the mean top weight, from the run's last diagnostics record."""
    from hf_attnres.study.arms_report import depth_sharpness

    folder = tmp_path / "run" / "train"
    folder.mkdir(parents=True)
    first = {"step": 1, "depth_weights": [[1.0], [0.9, 0.1]]}
    last = {"step": 2, "depth_weights": [[1.0], [0.5, 0.5], [1.0, 0.0], [0.25, 0.25, 0.25, 0.25]]}
    (folder / "diagnostics.jsonl").write_text(json.dumps(first) + "\n" + json.dumps(last) + "\n")
    assert depth_sharpness(tmp_path, "run") == f"{2 / 3:.2f} / {(0.5 + 1.0 + 0.25) / 3:.2f}"
    assert depth_sharpness(tmp_path, "missing") == "-" and depth_sharpness(None, "run") == "-"


def test_a_bracketed_minimum_is_the_best_before_the_sweep_ends():
    """An LR curve has one minimum: once the best finished LR has both neighbours finished and worse, the points
    beyond cannot win, so the tuned and screen runs start without waiting for them."""
    grid = grid_from_dict(SCREEN)
    record = {grid.arm_key("full", lr, 0).id: {"val_loss": loss} for lr, loss in ((0.002, 4.9), (0.004, 4.8),
                                                                               (0.008, 4.95))}
    assert best_lrs(grid, record) == {"full": 0.004}  # 0.001 not run yet: it lies beyond a worse neighbour
    del record[grid.arm_key("full", 0.008, 0).id]
    assert best_lrs(grid, record) == {}  # 0.004 is not bracketed yet
    edge = {grid.arm_key("full", lr, 0).id: {"val_loss": loss} for lr, loss in ((0.004, 4.9), (0.008, 4.8))}
    assert best_lrs(grid, edge) == {}  # a minimum at the sweep's edge is never bracketed
    edge[grid.arm_key("full", 0.002, 0).id] = edge[grid.arm_key("full", 0.001, 0).id] = {"val_loss": 5.0}
    assert best_lrs(grid, edge) == {"full": 0.008}  # ... until the sweep is done


def test_arm_switches_reach_the_command_and_the_model():
    grid = grid_from_dict(GRID)
    command = train_command(grid, grid.arm_key("full-qlr", 0.002, 0), REPO / "x", 16)
    flags = dict(zip(command, command[1:]))
    assert flags["--lr"] == "0.002" and float(flags["--res-proj-lr"]) == pytest.approx(0.02)
    assert flags["--res-proj-weight-decay"] == "0.1" and flags["--warmup-steps"] == "2"
    assert flags["--diagnostics-every"] == "4"  # the last step's depth weights, for the heatmaps
    plain = train_command(grid, grid.arm_key("full", 0.004, 0), REPO / "x", 16)
    assert "--res-proj-lr" not in plain and dict(zip(plain, plain[1:]))["--warmup-steps"] == "1"
    config = model_config(grid, grid.arm_key("full-init", 0.001, 0), 300)
    assert config.attn_res_query_init_std == 0.1 and config.attn_res_key_norm_init == 4.0
    assert model_config(grid, grid.arm_key("full-static", 0.001, 0), 300).attn_res_static_mixing
    assert model_config(grid, grid.arm_key("block-S1", 0.001, 0), 300).attn_res_block_size == 1
    # an edited arm redoes its runs: the arm is part of the run's spec
    edited = grid_from_dict({**GRID, "arms": {**GRID["arms"], "full-init": {"mode": "full"}}})
    key = grid.arm_key("full-init", 0.001, 0)
    assert run_spec(grid, key) != run_spec(edited, key) and run_spec(grid, grid.arm_key("full", 0.001, 0)) == \
        run_spec(edited, grid.arm_key("full", 0.001, 0))


def test_a_gated_arm_is_blocks_layout_with_the_gated_read():
    """Mode "gated" is an arm's mode (the config's is block, with attn_res_gated_read): its model has a gate per
    mix point and the arm's block size."""
    grid = grid_from_dict({**GRID, "arms": {**GRID["arms"], "gated": {"mode": "gated", "block_size": 1}}})
    config = model_config(grid, grid.arm_key("gated", 0.001, 0), 300)
    assert config.attn_res_mode == "block" and config.attn_res_block_size == 1 and config.attn_res_gated_read
    model = KimiLinearAttnResForCausalLM(config)
    assert len([n for n, _ in model.named_parameters() if n.endswith("_res_gate.weight")]) == 2 * 3 + 1
    assert not model_config(grid, grid.arm_key("block-S1", 0.001, 0), 300).attn_res_gated_read


def test_init_arms_change_only_the_initial_tensors():
    torch.manual_seed(0)
    default = KimiLinearAttnResForCausalLM(tiny_config("full", 0, 2, family="kimi_linear"))
    torch.manual_seed(0)
    arm = KimiLinearAttnResForCausalLM(tiny_config("full", 0, 2, attn_res_query_init_std=0.1,
                                                   attn_res_key_norm_init=4.0, family="kimi_linear"))
    queries = [p for n, p in arm.named_parameters() if n.endswith("_res_proj.weight")]
    gains = [p for n, p in arm.named_parameters() if n.endswith("_res_norm.weight")]
    assert queries and all(0.05 < q.std() < 0.2 for q in queries) and all(torch.all(g == 4.0) for g in gains)
    assert all(torch.all(p == 0) for n, p in default.named_parameters() if n.endswith("_res_proj.weight"))
    assert sorted(default.state_dict()) == sorted(arm.state_dict())  # the same tensors (K3's names)
    for field, value in (("attn_res_query_init_std", -1.0), ("attn_res_key_norm_init", 0.0),
                         ("attn_res_key_norm_init", float("nan"))):
        with pytest.raises(ValueError, match=field):
            tiny_config("full", 0, 2, **{field: value}, family="kimi_linear")


def test_query_weight_decay_is_its_own_group():
    model = KimiLinearAttnResForCausalLM(tiny_config("block", 1, 2, family="kimi_linear"))
    groups = {g["name"]: g for g in param_groups(model, 1e-3, 0.1, None, res_proj_weight_decay=0.05)}
    assert groups["res_proj"]["weight_decay"] == 0.05 and groups["decay"]["weight_decay"] == 0.1
    assert {g["name"]: g for g in param_groups(model, 1e-3, 0.1, None)}["res_proj"]["weight_decay"] == 0.0


@pytest.mark.parametrize("change, message", [
    ({"arms": {"full": {"mode": "full"}}}, "built in"),
    ({"arms": {"x": {"mode": "nope"}}}, "arms.x.mode"),
    ({"arms": {"x": {"mode": "full", "block_size": 2}}}, r"block_size applies to modes \('block', 'gated'\)"),
    ({"arms": {"x": {"mode": "gated", "block_size": 0}}}, "arms.x.block_size"),
    ({"arms": {"x": {"mode": "full", "config": {"hidden_size": 8}}}}, "config / train may set only"),
    ({"arms": {"x": {"mode": "full", "train": {"lr": 1.0}}}}, "config / train may set only"),
    ({"arms": {"x": {"mode": "standard", "ablation": "static"}}}, "ablation must be"),
    ({"arms": {"x": {"mode": "full", "colour": 1}}}, "unknown fields"),
    ({"groups": {"lr_sweep": {"arms": ["standard"], "lrs": [0.001], "seeds": [0]}}}, "at least two learning rates"),
    ({"groups": {"lr_sweep": {"arms": ["nope"], "lrs": [0.001, 0.002], "seeds": [0]}}}, "is not an arm"),
    ({"groups": {"lr_sweep": {"arms": ["standard"], "lrs": [0.001, -1], "seeds": [0]}}}, "lrs: -1"),
    ({"groups": {"lr_sweep": {"arms": ["standard"], "lrs": [0.001, 0.002], "seeds": [0]},
                 "tuned": {"arms": ["full"], "seeds": [1]}}}, "tuned but not in groups.lr_sweep"),
    ({"groups": {"scaling": {"arms": ["standard"], "hidden": [8, 16, 24], "seeds": [0], "lr": "best"}}},
     "'tuned'"),
    ({"groups": {"scaling": {"arms": ["standard"], "hidden": [8, 16, 24], "seeds": [0], "lr": "swept"}}},
     r"needs exactly the fields .*'lrs'\] with lr 'swept'"),
    ({"groups": {"scaling": {"arms": ["standard"], "hidden": [8, 16, 24], "seeds": [0], "lr": "swept",
                             "lrs": [0.001]}}}, "groups.scaling.lrs needs at least two learning rates"),
    ({"groups": {**SCREEN["groups"], "screen": {"arms": ["full-qlr"], "seeds": [0], "lr_of": "block"}}},
     "groups.screen.lr_of: 'block' must be an arm of groups.lr_sweep"),
    ({"groups": {**SCREEN["groups"], "screen": {"arms": ["full-qlr"], "seeds": [0]}}},
     r"groups.screen needs exactly the fields \['arms', 'seeds', 'lr_of'\]"),
    ({"groups": {**SCREEN["groups"], "screen": {"arms": ["nope"], "seeds": [0], "lr_of": "full"}}},
     "groups.screen.arms: 'nope' is not an arm"),
])
def test_bad_arms_name_the_field(change, message):
    raw = {**GRID, **change}
    with pytest.raises(ValueError, match=message):
        grid_from_dict(raw)


def test_bootstrap_interval_of_the_compute_multiplier():
    compute = {h: 1e12 * h**2 for h in (1, 2, 3, 4)}
    # other = the baseline's law at 1.5x the compute: the multiplier is 1.5 at every compute
    baseline = {h: [3.0 * c ** -0.05 + e for e in (-0.002, 0.002)] for h, c in compute.items()}
    other = {h: [3.0 * (1.5 * c) ** -0.05 + e for e in (-0.002, 0.002)] for h, c in compute.items()}
    point, low, high = bootstrap_multiplier(baseline, other, compute, 4e12, samples=500)
    assert point == pytest.approx(1.5, rel=1e-6) and low < 1.5 < high and high - low < 1.0
    # no seed noise: every resample is the data itself, a zero-width interval at the fit's answer
    exact_base = {h: [3.0 * c ** -0.05] * 2 for h, c in compute.items()}
    exact = {h: [3.0 * (1.5 * c) ** -0.05] * 2 for h, c in compute.items()}
    point, low, high = bootstrap_multiplier(exact_base, exact, compute, 4e12, samples=100)
    assert low == pytest.approx(high) == pytest.approx(point) == pytest.approx(1.5)


def test_a_baseline_that_does_not_scale_gives_no_multiplier():
    # the CPU grid's case: the baseline's loss is flat in compute (noise around 4.93), AttnRes falls with it. The
    # point estimate is a huge number that means nothing; the report says why no multiplier can be read.
    compute = {h: 1e12 * h**2 for h in (1, 2, 3, 4)}
    flat = {h: [4.93 + e, 4.93 - e] for h, e in zip(compute, (0.03, 0.02, 0.04, 0.01))}
    falling = {h: [5.0 * c ** -0.02 + e for e in (-0.01, 0.01)] for h, c in compute.items()}
    point, low, high = bootstrap_multiplier(flat, falling, compute, 4e12, samples=200)
    baseline = fit_power_law(list(compute.values()), [sum(v) / 2 for v in flat.values()])
    text = multiplier_text(point, low, high, baseline)
    assert high == math.inf and text.startswith("**not measurable here**") and f"C^{baseline.b:.4f}" in text
    # a baseline that scales keeps the number and its interval
    scaling = {h: [3.0 * c ** -0.05 + e for e in (-0.002, 0.002)] for h, c in compute.items()}
    point, low, high = bootstrap_multiplier(scaling, falling, compute, 4e12, samples=200)
    assert math.isfinite(high) and multiplier_text(point, low, high, baseline) == (
        f"**{point:.3f}x**, 90% bootstrap interval [{low:.3f}, {high:.3f}]")


def test_shipped_lr_grids_load():
    for name in ("cpu-lr", "gpu-20m"):
        grid = load_grid(REPO / "configs" / "study" / f"{name}.json")
        assert len(grid.groups["lr_sweep"]["lrs"]) >= 4 and grid.runs("lr_sweep")
        assert {"standard", "block", "full"} <= set(grid.groups["tuned"]["arms"])
    cpu = load_grid(REPO / "configs" / "study" / "cpu-lr.json")
    assert cpu.model["layers"] >= 12 and cpu.model["hidden"] >= 128
    assert cpu.train["max_steps"] * cpu.train["micro_batch_size"] * 128 >= 1_000_000
    assert len(cpu.groups["scaling"]["hidden"]) >= 4 and len(cpu.groups["scaling"]["seeds"]) >= 2
