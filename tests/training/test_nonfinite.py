"""The non-finite guard: a NaN/inf loss or gradient norm skips the update (accelerate,
DeepSpeed ZeRO-0 and ZeRO-2, the pipeline trainer), is logged, and a few in a row stop with exit code 3 and no model.
Faults are injected deterministically: poisoned batches (the loss times NaN) or a huge learning rate (the
pipeline trainer, which takes one)."""
from __future__ import annotations

import itertools
import json
import math
import os
import socket
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from hf_attnres.training import engines
from hf_attnres.training.guard import NonFiniteError, NonFiniteGuard
from hf_attnres.training.logs import read_jsonl
from tests.helpers.train_fixtures import REPO, train_args, train_losses

# 4 steps, a checkpoint after each: the weights after every step are on disk
RUN = dict(max_steps=4, save_every=1, keep_checkpoints=10, eval_every=0, diagnostics_every=0, warmup_steps=1)


def poison(forward, steps):
    """An engine `forward` that returns a NaN loss (hence NaN gradients) at the given optimizer steps (1-based, one
    micro-batch per step); evaluation forwards (no grad) are left alone."""
    calls = itertools.count(1)

    def poisoned(self, input_ids, *args, **kwargs):
        out = forward(self, input_ids, *args, **kwargs)
        if torch.is_grad_enabled() and next(calls) in steps:
            out.loss = out.loss * float("nan")
        return out

    return poisoned


def weights_after(run_dir, step):
    return load_file(str(run_dir / "checkpoints" / f"step-{step:08d}" / "model.safetensors"))


def skipped_steps(run_dir):
    return [r["step"] for r in read_jsonl(run_dir / "metrics.jsonl") if r.get("skipped/nonfinite")]


def test_guard_counts_in_a_row():
    guard = NonFiniteGuard(3)
    assert not guard.check(1, 2.0, 1.0)
    assert guard.check(2, float("nan"), 1.0) and guard.check(3, 2.0, float("inf"))
    assert not guard.check(4, 2.0, None)  # a finite step resets the count (None: norm not measured)
    assert guard.check(5, 2.0, 1.0, applied=False) and guard.check(6, float("inf"), 1.0)
    with pytest.raises(NonFiniteError, match=r"step 7: .*3 non-finite steps in a row.*--max-nonfinite-steps 3"):
        guard.check(7, float("nan"), float("nan"))


def test_poisoned_steps_make_no_update(data, train, tmp_path, monkeypatch):
    """Steps 2 and 3 poisoned (2 < limit 3): no weight change there, the schedule waits, the run finishes."""
    monkeypatch.setattr(engines.AccelerateEngine, "forward", poison(engines.AccelerateEngine.forward, {2, 3}))
    train(train_args(data, tmp_path, **RUN))
    assert skipped_steps(tmp_path) == [2, 3]
    after = {step: weights_after(tmp_path, step) for step in (1, 2, 3, 4)}
    for name, value in after[1].items():
        assert torch.equal(after[2][name], value) and torch.equal(after[3][name], value), name
    assert any(not torch.equal(after[4][name], value) for name, value in after[1].items())
    records = {r["step"]: r for r in read_jsonl(tmp_path / "metrics.jsonl") if "train/loss" in r}
    assert sorted(records) == [1, 4] and records[4]["lr/decay"] == pytest.approx(3e-3)  # step 2's rate: not advanced
    final = load_file(str(tmp_path / "final" / "model.safetensors"))
    assert all(torch.isfinite(t).all() for t in final.values())


def test_too_many_in_a_row_stop_without_a_model(data, train, tmp_path, monkeypatch):
    monkeypatch.setattr(engines.AccelerateEngine, "forward", poison(engines.AccelerateEngine.forward, {2, 3, 4}))
    with pytest.raises(NonFiniteError, match="step 4: loss nan"):
        train(train_args(data, tmp_path, **dict(RUN, max_steps=6)))
    assert skipped_steps(tmp_path) == [2, 3, 4]
    assert not (tmp_path / "final").exists()
    assert not (tmp_path / "checkpoints" / "step-00000005").exists()


# Poisons the script's training forwards from the 3rd on, in the script's own process (a learning rate large enough to
# overflow is refused before any work)
POISON_SITECUSTOMIZE = """
import itertools, torch
from hf_attnres.training import engines
forward, calls = engines.AccelerateEngine.forward, itertools.count(1)
def poisoned(self, *args, **kwargs):
    out = forward(self, *args, **kwargs)
    if torch.is_grad_enabled() and next(calls) >= 3:
        out.loss = out.loss * float("nan")
    return out
engines.AccelerateEngine.forward = poisoned
"""


def test_command_line_exit_code_and_message(data, tmp_path):
    """The loss is NaN from step 3 on; the script exits 3 with one line, no traceback."""
    (tmp_path / "inject").mkdir()
    (tmp_path / "inject" / "sitecustomize.py").write_text(POISON_SITECUSTOMIZE)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=f"{tmp_path / 'inject'}{os.pathsep}{REPO}")
    tmp_path = tmp_path / "run"
    command = [sys.executable, str(REPO / "scripts" / "train.py"),
               *train_args(data, tmp_path, **dict(RUN, max_steps=10, save_every=0, max_nonfinite_steps=2))]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 3, result.stderr[-3000:]
    assert "error: step" in result.stderr and "2 non-finite steps in a row" in result.stderr
    assert "Traceback" not in result.stderr
    assert len(skipped_steps(tmp_path)) == 2 and not (tmp_path / "final").exists()
    assert all(math.isfinite(x) for x in train_losses(tmp_path))  # skipped steps write no train/loss record


def free_port() -> int:
    """A free TCP port for the one-process group (the default 29500 may be taken by another job)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


DEEPSPEED_DRIVER = """
import json, sys
import torch
sys.path[:0] = [{repo!r}]
from hf_attnres.cli.train import main as train
from hf_attnres.training import engines
from tests.training.test_nonfinite import poison

optimizer_step, sums = engines.DeepSpeedEngine.optimizer_step, []

def recorded_step(self, **kwargs):
    result = optimizer_step(self, **kwargs)
    sums[-1].append([float(p.detach().double().sum()) for p in self.module.parameters()])
    return result

engines.DeepSpeedEngine.optimizer_step = recorded_step
forward = engines.DeepSpeedEngine.forward
for argv in json.loads(sys.argv[1]):  # one process group, several runs
    engines.DeepSpeedEngine.forward = poison(forward, {{2, 3}})
    sums.append([])
    train(argv)
json.dump(sums, open(sys.argv[2], "w"))
"""


def test_deepspeed_skips_poisoned_steps(data, tmp_path):
    """ZeRO-2 skips a non-finite norm by itself; ZeRO-0 (a plain fp32 optimizer) through our guarded step.
    One subprocess (one DeepSpeed process group) runs both."""
    runs = []
    for stage in (0, 2):
        config = tmp_path / f"zero{stage}.json"
        config.write_text(json.dumps({"zero_optimization": {"stage": stage}, "bf16": {"enabled": False}}))
        runs.append(train_args(data, tmp_path / f"zero{stage}", **dict(RUN, save_every=0, deepspeed=config)))
    driver, sums = tmp_path / "driver.py", tmp_path / "sums.json"
    driver.write_text(DEEPSPEED_DRIVER.format(repo=str(REPO)))
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO), DS_ACCELERATOR="cpu",
               MASTER_PORT=str(free_port()))
    env.pop("WORLD_SIZE", None)
    result = subprocess.run([sys.executable, str(driver), json.dumps(runs), str(sums)], capture_output=True, text=True,
                            timeout=400, env=env)
    assert result.returncode == 0, result.stderr[-4000:]
    for stage, after in zip((0, 2), json.loads(sums.read_text()), strict=True):  # parameter sums after steps 1..4
        assert after[1] == after[0] and after[2] == after[0] and after[3] != after[0], stage
        out = tmp_path / f"zero{stage}"
        assert skipped_steps(out) == [2, 3] and (out / "final" / "model.safetensors").is_file(), stage


@pytest.mark.slow
def test_pipeline_stops_with_exit_code_3(tmp_path):
    """2 pipeline stages, ZeRO-0 (our guarded step, agreed across stages), a model whose logits overflow to inf (a
    huge lm_head; a huge learning rate is refused before the launch): every step's loss is non-finite."""
    from tests.helpers.model_factory import tiny_model

    overflowing = tiny_model("block", 2, 5)
    with torch.no_grad():
        overflowing.lm_head.weight.mul_(1e38)
    overflowing.save_pretrained(tmp_path / "overflowing")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO), DS_ACCELERATOR="cpu")
    out = tmp_path / "pipe"
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", f"--master_port={free_port()}",
               str(REPO / "scripts" / "train_pipeline.py"), "--model", str(tmp_path / "overflowing"), "--steps", "8",
               "--zero-stage", "0", "--output-dir", str(out)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=400, env=env)
    assert result.returncode != 0 and "exitcode  : 3" in result.stderr, result.stderr[-4000:]
    assert "3 non-finite steps in a row" in result.stderr
    records = read_jsonl(out / "log.jsonl")
    assert [r["step"] for r in records if r.get("skipped/nonfinite")] == [1, 2, 3] and len(records) == 3
    assert not (out / "model").exists()
