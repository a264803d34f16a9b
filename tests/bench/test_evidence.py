"""The GPU evidence run (hf_attnres/bench/evidence.py; its command line hf_attnres/cli/gpu_evidence.py) on CPU with
stand-in
steps: steps run in order, each writes its status the moment it ends, a rerun skips the finished ones and reruns a
failed or capped one, a cap kills the step's whole process group, and bad flags are one line with nothing written."""
import json
import subprocess
import sys
import time

import pytest

from hf_attnres.bench.evidence import STATUS_FILE, Step, default_steps, read_status, run_steps
from hf_attnres.cli.gpu_evidence import main

PY = sys.executable


def script(code: str):
    """A stand-in step: `python -c code` with the step's folder as argv[1]."""
    return lambda folder: [PY, "-c", code, str(folder)]


def quiet(*_):
    pass


def test_steps_run_in_order_and_each_status_is_written_when_it_ends(tmp_path):
    first = Step("first", 30, script("import sys, pathlib; pathlib.Path(sys.argv[1], 'r.txt').write_text('1')"))
    # the second step sees the first's status already on disk: written the moment the first ended
    second = Step("second", 30, script(
        "import sys, json, pathlib; d = pathlib.Path(sys.argv[1]).parent; "
        f"assert json.loads((d / 'first' / '{STATUS_FILE}').read_text())['status'] == 'ok'"))
    results = run_steps(tmp_path, [first, second], log=quiet)
    assert [results[n]["status"] for n in ("first", "second")] == ["ok", "ok"]
    assert (tmp_path / "first" / "r.txt").read_text() == "1"
    assert not list(tmp_path.rglob("*.tmp*")), "a temporary file left behind"


def test_rerun_skips_finished_steps_and_reruns_failed_and_capped_ones(tmp_path):
    counter = "import sys, pathlib; p = pathlib.Path(sys.argv[1], 'n'); p.write_text(str(int(p.read_text() or 0) + 1) if p.exists() else '1')"  # noqa: E501
    ok = Step("ok", 30, script(counter))
    fails = Step("fails", 30, script(counter + "; sys.exit(3)"))
    slow = Step("slow", 1, script(counter + "; import time; time.sleep(30)"))
    first = run_steps(tmp_path, [ok, fails, slow], log=quiet)
    assert {n: s["status"] for n, s in first.items()} == dict(ok="ok", fails="failed", slow="capped")
    assert first["fails"]["rc"] == 3 and first["slow"]["seconds"] < 15
    run_steps(tmp_path, [ok, fails, slow], log=quiet)
    runs = {n: int((tmp_path / n / "n").read_text()) for n in ("ok", "fails", "slow")}
    assert runs == dict(ok=1, fails=2, slow=2)


def test_a_cap_kills_the_steps_children_too(tmp_path):
    pid_file = tmp_path / "child.pid"
    code = ("import subprocess, sys, time; "
            f"c = subprocess.Popen([{PY!r}, '-c', 'import time; time.sleep(60)']); "
            f"open({str(pid_file)!r}, 'w').write(str(c.pid)); time.sleep(60)")
    started = time.time()
    # a cap long enough for a loaded machine to start both interpreters, far below their 60 s sleeps
    status = run_steps(tmp_path, [Step("parent", 12, script(code))], log=quiet)["parent"]
    assert status["status"] == "capped" and time.time() - started < 40
    child = int(pid_file.read_text())
    time.sleep(0.5)
    alive = subprocess.run(["ps", "-o", "stat=", "-p", str(child)], capture_output=True, text=True).stdout.strip()
    assert alive in ("", "Z", "Z+"), f"the step's child {child} survived the cap ({alive})"


def test_a_damaged_status_is_not_finished(tmp_path):
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / STATUS_FILE).write_text('{"status": "ok"')  # cut short
    assert read_status(tmp_path / "s") is None
    assert run_steps(tmp_path, [Step("s", 30, script("pass"))], log=quiet)["s"]["status"] == "ok"


def test_default_steps_in_order_with_caps_within_30_minutes(tmp_path):
    steps = default_steps(tmp_path, tmp_path / "peers", None, None, caps={"kernels": 60})
    assert [s.name for s in steps] == ["cuda_lane", "kernels", "decode_b1", "decode_b32", "inkling2", "continued"]
    assert steps[1].cap == 60
    assert sum(s.cap for s in default_steps(tmp_path, None, None, None)) <= 30 * 60
    kernels = steps[1].command(tmp_path / "kernels")
    assert "7168" in kernels and "2,5,9" in kernels and "8192,32768" in kernels and str(tmp_path / "peers") in kernels
    assert "far_torch," not in ",".join(kernels) + ","  # the peers' max-autotune function stays out of the cap


def test_continued_step_reads_the_local_source_and_corpus(tmp_path):
    source, data = tmp_path / "model", tmp_path / "corpus"
    step = default_steps(tmp_path, None, source, data)[-1]
    command = step.command(tmp_path / "continued")
    grid = json.loads((tmp_path / "continued-gpu.json").read_text())
    assert grid["source"] == str(source) and grid["data"]["dir"] == str(data)
    assert str(tmp_path / "continued-gpu.json") in command


BAD = {
    "unknown_step": (["--only", "kernels,nope"], ["--only", "nope"]),
    "cap_not_a_number": (["--cap", "kernels=soon"], ["--cap", "STEP=SECONDS"]),
    "cap_unknown_step": (["--cap", "nope=10"], ["--cap", "nope"]),
    "cap_zero": (["--cap", "kernels=0"], ["--cap", "> 0"]),
    "missing_peers": (["--peers", "{tmp}/nowhere"], ["--peers", "nowhere"]),
    "source_not_a_model": (["--source", "{tmp}"], ["--source", "config.json"]),
}


@pytest.mark.parametrize("flags, named", BAD.values(), ids=BAD.keys())
def test_bad_flags_one_line_nothing_written(tmp_path, capsys, flags, named):
    out = tmp_path / "out"
    assert main([str(out), *(f.format(tmp=tmp_path) for f in flags)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and err.count("\n") == 1 and "Traceback" not in err, err
    for name in named:
        assert name in err, err
    assert not out.exists()


def test_out_that_is_a_file_refused(tmp_path, capsys):
    out = tmp_path / "out"
    out.write_text("notes")
    assert main([str(out)]) == 2 and "is a file" in capsys.readouterr().err
    assert out.read_text() == "notes"


def test_help_names_every_step():
    done = subprocess.run(["bash", "scripts/gpu_evidence.sh", "--help"], capture_output=True, text=True,
                          cwd=str(__import__("hf_attnres.bench.evidence", fromlist=["REPO"]).REPO), timeout=120)
    assert done.returncode == 0
    for name in ("cuda_lane", "kernels", "decode_b1", "decode_b32", "inkling2", "continued", "OUT"):
        assert name in done.stdout
