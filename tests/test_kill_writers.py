"""SIGKILL in the middle of every writer: the output never appears half-written, an existing output stays as it was,
the inputs are untouched, and the next run (or `recover_interrupted`) cleans what the killed one left. Each writer
pauses just before its final rename when ATTNRES_PAUSE_BEFORE_RENAME_S is set, and says so on stderr; the test kills
it there. (The training checkpoint writer has its own kill test: tests/training/test_train.py.)"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from attnres.atomic_io import PAUSE_ENV, recover_interrupted, write_json_atomic
from attnres.cli.convert import main as convert_main
from attnres.training.state import OutputLockedError, output_lock
from tests.helpers.bad_input_fixtures import moonshot_checkpoint, saved_model, snapshot  # noqa: F401
from tests.helpers.train_fixtures import REPO, write_documents

pytestmark = pytest.mark.slow


def kill_when_paused(argv, marker: str = PAUSE_ENV):
    """Start `argv`, wait for `marker` on its stderr (the writer is paused before its rename), SIGKILL it."""
    env = dict(os.environ, **{PAUSE_ENV: "120"}, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    process = subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env, cwd=REPO)
    seen = b""
    while marker.encode() not in seen:
        chunk = process.stderr.read1(4096)
        if not chunk:
            process.wait()
            pytest.fail(f"{argv} ended before pausing: {seen.decode(errors='replace')[-2000:]}")
        seen += chunk
    process.send_signal(signal.SIGKILL)
    process.wait()
    process.stderr.close()
    return process


def leftovers(folder, *kinds):
    kinds = kinds or (".partial-", ".replaced-")
    return sorted(p.name for p in folder.iterdir() if any(kind in p.name for kind in kinds))


def command(name):
    return [sys.executable, "-m", "attnres", name]


def test_kill_conversion(moonshot_checkpoint, tmp_path):
    before = snapshot(moonshot_checkpoint)
    out = tmp_path / "out"
    kill_when_paused([*command("convert"), str(moonshot_checkpoint), str(out), "--no-progress"])
    assert not out.exists() and leftovers(tmp_path) and snapshot(moonshot_checkpoint) == before
    assert convert_main([str(moonshot_checkpoint), str(out), "--no-progress"]) == 0
    assert not leftovers(tmp_path) and (out / "config.json").is_file()  # the next run cleaned up


def test_kill_prepare_data_replacing_an_output(tmp_path):
    files = write_documents(tmp_path / "corpus", count=4)
    out = tmp_path / "data"
    out.mkdir()
    (out / "meta.json").write_text('{"old": true}')
    before = snapshot(tmp_path)
    kill_when_paused([*command("prepare-data"), "--files", *map(str, files), "--tokenizer", "bpe", "--vocab-size",
                      "260", "--seq-len", "8", "--validation-fraction", "0.5", "--output-dir", str(out), "--force"])
    assert leftovers(tmp_path)
    recover_interrupted(out)
    assert snapshot(tmp_path) == before  # the old output, the corpus: as they were, nothing else left


def test_kill_push_to_hub_build(saved_model, tmp_path):
    before = snapshot(saved_model)
    out = tmp_path / "hub"
    kill_when_paused([*command("push-to-hub"), "--model", str(saved_model), "--output", str(out), "--dry-run"])
    assert not out.exists() and leftovers(tmp_path) and snapshot(saved_model) == before
    recover_interrupted(out)
    assert not leftovers(tmp_path)


def test_kill_save_pretrained_over_a_model(saved_model, tmp_path):
    folder = shutil.copytree(saved_model, tmp_path / "model")
    before = snapshot(folder)
    code = ("from tests.helpers.model_factory import tiny_model; "
            f"tiny_model('full', num_layers=4, seed=3).save_pretrained({str(folder)!r})")
    kill_when_paused([sys.executable, "-c", code])
    assert snapshot(folder) == before and leftovers(tmp_path)
    recover_interrupted(folder)
    assert not leftovers(tmp_path)


def test_kill_atomic_write(tmp_path):
    target = tmp_path / "results.json"
    target.write_text('{"old": 1}')
    code = f"from attnres.atomic_io import write_json_atomic; write_json_atomic({str(target)!r}, {{'new': 2}})"
    kill_when_paused([sys.executable, "-c", code])
    assert target.read_text() == '{"old": 1}' and leftovers(tmp_path, ".tmp-")
    write_json_atomic(target, {"next": 3})  # the next write cleans the dead writer's temporary file
    assert json.loads(target.read_text()) == {"next": 3} and not leftovers(tmp_path, ".tmp-")


def test_killed_run_leaves_no_lock(tmp_path):
    out = tmp_path / "run"
    code = ("import sys, time; from attnres.training.state import output_lock\n"
            f"with output_lock({str(out)!r}):\n    print('LOCKED', file=sys.stderr, flush=True); time.sleep(120)")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    process = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, env=env)
    assert b"LOCKED" in process.stderr.readline()
    with pytest.raises(OutputLockedError, match=f"pid {process.pid}"):
        with output_lock(out):
            pass
    process.send_signal(signal.SIGKILL)
    process.wait()
    process.stderr.close()
    deadline = time.time() + 10
    while True:  # the kernel drops the dead process's lock
        try:
            with output_lock(out):
                break
        except OutputLockedError:
            assert time.time() < deadline
            time.sleep(0.1)
