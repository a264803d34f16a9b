"""Bad input to scripts/train.py (in-process main()) and scripts/train_pipeline.py's checks: non-finite or impossible
flags, damaged --resume checkpoints, pickled code planted in a checkpoint (it must never run), two runs in one
--output-dir. Every case: one message naming the flag or file, the data and checkpoint untouched."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from hf_attnres.training.args import SetupError
from hf_attnres.training.checkpoints import latest_checkpoint
from hf_attnres.training.state import LOCK_FILE, load_weights_only, output_lock
from tests.helpers.bad_input_fixtures import damaged_copy, expect_refused, nan_weight, truncate
from tests.helpers.prepared_damage import PREPARED_DAMAGE
from tests.helpers.train_fixtures import train_args

FAST = dict(max_steps=2, save_every=2, eval_every=0, diagnostics_every=0, no_final_model=True)


@pytest.fixture(scope="module")
def checkpoint(prepared_data, train, tmp_path_factory):
    out = tmp_path_factory.mktemp("bad_inputs_run")
    train(train_args(prepared_data, out, **dict(FAST, save_every=1)))  # two checkpoints: step 1 and step 2
    return latest_checkpoint(out / "checkpoints")


FLAG_CASES = {
    "lr_nan": (dict(lr="nan"), ["--lr", "finite"]),
    "lr_inf": (dict(lr="inf"), ["--lr", "finite"]),
    "lr_infinity_spelled": (dict(lr="Infinity"), ["--lr", "finite"]),
    "res_proj_lr_nan": (dict(res_proj_lr="nan"), ["--res-proj-lr", "finite"]),
    "min_lr_ratio_nan": (dict(min_lr_ratio="nan"), ["--min-lr-ratio"]),
    "weight_decay_inf": (dict(weight_decay="inf"), ["--weight-decay", "finite"]),
    "grad_clip_nan": (dict(grad_clip="nan"), ["--grad-clip", "finite"]),
    "res_proj_weight_decay_nan": (dict(res_proj_weight_decay="nan"), ["--res-proj-weight-decay", "finite"]),
    "res_proj_weight_decay_negative": (dict(res_proj_weight_decay=-0.1), ["--res-proj-weight-decay", ">= 0"]),
    "lr_zero": (dict(lr=0), ["--lr", "> 0"]),
    "block_size_zero": (dict(block_size=0), ["--block-size"]),
    "max_steps_zero": (dict(max_steps=0), ["--max-steps"]),
    # a group's peak LR out of (0, 1]: the multiplier's product with --lr, or a rate given outright
    "multiplier_1e30": (dict(attn_res_lr_multiplier=1e30), ["--attn-res-lr-multiplier 1e+30", "3e+27", "1e-12, 1]"]),
    "multiplier_1e308": (dict(attn_res_lr_multiplier=1e308), ["--attn-res-lr-multiplier 1e+308", "1e-12, 1]"]),
    "multiplier_just_above": (dict(attn_res_lr_multiplier=400), ["--attn-res-lr-multiplier 400", "1.2"]),
    "multiplier_underflows": (dict(attn_res_lr_multiplier=1e-320), ["--attn-res-lr-multiplier", "1e-12, 1]"]),
    "lr_below_rounding": (dict(lr=1e-20), ["--lr must be in [1e-12, 1]", "1e-20"]),
    "multiplier_inf": (dict(attn_res_lr_multiplier="inf"), ["--attn-res-lr-multiplier", "finite"]),
    "multiplier_zero": (dict(attn_res_lr_multiplier=0), ["--attn-res-lr-multiplier", "> 0"]),
    "lr_absurd": (dict(lr=5), ["--lr must be in [1e-12, 1]", "got 5"]),
    "res_proj_lr_absurd": (dict(res_proj_lr=1e10), ["--res-proj-lr must be in [1e-12, 1]", "1e+10"]),
    "res_proj_lr_zero": (dict(res_proj_lr=0), ["--res-proj-lr", "> 0"]),
    "weight_decay_absurd": (dict(weight_decay=1e3), ["--weight-decay 1000", "lr x decay = 3", "below 1"]),
    "res_proj_weight_decay_absurd": (dict(res_proj_weight_decay=1e6), ["--res-proj-weight-decay 1e+06", "below 1"]),
}


@pytest.mark.parametrize("flags, named", FLAG_CASES.values(), ids=FLAG_CASES.keys())
def test_bad_flag_refused_before_any_work(prepared_data, train, tmp_path, flags, named):
    out = tmp_path / "run"
    expect_refused(lambda: train(train_args(prepared_data, out, **{**FAST, **flags})), named,
                   untouched=[prepared_data], absent=[out], errors=SetupError)


@pytest.mark.parametrize("damage, named", PREPARED_DAMAGE.values(), ids=PREPARED_DAMAGE.keys())
def test_prepared_data_disagreeing_with_meta_refused(prepared_data, train, tmp_path, damage, named):
    data = damaged_copy(prepared_data, tmp_path, damage)
    out = tmp_path / "run"
    expect_refused(lambda: train(train_args(data, out, **FAST)), named, untouched=[data], absent=[out],
                   errors=SetupError)


def test_output_dir_that_is_a_file(prepared_data, train, tmp_path):
    (tmp_path / "run").write_text("my notes")
    expect_refused(lambda: train(train_args(prepared_data, tmp_path / "run", **FAST)), ["--output-dir", "file"],
                   untouched=[tmp_path / "run"], errors=SetupError)


class Payload:
    """Unpickling this creates `marker`: proof that code from the file ran."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _plant(path: Path, marker: Path) -> None:
    torch.save({"state": Payload(marker)}, path)


def _scramble(path: Path) -> None:
    path.write_bytes(b"\x00garbage" * 10)


# name -> (damage(checkpoint folder, marker path), words)
RESUME_CASES = {
    "truncated_model_weights": (lambda c, m: truncate(c / "model.safetensors"), ["model.safetensors", "truncated"]),
    "truncated_rng_state": (lambda c, m: truncate(c / "random_states_0.pkl"), ["random_states_0.pkl"]),
    "truncated_optimizer": (lambda c, m: truncate(c / "optimizer.bin"), ["optimizer.bin"]),
    "scrambled_scheduler": (lambda c, m: _scramble(c / "lr_scheduler.pt"), ["lr_scheduler.pt"]),
    "missing_scheduler": (lambda c, m: (c / "lr_scheduler.pt").unlink(), ["lr_scheduler.pt", "missing"]),
    "state_invalid_json": (lambda c, m: (c / "trainer_state.json").write_text("{"), ["trainer_state.json", "JSON"]),
    "pickle_in_scheduler": (lambda c, m: _plant(c / "lr_scheduler.pt", m), ["lr_scheduler.pt", "never loaded"]),
    "pickle_in_rng_state": (lambda c, m: _plant(c / "random_states_0.pkl", m), ["random_states_0.pkl"]),
    "pickle_in_optimizer": (lambda c, m: _plant(c / "optimizer.bin", m), ["--resume"]),
    "nan_model_weights": (lambda c, m: nan_weight(c / "model.safetensors"), ["model.safetensors", "non-finite"]),
    "inf_model_weights": (lambda c, m: nan_weight(c / "model.safetensors", float("inf")), ["model.safetensors", "inf"]),
}


@pytest.mark.parametrize("damage, named", RESUME_CASES.values(), ids=RESUME_CASES.keys())
def test_damaged_or_hostile_resume_refused(prepared_data, train, checkpoint, tmp_path, damage, named):
    folder = shutil.copytree(checkpoint, tmp_path / "ckpt")
    marker = tmp_path / "PWNED"
    damage(folder, marker)
    out = tmp_path / "run"
    expect_refused(lambda: train(train_args(prepared_data, out, resume=folder, **FAST)), named,
                   untouched=[folder, prepared_data], errors=SetupError)
    assert not marker.exists(), "code planted in the checkpoint ran"
    assert not list((out / "checkpoints").glob("step-*")) if out.exists() else True


def test_deepspeed_rng_state_is_never_unpickled(tmp_path):
    marker = tmp_path / "PWNED"
    _plant(tmp_path / "rng_state_0.pt", marker)
    expect_refused(lambda: load_weights_only(tmp_path / "rng_state_0.pt"), ["rng_state_0.pt", "never loaded"])
    assert not marker.exists()
    torch.save(dict(torch=torch.get_rng_state(), python=(3, tuple(range(625)), None)), tmp_path / "ok.pt")
    assert load_weights_only(tmp_path / "ok.pt")["torch"].dtype == torch.uint8  # plain data still loads


def test_deepspeed_state_files_are_never_unpickled(tmp_path):
    """DeepSpeed's checkpoint engine is switched to weights_only=True loading before resume."""
    from types import SimpleNamespace

    from hf_attnres.training.state import read_deepspeed_weights_only

    marker = tmp_path / "PWNED"
    _plant(tmp_path / "mp_rank_00_model_states.pt", marker)
    engine = SimpleNamespace(load=None)
    read_deepspeed_weights_only(engine)
    expect_refused(lambda: engine.load(str(tmp_path / "mp_rank_00_model_states.pt")),
                   ["mp_rank_00_model_states.pt", "never loaded"])
    assert not marker.exists()
    torch.save({"module": {"w": torch.ones(2)}, "ds_version": "0.18"}, tmp_path / "ok.pt")
    assert engine.load(str(tmp_path / "ok.pt"))["module"]["w"].sum() == 2


def test_second_run_in_a_locked_output_dir_refused(prepared_data, train, tmp_path):
    out = tmp_path / "run"
    with output_lock(out):  # a live run holds the folder
        expect_refused(lambda: train(train_args(prepared_data, out, **FAST)), ["--output-dir", "in use", "pid"],
                       errors=SetupError)
    assert not (out / "checkpoints").exists()


def test_stale_lock_of_a_dead_run_is_recovered(prepared_data, train, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / LOCK_FILE).write_text("pid 999999 on some-host, since 2020-01-01 00:00:00")  # its process is gone
    summary = train(train_args(prepared_data, out, **FAST))
    assert summary["step"] == 2 and latest_checkpoint(out / "checkpoints") is not None


PIPELINE_CASES = {
    "lr_nan": (["--lr", "nan"], ["--lr", "finite"]),
    "weight_decay_inf": (["--weight-decay", "inf"], ["--weight-decay", "finite"]),
    "grad_clip_nan": (["--grad-clip", "nan"], ["--grad-clip"]),
    "model_without_config": (["--model", "{empty}"], ["--model", "config.json"]),
    "model_missing": (["--model", "{missing}"], ["--model", "no such folder"]),
}


@pytest.mark.parametrize("argv, named", PIPELINE_CASES.values(), ids=PIPELINE_CASES.keys())
def test_pipeline_flags_refused(tmp_path, argv, named):
    from hf_attnres.cli.train_pipeline import build_parser
    from hf_attnres.pipeline.args import PipelineArgs
    from hf_attnres.pipeline.train import check_args

    (tmp_path / "empty").mkdir()
    argv = [a.format(empty=tmp_path / "empty", missing=tmp_path / "missing") for a in argv]
    args = PipelineArgs(**vars(build_parser().parse_args(argv)))
    expect_refused(lambda: check_args(args, 2), named, errors=SystemExit)


def _deepspeed_checkpoint(folder: Path) -> Path:
    """The file layout DeepSpeedEngine.save writes (contents: plain tensors)."""
    (folder / "deepspeed").mkdir(parents=True)
    (folder / "trainer_state.json").write_text('{"step": 2, "signature": {}}')
    torch.save({"module": {"w": torch.ones(2)}}, folder / "deepspeed" / "mp_rank_00_model_states.pt")
    torch.save({"optimizer_state_dict": {}}, folder / "deepspeed" / "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    torch.save({"torch": torch.get_rng_state()}, folder / "rng_state_0.pt")
    return folder


DEEPSPEED_RESUME_CASES = {
    "truncated_model_states": (lambda c: truncate(c / "deepspeed" / "mp_rank_00_model_states.pt"),
                               ["mp_rank_00_model_states.pt", "truncated"]),
    "no_deepspeed_files": (lambda c: shutil.rmtree(c / "deepspeed"), ["deepspeed", "no DeepSpeed state"]),
    "truncated_rng_state": (lambda c: truncate(c / "rng_state_0.pt"), ["rng_state_0.pt"]),
    "missing_rng_state": (lambda c: (c / "rng_state_0.pt").unlink(), ["rng_state_0.pt", "missing"]),
}


@pytest.mark.parametrize("damage, named", DEEPSPEED_RESUME_CASES.values(), ids=DEEPSPEED_RESUME_CASES.keys())
def test_damaged_deepspeed_checkpoint_named(tmp_path, damage, named):
    from hf_attnres.training.state import check_checkpoint

    folder = _deepspeed_checkpoint(tmp_path / "ckpt")
    check_checkpoint(folder, deepspeed=True)  # intact: passes
    damage(folder)
    expect_refused(lambda: check_checkpoint(folder, deepspeed=True), named, untouched=[folder], errors=ValueError)


# --- what a run may delete or replace: only what a run wrote, never a newer state (hf_attnres/training/state.py,
# checkpoints.py). Each folder below holds files a run would replace (final/) or clean up (checkpoints/.tmp-*).


def _users_final(out: Path) -> None:
    (out / "final").mkdir(parents=True)
    (out / "final" / "model.safetensors").write_text("the user's own model")


def _users_partial_checkpoint(out: Path) -> None:
    (out / "checkpoints" / ".tmp-mine").mkdir(parents=True)
    (out / "checkpoints" / ".tmp-mine" / "notes.txt").write_text("mine")


@pytest.mark.parametrize("plant, named", [(_users_final, ["final"]), (_users_partial_checkpoint, ["checkpoints"])],
                         ids=["users_final", "users_tmp_checkpoint"])
def test_files_no_run_wrote_are_never_deleted(prepared_data, train, tmp_path, plant, named):
    out = tmp_path / "mine"
    plant(out)
    expect_refused(lambda: train(train_args(prepared_data, out, **FAST)), ["--output-dir", *named],
                   untouched=[out], absent=[out / LOCK_FILE], errors=SetupError)


def test_output_dir_dot_holding_a_users_final_refused(prepared_data, train, tmp_path, monkeypatch):
    _users_final(tmp_path)
    monkeypatch.chdir(tmp_path)
    expect_refused(lambda: train(train_args(prepared_data, Path("."), **FAST)), ["--output-dir", "final"],
                   untouched=[tmp_path / "final"], absent=[tmp_path / LOCK_FILE], errors=SetupError)


def test_other_files_in_the_output_dir_are_left_alone(prepared_data, train, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "notes.txt").write_text("kept")
    assert train(train_args(prepared_data, out, **FAST))["step"] == 2
    assert (out / "notes.txt").read_text() == "kept"


def _finished_run(checkpoint: Path, tmp_path: Path) -> Path:
    """A copy of the module's finished run folder (two checkpoints, the lock file of a run)."""
    return shutil.copytree(checkpoint.parent.parent, tmp_path / "finished")


def test_resume_never_into_a_finished_run_refused(prepared_data, train, checkpoint, tmp_path):
    out = _finished_run(checkpoint, tmp_path)
    expect_refused(lambda: train(train_args(prepared_data, out, resume="never", **dict(FAST, max_steps=1))),
                   ["--output-dir", "checkpoints up to step-00000002", "--resume auto"], untouched=[out],
                   errors=SetupError)


def test_resume_from_an_older_checkpoint_never_overwrites_the_newer(prepared_data, train, checkpoint, tmp_path):
    out = _finished_run(checkpoint, tmp_path)
    older = out / "checkpoints" / "step-00000001"
    expect_refused(lambda: train(train_args(prepared_data, out, resume=older, **FAST)),
                   ["--resume", "newer checkpoint step-00000002"], untouched=[out], errors=SetupError)


def test_resume_from_another_folder_into_a_run_refused(prepared_data, train, checkpoint, tmp_path):
    out = _finished_run(checkpoint, tmp_path)
    expect_refused(lambda: train(train_args(prepared_data, out, resume=checkpoint, **FAST)),
                   ["--resume", "another folder", "new --output-dir"], untouched=[out, checkpoint], errors=SetupError)


# --- the numeric guard (hf_attnres/utils/finite_weights.py): NaN weights are named where a run reads or writes them


def test_resume_from_nan_latest_checkpoint_refused(prepared_data, train, checkpoint, tmp_path):
    out = _finished_run(checkpoint, tmp_path)
    name = nan_weight(out / "checkpoints" / "step-00000002" / "model.safetensors")
    expect_refused(lambda: train(train_args(prepared_data, out, **FAST)),
                   ["step-00000002", "model.safetensors", name, "NaN"], untouched=[out], errors=SetupError)


def test_init_from_nan_weights_refused(prepared_data, train, saved_model, tmp_path):
    model = shutil.copytree(saved_model, tmp_path / "model")
    name = nan_weight(model)
    expect_refused(lambda: train(train_args(prepared_data, tmp_path / "run", init_from=model, model_size=None,
                                            **FAST)),
                   ["model.safetensors", name, "non-finite"], untouched=[model], absent=[tmp_path / "run"],
                   errors=SetupError)
