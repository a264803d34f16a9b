"""`attnres train-interleaved` (hf_attnres/pipeline/interleaved_train.py) as train.py behaves: a run resumed from a
mid-run checkpoint ends bit for bit where an uninterrupted one does; the non-finite guard skips updates and stops
with exit code 3 and no model; a second run on a locked output folder stops at once; the saved model is a
from_pretrained folder with the trained weights. One 2-process gloo launch runs all the training."""
import json

import pytest
import torch
import torch.multiprocessing as mp

from hf_attnres.cli.train_interleaved import main
from hf_attnres.training.state import output_lock
from tests.helpers.interleaved_worker import COPY, train_worker
from tests.helpers.other_family import assert_untrainable_folder_refused
from tests.helpers.ports import free_port

TINY = ["--layers", "4", "--block-size", "3", "--seq-len", "8", "--grad-accum", "2"]


def read_log(folder):
    return [json.loads(line) for line in (folder / "log.jsonl").read_text().splitlines()]


def checkpoint_tensors(folder, step, world=2):
    ckpt = folder / "checkpoints" / f"step-{step:08d}"
    return [torch.load(ckpt / f"pipeline_rank{r}.pt", weights_only=True) for r in range(world)]


@pytest.mark.slow
def test_resume_guard_and_saved_model(tmp_path):
    straight, split, nan = tmp_path / "straight", tmp_path / "split", tmp_path / "nan"
    runs = [
        [*TINY, "--steps", "4", "--save-every", "2", "--keep-checkpoints", "5", "--output-dir", str(straight)],
        # what a run killed after step 2 leaves: its step-2 checkpoint (the schedule spans --steps, so a shorter run
        # is another run, refused on resume)
        [COPY, str(straight / "checkpoints" / "step-00000002"), str(split / "checkpoints" / "step-00000002")],
        [*TINY, "--steps", "4", "--save-every", "2", "--keep-checkpoints", "5", "--output-dir", str(split)],  # resumes
        # a longer schedule than the checkpoint's: refused by name
        [*TINY, "--steps", "6", "--no-save", "--output-dir", str(straight)],
        [*TINY, "--steps", "8", "--lr", "1e6", "--no-save", "--output-dir", str(nan)],
    ]
    mp.spawn(train_worker, args=(2, free_port(), runs), nprocs=2)

    # resume: started at the step-2 checkpoint, then the same losses, weights and optimizer state bit for bit
    assert json.loads((tmp_path / "split.rank0.json").read_text())["start_step"] == 2
    assert [r["loss"] for r in read_log(split)] == [r["loss"] for r in read_log(straight)][2:]
    refused = json.loads((tmp_path / "straight.rank0.json").read_text())["error"]
    assert "recipe.max_steps': (4, 6)" in refused and "recipe.lr" not in refused, refused
    for mine, ref in zip(checkpoint_tensors(split, 4), checkpoint_tensors(straight, 4), strict=True):
        assert mine["model"].keys() == ref["model"].keys()
        assert all(torch.equal(mine["model"][k], ref["model"][k]) for k in ref["model"])
        assert all(torch.equal(a, b) for k, s in ref["optimizer"]["state"].items()
                   for a, b in zip(mine["optimizer"]["state"][k].values(), s.values()))
    # and the weights moved: step 2 differs from step 4
    assert not all(torch.equal(a, b) for a, b in zip(checkpoint_tensors(straight, 2)[0]["model"].values(),
                                                      checkpoint_tensors(straight, 4)[0]["model"].values()))

    # the saved model: a from_pretrained folder holding the step-4 weights of both ranks
    from hf_attnres import KimiLinearAttnResForCausalLM

    model = KimiLinearAttnResForCausalLM.from_pretrained(straight / "model")
    trained = {**checkpoint_tensors(straight, 4)[0]["model"], **checkpoint_tensors(straight, 4)[1]["model"]}
    state = model.state_dict()
    assert trained.keys() == state.keys() and all(torch.equal(state[k], trained[k]) for k in trained)
    comms = json.loads((straight / "comms.json").read_text())
    assert comms["measured_per_micro_batch"] == comms["plan_per_micro_batch"]

    # the guard: a huge learning rate; steps 2-4 make no update, the third in a row stops the run (exit code 3)
    assert json.loads((tmp_path / "nan.rank0.json").read_text()) == 3
    records = read_log(nan)
    assert [r["step"] for r in records if r.get("skipped/nonfinite")] == [2, 3, 4] and len(records) == 4
    assert not (nan / "model").exists() and not (nan / "checkpoints").exists()


def test_locked_output_folder_stops_before_any_work(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    with output_lock(tmp_path / "out"):
        with pytest.raises(SystemExit, match="in use by another run"):
            main([*TINY, "--output-dir", str(tmp_path / "out")])


def test_bad_flags_are_one_line_errors(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "1")
    with pytest.raises(SystemExit, match=">= 2 processes"):
        main(TINY)
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(SystemExit, match="--virtual-stages must be >= 1"):
        main([*TINY, "--virtual-stages", "0"])


@pytest.mark.parametrize("resume", ["never", "older"])
def test_a_new_or_older_start_never_prunes_the_folders_newer_run(tmp_path, resume):
    """`--resume never` into a folder holding another run (or a resume from an older checkpoint of it)
    would prune that run's checkpoints: refused by name, as `attnres train` refuses it, before any state changes."""
    from hf_attnres.pipeline.args import InterleavedArgs
    from hf_attnres.pipeline.train import matching_checkpoint
    from hf_attnres.utils.tiny import tiny_config

    older = str(tmp_path / "checkpoints" / "step-00000002")
    args = InterleavedArgs(output_dir=tmp_path, resume="never" if resume == "never" else older)
    config = tiny_config(mode=args.mode, block_size=args.block_size, num_layers=args.layers)
    record = {"signature": args.signature(config, 2)}
    for step in (2, 4):  # checkpoints of this very run: only the newer state stands in the way
        folder = tmp_path / "checkpoints" / f"step-{step:08d}"
        folder.mkdir(parents=True)
        (folder / "trainer_state.json").write_text(json.dumps(dict(record, step=step)))
    expected = "holds another run" if resume == "never" else "holds the newer checkpoint step-00000004"
    with pytest.raises(SystemExit, match=expected):
        matching_checkpoint(args, record)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step-00000002", "step-00000004"]


@pytest.mark.parametrize("case", ["plain", "tied"])
def test_an_untrainable_folder_is_refused_in_one_line(tmp_path, monkeypatch, case):
    assert_untrainable_folder_refused(main, tmp_path, monkeypatch, case)
