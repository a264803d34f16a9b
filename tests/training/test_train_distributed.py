"""The train command (scripts/train.py) across 2 CPU processes (gloo) gives the single-process run: DDP through
`accelerate launch`, DeepSpeed ZeRO-2 and ZeRO-3 through `torchrun`. One launch per configuration, four tiny steps
each."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from hf_attnres.training.logs import read_jsonl
from tests.helpers.train_fixtures import REPO, train_args, train_losses

pytestmark = pytest.mark.slow
STEPS = dict(max_steps=4, save_every=2, eval_every=2, diagnostics_every=2, attn_res="block")


@pytest.fixture(scope="module")
def single(data, train, tmp_path_factory):
    """The reference: one process, micro-batch 4 (the global batch of every launch below)."""
    out = tmp_path_factory.mktemp("single")
    train(train_args(data, out, micro_batch_size=4, **STEPS))
    return out


def zero3_config(tmp_path):
    """The repo's ZeRO-3 config, with every parameter sharded (tiny tensors are otherwise kept whole)."""
    config = json.loads((REPO / "configs" / "deepspeed" / "zero3.json").read_text())
    config["zero_optimization"]["stage3_param_persistence_threshold"] = 0
    path = tmp_path / "zero3_all_sharded.json"
    path.write_text(json.dumps(config))
    return path


LAUNCHES = {
    # accelerate's MULTI_GPU launcher starts 2 processes; train.py's Accelerator(cpu=True) makes them gloo DDP.
    # Micro-batch 1 x 2 accumulation steps x 2 processes = the single run's 4 sequences (DDP's no_sync path)
    "ddp": lambda tmp: ([sys.executable, "-m", "accelerate.commands.launch", "--config_file",
                         str(REPO / "configs" / "accelerate" / "ddp_cpu.yaml")],
                        dict(micro_batch_size=1, grad_accum=2)),
    # ZeRO-2 with gradient accumulation (DeepSpeed's own boundary logic)
    "zero2": lambda tmp: ([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"],
                          dict(micro_batch_size=1, grad_accum=2,
                               deepspeed=REPO / "configs" / "deepspeed" / "zero2.json")),
    "zero3": lambda tmp: ([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"],
                          dict(micro_batch_size=2, deepspeed=zero3_config(tmp))),
}


@pytest.fixture(scope="module")
def launched(data, tmp_path_factory):
    """launched(name) -> run folder of that 2-process launch (each launch runs once per module)."""
    runs = {}

    def launch(name, resume_from=None):
        key = (name, resume_from)
        if key not in runs:
            tmp = tmp_path_factory.mktemp(name)
            launcher, flags = LAUNCHES[name](tmp)
            out = tmp / "run"
            if resume_from is not None:  # start from a copy of another run's checkpoint
                shutil.copytree(resume_from, out / "checkpoints" / resume_from.name)
            env = dict(os.environ, DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
            command = [*launcher, str(REPO / "scripts" / "train.py"), *train_args(data, out, **flags, **STEPS)]
            result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=400)
            assert result.returncode == 0, result.stderr[-4000:]
            runs[key] = out
        return runs[key]

    return launch


@pytest.mark.parametrize("name", list(LAUNCHES))
def test_two_processes_match_single_process(name, single, launched):
    out = launched(name)
    for key in ("train/loss", "val/loss", "train/grad_norm"):
        assert train_losses(out, key) == pytest.approx(train_losses(single, key), rel=1e-4, abs=1e-5), key
    # Diagnostics cover the global batch: the same statistics as the single process
    for ours, reference in zip(read_jsonl(out / "diagnostics.jsonl"), read_jsonl(single / "diagnostics.jsonl"),
                               strict=True):
        for key in ("layer_rms", "layer_grad_norm"):
            assert ours[key] == pytest.approx(reference[key], rel=1e-3), key
        for w, w_ref in zip(ours["depth_weights"], reference["depth_weights"], strict=True):
            assert w == pytest.approx(w_ref, abs=1e-5)
    assert (out / "final" / "model.safetensors").is_file() and (out / "checkpoints" / "step-00000004").is_dir()


def test_zero3_resume_is_exact(launched):
    """Resuming the sharded ZeRO-3 run from its step-2 checkpoint (DeepSpeed state + per-rank RNG) logs the same."""
    full = launched("zero3")
    resumed = launched("zero3", resume_from=full / "checkpoints" / "step-00000002")
    records = [{k: v for k, v in r.items() if k != "train/tokens_per_s"} for r in read_jsonl(resumed / "metrics.jsonl")]
    expected = [{k: v for k, v in r.items() if k != "train/tokens_per_s"} for r in read_jsonl(full / "metrics.jsonl")]
    assert records == [r for r in expected if r["step"] > 2]
