"""A 2-stage DeepSpeed pipeline (torchrun, gloo, 1F1B `train_batch`, ZeRO-1) trains exactly like one process.

One torchrun launch runs `hf_attnres.cli.train_pipeline` for Kimi Linear's block, full and standard mode and a Llama
Block AttnRes model (startup is most of the cost).
Each run: one SGD step over 4 micro-batches (the 1F1B schedule interleaves them) from a saved tiny model; then here,
single-process training of the same model on the same micro-batches. SGD makes the update proportional to the
gradient, so comparing the updated weights (read back from the pipeline's sharded checkpoint) compares every gradient
of every stage. One step only: a second step would compare MoE top-k routing decisions that float-order noise may flip.
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hf_attnres import KimiLinearAttnResForCausalLM
from hf_attnres.core.depth_layout import DepthLayout
from hf_attnres.families.registry import family_classes
from hf_attnres.folders.model_family import family_of_folder
from hf_attnres.pipeline.data import synthetic_micro_batch
from tests.families.tiny import attn_res_model
from tests.helpers.model_factory import perturb_attn_res, random_ids, tiny_model
from tests.helpers.other_family import assert_plain_folder_refused
from tests.helpers.remote_loading import load_in_clean_process, write_tokenizer

ROOT = Path(__file__).resolve().parents[2]
MODES = ("block", "full", "standard")
# Kimi Linear in each mode; upcycled families' Block AttnRes models (Gemma 3: tied embeddings, soft-capped logits)
RUNS = (*MODES, "llama-block", "gemma3_text-block")
STEPS, GRAD_ACCUM, MICRO_BATCH, SEQ_LEN, LR, SEED = 1, 4, 2, 16, 0.5, 3
# runs several trainings in one process pair: `main(argv)` for each argv list in the JSON argument
LAUNCH = ("import json, sys; from hf_attnres.cli.train_pipeline import main; "
          "[main(argv) for argv in json.loads(sys.argv[1])]")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("torchrun") is None, reason="torchrun not on PATH"),
]


def run_args(model_dir: Path, out_dir: Path) -> list[str]:
    return ["--model", str(model_dir), "--output-dir", str(out_dir), "--steps", str(STEPS), "--grad-accum",
            str(GRAD_ACCUM), "--micro-batch-size", str(MICRO_BATCH), "--seq-len", str(SEQ_LEN), "--optimizer", "sgd",
            "--lr", str(LR), "--seed", str(SEED), "--zero-stage", "1", "--report-comms",
            "--weight-decay", "0", "--grad-clip", "0"]  # plain SGD: the update is -lr x gradient


@pytest.fixture(scope="module")
def pipeline_runs(tmp_path_factory):
    """{run: (initial model folder, run output folder)} after one torchrun launch of all the runs."""
    root = tmp_path_factory.mktemp("pipeline")
    runs, argvs = {}, []
    for mode in RUNS:
        model_dir, out_dir = root / f"init-{mode}", root / f"run-{mode}"
        if mode.endswith("-block"):  # the 2 stages' boundary lies inside a block (Gemma 3 keeps its 4 layer types)
            layers, size = (4, 3) if mode.startswith("gemma3") else (5, 2)
            model = attn_res_model(mode.removesuffix("-block"), "block", block_size=size, num_hidden_layers=layers)
            perturb_attn_res(model).save_pretrained(model_dir)
        else:
            tiny_model(mode=mode, block_size=2, num_layers=5).save_pretrained(model_dir)
            write_tokenizer(model_dir)  # the run's output carries the --model folder's tokenizer
        runs[mode] = (model_dir, out_dir)
        # full mode also checkpoints activations (DeepSpeed recomputes each decoder layer in backward)
        checkpointing = ["--activation-checkpoint-interval", "1"] if mode == "full" else []
        argvs.append(run_args(model_dir, out_dir) + checkpointing)
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1"}
    cmd = ["torchrun", "--standalone", "--nproc_per_node", "2", "--no-python", sys.executable, "-c", LAUNCH,
           json.dumps(argvs)]
    result = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    return runs


def model_class(model_dir: Path):
    """The AttnRes causal LM class of the folder's family."""
    return family_classes(family_of_folder(model_dir)[0])[1]


def single_process_training(model_dir: Path):
    """Per-step losses and the final model of plain training: mean loss over the micro-batches, SGD step."""
    model = model_class(model_dir).from_pretrained(model_dir).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    losses = []
    for step in range(STEPS):
        optimizer.zero_grad()
        micro = [synthetic_micro_batch(SEED, step, m, 0, MICRO_BATCH, SEQ_LEN, model.config.vocab_size)
                 for m in range(GRAD_ACCUM)]
        loss = sum(model(input_ids=ids, labels=ids, use_cache=False).loss for ids in micro) / GRAD_ACCUM
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses, model


@pytest.mark.parametrize("mode", RUNS)
def test_pipeline_matches_single_process(pipeline_runs, mode):
    model_dir, out_dir = pipeline_runs[mode]
    ref_losses, ref_model = single_process_training(model_dir)
    logged = [json.loads(line)["loss"] for line in (out_dir / "log.jsonl").read_text().splitlines()]
    assert logged == pytest.approx(ref_losses, rel=1e-5, abs=1e-6)

    initial = dict(model_class(model_dir).from_pretrained(model_dir).named_parameters())
    trained = dict(model_class(out_dir / "model").from_pretrained(out_dir / "model").named_parameters())
    reference = dict(ref_model.named_parameters())
    assert trained.keys() == reference.keys()
    for name, ref in reference.items():
        ref_update, update = ref.detach() - initial[name], trained[name].detach() - initial[name]
        torch.testing.assert_close(update, ref_update, rtol=1e-3, atol=1e-6, msg=lambda m: f"{name}: {m}")
    # gradients crossed the boundary: the first stage's weights (embedding, layer 0) moved
    for name in ("model.embed_tokens.weight", "model.layers.0.mlp.down_proj.weight"):
        assert (trained[name] - initial[name]).abs().max() > 1e-4, name


@pytest.mark.parametrize("mode", RUNS)
def test_boundary_sends_exactly_the_needed_sources(pipeline_runs, mode):
    """Measured bytes per boundary == the depth sources the next stage reads (+ DeepSpeed's one metadata buffer)."""
    model_dir, out_dir = pipeline_runs[mode]
    config = model_class(model_dir).config_class.from_pretrained(model_dir)
    report = json.loads((out_dir / "comms.json").read_text())
    (row,) = report["boundaries"]
    layer = report["parts"][1] - 1  # pipe layer 0 is the embedding
    tensor_bytes = MICRO_BATCH * SEQ_LEN * config.hidden_size * 4 * STEPS * GRAD_ACCUM
    assert row["tensors"] == DepthLayout.of(config).sources_before_layers()[layer]
    assert row["activation_bytes"] == row["gradient_bytes"] == row["minimum_bytes"] == row["tensors"] * tensor_bytes
    assert row["standard_bytes"] == tensor_bytes
    assert 0 < row["metadata_bytes"] <= 1024  # sent once: the boundary's shapes are fixed
    if mode.endswith("block"):
        assert layer % config.attn_res_block_size != 0, "the test wants a boundary inside a block (partial sum crosses)"


def test_output_folder_loads_with_auto_classes_without_the_package(pipeline_runs, tmp_path):
    """Like a save_pretrained folder: code files, auto_map and tokenizer, loaded where attnres is not installed."""
    _, out_dir = pipeline_runs["block"]
    ids = random_ids()
    with torch.no_grad():
        expected = KimiLinearAttnResForCausalLM.from_pretrained(out_dir / "model").eval()(ids).logits
    result = load_in_clean_process(out_dir / "model", ids, tmp_path / "run", tmp_path / "hf", tokenizer=True)
    torch.testing.assert_close(result["logits"], expected)
    assert result["tokens"] == [5, 7, 9]


def test_a_plain_family_checkpoint_is_refused_in_one_line(tmp_path, monkeypatch):
    from hf_attnres.cli.train_pipeline import main

    assert_plain_folder_refused(main, tmp_path, monkeypatch)


# each argv in turn; a refusal (SystemExit) is appended as one line to the rank's own file in the folder sys.argv[2]
# (the ranks share one stdout, where their writes interleave mid-line) and the next run goes on;
# a ["truncate", path] entry halves the file on rank 0, between runs (the process group is the runs' own)
RESUME_LAUNCH = ("import json, os, sys\nimport torch.distributed as dist\n"
                 "from hf_attnres.cli.train_pipeline import main\n"
                 "for argv in json.loads(sys.argv[1]):\n"
                 "    if argv[0] == 'truncate':\n"
                 "        if dist.get_rank() == 0:\n"
                 "            os.truncate(argv[1], os.path.getsize(argv[1]) // 2)\n"
                 "        dist.barrier()\n        continue\n"
                 "    try:\n        main(argv)\n    except SystemExit as error:\n"
                 "        with open(os.path.join(sys.argv[2], 'refused-' + os.environ['RANK']), 'a') as out:\n"
                 "            out.write(str(error).replace(chr(10), ' ') + chr(10))\n")


def test_resume_continues_bit_for_bit_and_other_settings_are_refused(tmp_path):
    """A 4-step run checkpointing every 2 steps; a run resumed from its step-2 checkpoint (in another folder) logs the
    same losses for steps 3-4 and saves the same weights; the same folder with --steps 6 is refused by name (the
    schedule spans --steps), its checkpoints untouched. Resuming from a checkpoint whose rank-0 RNG state, or whose
    DeepSpeed file of the second stage's layer, is truncated stops both ranks with the same one line naming the file
    (no rank goes on into a collective the other left)."""
    from safetensors.torch import load_file

    straight, split, damaged = tmp_path / "straight", tmp_path / "split", tmp_path / "damaged"
    step2, step4 = (straight / "checkpoints" / f"step-0000000{step}" for step in (2, 4))
    layer_file = step2 / "deepspeed" / "layer_05-model_states.pt"  # decoder layer 4: the second stage's
    flags = ["--steps", "4", "--save-every", "2", "--seq-len", "8", "--lr", "1e-2"]
    argvs = [[*flags, "--output-dir", str(straight)],
             [*flags, "--output-dir", str(split), "--resume", str(straight / "checkpoints" / "step-00000002")],
             ["--steps", "6", *flags[2:], "--output-dir", str(straight), "--no-save"],
             ["truncate", str(step4 / "rng_state_0.pt")],
             [*flags, "--output-dir", str(damaged), "--resume", str(step4)],
             ["truncate", str(layer_file)],
             [*flags, "--output-dir", str(damaged), "--resume", str(step2)]]
    # the eager mix in every run: the fused CPU kernel, built on first use, could be ready for one run and not for
    # the other, and its last bits differ from the eager path's
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "ATTNRES_BACKEND": "torch"}
    cmd = ["torchrun", "--standalone", "--nproc_per_node", "2", "--no-python", sys.executable, "-c", RESUME_LAUNCH,
           json.dumps(argvs), str(tmp_path)]
    result = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]

    def losses(folder):
        return [(r["step"], r["loss"]) for r in map(json.loads, (folder / "log.jsonl").read_text().splitlines())]

    assert [step for step, _ in losses(split)] == [3, 4]
    assert losses(split) == losses(straight)[2:]
    shards = sorted(p.name for p in (straight / "model").glob("*.safetensors"))
    assert shards and shards == sorted(p.name for p in (split / "model").glob("*.safetensors"))
    for name in shards:
        mine, ref = load_file(split / "model" / name), load_file(straight / "model" / name)
        assert mine.keys() == ref.keys() and all(torch.equal(mine[k], ref[k]) for k in ref), name
    refused = {rank: (tmp_path / f"refused-{rank}").read_text().splitlines() for rank in "01"}
    assert [len(lines) for lines in refused.values()] == [3, 3], refused
    # the settings refusal, then each damaged file: the same line on both ranks, naming it; nothing else went wrong
    assert refused["0"] == refused["1"], refused
    settings, rng_damaged, layer_damaged = refused["0"]
    assert "recipe.max_steps': (4, 6)" in settings, settings
    assert rng_damaged.startswith(f"error: {step4 / 'rng_state_0.pt'}: "), rng_damaged
    assert layer_damaged.startswith(f"error: {layer_file}: "), layer_damaged
    assert "Traceback" not in result.stderr and "Connection closed" not in result.stderr, result.stderr[-3000:]
    assert not (damaged / "model").exists()
    assert sorted(p.name for p in (straight / "checkpoints").iterdir()) == ["step-00000002", "step-00000004"]


@pytest.mark.parametrize("flags, named", [(["--keep-checkpoints", "0"], "--keep-checkpoints must be >= 1, got 0"),
                                          (["--save-every", "-1"], "--save-every must be >= 0, got -1")],
                         ids=["keep_checkpoints", "save_every"])
def test_checkpoint_flags_out_of_range_are_one_line(tmp_path, monkeypatch, flags, named):
    from hf_attnres.cli.train_pipeline import main

    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(SystemExit, match=named):
        main([*flags, "--output-dir", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()
