"""The main job's per-arm learning rates are the committed study's bests, for the model the study trained."""
from __future__ import annotations

from pathlib import Path

import pytest

from hf_attnres.study.grid import best_lrs, load_grid, model_config
from hf_attnres.study.runner import finished_records
from hf_attnres.study.tuned_lrs import BEST, BEST_LOSS, STUDY_GRID, STUDY_RECORDS, STUDY_SETTING, study_lr

REPO = Path(__file__).resolve().parents[2]


def test_table_is_the_studys_best_recomputed_from_its_records():
    """Each entry is `grid.best_lrs` of the committed records (a study that moves a best fails here), and each
    provenance names a record that exists, with its loss."""
    grid = load_grid(REPO / STUDY_GRID)
    records = finished_records(grid, REPO / Path(STUDY_RECORDS).parent, grid.sweep_runs())
    best = best_lrs(grid, records)
    for (mode, hidden, size), (lr, arm, group) in BEST.items():
        assert best[arm if group == "lr_sweep" else (arm, hidden)] == lr, (mode, hidden, size)
        assert grid.arms[arm]["mode"] == mode and grid.arms[arm]["block_size"] == size
        found, provenance = study_lr(mode, hidden, size)
        run = grid.arm_key(arm, lr, 0, hidden=hidden).id
        assert found == lr and provenance["best_run"] == f"{STUDY_RECORDS}/{run}/result.json"
        assert "nearest" not in provenance and provenance["group"] == group
        assert records[run]["val_loss"] == BEST_LOSS[run] == provenance["best_run_loss"]
        assert (REPO / provenance["best_run"]).is_file()
    assert study_lr("standard", 128, 3)[0] == 0.012 and study_lr("block", 128, 3)[0] == 0.003


def test_main_job_defaults_are_the_studys_setting():
    """The main job's defaults and model config are those of the study's runs (so its bests apply), except the
    special-token ids the main job sets for evaluation."""
    from hf_attnres.cli.main_job import build_parser
    from hf_attnres.study.main_job import pair_config
    from hf_attnres.study.tuned_lrs import differences

    args = build_parser().parse_args([])
    assert differences(args) == []
    grid = load_grid(REPO / STUDY_GRID)
    assert (args.layers, args.hidden_size, args.block_size) == (grid.model["layers"], grid.model["hidden"],
                                                                grid.model["block_size"])
    assert (args.steps, args.micro_batch_size) == (grid.train["max_steps"], grid.train["micro_batch_size"])
    assert args.steps // 10 == grid.train["warmup_steps"] == STUDY_SETTING["warmup_steps"]
    ours = pair_config(4096, 12, 128, 3, eos_token_id=0)
    theirs = model_config(grid, grid.arm_key("block", 0.003, 0), 4096).to_dict()
    special = ("pad_token_id", "bos_token_id", "eos_token_id")
    assert {k: v for k, v in ours.items() if k not in special} == {k: v for k, v in theirs.items() if k not in special}


@pytest.mark.parametrize("mode,hidden,size,lr,note", [
    ("block", 64, 2, 0.003, "did not sweep block S=2 at hidden 64: its best at hidden 128, S=2"),
    ("block", 128, 5, 0.003, "did not sweep block S=5 at hidden 128: its best at hidden 128, S=3"),
    ("standard", 32, 0, 0.012, "did not sweep standard at hidden 32: its best at hidden 128"),
])
def test_settings_the_study_did_not_sweep_get_the_nearest_said_so(mode, hidden, size, lr, note):
    found, provenance = study_lr(mode, hidden, size)
    assert found == lr and provenance["nearest"].endswith(note)


def test_differences_name_each_flag():
    from hf_attnres.cli.main_job import build_parser
    from hf_attnres.study.tuned_lrs import differences

    args = build_parser().parse_args(["--steps", "60", "--layers", "4"])
    assert differences(args) == ["--layers 4 (study: 12)", "--steps 60 (study: 500)",
                                 "--warmup-steps 6 (study: 50)"]
