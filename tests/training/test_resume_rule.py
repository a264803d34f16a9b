"""The resume rule (hf_attnres/training/resume.py): a resume continues exactly the recorded run. Flags left out take the
recorded values; a flag that would change the run is refused by name with both values, the run folder untouched; a
hand-edited step in trainer_state.json is refused naming the file; the provenance records every segment."""
from __future__ import annotations

import json
import shutil

import pytest

from hf_attnres.training.args import SetupError
from hf_attnres.training.checkpoints import STATE_FILE, checkpoint_dir
from hf_attnres.training.logs import INFO_FILE, data_fingerprint, read_jsonl
from tests.helpers.bad_input_fixtures import expect_refused, overwrite_json
from tests.helpers.train_fixtures import crash_after_step, prepare_tiny_dataset, train_args

# The recorded run: 4 steps, checkpoints at 2 and 4
RUN = dict(max_steps=4, save_every=2, eval_every=2, diagnostics_every=0, keep_checkpoints=2)


@pytest.fixture(scope="module")
def recorded(data, train, tmp_path_factory):
    out = tmp_path_factory.mktemp("recorded")
    train(train_args(data, out, **RUN))
    return out


@pytest.fixture(scope="module")
def other_data(tmp_path_factory):
    return prepare_tiny_dataset(tmp_path_factory.mktemp("other_data"))


def comparable(run_dir):
    return [{k: v for k, v in r.items() if k != "train/tokens_per_s"} for r in read_jsonl(run_dir / "metrics.jsonl")]


# name -> (flags changed on the resume, words the message must hold)
CONFLICTS = {
    "lr": (dict(lr=1e-3), ["--lr 0.003 (recorded) vs 0.001 (given)", "resume continues the recorded run"]),
    "weight_decay": (dict(weight_decay=0.05), ["--weight-decay 0.1 (recorded) vs 0.05 (given)"]),
    "lr_and_seed": (dict(lr=1e-3, seed=7),
                    ["--lr 0.003 (recorded) vs 0.001 (given)", "--seed 0 (recorded) vs 7 (given)"]),
    "larger_max_steps": (dict(max_steps=8), ["--max-steps 4 (recorded) vs 8 (given)", "schedule", "--init-from"]),
    "smaller_max_steps": (dict(max_steps=3), ["--max-steps 4 (recorded) vs 3 (given)"]),
    "warmup": (dict(warmup_steps=2), ["--warmup-steps 1 (recorded) vs 2 (given)"]),
    "min_lr_ratio": (dict(min_lr_ratio=0.5), ["--min-lr-ratio 0.1 (recorded) vs 0.5 (given)"]),
    "res_proj_lr": (dict(res_proj_lr=1e-2), ["--res-proj-lr unset (recorded) vs 0.01 (given)"]),
    "batch": (dict(micro_batch_size=2), ["--micro-batch-size 4 (recorded) vs 2 (given)"]),
    "residual": (dict(attn_res="full"), ["--attn-res block (recorded) vs full (given)"]),
}


@pytest.mark.parametrize("flags, named", CONFLICTS.values(), ids=CONFLICTS.keys())
def test_conflicting_flag_refused_by_name(data, train, recorded, tmp_path, flags, named):
    run = shutil.copytree(recorded, tmp_path / "run")
    expect_refused(lambda: train(train_args(data, run, **{**RUN, **flags})), named, untouched=[run, data],
                   errors=SetupError)


def test_other_data_refused_by_name(data, other_data, train, recorded, tmp_path):
    run = shutil.copytree(recorded, tmp_path / "run")
    expect_refused(lambda: train(train_args(other_data, run, **RUN)),
                   ["--data", "other data", data_fingerprint(data), data_fingerprint(other_data), str(data)],
                   untouched=[run, data, other_data], errors=SetupError)


@pytest.mark.parametrize("step, shown", [(-5, "step -5"), (10**9, "step 1000000000"), ("abc", "step 'abc'"),
                                         (1e9, "step 1000000000.0"), (2, "step 2 ")],
                         ids=["negative", "huge", "text", "float", "not_the_folder_name"])
def test_edited_step_refused_naming_the_file(data, train, recorded, tmp_path, step, shown):
    run = shutil.copytree(recorded, tmp_path / "run")
    state = checkpoint_dir(run / "checkpoints", 4) / STATE_FILE
    overwrite_json(state, step=step)
    expect_refused(lambda: train(train_args(data, run, **RUN)), [str(state), shown, "[0, 4]"], untouched=[run, data],
                   errors=SetupError)


def test_flags_left_out_take_the_recorded_values(data, train, recorded, tmp_path, monkeypatch):
    """Crash after checkpoint 2, resume giving only --data and --output-dir: it continues the recorded run (its lr,
    steps, batch, warmup...) and logs what the uninterrupted run logged, bit for bit. --data left out works too."""
    crash_after_step(3, monkeypatch, lambda: train(train_args(data, tmp_path, **RUN)))
    summary = train(["--output-dir", str(tmp_path), "--no-tensorboard", "--eval-every", "2", "--log-every", "1",
                     "--eval-batches", "1", "--diagnostics-every", "0", "--save-every", "2"])
    assert summary["start_step"] == 2 and summary["step"] == 4
    assert comparable(tmp_path) == comparable(recorded)
    info = json.loads((tmp_path / "final" / INFO_FILE).read_text())
    first, second = info["segments"]
    assert (first["start_step"], first["end_step"], second["start_step"], second["end_step"]) == (0, 2, 2, 4)
    assert "--lr" in first["argv"] and "--lr" not in second["argv"]  # the command lines as given
    assert first["data_fingerprint"] == second["data_fingerprint"] == data_fingerprint(data) == info["data_fingerprint"]
    assert info["settings"]["lr"] == 3e-3 and info["settings"]["max_steps"] == 4 and info["steps"] == 4


def test_same_flags_resume_continues(data, train, recorded, tmp_path):
    """The unchanged command on a finished run resumes at its last step: nothing retrained, a third segment."""
    run = shutil.copytree(recorded, tmp_path / "run")
    summary = train(train_args(data, run, **RUN))
    assert summary["start_step"] == 4 and summary["step"] == 4
    segments = json.loads((run / "final" / INFO_FILE).read_text())["segments"]
    assert [(s["start_step"], s["end_step"]) for s in segments] == [(0, 4), (4, 4)]


# settings field edited in trainer_state.json -> (value, words): the optimizer state restored beside it holds the rates
# it trained with, so the edited value would be recorded while the old one trains
EDITED_SETTINGS = {
    "lr": (0.3, ["settings.lr gives lr 0.3, the optimizer state holds 0.003", "groups decay, no_decay"]),
    "weight_decay": (0.5, ["settings.weight_decay gives weight_decay 0.5, the optimizer state holds 0.1"]),
    "res_proj_lr": (0.05, ["settings.res_proj_lr gives lr 0.05, the optimizer state holds 0.003", "group res_proj"]),
}


@pytest.mark.parametrize("field, edit", EDITED_SETTINGS.items(), ids=EDITED_SETTINGS.keys())
def test_settings_the_optimizer_state_contradicts_are_refused(data, train, tmp_path, monkeypatch, field, edit):
    value, named = edit
    crash_after_step(3, monkeypatch, lambda: train(train_args(data, tmp_path, **RUN)))
    state = checkpoint_dir(tmp_path / "checkpoints", 2) / STATE_FILE
    recorded = json.loads(state.read_text())
    overwrite_json(state, settings=dict(recorded["settings"], **{field: value}))
    expect_refused(lambda: train(["--output-dir", str(tmp_path), "--no-tensorboard"]),
                   [f"--resume {state.parent}", str(state), *named], untouched=[state.parent], errors=SetupError)
    assert not (tmp_path / "final").exists()  # no training_info.json records the edited value
