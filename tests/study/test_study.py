"""The reproduction study (`attnres study`): statistics and fit on synthetic numbers with a known answer, the grid
file's checks, resume logic (a fake runner), the report, and one tiny real run through `attnres train`."""
from __future__ import annotations

import json
import math

import pytest

from hf_attnres.cli import study
from hf_attnres.study import runner as study_runner
from hf_attnres.study.analysis import (
    PowerLaw,
    compute_multiplier,
    fit_power_law,
    mean_std,
    paired_deltas,
    paired_t,
    training_flops,
)
from hf_attnres.study.grid import grid_from_dict, load_grid, model_config
from hf_attnres.study.report import write_report
from hf_attnres.study.runner import RESULT_FILE, run_grid, run_spec
from tests.helpers.train_fixtures import REPO, prepare_tiny_dataset

# --- statistics and fit: synthetic numbers, known answers ---------------------------------------------------------


def test_mean_std_and_paired_deltas():
    stat = mean_std([1.0, 2.0, 3.0, 4.0])
    assert stat.mean == 2.5 and stat.std == pytest.approx(math.sqrt(5 / 3)) and stat.n == 4
    assert mean_std([7.0]).n == 1 and math.isnan(mean_std([7.0]).std)
    assert mean_std([]).n == 0
    # only the seeds both sides have; other - baseline
    assert paired_deltas({0: 5.0, 1: 4.0, 2: 3.0}, {0: 4.5, 2: 3.5, 3: 1.0}) == {0: -0.5, 2: 0.5}
    # deltas -1, -2, -3: mean -2, std 1, t = -2 / (1 / sqrt 3)
    assert paired_t([-1.0, -2.0, -3.0]) == pytest.approx(-2 * math.sqrt(3))
    assert math.isnan(paired_t([-1.0])) and math.isnan(paired_t([0.5, 0.5]))


def test_exact_power_law_is_recovered():
    truth = PowerLaw(1.891, -0.057)  # the paper's baseline fit
    compute = [1e17, 3e17, 1e18, 5e18]
    fit = fit_power_law(compute, [truth.loss(c) for c in compute])
    assert fit.a == pytest.approx(1.891, rel=1e-9) and fit.b == pytest.approx(-0.057, rel=1e-9)


def test_compute_multiplier_known_answers():
    baseline = PowerLaw(2.0, -0.05)
    # AttnRes reaching at C what the baseline reaches at 1.25 C: multiplier exactly 1.25, at every compute
    better = PowerLaw(2.0 * 1.25**-0.05, -0.05)
    for compute in (1e15, 1e18, 1e21):
        assert compute_multiplier(baseline, better, compute) == pytest.approx(1.25, rel=1e-12)
    # recovered through the fit as well
    compute = [1e16, 1e17, 1e18]
    fits = [fit_power_law(compute, [law.loss(c) for c in compute]) for law in (baseline, better)]
    assert compute_multiplier(*fits, 1e17) == pytest.approx(1.25, rel=1e-9)
    # equal slopes: (a_other / a_base)^(1/b); the paper's Block vs baseline intercepts at its baseline slope
    paper = compute_multiplier(PowerLaw(1.891, -0.057), PowerLaw(1.870, -0.057), 1e18)
    assert paper == pytest.approx((1.870 / 1.891) ** (1 / -0.057), rel=1e-12) and 1.2 < paper < 1.25
    # a worse model needs less baseline compute; a flat baseline can never match
    assert compute_multiplier(baseline, PowerLaw(2.1, -0.05), 1e17) < 1
    assert math.isnan(compute_multiplier(PowerLaw(2.0, 0.01), better, 1e17))
    # a nearly flat baseline reaches a far lower loss only past float range: inf, not an OverflowError
    assert compute_multiplier(PowerLaw(4.93, -1e-4), PowerLaw(4.0, -0.01), 1e12) == math.inf


@pytest.mark.parametrize("compute,loss,message", [
    ([1e3, 1e3], [2.0, 1.0], "two distinct"),
    ([1e3, 1e4], [2.0], "compute values but"),
    ([1e3, -1e4], [2.0, 1.0], "> 0"),
    ([1e3, 1e4], [2.0, float("nan")], "finite"),
])
def test_fit_rejects_bad_input(compute, loss, message):
    with pytest.raises(ValueError, match=message):
        fit_power_law(compute, loss)


def test_training_flops():
    assert training_flops(1_000_000, 2_000) == 6 * 1_000_000 * 2_000


# --- the grid file ------------------------------------------------------------------------------------------------

GRID = {
    "name": "t",
    "data": {"dir": "data/x"},
    "model": {"layers": 3, "hidden": 16, "block_size": 2, "heads": 2},
    "train": {"max_steps": 2, "micro_batch_size": 2, "seq_len": 16, "warmup_steps": 1, "eval_points": 1,
              "eval_batches": 1},
    "groups": {
        "main": {"modes": ["standard", "block", "full"], "seeds": [0, 1]},
        "ablations": {"base": "full", "ablations": ["static", "sigmoid", "no_key_norm"], "seeds": [0]},
        "block_size": {"block_sizes": [1, 2], "seeds": [0]},
        "scaling": {"modes": ["standard", "block"], "hidden": [8, 16, 24], "seeds": [0]},
    },
}


def with_changes(**sections):
    raw = json.loads(json.dumps(GRID))
    for section, change in sections.items():
        if change is None:
            raw.pop(section)
        elif isinstance(raw.get(section), dict) and isinstance(change, dict):
            raw[section].update(change)
        else:
            raw[section] = change
    return raw


def test_grid_expansion_shares_runs_between_groups():
    grid = grid_from_dict(GRID)
    ids = [k.id for k in grid.runs()]
    assert len(ids) == len(set(ids))
    # main: 6; ablations: 3 new (its base is main's full seed 0); sweep: S=1 new; scaling: h8, h24 x 2 modes new
    assert len(ids) == 6 + 3 + 1 + 4
    assert ids[:3] == ["standard-L3-h16-seed0", "block-S2-L3-h16-seed0", "full-L3-h16-seed0"]  # main first
    assert "full-static-L3-h16-seed0" in ids and "block-S1-L3-h16-seed0" in ids
    config = model_config(grid, grid.key("full", 0, ablation="static"), vocab_size=300)
    assert config.attn_res_static_mixing and config.attn_res_mode == "full" and config.pad_token_id is None
    assert set(config.layer_types) == {"full_attention"} and config.hidden_size == 16


@pytest.mark.parametrize("raw,message", [
    (with_changes(groups={"main": {"modes": ["standard", "blocky"], "seeds": [0]}}), "groups.main.modes"),
    (with_changes(groups={"main": {"modes": ["standard"], "seeds": [0, 0]}}), "without repeats"),
    (with_changes(groups={"main": {"modes": ["standard"]}}), "groups.main needs exactly"),
    (with_changes(groups={"mian": {"modes": ["standard"], "seeds": [0]}}), "unknown group 'mian'"),
    (with_changes(groups={"scaling": {"modes": ["standard"], "hidden": [8, 16], "seeds": [0]}}), "at least three"),
    (with_changes(groups={"ablations": {"base": "standard", "ablations": ["static"], "seeds": [0]}}),
     "groups.ablations.base"),
    (with_changes(groups={"ablations": {"base": "full", "ablations": ["tanh"], "seeds": [0]}}),
     "groups.ablations.ablations"),
    (with_changes(groups={"main": {"modes": ["standard"], "seeds": [-1]}}), "groups.main.seeds"),
    (with_changes(model={"layers": 0}), "model.layers"),
    (with_changes(model={"hidden": 10}), "model.hidden"),
    (with_changes(model={"attention": "kda"}), "model.attention"),
    (with_changes(model={"width": 3}), "unknown model fields"),
    (with_changes(train={"lr": -1}), "train.lr"),
    (with_changes(train={"max_steps": 0}), "train.max_steps"),
    (with_changes(train={"extra_args": "--foo"}), "train.extra_args"),
    (with_changes(train={"metric": "first-384"}), r"train.metric must be one of \['whole-split', 'eval-batches'\]"),
    (with_changes(data=None), "'data'"),
    (dict(GRID, groups={}), "'groups'"),
    (dict(GRID, extra=1), "unknown top-level"),
])
def test_bad_grid_raises_naming_the_field(raw, message):
    with pytest.raises(ValueError, match=message):
        grid_from_dict(raw, "grid.json")


def test_grid_file_errors(tmp_path):
    with pytest.raises(ValueError, match="file not found"):
        load_grid(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_grid(tmp_path / "bad.json")
    (tmp_path / "deep.json").write_text('{"groups": ' * 100_000 + "1" + "}" * 100_000)  # RecursionError before
    with pytest.raises(ValueError, match=r"--grid .*deep\.json: JSON nested more than"):
        load_grid(tmp_path / "deep.json")


@pytest.mark.parametrize("name", ["cpu", "smoke"])
def test_shipped_grids_load(name):
    grid = load_grid(REPO / "configs" / "study" / f"{name}.json")
    assert grid.runs() and "main" in grid.groups


# --- resume logic, with a fake runner -----------------------------------------------------------------------------


def fake_record(grid, key, flops_scale=1.0):
    """A result whose loss follows an exact power law in compute, 0.02 lower with AttnRes, seed noise 0.01."""
    flops = 1e12 * flops_scale * (key.hidden / 8) ** 2
    loss = 3.0 * (flops / 1e12) ** -0.05 - (0.02 if key.mode != "standard" else 0.0) + 0.01 * key.seed
    return dict(id=key.id, spec=run_spec(grid, key), **key.to_dict(), val_loss=loss,
                val_curve=[[1, loss + 0.5], [2, loss]], train_loss=loss, params=int(flops / 6e3),
                flop_params=int(flops / 6e3), tokens=1000, flops=flops, wall_s=0.1)


class FakeRunner:
    def __init__(self, fail=()):
        self.calls, self.fail = [], set(fail)

    def __call__(self, grid, key, out, meta, threads):
        self.calls.append(key.id)
        if key.id in self.fail:
            raise RuntimeError(f"{key.id}: crashed")
        record = fake_record(grid, key)
        run_dir = out / "runs" / key.id
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / RESULT_FILE).write_text(json.dumps(record))
        return record


@pytest.fixture
def fake_data(tmp_path, monkeypatch):
    monkeypatch.setattr(study_runner, "ensure_data", lambda grid: {"vocab_size": 300, "seq_len": 16})
    return tmp_path


def test_resume_skips_finished_and_redoes_crashed_runs(fake_data):
    grid, out = grid_from_dict(GRID), fake_data / "study"
    total = len(grid.runs())
    crashing = FakeRunner(fail={"block-S2-L3-h16-seed1"})
    records, errors = run_grid(grid, out, jobs=2, runner=crashing)
    assert len(crashing.calls) == total and len(records) == total - 1
    assert len(errors) == 1 and "block-S2-L3-h16-seed1: crashed" in errors[0]
    again = FakeRunner()
    records, errors = run_grid(grid, out, runner=again)
    assert again.calls == ["block-S2-L3-h16-seed1"] and len(records) == total and not errors
    third = FakeRunner()
    run_grid(grid, out, runner=third)
    assert third.calls == []
    # a record made with other training settings is redone
    changed = grid_from_dict(with_changes(train={"max_steps": 3}))
    fourth = FakeRunner()
    run_grid(changed, out, runner=fourth, only=changed.runs("main"))
    assert sorted(fourth.calls) == sorted(k.id for k in changed.runs("main"))


def test_report_on_synthetic_records(fake_data):
    grid, out = grid_from_dict(GRID), fake_data / "study"
    records, _ = run_grid(grid, out, runner=FakeRunner())
    path = write_report(grid, records, fake_data / "report", header="- test header\n")
    text = path.read_text()
    # every AttnRes run is exactly 0.02 below its same-seed baseline
    assert "| block (S=2) | 2/2 |" in text and "-0.0200 +- 0.0000 |" in text  # no t for identical deltas
    assert "C^-0.0500" in text  # the baseline's losses are an exact power law with b = -0.05
    # the multiplier at the geometric middle of the grid's compute, from the per-mode fits
    computes = [1e12 * (h / 8) ** 2 for h in (8, 16, 24)]
    middle = math.exp(sum(map(math.log, computes)) / 3)
    fits = [fit_power_law(computes, [fake_record(grid, grid.key(m, 0, hidden=h))["val_loss"] for h in (8, 16, 24)])
            for m in ("standard", "block")]
    assert f"**{compute_multiplier(*fits, middle):.3f}x**" in text and compute_multiplier(*fits, middle) > 1
    for name in ("study_main.png", "study_block_size.png", "study_scaling.png", "runs.csv"):
        assert (fake_data / "report" / name).stat().st_size > 0
    assert len((fake_data / "report" / "runs.csv").read_text().splitlines()) == len(records) + 1


def test_cli_errors_and_help(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        study.main(["--help"])
    assert exit_info.value.code == 0 and "resumable" in capsys.readouterr().out.lower()
    with pytest.raises(SystemExit, match="file not found"):
        study.main(["--grid", str(tmp_path / "nope.json")])
    with pytest.raises(SystemExit, match="--jobs"):
        study.main(["--jobs", "0"])


# --- one tiny real run through attnres train ----------------------------------------------------------------------


def test_tiny_real_run_then_resume(tmp_path, monkeypatch):
    data = prepare_tiny_dataset(tmp_path / "d", seq_len=16)
    raw = with_changes(data={"dir": str(data)}, model={"layers": 2, "hidden": 8},
                       groups={"main": {"modes": ["block"], "seeds": [0]}})
    for group in ("ablations", "block_size", "scaling"):
        raw["groups"].pop(group)
    grid_file = tmp_path / "grid.json"
    grid_file.write_text(json.dumps(raw))
    out = tmp_path / "study"
    assert study.main(["--grid", str(grid_file), "--output-dir", str(out)]) == 0
    run_dir = out / "runs" / "block-S2-L2-h8-seed0"
    record = json.loads((run_dir / RESULT_FILE).read_text())
    assert math.isfinite(record["val_loss"]) and record["tokens"] == 2 * 2 * 16 and record["params"] > 0
    # the compared loss is the final model's on the whole split (the curve's evals read one batch of 2 sequences)
    validation = json.loads((data / "meta.json").read_text())["num_sequences"]["validation"]
    assert record["metric"] == "whole-split" and record["val_sequences"] == validation > 2
    assert record["val_loss"] == record["heldout_loss"] != record["val_curve"][-1][1]
    assert record["curve_sequences"] == 2
    # the study keeps the record and the final model (to evaluate again), not the checkpoints
    assert not (run_dir / "train" / "checkpoints").exists()
    assert (run_dir / "train" / "final" / "model.safetensors").is_file()
    text = (out / "RESULTS.md").read_text()
    assert "| block (S=2) | 1/1 |" in text
    assert f"the final model's mean loss per token on the whole validation split ({validation} sequences)" in text

    def must_not_train(*args):
        raise AssertionError("a finished run was trained again")

    monkeypatch.setattr(study_runner, "run_one", must_not_train)
    assert study.main(["--grid", str(grid_file), "--output-dir", str(out)]) == 0


def test_committed_grid_says_its_metric_covers_the_first_384_sequences(tmp_path):
    """The committed LR study compares the final eval's first 24 x 16 sequences (its records were made so); its
    records still match the grid, and the report says what the metric covers."""
    grid = load_grid(REPO / "configs" / "study" / "cpu-lr.json")
    assert grid.train["metric"] == "eval-batches"
    keys, done = study_runner.grid_runs(grid, REPO / "docs" / "results" / "study-cpu-lr")
    assert len(done) >= 128
    path = write_report(grid, list(done.values())[:3], tmp_path / "report")
    assert "on the **first 384" in path.read_text() and "not the whole split" in path.read_text()


@pytest.mark.parametrize("argv,message", [
    (["--only", "block"], "--only block needs --lr and --seed"),
    (["--only", "block", "--lr", "3e-3"], "--only block needs --seed"),
    (["--lr", "3e-3", "--seed", "1"], "--lr, --seed apply to one run: give --only ARM too"),
    (["--only", "blok", "--lr", "3e-3", "--seed", "1"], "--only blok: not an arm of .*known: block, full, standard"),
    (["--only", "block", "--lr", "0", "--seed", "1"], r"--lr must be a number in \(0, 1\] .*, got 0"),
    (["--only", "block", "--lr", "nan", "--seed", "1"], r"--lr must be a number in \(0, 1\] .*, got nan"),
    (["--only", "block", "--lr", "1e300", "--seed", "1"], r"--lr must be a number in \(0, 1\] .*, got 1e\+300"),
    (["--only", "block", "--lr", "3e-3", "--seed", "-1"], "--seed must be >= 0"),
    (["--only", "block", "--lr", "3e-3", "--seed", "1", "--hidden", "10"],
     r"--hidden must be a positive multiple of 2 \* model.heads \(4\), got 10"),
    (["--only", "block", "--lr", "3e-3", "--seed", "1", "--dry-run"], "writes no report: drop --dry-run"),
])
def test_one_run_bad_flags(tmp_path, argv, message):
    grid_file = tmp_path / "grid.json"
    grid_file.write_text(json.dumps(GRID))
    with pytest.raises(SystemExit, match=message):
        study.main(["--grid", str(grid_file), "--output-dir", str(tmp_path / "out"), *argv])
    assert not (tmp_path / "out").exists()


def test_one_arm_at_one_lr_and_seed(tmp_path, capsys):
    """`--only ARM --lr X --seed N` trains that one run, with the grid's id and spec (a later grid run skips it)."""
    data = prepare_tiny_dataset(tmp_path / "d", seq_len=16)
    raw = with_changes(data={"dir": str(data)}, model={"layers": 2, "hidden": 8})
    grid_file = tmp_path / "grid.json"
    grid_file.write_text(json.dumps(raw))
    out = tmp_path / "study"
    argv = ["--grid", str(grid_file), "--output-dir", str(out), "--only", "block", "--lr", "0.01", "--seed", "3"]
    assert study.main(argv) == 0
    run_dir = out / "runs" / "block-lr0.01-L2-h8-seed3"
    record = json.loads((run_dir / RESULT_FILE).read_text())
    grid = load_grid(grid_file)
    assert record["spec"] == run_spec(grid, grid.arm_key("block", 0.01, 3)) and record["lr"] == 0.01
    assert sorted(p.name for p in out.joinpath("runs").iterdir()) == ["block-lr0.01-L2-h8-seed3"]
    assert (run_dir / "train" / "final" / "model.safetensors").is_file() and not (out / "RESULTS.md").exists()
    said = capsys.readouterr().out
    assert f"block-lr0.01-L2-h8-seed3: val loss {record['val_loss']:.4f} (whole-split" in said
    assert study.main(argv) == 0 and "0 to train" in capsys.readouterr().out  # done: not trained again
