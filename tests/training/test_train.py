"""The train command (scripts/train.py) in one process on a tiny model and dataset: learning, exact resume, atomic
checkpoints, errors."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch
from safetensors.torch import load_file

from hf_attnres.training import loop
from hf_attnres.training.args import SetupError
from hf_attnres.training.checkpoints import PAUSE_ENV, latest_checkpoint, read_state
from hf_attnres.training.logs import read_jsonl
from tests.helpers.train_fixtures import REPO, crash_after_step, train_args, train_losses

# The run every resume test compares against: accumulation, eval, diagnostics, its own pseudo-query LR
REFERENCE = dict(max_steps=4, grad_accum=2, micro_batch_size=2, res_proj_lr=1e-2, save_every=2, eval_every=2,
                 diagnostics_every=2)


@pytest.fixture(scope="module")
def reference(data, train, tmp_path_factory):
    out = tmp_path_factory.mktemp("reference")
    train(train_args(data, out, **REFERENCE))
    return out


def comparable(run_dir):
    """Every logged number except throughput (wall-clock dependent)."""
    return [{k: v for k, v in r.items() if k != "train/tokens_per_s"} for r in read_jsonl(run_dir / "metrics.jsonl")]


def test_loss_decreases(data, train, tmp_path):
    train(train_args(data, tmp_path, max_steps=12, warmup_steps=2, lr=1e-2, eval_every=12, save_every=0,
                     diagnostics_every=0, no_final_model=True))
    losses = train_losses(tmp_path)
    assert len(losses) == 12
    assert sum(losses[-3:]) / 3 < 0.8 * sum(losses[:3]) / 3, losses
    assert train_losses(tmp_path, "val/loss")[-1] < losses[0]


def test_separate_pseudo_query_learning_rate(reference):
    records = [r for r in read_jsonl(reference / "metrics.jsonl") if "lr/res_proj" in r]
    peak = max(records, key=lambda r: r["lr/decay"])
    assert peak["lr/decay"] == pytest.approx(3e-3) and peak["lr/res_proj"] == pytest.approx(1e-2)
    for r in records:  # one schedule, two peaks
        assert r["lr/res_proj"] == pytest.approx(r["lr/decay"] * 1e-2 / 3e-3)


def test_final_model_and_tokenizer_load_with_auto_classes(reference):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(reference / "final")
    tokenizer = AutoTokenizer.from_pretrained(reference / "final")
    ids = tokenizer("the king walks", return_tensors="pt")["input_ids"]
    assert model.config.attn_res_mode == "block" and model.config.vocab_size == len(tokenizer)
    assert torch.isfinite(model(input_ids=ids).logits).all()


def test_final_folder_records_tokens_and_data(reference, data):
    from hf_attnres.training.logs import INFO_FILE, data_fingerprint

    info = json.loads((reference / "final" / INFO_FILE).read_text())
    global_batch = REFERENCE["micro_batch_size"] * REFERENCE["grad_accum"]
    assert info["tokens_trained"] == REFERENCE["max_steps"] * global_batch * 32  # the tiny dataset's seq_len
    assert info["data_fingerprint"] == data_fingerprint(data) and len(info["data_fingerprint"]) == 16


def test_final_folder_loads_where_attnres_is_not_installed(reference, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tests.helpers.remote_loading import load_in_clean_process

    model = AutoModelForCausalLM.from_pretrained(reference / "final").eval()
    ids = torch.randint(3, model.config.vocab_size, (2, 8), generator=torch.Generator().manual_seed(0))
    result = load_in_clean_process(reference / "final", ids, tmp_path / "run", tmp_path / "home", tokenizer=True)
    with torch.no_grad():
        torch.testing.assert_close(result["logits"], model(ids).logits)
    assert result["tokens"] == AutoTokenizer.from_pretrained(reference / "final")("w5 w7 w9")["input_ids"]


def test_resume_after_crash_is_exact(data, train, reference, tmp_path, monkeypatch):
    """Crash after step 3 (checkpoint at step 2), rerun the same command: it resumes and logs what the uninterrupted
    run logged, bit for bit, and ends with the same weights."""
    crash_after_step(3, monkeypatch, lambda: train(train_args(data, tmp_path, **REFERENCE)))
    assert read_state(latest_checkpoint(tmp_path / "checkpoints"))["step"] == 2
    assert max(r["step"] for r in read_jsonl(tmp_path / "metrics.jsonl")) == 3
    summary = train(train_args(data, tmp_path, **REFERENCE))
    assert summary["start_step"] == 2
    assert comparable(tmp_path) == comparable(reference)
    final = load_file(tmp_path / "final" / "model.safetensors")
    expected = load_file(reference / "final" / "model.safetensors")
    assert final.keys() == expected.keys() and all(torch.equal(final[k], expected[k]) for k in final)


def test_kill_during_checkpoint_write_leaves_previous_loadable(data, train, reference, tmp_path):
    """SIGKILL while checkpoint 4 is being written: checkpoint 2 stays the latest and complete; rerunning resumes
    from it (the partial folder is removed) and still reproduces the uninterrupted run."""
    env = dict(os.environ, **{PAUSE_ENV: "4"})
    command = [sys.executable, str(REPO / "scripts" / "train.py"), *train_args(data, tmp_path, **REFERENCE)]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    partial, deadline = tmp_path / "checkpoints" / ".tmp-step-00000004", time.time() + 240
    try:
        while not (partial / "model.safetensors").exists():
            assert process.poll() is None and time.time() < deadline, "train.py ended before writing checkpoint 4"
            time.sleep(0.2)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    assert latest_checkpoint(tmp_path / "checkpoints").name == "step-00000002"
    assert partial.exists()  # killed mid-write: the half checkpoint is there, but never named step-*
    summary = train(train_args(data, tmp_path, **REFERENCE))
    assert summary["start_step"] == 2 and not partial.exists()
    assert comparable(tmp_path) == comparable(reference)


def test_gradient_checkpointing_changes_nothing(data, train, tmp_path):
    common = dict(max_steps=2, eval_every=0, save_every=0, diagnostics_every=0, no_final_model=True, attn_res="full")
    train(train_args(data, tmp_path / "plain", **common))
    train(train_args(data, tmp_path / "ckpt", gradient_checkpointing=True, **common))
    assert train_losses(tmp_path / "ckpt") == pytest.approx(train_losses(tmp_path / "plain"), abs=1e-6)
    assert train_losses(tmp_path / "ckpt", "train/grad_norm") == pytest.approx(
        train_losses(tmp_path / "plain", "train/grad_norm"), rel=1e-5)


@pytest.mark.parametrize(
    "flags, message",
    [
        (dict(micro_batch_size=300, eval_every=0), "training sequences in"),
        (dict(micro_batch_size=60), "validation has 50 sequences"),
        (dict(grad_accum=0), "--grad-accum must be >= 1"),
        (dict(warmup_steps=10, max_steps=5), "--warmup-steps 10 exceeds --max-steps 5"),
        (dict(seq_len=1000), "--seq-len must be in [2, 32]"),
        (dict(block_size=0), "--block-size must be >= 1"),
        (dict(resume="/no/such/checkpoint"), "--resume /no/such/checkpoint"),
    ],
)
def test_bad_settings_fail_before_any_work(data, train, tmp_path, monkeypatch, flags, message):
    built = []
    monkeypatch.setattr(loop, "build_model", lambda *a: built.append(a))
    with pytest.raises(SetupError, match=re.escape(message)):
        train(train_args(data, tmp_path, **flags))
    assert not built and not (tmp_path / "metrics.jsonl").exists()


def test_bad_files_are_named(data, train, tmp_path):
    with pytest.raises(SetupError, match="no prepared dataset there.*prepare_data.py"):
        train(train_args(tmp_path / "missing", tmp_path))
    bad_config = tmp_path / "model.json"
    bad_config.write_text(json.dumps(dict(model_type="kimi_linear_attnres", attn_res_mode="diagonal")))
    with pytest.raises(SetupError, match=f"--config {bad_config}.*attn_res_mode"):
        train(train_args(data, tmp_path, config=bad_config))
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps(dict(train_batch_size=7, zero_optimization=dict(stage=2))))
    with pytest.raises(SetupError, match="train_batch_size is 7 but the command line gives 4"):
        train(train_args(data, tmp_path, deepspeed=ds))
    ds.write_text("{not json")
    with pytest.raises(SetupError, match="not valid JSON"):
        train(train_args(data, tmp_path, deepspeed=ds))


def test_resume_with_other_settings_is_refused(data, train, reference, tmp_path):
    import shutil

    shutil.copytree(reference / "checkpoints", tmp_path / "checkpoints")
    with pytest.raises(ValueError, match=r"--attn-res block \(recorded\) vs standard \(given\)"):
        train(train_args(data, tmp_path, **dict(REFERENCE, attn_res="standard")))
    short_name = tmp_path / "checkpoints" / "step-2"  # the folder is step-00000002: the alias reaches the same check
    with pytest.raises(ValueError, match=r"step-00000002: --attn-res block \(recorded\) vs standard \(given\)"):
        train(train_args(data, tmp_path, **dict(REFERENCE, attn_res="standard", resume=short_name)))


def test_command_line_error_is_one_line(tmp_path):
    result = subprocess.run([sys.executable, str(REPO / "scripts" / "train.py"), "--data", str(tmp_path / "none")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "error: --data" in result.stderr and "Traceback" not in result.stderr
