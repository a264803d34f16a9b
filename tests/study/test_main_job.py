"""scripts/main_job.py end to end at a reduced setting (no network: a local corpus and self-written benchmark items):
a matched pair is trained, evaluated through hf_attnres.evaluation, compared, summarised and plotted; bad flags are
refused before anything is written."""
from __future__ import annotations

import json
import math

import pytest

from hf_attnres.study.job_args import MainJobArgs
from hf_attnres.training.logs import read_jsonl
from tests.helpers.eval_fixtures import fixture_eval_data
from tests.helpers.train_fixtures import write_documents


@pytest.fixture(scope="module")
def main_job():
    from hf_attnres.cli.main_job import main

    return main


def small_job(tmp_path, **flags) -> list[str]:
    options = dict(files=None, vocab_size=300, seq_len=32, data=tmp_path / "data", layers=3, hidden_size=32,
                   block_size=2, steps=6, micro_batch_size=4, eval_every=3, task_limit=2, output_dir=tmp_path / "out")
    options.update(flags)
    argv = ["--files", *map(str, write_documents(tmp_path / "text"))]
    for key, value in options.items():
        if value is True:
            argv.append(f"--{key.replace('_', '-')}")
        elif value is not None:
            argv += [f"--{key.replace('_', '-')}", *(map(str, value) if isinstance(value, list) else [str(value)])]
    return argv


def test_reduced_main_job(main_job, tmp_path, capsys):
    eval_data = fixture_eval_data(tmp_path / "bench", benchmarks=("triviaqa",))
    summary = main_job(small_job(tmp_path, eval_data=eval_data, tasks=["attnres_triviaqa_bpb"]))
    out = tmp_path / "out"
    for name in ("summary.md", "summary.json", "loss_curves.png", "figure5.png", "model_config.json",
                 "eval/heldout/report.json", "eval/tasks/report.json"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    assert json.loads((out / "summary.json").read_text())["results"] == summary["results"]
    results = summary["results"]
    assert set(results) == {"held-out loss (nats/token)", "held-out bits per byte (pooled)",
                            "attnres_triviaqa_bpb bpb (n=2)"}
    for values in results.values():
        assert set(values) == {"standard", "block"} and all(math.isfinite(v) for v in values.values())
    # a matched pair: the same config except the residual, the same steps, tokens and data order
    standard, block = summary["parameters"]["standard"], summary["parameters"]["block"]
    assert standard["attn_res"] == 0 and block["attn_res"] > 0
    assert block["total"] - block["attn_res"] == standard["total"]
    curves = summary["validation_curves"]
    assert [s for s, _ in curves["standard"]] == [s for s, _ in curves["block"]] == [3, 6]
    logs = {mode: read_jsonl(out / mode / "metrics.jsonl") for mode in ("standard", "block")}
    assert [r["step"] for r in logs["standard"]] == [r["step"] for r in logs["block"]]
    diagnostics = read_jsonl(out / "block" / "diagnostics.jsonl")[-1]
    assert len(diagnostics["layer_rms"]) == 3 and len(diagnostics["depth_weights"]) == 2 * 3 + 1
    printed = capsys.readouterr().out
    assert "block - standard" in printed and "held-out bits per byte (pooled)" in printed
    assert "| held-out loss (nats/token) |" in (out / "summary.md").read_text()
    # each arm at its own study LR (the nearest the study has at this reduced setting), trained and said so
    lrs = summary["learning_rates"]
    assert summary["lr_mode"] == "per-arm" and (lrs["standard"]["lr"], lrs["block"]["lr"]) == (0.012, 0.003)
    assert lrs["standard"]["study"]["best_run"] == (
        "docs/results/study-cpu-lr/runs/standard-lr0.012-L12-h128-seed0/result.json")
    assert lrs["block"]["study"]["arm"] == "block-S2" and "--steps 6 (study: 500)" in lrs["block"]["differs"]
    assert summary["training_flags"]["lr"] == {"standard": 0.012, "block": 0.003}
    for mode, lr in (("standard", 0.012), ("block", 0.003)):  # the peak LR each run used at its first step
        assert max(v for k, v in logs[mode][0].items() if k.startswith("lr/")) == pytest.approx(lr)
    text = (out / "summary.md").read_text()
    assert "Each arm at its own best LR from the LR study" in text and "the old, unfair number" in text
    assert "leaves the study's setting" in text


@pytest.mark.parametrize("flags,message", [
    (dict(steps=0), "--steps must be >= 1"),
    (dict(hidden_size=36), "--hidden-size must be a multiple of 8"),
    (dict(lr=float("nan")), "--lr must be a finite number"),
    (dict(lr_block=0), "--lr-block must be a finite number > 0, got 0"),
    (dict(lr_standard=float("inf")), "--lr-standard must be a finite number > 0, got inf"),
    (dict(lr=3e-3, lr_block=1e-3), "--lr \\(one shared LR for both arms\\) and --lr-standard / --lr-block"),
    (dict(eval_every=99), "--eval-every must be in [1, --steps]"),
    (dict(warmup_steps=7), "--warmup-steps must be in [0, --steps]"),
    (dict(tasks=["attnres_humaneval"]), "--tasks attnres_humaneval: not one the main job can fetch and run offline"),
])
def test_bad_flags_write_nothing(main_job, tmp_path, flags, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        main_job(small_job(tmp_path, **flags))
    assert not (tmp_path / "out").exists() and not (tmp_path / "data").exists()


def test_missing_file_is_named(main_job, tmp_path):
    argv = small_job(tmp_path)
    argv[argv.index("--files") + 1] = str(tmp_path / "nope.txt")
    with pytest.raises(ValueError, match="--files .*nope.txt: no such file"):
        main_job(argv)
    assert not (tmp_path / "out").exists()


def test_failed_run_names_its_log(tmp_path):
    """A training run that fails stops the pair with its exit code and log (here: train.py refuses a missing --data)."""
    from hf_attnres.study.main_job import run_pair

    run_dirs = {mode: tmp_path / mode for mode in ("standard", "block")}
    runs = {mode: ["--data", str(tmp_path / "none")] for mode in run_dirs}
    with pytest.raises(RuntimeError,
                       match=r"training (standard|block) failed \(exit code 1\); log: .*train.log") as error:
        run_pair(runs, run_dirs, steps=2, parallel=True, threads=1)
    assert "no prepared dataset there" in str(error.value)  # the log's tail comes with the message


def test_rerun_with_a_changed_training_flag_refused(main_job, tmp_path):
    """The first run recorded its settings and trained (standard/ exists): a rerun with another --lr or --steps is
    refused naming each flag, before anything is written (no summary reporting settings the models never had)."""
    from hf_attnres.cli.main_job import build_parser
    from hf_attnres.study.main_job import JOB_FILE, check_job_settings, resolve_lrs

    out = tmp_path / "out"
    out.mkdir()
    first = MainJobArgs(**vars(build_parser().parse_args(small_job(tmp_path))))
    resolve_lrs(first)
    check_job_settings(first, out)
    (out / "standard").mkdir()
    recorded = (out / JOB_FILE).read_text()
    changed = (r"--steps 6 \(recorded\) vs 9 \(given\); --lr-standard 0.012 \(recorded\) vs 0.001 \(given\); "
               r"--lr-block 0.003 \(recorded\) vs 0.001 \(given\)")
    with pytest.raises(ValueError, match=changed):
        main_job(small_job(tmp_path, lr=1e-3, steps=9))
    with pytest.raises(ValueError, match=r"settings: --lr-block 0.003 \(recorded\) vs 0.006 \(given\): a rerun"):
        main_job(small_job(tmp_path, lr_block=6e-3))
    assert (out / JOB_FILE).read_text() == recorded and sorted(p.name for p in out.iterdir()) == [JOB_FILE, "standard"]
    # the same pair of LRs given by the per-arm flags is the same job: not refused
    same = MainJobArgs(**vars(build_parser().parse_args(small_job(tmp_path, lr_standard=0.012, lr_block=0.003))))
    resolve_lrs(same)
    check_job_settings(same, out)
    # a job recorded before the per-arm LRs (one "lr") is refused naming the new fields
    older = {k: v for k, v in json.loads(recorded).items() if k not in ("lr_standard", "lr_block")}
    (out / JOB_FILE).write_text(json.dumps(dict(older, lr=0.003)))
    with pytest.raises(ValueError, match=r"--lr-standard \(not recorded: an older job\) \(recorded\) vs 0.012"):
        check_job_settings(same, out)
    assert not (tmp_path / "data").exists()


def train_processes(marker: str) -> list[int]:
    """Live train commands whose command line mentions `marker` (from /proc)."""
    import os
    from pathlib import Path

    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        mentioned = b"hf_attnres.cli.train" in argv and marker.encode() in b" ".join(argv)
        if entry.name.isdigit() and mentioned and state != "Z":
            found.append(int(entry.name))
    return [pid for pid in found if pid != os.getpid()]


@pytest.mark.slow
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_signal_stops_both_train_runs(tmp_path, sig):
    """SIGTERM or SIGINT to the main job while both runs train: both are stopped (no train process left), each keeps
    a complete checkpoint and no half-written one, and the job ends with one line and 128 + the signal."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from hf_attnres.training.checkpoints import latest_checkpoint
    from tests.helpers.processes import sigint_at_default
    from tests.helpers.train_fixtures import REPO

    out = tmp_path / "out"
    argv = small_job(tmp_path, steps=2000, eval_every=3, no_tasks=True, task_limit=None)
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    job = subprocess.Popen([sys.executable, "-m", "hf_attnres.cli.main_job", *argv], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, env=env, cwd=tmp_path, preexec_fn=sigint_at_default)
    try:
        deadline = time.time() + 600
        while not all(latest_checkpoint(out / mode / "checkpoints") for mode in ("standard", "block")):
            assert job.poll() is None and time.time() < deadline, job.stderr.read().decode()[-3000:]
            time.sleep(0.5)
        assert len(train_processes(str(out))) == 2
        job.send_signal(getattr(signal, sig))
        _, stderr = job.communicate(timeout=180)
    finally:
        job.kill()
        for pid in train_processes(str(out)):  # never leave a run behind, even when the test fails
            os.kill(pid, signal.SIGKILL)
    said = stderr.decode(errors="replace")
    assert job.returncode == 128 + getattr(signal, sig) and "Traceback" not in said, said[-3000:]
    assert [line for line in said.splitlines() if line.startswith("interrupted")] == [
        f"interrupted ({sig}): the job and its runs stopped; rerun the same command to continue from their last "
        "checkpoints"]
    assert train_processes(str(out)) == []
    for mode in ("standard", "block"):
        checkpoints = out / mode / "checkpoints"
        assert latest_checkpoint(checkpoints) and not [p for p in checkpoints.iterdir() if p.name.startswith(".")]
        assert "interrupted" in (out / mode / "train.log").read_text()  # each run stopped cleanly, said so


def test_loss_curves_say_what_their_validation_loss_covers(monkeypatch):
    """`loss_curves.png`'s end label is training's few-batch validation loss, not the table's held-out one."""
    import hf_attnres.training.data
    from hf_attnres.study.main_job import validation_subset

    monkeypatch.setattr(hf_attnres.training.data, "check_prepared", lambda data: {"num_sequences": {"validation": 491}})
    args = MainJobArgs(data="d", micro_batch_size=16)
    assert validation_subset(args, {"eval_batches": 4}) == ("first 64 of 491 validation sequences "
                                                             "(whole split: summary.md)")
    monkeypatch.setattr(hf_attnres.training.data, "check_prepared", lambda data: {"num_sequences": {"validation": 40}})
    assert validation_subset(args, {"eval_batches": 4}).startswith("first 32 of 40 ")  # what evaluate() can read


def test_shared_and_given_lrs_are_labelled():
    """--lr trains both at one LR, labelled the old unfair comparison; --lr-block replaces Block's only."""
    from hf_attnres.cli.main_job import build_parser
    from hf_attnres.study.main_job import lr_paragraph, resolve_lrs

    args = MainJobArgs(**vars(build_parser().parse_args(["--lr", "0.003"])))
    lrs = resolve_lrs(args)
    assert (args.lr_standard, args.lr_block) == (0.003, 0.003) and "study" not in lrs["standard"]
    assert all("not each arm's own best" in lrs[m]["source"] for m in lrs)
    assert "One shared LR for both arms (--lr)" in lr_paragraph(dict(learning_rates=lrs, lr_mode="shared"))
    args = MainJobArgs(**vars(build_parser().parse_args(["--lr-block", "0.006"])))
    lrs = resolve_lrs(args)
    assert (args.lr_standard, args.lr_block) == (0.012, 0.006)
    assert lrs["block"]["source"] == "--lr-block 0.006 (given; not the study's)" and "study" in lrs["standard"]
    text = lr_paragraph(dict(learning_rates=lrs, lr_mode="per-arm"))
    assert "block: --lr-block 0.006 (given" in text and "the old, unfair number" in text


def test_a_second_job_into_the_same_output_is_refused_before_any_work(main_job, tmp_path):
    """One output rule for every writer: a main job whose --output-dir another live job holds is one clear
    error, and writes nothing (no data, no runs)."""
    from tests.helpers.processes import output_held

    with output_held(tmp_path / "out"):
        with pytest.raises(ValueError, match="out is being written by another process"):
            main_job(small_job(tmp_path))
    assert not (tmp_path / "data").exists()
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
