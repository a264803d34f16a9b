"""One recipe, every engine: the same tiny model (`--model-size tiny`: 4 layers, Block AttnRes, MoE),
data and recipe flags trained 4 steps by every engine give the same losses as one process:

- `attnres train` in one process (the reference, micro-batch 4);
- DDP (accelerate, under torchrun: micro-batch 1 x 2 accumulation x 2 processes), DeepSpeed ZeRO 1, 2, 3;
- `attnres train-pipeline` (DeepSpeed 1F1B, 2 stages) and `attnres train-interleaved` (2 ranks x 2 virtual stages),
  both from the reference's initial weights (saved here) on the same data order;
- FSDP2: the documented launch, `accelerate launch --config_file configs/accelerate/fsdp2_cpu.yaml scripts/train.py`.

Every run records the same recipe (betas, groups, schedule, clipping, data order) in its provenance. One torchrun
launch runs all but the reference and FSDP2 (which needs its own launcher).

Tolerance: relative 1e-5 on every step's loss. The engines differ only in the order of fp32 sums (gradient
all-reduce, micro-batch accumulation, sharded clipping norms): measured 2026-12-03, at most 1.8e-7 relative (two fp32
ulps of a loss near 5.2) at any step of any engine, most steps bit-equal. A recipe difference is far larger: torch's
default betas (0.9, 0.999) move step 4's loss by 1.8e-4 relative (step 3's by 6e-5), 18x the tolerance (checked
below, one process).
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import pytest

from tests.helpers.ports import free_port
from tests.helpers.train_fixtures import REPO, train_args, train_losses
from tests.test_readme import block_commands, code_blocks

pytestmark = pytest.mark.slow
STEPS = 4
RECIPE = dict(lr=3e-3, res_proj_lr=1e-2, warmup_steps=1, min_lr_ratio=0.1, weight_decay=0.1, grad_clip=1.0, seed=0)
TRAIN = dict(model_size="tiny", family="kimi_linear", max_steps=STEPS, eval_every=0, diagnostics_every=0, save_every=0,
             no_final_model=True, **RECIPE)
TOLERANCE = dict(rel=1e-5, abs=0)
# Global batch 4 sequences everywhere: micro-batch x accumulation x data-parallel processes
ZERO_FLAGS = {1: dict(micro_batch_size=2), 2: dict(micro_batch_size=1, grad_accum=2), 3: dict(micro_batch_size=2)}
DOCUMENTED_FSDP2 = ["accelerate", "launch", "--config_file", "configs/accelerate/fsdp2_cpu.yaml", "scripts/train.py",
                    "--model-size", "tiny", "--family", "kimi_linear", "--micro-batch-size", "2"]


def cli(flags: dict) -> list[str]:
    """Flags (underscores for dashes) as a command line."""
    argv = []
    for key, value in flags.items():
        argv += [f"--{key.replace('_', '-')}"] + ([] if value is True else [str(value)])
    return argv


def zero3_config(tmp_path):
    config = json.loads((REPO / "configs" / "deepspeed" / "zero3.json").read_text())
    config["zero_optimization"]["stage3_param_persistence_threshold"] = 0  # every parameter sharded
    path = tmp_path / "zero3_all_sharded.json"
    path.write_text(json.dumps(config))
    return path


def initial_model(data, folder):
    """The reference run's initial weights (`attnres train --model-size tiny --family kimi_linear --seed 0`
    builds the same), saved for the pipeline engines' --model."""
    from argparse import Namespace

    from hf_attnres.training.data import load_prepared
    from hf_attnres.training.loop import build_model
    from hf_attnres.training.models import build_config

    config = build_config("tiny", None, None, None, load_prepared(data)[2], "kimi_linear")
    build_model(config, Namespace(seed=RECIPE["seed"], init_from=None, gradient_checkpointing=False)) \
        .save_pretrained(folder)
    return folder


def pipeline_flags(data, model, out):
    """The pipeline commands' flags: the same recipe, 2 micro-batches of 2 per step (one data-parallel replica)."""
    return cli(dict(model=model, data=data, steps=STEPS, micro_batch_size=2, grad_accum=2, no_save=True,
                    output_dir=out, **RECIPE))


def run(command, env, timeout=500):
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    return result.stdout


@pytest.fixture(scope="module")
def engines(data, train, tmp_path_factory):
    """{engine: its per-step losses, its recorded recipe}; the reference under 'one process'."""
    root = tmp_path_factory.mktemp("engines")
    env = dict(os.environ, DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    out = {name: root / name for name in ("single", "ddp", "zero1", "zero2", "zero3", "pipeline", "interleaved",
                                          "fsdp2")}
    train(train_args(data, out["single"], micro_batch_size=4, **TRAIN))
    model = initial_model(data, root / "init")
    runs = [["train", train_args(data, out["ddp"], micro_batch_size=1, grad_accum=2, **TRAIN)]]
    for stage, flags in ZERO_FLAGS.items():
        config = zero3_config(root) if stage == 3 else REPO / "configs" / "deepspeed" / f"zero{stage}.json"
        runs.append(["train", train_args(data, out[f"zero{stage}"], deepspeed=config, **flags, **TRAIN)])
    runs.append(["train-pipeline", pipeline_flags(data, model, out["pipeline"])])
    runs.append(["train-interleaved", [*pipeline_flags(data, model, out["interleaved"]), "--virtual-stages", "2"]])
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", f"--master_port={free_port()}"]
    stdout = run([*torchrun, str(REPO / "tests" / "helpers" / "engines_worker.py"), json.dumps(runs)], env)
    assert stdout.count("ok ") == 2 * len(runs), stdout
    # FSDP2 exactly as docs/TRAINING.md launches it (+ a free port, the tiny data and this test's recipe flags)
    launch = [sys.executable, "-m", "accelerate.commands.launch", *DOCUMENTED_FSDP2[2:4],
              "--main_process_port", str(free_port()), *DOCUMENTED_FSDP2[4:]]
    extra = {k: v for k, v in TRAIN.items() if k not in ("model_size", "family")}
    run([*launch, *train_args(data, out["fsdp2"], model_size=None, micro_batch_size=None, **extra)], env)
    return {name: (losses(name, folder), recorded_recipe(name, folder)) for name, folder in out.items()}


def losses(name, folder) -> list[float]:
    if name in ("pipeline", "interleaved"):
        return [json.loads(line)["loss"] for line in (folder / "log.jsonl").read_text().splitlines()]
    return train_losses(folder)


def recorded_recipe(name, folder) -> dict:
    if name in ("pipeline", "interleaved"):
        return json.loads((folder / "run.json").read_text())["recipe"]
    state = folder / "checkpoints" / f"step-{STEPS:08d}" / "trainer_state.json"
    return json.loads(state.read_text())["recipe"]


@pytest.mark.parametrize("engine", ["ddp", "zero1", "zero2", "zero3", "pipeline", "interleaved", "fsdp2"])
def test_engine_trains_like_one_process(engines, engine):
    (reference, reference_recipe), (ours, recipe) = engines["single"], engines[engine]
    assert len(ours) == len(reference) == STEPS
    assert ours == pytest.approx(reference, **TOLERANCE), [abs(a / b - 1) for a, b in zip(ours, reference)]
    assert recipe == reference_recipe
    assert recipe["betas"] == [0.9, 0.95] and recipe["res_proj_lr"] == RECIPE["res_proj_lr"]


def test_tolerance_sees_a_recipe_change(engines, data, train, tmp_path, monkeypatch):
    """torch's default betas (not the recipe's), one process: step 4's loss moves by far
    more than the tolerance, so the comparison above would catch an engine training with another recipe."""
    monkeypatch.setattr("hf_attnres.training.recipe.BETAS", (0.9, 0.999))
    train(train_args(data, tmp_path / "betas", micro_batch_size=4, **TRAIN))
    other, reference = train_losses(tmp_path / "betas"), engines["single"][0]
    assert recorded_recipe("betas", tmp_path / "betas")["betas"] == [0.9, 0.999]
    assert other[:2] == reference[:2]  # the betas act from the second update on (step 3's loss)
    assert abs(other[-1] / reference[-1] - 1) > 10 * TOLERANCE["rel"], (other, reference)


def test_documented_fsdp2_launch_is_the_docs():
    """The command the FSDP2 run above uses is a command line of docs/TRAINING.md's bash blocks, word for word."""
    commands = [block_commands(block) for block in code_blocks("bash", (REPO / "docs" / "TRAINING.md").read_text())]
    assert DOCUMENTED_FSDP2 in [shlex.split(command) for block in commands for command in block]
