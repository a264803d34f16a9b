"""`attnres train-interleaved` (hf_attnres/pipeline/interleaved_train.py) as train.py behaves: a run resumed from a
mid-run checkpoint ends bit for bit where an uninterrupted one does; the non-finite guard skips updates and stops
with exit code 3 and no model; a second run on a locked output folder stops at once; the saved model is a
from_pretrained folder with the trained weights; a damaged rank file stops every rank with the same line; a Llama
Block AttnRes model trains with the losses of one process. One 2-process gloo launch runs all the training."""
import json

import pytest
import torch
import torch.multiprocessing as mp

from hf_attnres.cli.train_interleaved import main
from hf_attnres.training.state import output_lock
from tests.helpers.interleaved_worker import COPY, TRUNCATE, train_worker
from tests.helpers.other_family import assert_plain_folder_refused
from tests.helpers.ports import free_port

TINY = ["--family", "kimi_linear", "--layers", "4", "--block-size", "3", "--seq-len", "8", "--grad-accum", "2"]


def read_log(folder):
    return [json.loads(line) for line in (folder / "log.jsonl").read_text().splitlines()]


def checkpoint_tensors(folder, step, world=2):
    ckpt = folder / "checkpoints" / f"step-{step:08d}"
    return [torch.load(ckpt / f"pipeline_rank{r}.pt", weights_only=True) for r in range(world)]


def save_llama_block_model(folder):
    from tests.families.tiny import attn_res_model
    from tests.helpers.model_factory import perturb_attn_res

    model = attn_res_model("llama", "block", block_size=3, num_hidden_layers=4, tie_word_embeddings=False)
    perturb_attn_res(model).save_pretrained(folder)
    return model


def save_overflowing_model(folder):
    """A model whose logits overflow to inf (a huge lm_head): every step's loss is non-finite."""
    from tests.helpers.model_factory import tiny_model

    model = tiny_model("block", 3, 4)
    with torch.no_grad():
        model.lm_head.weight.mul_(1e38)
    model.save_pretrained(folder)
    return folder


def single_process_loss(model, step: int, seed=0, micro_batches=2, micro_batch=2, seq_len=8) -> float:
    """The mean loss over a step's micro-batches (the pipeline's synthetic data) of the model in one process."""
    from hf_attnres.pipeline.data import synthetic_micro_batch

    model.train()
    with torch.no_grad():
        losses = [model(ids, labels=ids).loss for ids in (
            synthetic_micro_batch(seed, step, micro, 0, micro_batch, seq_len, model.config.vocab_size)
            for micro in range(micro_batches))]
    return torch.stack(losses).mean().item()


@pytest.mark.slow
def test_resume_guard_and_saved_model(tmp_path):
    straight, split, nan = tmp_path / "straight", tmp_path / "split", tmp_path / "nan"
    damaged, llama, llama_out = tmp_path / "damaged", tmp_path / "llama", tmp_path / "llama-run"
    llama_model = save_llama_block_model(llama)
    overflowing = save_overflowing_model(tmp_path / "overflowing")
    damaged_file = damaged / "checkpoints" / "step-00000002" / "pipeline_rank1.pt"
    runs = [
        [*TINY, "--steps", "4", "--save-every", "2", "--keep-checkpoints", "5", "--output-dir", str(straight)],
        # what a run killed after step 2 leaves: its step-2 checkpoint (the schedule spans --steps, so a shorter run
        # is another run, refused on resume)
        [COPY, str(straight / "checkpoints" / "step-00000002"), str(split / "checkpoints" / "step-00000002")],
        [*TINY, "--steps", "4", "--save-every", "2", "--keep-checkpoints", "5", "--output-dir", str(split)],  # resumes
        # a longer schedule than the checkpoint's: refused by name
        [*TINY, "--steps", "6", "--no-save", "--output-dir", str(straight)],
        ["--model", str(overflowing), "--seq-len", "8", "--grad-accum", "2", "--steps", "8", "--no-save",
         "--output-dir", str(nan)],
        # rank 1's file of a checkpoint damaged: rank 0's is intact, and rank 1 alone cannot read its own
        [COPY, str(straight / "checkpoints" / "step-00000002"), str(damaged / "checkpoints" / "step-00000002")],
        [TRUNCATE, str(damaged_file)],
        [*TINY, "--steps", "4", "--save-every", "2", "--output-dir", str(damaged)],
        ["--model", str(llama), "--seq-len", "8", "--grad-accum", "2", "--steps", "2", "--output-dir", str(llama_out)],
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

    # the guard: logits that overflow; steps 1-3 make no update, the third in a row stops the run (exit code 3)
    assert json.loads((tmp_path / "nan.rank0.json").read_text()) == 3
    records = read_log(nan)
    assert [r["step"] for r in records if r.get("skipped/nonfinite")] == [1, 2, 3] and len(records) == 3
    assert not (nan / "model").exists() and not (nan / "checkpoints").exists()

    # the damaged file: both ranks stop with the same one line naming it, before any step
    verdicts = [json.loads((tmp_path / f"damaged.rank{r}.json").read_text()) for r in range(2)]
    assert verdicts[0] == verdicts[1] and verdicts[0]["error"].startswith(f"error: {damaged_file}: "), verdicts
    assert "\n" not in verdicts[0]["error"] and not (damaged / "log.jsonl").exists()

    # another family: a Llama Block AttnRes model's first loss is one process's, and the trained model loads as Llama
    from hf_attnres.families.llama import LlamaAttnResForCausalLM

    assert read_log(llama_out)[0]["loss"] == pytest.approx(single_process_loss(llama_model, 0), rel=1e-5)
    trained = LlamaAttnResForCausalLM.from_pretrained(llama_out / "model")
    assert trained.state_dict().keys() == llama_model.state_dict().keys()
    assert not torch.equal(trained.model.embed_tokens.weight, llama_model.model.embed_tokens.weight)


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
    config = tiny_config(mode=args.mode, block_size=args.block_size, num_layers=args.layers, family=args.family)
    record = {"signature": args.signature(config, 2)}
    for step in (2, 4):  # checkpoints of this very run: only the newer state stands in the way
        folder = tmp_path / "checkpoints" / f"step-{step:08d}"
        folder.mkdir(parents=True)
        (folder / "trainer_state.json").write_text(json.dumps(dict(record, step=step)))
    expected = "holds another run" if resume == "never" else "holds the newer checkpoint step-00000004"
    with pytest.raises(SystemExit, match=expected):
        matching_checkpoint(args, record)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step-00000002", "step-00000004"]


def test_a_plain_family_checkpoint_is_refused_in_one_line(tmp_path, monkeypatch):
    assert_plain_folder_refused(main, tmp_path, monkeypatch)
