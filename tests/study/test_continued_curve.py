"""The budget curve (hf_attnres/study/continued/curve.py, `attnres continued-curve`): records of continued grids at
several budgets read back as paired deltas with per-sequence and over-seed CIs, the verdict per budget, the zero
crossing of the deltas against log(tokens), the plot; bad input refused in one line."""
import json
import math

import pytest
from transformers import LlamaConfig

from hf_attnres.cli.continued_curve import main
from hf_attnres.study.continued.config import load_continued
from hf_attnres.study.continued.curve import ArmDelta, crossing, crossing_line, per_sequence_ci, trend
from hf_attnres.study.runner import RESULT_FILE, run_spec
from hf_attnres.study.study_args import GPU_GRID_TOKENS, default_grid


def test_per_sequence_ci_matches_hand_computation():
    base, other = [1.0, 2.0, 3.0], [1.1, 2.3, 3.2]  # deltas 0.1, 0.3, 0.2: mean 0.2, std 0.1, t(0.975, 2) 4.302653
    low, high = per_sequence_ci(base, other)
    half = 4.302653 * 0.1 / math.sqrt(3)
    assert (low, high) == pytest.approx((0.2 - half, 0.2 + half), rel=1e-5)
    assert all(math.isnan(v) for v in per_sequence_ci(None, other))  # a record without per-sequence losses


def rows(deltas_by_tokens: dict) -> list[ArmDelta]:
    return [ArmDelta("block", "block", tokens, {s: (d, math.nan, math.nan) for s, d in enumerate(deltas)})
            for tokens, deltas in deltas_by_tokens.items()]


def test_a_closing_gap_crosses_where_its_line_does():
    # delta = 0.04 - 0.02 * (log10 tokens - 4): zero at 1e6 tokens, seeds +-0.002 around it
    found = crossing(rows({10**4: [0.042, 0.038, 0.040], 10**5: [0.022, 0.018, 0.020], 10**6: [0.002, -0.002]}))
    assert found["tokens"] == pytest.approx(1e6, rel=0.05)
    assert found["slope"] == pytest.approx(-0.02, rel=0.05)
    assert found["low"] < 1e6 < found["high"] and found["high"] < 1e7


def test_a_flat_curve_resolves_no_crossing():
    """Deltas below zero and nearly flat: the line leans towards zero, but the refits disagree on the direction."""
    found = crossing(rows({10**4: [-0.0011, -0.0005, -0.0002], 10**5: [-0.0001, -0.0010]}))
    assert found is not None and not math.isfinite(found["high"])
    line = crossing_line("gated", found, 2_457_600)
    assert "no crossing resolved" in line and "to never" in line and "2.5M tokens" in line
    assert "about" not in line  # no point estimate is quoted


def test_a_widening_gap_has_no_crossing():
    widening = rows({10**4: [0.02, 0.03], 10**5: [0.04, 0.05]})
    assert crossing(widening) is None
    assert crossing(rows({10**4: [0.02, 0.03]})) is None  # one budget: no line
    line = crossing_line("block", None, None, trend(widening))
    assert "no crossing ahead" in line and "the gap widens" in line and "+0.0200 nats per tenfold" in line


def test_a_growing_lead_is_not_reported_as_a_widening_gap():
    """Deltas below zero moving further below: no crossing either, but the arm is ahead, and the line says so."""
    growing = rows({10**4: [-0.001, -0.002], 10**5: [-0.004, -0.005]})
    assert crossing(growing) is None
    line = crossing_line("gated", None, None, trend(growing))
    assert "the lead grows" in line and "lower loss" in line and "widens" not in line and "-0.0030 nats" in line
    assert trend(rows({10**4: [0.01]})) is None


def test_the_gpu_grid_budget_is_the_grid_files():
    raw = json.loads(default_grid("continued-gpu.json").read_text())["train"]
    assert GPU_GRID_TOKENS == raw["max_steps"] * raw["micro_batch_size"] * raw.get("grad_accum", 1) * raw["seq_len"]


@pytest.fixture
def source(tmp_path):
    folder = tmp_path / "tiny-llama"
    LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=2048).save_pretrained(folder)
    return folder


def write_grid(path, steps: int):
    path.write_text(json.dumps({
        "name": path.stem, "source": "tiny", "data": {"dir": "unused"},
        "train": {"max_steps": steps, "micro_batch_size": 2, "seq_len": 16, "warmup_steps": 1},
        "arms": {"block_q10": {"mode": "block", "train": {"attn_res_lr_multiplier": 10}}},
        "groups": {"lr_sweep": {"arms": ["standard", "block_q10"], "lrs": {"standard": [3e-4], "block_q10": [1e-4]},
                                "seeds": [0]},
                   "tuned": {"arms": ["standard", "block_q10"], "seeds": [0, 1]}}}))
    return path


def write_run(grid_file, runs_root, source, arm, lr, seed, item_loss):
    cg = load_continued(grid_file, lambda _: source)
    key = cg.grid.arm_key(arm, lr, seed)
    run_dir = runs_root / cg.grid.name / "runs" / key.id
    run_dir.mkdir(parents=True)
    loss = sum(item_loss) / len(item_loss)
    (run_dir / RESULT_FILE).write_text(json.dumps(dict(
        id=key.id, spec=run_spec(cg.grid, key), heldout_loss=loss, heldout_bpb=loss / 3, train_loss=loss,
        val_loss=loss, item_loss=item_loss)))


def test_the_report_pairs_each_budgets_seeds(tmp_path, source, capsys):
    grids = [write_grid(tmp_path / "curve-a.json", 4), write_grid(tmp_path / "curve-b.json", 16)]
    runs = tmp_path / "runs"
    base = [2.0, 2.2, 2.4, 2.6]
    # budget a: block worse by 0.05 and 0.03 (seeds 0, 1); budget b: by 0.01 at seed 0 only (seed 1 not trained)
    for grid, gaps in ((grids[0], {0: 0.05, 1: 0.03}), (grids[1], {0: 0.01})):
        for seed in (0, 1):
            write_run(grid, runs, source, "standard", 3e-4, seed, base)
        for seed, gap in gaps.items():
            write_run(grid, runs, source, "block_q10", 1e-4, seed,
                      [b + gap + 0.01 * (i % 2) - 0.005 for i, b in enumerate(base)])
    out = tmp_path / "report"
    assert main([*map(str, grids), "--runs-root", str(runs), "--report-dir", str(out), "--past", "100"],
                resolve_source=lambda _: source) == 0
    summary = json.loads((out / "curve.json").read_text())
    a = summary["curve-a"]["rows"][0]
    assert summary["curve-a"]["tokens"] == 4 * 2 * 16
    assert [a["seeds"][s]["delta"] for s in ("0", "1")] == pytest.approx([0.05, 0.03])
    low, high = a["seeds"]["0"]["per_sequence_ci"]
    assert low < 0.05 < high and high - low < 0.05
    assert a["ci"][0] == pytest.approx(0.04)
    assert list(summary["curve-b"]["rows"][0]["seeds"]) == ["0"]  # only the paired seed
    crossing_b = summary["crossings"]["block, depth x10"]
    assert crossing_b is not None and 128 < crossing_b["tokens"]  # the gap closes from 0.04 towards 0.01
    text = (out / "curve.md").read_text()
    verdicts = [line.split(" | ")[-1].rstrip(" |") for line in text.splitlines() if line.startswith("| 128 ")]
    assert verdicts == ["no measurable difference"]  # two seeds: a t interval of 0.04 +- 0.127 holds zero
    assert [line.split(" | ")[-1].rstrip(" |") for line in text.splitlines() if line.startswith("| 512 ")] == [
        "no verdict (one seed)"]
    section = text.split("### Verdict per budget")[1].split("###")[0]
    verdict_lines = [line for line in section.splitlines() if line.startswith("- ")]
    assert [("128 tokens" in line, "512 tokens" in line) for line in verdict_lines] == [(True, False), (False, True)]
    assert (out / "curve.png").stat().st_size > 0
    assert str(out / "curve.md") in capsys.readouterr().out


@pytest.mark.parametrize("argv, named", [
    (["missing.json"], "missing.json: no such grid file"),
    (["--past", "0"], "--past must be a positive number of tokens"),
])
def test_bad_input_is_one_line(tmp_path, monkeypatch, argv, named):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        main([*argv, "--report-dir", str(tmp_path / "out")])
    assert named in str(stop.value)
    assert not (tmp_path / "out").exists()


def test_the_committed_curve_grids_differ_only_in_budget(source):
    """The three budgets compare the same arms at the same settings: data, continued settings, each arm's mode,
    multiplier and LR alike; only the steps (x4 per budget) and the warmup (a tenth of the steps) differ."""
    grids = [load_continued(default_grid(name), lambda _: source) for name in
             ("curve-40k.json", "curve-160k.json", "curve-640k.json")]
    steps = [cg.grid.train["max_steps"] for cg in grids]
    assert steps == [steps[0], 4 * steps[0], 16 * steps[0]]
    assert [cg.grid.train["warmup_steps"] for cg in grids] == [s // 10 for s in steps]
    budget_free = [{k: v for k, v in cg.grid.train.items() if k not in ("max_steps", "warmup_steps", "log_every")}
                   for cg in grids]
    assert all(train == budget_free[0] for train in budget_free)
    assert all(cg.grid.data == grids[0].grid.data and cg.continued == grids[0].continued for cg in grids)
    first = grids[0].grid
    tuned = first.groups["tuned"]["arms"]
    best = {arm: sorted(first.groups["lr_sweep"]["lrs"][arm]) for arm in tuned}
    for cg in grids[1:]:
        assert set(cg.grid.groups["tuned"]["arms"]) <= set(tuned)
        for arm in cg.grid.groups["tuned"]["arms"]:
            assert cg.grid.arms.get(arm) == first.arms.get(arm), arm
            assert cg.grid.groups["lr_sweep"]["lrs"][arm][0] in best[arm], arm
