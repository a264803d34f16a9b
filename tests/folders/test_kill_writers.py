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

from hf_attnres.cli.convert import main as convert_main
from hf_attnres.folders.atomic_io import recover_interrupted, write_json_atomic
from hf_attnres.training.state import OutputLockedError, output_lock
from tests.helpers.bad_input_fixtures import snapshot
from tests.helpers.processes import aside_pause_line, kill_when_paused, leftovers, pause_line
from tests.helpers.processes import attnres_command as command
from tests.helpers.train_fixtures import REPO, write_documents

pytestmark = pytest.mark.slow


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


def test_kill_save_over_a_model(saved_model, tmp_path):
    folder = shutil.copytree(saved_model, tmp_path / "model")
    before = snapshot(folder)
    code = ("import hf_attnres; from tests.helpers.model_factory import tiny_model; "
            f"hf_attnres.save(tiny_model('full', num_layers=4, seed=3), {str(folder)!r})")
    kill_when_paused([sys.executable, "-c", code])
    assert snapshot(folder) == before and leftovers(tmp_path)
    recover_interrupted(folder)
    assert not leftovers(tmp_path)


def save_over(folder) -> list[str]:
    """A process saving another model over the model folder `folder` with `hf_attnres.save`."""
    code = ("import hf_attnres; from tests.helpers.model_factory import tiny_model; "
            f"hf_attnres.save(tiny_model('full', num_layers=4, seed=3), {str(folder)!r})")
    return [sys.executable, "-c", code]


def test_kill_save_before_the_old_model_steps_aside(saved_model, tmp_path):
    folder = shutil.copytree(saved_model, tmp_path / "model")
    before = snapshot(folder)
    kill_when_paused(save_over(folder), pause_line(folder))  # move_into_place's first pause: the new copy is built
    assert snapshot(folder) == before and leftovers(tmp_path) == [f".model.partial-{_only_pid(tmp_path)}"]
    recover_interrupted(folder)
    assert snapshot(folder) == before and not leftovers(tmp_path)


@pytest.mark.parametrize("recovery", ["recover_interrupted", "next_save"])
def test_kill_save_while_the_old_model_is_aside(saved_model, tmp_path, recovery):
    """Killed between the two renames of move_into_place: the old model is `.model.replaced-PID`, nothing at the name.
    Recovery puts the complete old model back (and the next save then replaces it as usual)."""
    folder = shutil.copytree(saved_model, tmp_path / "model")
    before = snapshot(folder)
    kill_when_paused(save_over(folder), aside_pause_line(folder))
    pid = _only_pid(tmp_path)
    assert not folder.exists() and leftovers(tmp_path) == [f".model.partial-{pid}", f".model.replaced-{pid}"]
    if recovery == "recover_interrupted":
        recover_interrupted(folder)
        assert snapshot(folder) == before  # the old model, complete, at its name
    else:
        import hf_attnres
        from tests.helpers.model_factory import tiny_model

        hf_attnres.save(tiny_model("full", num_layers=4, seed=3), folder)
        assert json.loads((folder / "config.json").read_text())["attn_res_mode"] == "full"
    assert not leftovers(tmp_path)


def _only_pid(folder) -> str:
    """The writer id of the leftovers in `folder` (one killed writer)."""
    pids = {name.rsplit("-", 1)[1] for name in leftovers(folder)}
    assert len(pids) == 1, pids
    return pids.pop()


def test_kill_atomic_write(tmp_path):
    target = tmp_path / "results.json"
    target.write_text('{"old": 1}')
    code = (f"from hf_attnres.folders.atomic_io import write_json_atomic; "
            f"write_json_atomic({str(target)!r}, {{'new': 2}})")
    kill_when_paused([sys.executable, "-c", code])
    assert target.read_text() == '{"old": 1}' and leftovers(tmp_path, ".tmp-")
    write_json_atomic(target, {"next": 3})  # the next write cleans the dead writer's temporary file
    assert json.loads(target.read_text()) == {"next": 3} and not leftovers(tmp_path, ".tmp-")


def test_killed_run_leaves_no_lock(tmp_path):
    out = tmp_path / "run"
    code = ("import sys, time; from hf_attnres.training.state import output_lock\n"
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
