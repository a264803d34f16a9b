"""Bad input and interruptions of `attnres continued-study`: each is one line naming the field, file or
run, refused before any work where it can be; an edited grid never replaces another grid's runs without --force;
Ctrl-C / SIGTERM end the study at once (exit 130 / 143) and the finished runs survive; the query multiplier and
per-group clipping are grid fields."""
from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from transformers import AutoModelForCausalLM

from hf_attnres.cli import continued_study
from hf_attnres.study.continued import train as continued_train
from hf_attnres.study.continued.config import load_continued
from hf_attnres.study.runner import run_spec
from tests.helpers.train_fixtures import REPO
from tests.study.test_continued_study import grid, source  # noqa: F401  (source: the tiny Llama fixture)

ONE_RUN = ["--only", "standard", "--lr", "1e-3", "--seed", "0"]


def main(path, out, *flags):
    return continued_study.main(["--grid", str(path), "--output-dir", str(out), *map(str, flags)])


TRAIN = {"max_steps": 2, "micro_batch_size": 2, "seq_len": 16, "warmup_steps": 1}


@pytest.mark.parametrize("change, message", [
    (dict(train=dict(TRAIN, warmup_steps=5)), r"train.warmup_steps \(5\) exceeds train.max_steps \(2\)"),
    (dict(train=dict(TRAIN, seq_len=128)), "train.seq_len 128 exceeds the source's max_position_embeddings"),
    (dict(groups={"lr_sweep": {"arms": ["standard"], "lrs": [1e-3, 1e300], "seeds": [0]}}), "groups.lr_sweep.lrs"),
    (dict(groups={"lr_sweep": {"arms": ["standard"], "lrs": [1e-3, 3e-3], "seeds": [2**70]}}),
     "groups.lr_sweep.seeds"),
    (dict(arms={"frozen": {"mode": "block"}, "q": {"mode": "block", "train": {"attn_res_lr_multiplier": 0}}}),
     "arms.q.attn_res_lr_multiplier"),
    (dict(continued={"frozen_arms": ["frozen"], "grad_clip_groups": "sometimes"}), "continued.grad_clip_groups"),
    (dict(continued={"frozen_arms": ["frozen"], "device": "cuda"}), "no CUDA device"),
])
def test_bad_grid_one_line_before_any_work(tmp_path, source, change, message):  # noqa: F811
    if "no CUDA" in message and __import__("torch").cuda.is_available():
        pytest.skip("a CUDA device is visible: the grid is valid here")
    path = grid(tmp_path, source, **change)
    with pytest.raises(SystemExit, match=message):
        main(path, tmp_path / "out")
    assert not (tmp_path / "out").exists() and not (tmp_path / "data").exists()


def test_one_run_values_named(tmp_path, source, capsys):  # noqa: F811
    path, out = grid(tmp_path, source), tmp_path / "out"
    with pytest.raises(SystemExit, match=r"--lr must be a number in \(0, 1\].*got 1e\+300"):
        main(path, out, "--only", "block", "--lr", "1e300", "--seed", "0")
    with pytest.raises(SystemExit):
        main(path, out, "--only", "block", "--lr", "1e-3", "--seed", str(2**70))
    assert f"--seed: must be from 0 to 4294967295 (2**32 - 1), got {2**70}" in capsys.readouterr().err
    assert not out.exists()


def test_binary_grid_file(tmp_path):
    path = tmp_path / "grid.json"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
    with pytest.raises(SystemExit, match="grid.json: not a text file"):
        main(path, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_already_attn_res_source(tmp_path, source):  # noqa: F811
    from hf_attnres.families.upcycle import upcycle

    folder = tmp_path / "upcycled"
    upcycle(AutoModelForCausalLM.from_pretrained(source[0]), "block", block_size=2).save_pretrained(folder)
    path = grid(tmp_path, source, source=str(folder))
    with pytest.raises(SystemExit, match="already an AttnRes model"):
        main(path, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_failing_data_preparation(tmp_path, source):  # noqa: F811
    path = grid(tmp_path, source, data={"dir": str(tmp_path / "data"), "prepare": ["--seq-len", "1"]})
    with pytest.raises(SystemExit, match="data.prepare failed"):
        main(path, tmp_path / "out")
    assert not (tmp_path / "out").exists() and not (tmp_path / "data").exists()


def test_non_number_in_a_result_names_the_file(tmp_path, source):  # noqa: F811
    path, out = grid(tmp_path, source), tmp_path / "out"
    cg = load_continued(path)
    key = cg.grid.arm_key("standard", 1e-3, 0)
    result = out / "runs" / key.id / "result.json"
    result.parent.mkdir(parents=True)
    result.write_text(json.dumps(dict(spec=json.loads(json.dumps(run_spec(cg.grid, key))), val_loss="fast")))
    with pytest.raises(SystemExit, match=f"{result}: val_loss is 'fast', not a finite number"):
        main(path, out, "--dry-run")


def test_edited_grid_refused_without_force(tmp_path, source):  # noqa: F811
    path, out = grid(tmp_path, source), tmp_path / "out"
    assert main(path, out, *ONE_RUN) == 0
    result = next((out / "runs").glob("*/result.json"))
    before = result.read_bytes()
    edited = grid(tmp_path, source, train=dict(TRAIN, max_steps=3),
                  continued={"frozen_arms": ["frozen"], "grad_clip_groups": "per-group"})
    with pytest.raises(SystemExit, match=r"holds runs of other settings .*train.max_steps.*--force"):
        main(edited, out, *ONE_RUN)
    with pytest.raises(SystemExit, match="continued.grad_clip_groups"):
        main(edited, out, "--report-only")
    assert result.read_bytes() == before
    assert main(edited, out, *ONE_RUN, "--force") == 0  # the edited grid's run: the old record is redone
    assert json.loads(result.read_text())["spec"]["train"]["max_steps"] == 3


def test_full_disk_names_the_run(tmp_path, source, monkeypatch, capsys):  # noqa: F811
    def full(model, path):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(continued_train, "save_trainable", full)
    path, out = grid(tmp_path, source), tmp_path / "out"
    assert main(path, out, *ONE_RUN) == 1
    err = capsys.readouterr().err
    assert "standard-lr0.001-L4-h32-seed0: No space left on device writing" in err and "Traceback" not in err
    assert not list((out / "runs").glob("*/result.json"))


def test_multiplier_moves_the_queries_further(tmp_path, source):  # noqa: F811
    """The same block run at multiplier 1 and 100: the pseudo-queries (zero at upcycling) move ~100x further."""
    arms = {"frozen": {"mode": "block"}, "q100": {"mode": "block", "train": {"attn_res_lr_multiplier": 100}}}
    path, out = grid(tmp_path, source, arms=arms), tmp_path / "out"
    for arm in ("block", "q100"):
        assert main(path, out, "--only", arm, "--lr", "1e-4", "--seed", "0") == 0
    norms = {arm: json.loads(next((out / "runs").glob(f"{arm}-*/result.json")).read_text())["query_norms"]
             for arm in ("block", "q100")}
    mean = {arm: sum(n) / len(n) for arm, n in norms.items()}
    assert mean["q100"] > 20 * mean["block"] > 0


@pytest.mark.slow  # a study in a subprocess until its first run finishes
@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_interrupt_one_line_and_finished_runs_survive(tmp_path, source, signum, code):  # noqa: F811
    path, out = grid(tmp_path, source), tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    process = subprocess.Popen([sys.executable, "-m", "hf_attnres", "continued-study", "--grid", str(path),
                                "--output-dir", str(out)], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 600
    while not list(out.glob("runs/*/result.json")) and time.time() < deadline and process.poll() is None:
        time.sleep(0.2)
    finished = list(out.glob("runs/*/result.json"))
    assert finished and process.poll() is None, "no run finished before the study ended"
    process.send_signal(signum)
    _, err = process.communicate(timeout=60)
    assert process.returncode == code, err
    last = err.strip().splitlines()[-1]
    assert "interrupted" in last and signal.Signals(signum).name in last and "Traceback" not in err
    for result in finished:
        assert json.loads(result.read_text())["heldout_loss"] > 0
