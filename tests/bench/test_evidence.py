"""The GPU evidence run (hf_attnres/bench/evidence.py; its command line hf_attnres/cli/gpu_evidence.py) on CPU with
stand-in steps: steps run in order, each writes its status the moment it ends, a rerun skips the finished ones and
reruns a failed or capped one, a cap kills the step's whole process group, a step that tested or measured nothing is
"not run" (never "ok"), a recorded "ok" counts only with its exit code and its result files' checksums, one run per
OUT, a relative OUT is the caller's, SIGINT / SIGTERM stop the step's group and record it, and bad flags or an OUT
that cannot be made are one line with nothing written."""
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch

from hf_attnres.bench import evidence
from hf_attnres.bench.args import EvidenceArgs
from hf_attnres.bench.evidence import REPO, STATUS_FILE, Step, default_steps, read_status, run_evidence, run_steps
from hf_attnres.cli.gpu_evidence import main
from hf_attnres.training.state import output_lock

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
    # a zombie's state is Z with modifiers (N under nice, + in the foreground): it has exited
    assert alive == "" or alive.startswith("Z"), f"the step's child {child} survived the cap ({alive})"


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
                          cwd=REPO, timeout=120)
    assert done.returncode == 0
    for name in ("cuda_lane", "kernels", "decode_b1", "decode_b32", "inkling2", "continued", "OUT"):
        assert name in done.stdout


def default_step(name: str, out, command) -> Step:
    """The default step `name` (its result files and how they are judged) with a stand-in command."""
    step = next(s for s in default_steps(out, None, None, None) if s.name == name)
    step.command, step.needs_cuda = command, False  # the stand-in runs on CPU
    return step


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine without CUDA")
def test_without_cuda_the_lane_is_not_run_and_the_summary_says_so(tmp_path, capsys):
    out = tmp_path / "out"
    assert main([str(out), "--only", "cuda_lane"]) == 1
    status = read_status(out / "cuda_lane")
    assert status["status"] == "not run" and "no CUDA device" in status["why"], status
    assert not (out / "cuda_lane" / "log.txt").exists(), "the lane was started"
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert "all ok" not in last and "not run: cuda_lane" in last, last


def test_a_step_that_needs_cuda_does_not_start_where_there_is_none(tmp_path, monkeypatch):
    monkeypatch.setattr(evidence, "cuda_missing", lambda: "no CUDA device: stand-in")
    step = default_step("decode_b1", tmp_path, writer(MEASURED, COUNT))
    step.needs_cuda = True
    status = run_steps(tmp_path, [step], log=quiet)["decode_b1"]
    assert status["status"] == "not run" and status["why"] == "no CUDA device: stand-in", status
    assert not (tmp_path / "decode_b1" / "n").exists(), "the step started"
    monkeypatch.setattr(evidence, "cuda_missing", lambda: None)  # the GPU machine's later run into the same OUT
    assert run_steps(tmp_path, [step], log=quiet)["decode_b1"]["status"] == "ok"


def lane_stand_in(tmp_path, body: str):
    """The CUDA lane's command line on a test file of its own: pytest with a JUnit XML in the step's folder."""
    tests = tmp_path / "lane_tests"
    tests.mkdir(exist_ok=True)
    (tests / "test_lane.py").write_text(body)
    return lambda d: [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={d / 'junit.xml'}",
                      str(tests)]


SKIPPING = ("import pytest\nneeds = pytest.mark.skipif(True, reason='needs a CUDA GPU')\n"
            "@needs\ndef test_a(): pass\n@needs\ndef test_b(): pass\n")


def test_a_lane_whose_tests_all_skip_is_not_run_reported_so_and_run_again(tmp_path, capsys):
    step = default_step("cuda_lane", tmp_path, lane_stand_in(tmp_path, SKIPPING))
    args = EvidenceArgs(out=tmp_path / "out")
    assert run_evidence(args, ["cuda_lane"], {}, steps=[step]) == 1
    status = read_status(tmp_path / "out" / "cuda_lane")
    assert status["status"] == "not run" and status["rc"] == 0, status
    assert "all 2 tests skipped" in status["why"] and "needs a CUDA GPU" in status["why"], status
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert "all ok" not in last and "not run: cuda_lane" in last, last
    # a later run (the GPU machine's) runs it again: its log holds two pytest sessions
    run_evidence(args, ["cuda_lane"], {}, steps=[step])
    assert (tmp_path / "out" / "cuda_lane" / "log.txt").read_text().count("2 skipped") == 2


def test_a_lane_that_collected_no_test_is_not_run(tmp_path):
    step = default_step("cuda_lane", tmp_path, lane_stand_in(tmp_path, "CASES = []\n"))
    status = run_steps(tmp_path, [step], log=quiet)["cuda_lane"]
    assert status["status"] == "not run" and status["rc"] == 5, status


def test_a_lane_that_ran_some_tests_is_ok_with_the_skips_noted(tmp_path):
    body = SKIPPING + "def test_c(): pass\n"
    step = default_step("cuda_lane", tmp_path, lane_stand_in(tmp_path, body))
    status = run_steps(tmp_path, [step], log=quiet)["cuda_lane"]
    assert status["status"] == "ok" and "1 passed" in status["note"] and "2 skipped" in status["note"], status


NOTHING_MEASURED = {  # what each benchmark step writes when it measured nothing, as its command writes it
    "kernels": {"kernels.json": {"results": [{"impl": "fla", "unavailable": "not installed"}]}},
    "decode_b1": {"model_b1.json": {"results": []}},
    "decode_b32": {"model_b32.json": {"results": []}},
    "inkling2": {"inkling2.json": {"results": []}},
    "continued": {"study/summary.json": {"runs": {}}, "study/summary.md": "no runs"},
}


def writer(files: dict, then: str = ""):
    """A stand-in step that writes `files` ({relative path: JSON value or text}) into its folder (`d`), runs the code
    `then` and exits 0."""
    code = ("import json, sys, pathlib; d = pathlib.Path(sys.argv[1]); files = json.loads(sys.argv[2])\n"
            "for name, value in files.items():\n"
            "    (d / name).parent.mkdir(parents=True, exist_ok=True)\n"
            "    (d / name).write_text(value if isinstance(value, str) else json.dumps(value))\n" + then)
    return lambda folder: [PY, "-c", code, str(folder), json.dumps(files)]

@pytest.mark.parametrize("name", NOTHING_MEASURED)
def test_a_benchmark_step_that_measured_nothing_is_not_run(tmp_path, name):
    step = default_step(name, tmp_path, writer(NOTHING_MEASURED[name]))
    status = run_steps(tmp_path, [step], log=quiet)[name]
    assert status["status"] == "not run" and status["why"], status


def test_kernels_with_every_implementation_unavailable_is_not_run(tmp_path):
    """The kernels step's verdict on what bench-kernels itself writes when nothing could run (a peer not installed)."""
    step = default_step("kernels", tmp_path, lambda d: [
        PY, "-m", "hf_attnres", "bench-kernels", "--device", "cpu", "--hidden", "64", "--sources", "2", "--tokens",
        "64", "--impls", "fla", "--peers-path", str(tmp_path / "no-peers"), "--output", str(d / "kernels.json")])
    status = run_steps(tmp_path, [step], log=quiet)["kernels"]
    assert status["status"] == "not run" and "not installed" in status["why"], status


@pytest.mark.parametrize("files", [{}, {"model_b1.json": "not JSON"}, {"model_b1.json": {"results": "none"}}],
                         ids=["missing", "not_json", "no_results_list"])
def test_exit_code_0_without_a_readable_result_file_is_failed(tmp_path, files):
    step = default_step("decode_b1", tmp_path, writer(files))
    status = run_steps(tmp_path, [step], log=quiet)["decode_b1"]
    assert status["status"] == "failed" and "model_b1.json" in status["why"], status


MEASURED = {"model_b1.json": {"results": [{"mode": "block", "phase": "decode", "seconds": 0.5}]}}


COUNT = "n = d / 'n'; n.write_text(str(int(n.read_text()) + 1) if n.exists() else '1')\n"  # the step's runs

EDITS = {
    "hand_written_ok": lambda d: (d / STATUS_FILE).write_text('{"status": "ok"}'),
    "result_deleted": lambda d: (d / "model_b1.json").unlink(),
    "result_changed": lambda d: (d / "model_b1.json").write_text('{"results": [{"seconds": 0.1}]}'),
    "exit_code_not_0": lambda d: (d / STATUS_FILE).write_text(
        json.dumps(dict(json.loads((d / STATUS_FILE).read_text()), rc=1))),
}


@pytest.mark.parametrize("edit", EDITS.values(), ids=EDITS.keys())
def test_a_recorded_ok_counts_only_with_exit_code_0_and_its_result_files_unchanged(tmp_path, edit):
    step = default_step("decode_b1", tmp_path, writer(MEASURED, COUNT))
    assert run_steps(tmp_path, [step], log=quiet)["decode_b1"]["status"] == "ok"
    run_steps(tmp_path, [step], log=quiet)
    assert (tmp_path / "decode_b1" / "n").read_text() == "1", "an untouched ok step ran again"
    edit(tmp_path / "decode_b1")
    assert run_steps(tmp_path, [step], log=quiet)["decode_b1"]["status"] == "ok"
    assert (tmp_path / "decode_b1" / "n").read_text() == "2", "a step whose recorded ok is not proven was skipped"


def test_a_second_run_into_the_same_out_is_refused_naming_the_holder(tmp_path, capsys):
    out = tmp_path / "out"
    with output_lock(out, flag="OUT"):  # what the first run holds while it runs
        assert main([str(out), "--only", "inkling2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(out) in err and f"pid {os.getpid()}" in err, err
    assert not (out / "inkling2").exists()


def test_relative_paths_are_the_callers_when_the_steps_get_them(tmp_path, monkeypatch):
    (tmp_path / "peers").mkdir()
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    seen = []
    monkeypatch.setattr(evidence, "run_evidence", lambda args, only, caps: seen.append(args) or 0)
    monkeypatch.chdir(tmp_path)
    assert main(["out", "--peers", "peers", "--source", "model", "--data", "."]) == 0
    assert (seen[0].out, seen[0].peers, seen[0].source, seen[0].data) == (
        tmp_path / "out", tmp_path / "peers", tmp_path / "model", tmp_path)


def test_a_relative_out_is_the_callers_not_the_repositorys(tmp_path):
    name = f"evidence-relative-{os.getpid()}"
    done = subprocess.run(["bash", str(REPO / "scripts" / "gpu_evidence.sh"), name, "--only", "inkling2", "--cap",
                           "inkling2=1"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr  # not ok: not run without CUDA, capped (1 s) with it
    assert read_status(tmp_path / name / "inkling2") is not None, done.stdout + done.stderr
    assert not (REPO / name).exists()


def under_a_file(tmp):
    (tmp / "notes").write_text("x")
    return tmp / "notes" / "out"


UNCREATABLE = {
    "under_a_file": under_a_file,
    "in_proc": lambda tmp: "/proc/attnres-evidence/out",
    "name_too_long": lambda tmp: tmp / "new" / ("x" * 300) / "out",  # mkdir would make new/ before failing
}


@pytest.mark.parametrize("make", UNCREATABLE.values(), ids=UNCREATABLE.keys())
def test_an_out_that_cannot_be_created_is_one_line_naming_it(tmp_path, capsys, make):
    out = make(tmp_path)
    before = sorted(tmp_path.rglob("*"))
    assert main([str(out), "--only", "inkling2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: OUT ") and str(out) in err and err.count("\n") == 1, err
    assert sorted(tmp_path.rglob("*")) == before and not os.path.exists(out)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes in any folder")
def test_an_out_without_write_permission_is_one_line_naming_it(tmp_path, capsys):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    assert main([str(locked / "out"), "--only", "inkling2"]) == 2
    err = capsys.readouterr().err
    assert "not writable" in err and str(locked) in err and err.count("\n") == 1, err


# A step whose process starts a child (both sleep) and records both pids; the run is stopped while they sleep.
SLEEPER = ("import subprocess, sys, time, pathlib; d = pathlib.Path(sys.argv[1]); "
           f"c = subprocess.Popen([{PY!r}, '-c', 'import time; time.sleep(120)']); "
           "import os; (d / 'pids.tmp').write_text(f'{os.getpid()} {c.pid}'); (d / 'pids.tmp').rename(d / 'pids'); "
           "time.sleep(120)")
RUNNER = ("import sys; from pathlib import Path; from hf_attnres.bench.args import EvidenceArgs; "
          "from hf_attnres.bench.evidence import Step, run_evidence; "
          f"step = Step('slow', 300, lambda d: [sys.executable, '-c', {SLEEPER!r}, str(d)]); "
          "sys.exit(run_evidence(EvidenceArgs(out=Path(sys.argv[1])), ['slow'], {}, steps=[step]))")


def alive(pid: int) -> bool:
    state = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True).stdout.strip()
    return state != "" and not state.startswith("Z")  # Z with modifiers (N, +) is a zombie: it has exited


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_signal_stops_the_steps_process_group_records_it_and_exits_130(tmp_path, sig):
    out = tmp_path / "out"
    run, pids = start_runner(out)
    run.send_signal(sig)
    stdout, stderr = run.communicate(timeout=60)
    assert run.returncode == 130, stdout + stderr
    assert "Traceback" not in stderr and stderr.count(f"stopped by {sig.name}") == 1, stderr
    status = read_status(out / "slow")
    assert status["status"] == "interrupted" and sig.name in status["why"], status
    time.sleep(0.5)
    survivors = [pid for pid in map(int, pids.read_text().split()) if alive(pid)]
    assert not survivors, f"the step's processes {survivors} outlived the run"


def as_from_a_terminal(also=None):
    """A child's signals as a terminal's foreground job has them: SIGINT and SIGHUP at their defaults. A shell that
    starts a job in the background sets SIGINT ignored, `nohup` sets SIGHUP ignored (CI's runner may do either), the
    child inherits that, and the run rightly keeps a signal ignored at its start; `also`: more set-up in the child."""
    def setup():
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        if also is not None:
            also()
    return setup


def start_runner(out, preexec_fn=None):
    """RUNNER in a process of its own, once its step's two processes are up: (the run, the pids file)."""
    run = subprocess.Popen([PY, "-c", RUNNER, str(out)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, preexec_fn=as_from_a_terminal(preexec_fn))
    pids = out / "slow" / "pids"
    deadline = time.time() + 240
    while not pids.exists() and run.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    assert pids.exists(), run.communicate(timeout=60)
    return run, pids


def test_a_signal_ignored_at_the_start_stays_ignored(tmp_path):
    """Under nohup (SIGHUP ignored) a closed terminal must not stop the run; Ctrl-C still does."""
    run, pids = start_runner(tmp_path / "out", preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    run.send_signal(signal.SIGHUP)
    time.sleep(1.5)
    assert run.poll() is None and all(alive(int(pid)) for pid in pids.read_text().split())
    run.send_signal(signal.SIGINT)
    assert run.wait(timeout=60) == 130


@pytest.mark.parametrize("after", [0.3, 1.0], ids=["early", "late"])
def test_ctrl_c_while_the_script_starts_is_one_quiet_exit_130(tmp_path, after):
    """Wherever the signal lands in the imports (a finalizer, a lazy import's error wrapper), the exit is 130."""
    out = tmp_path / "out"
    run = subprocess.Popen(["bash", str(REPO / "scripts" / "gpu_evidence.sh"), str(out), "--only", "cuda_lane"],
                           cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           preexec_fn=as_from_a_terminal())
    cmdline = f"/proc/{run.pid}/cmdline"
    deadline = time.time() + 60
    while run.poll() is None and time.time() < deadline and b"gpu_evidence" not in open(cmdline, "rb").read():
        time.sleep(0.01)
    time.sleep(after)  # python runs, its imports (torch, transformers) take seconds
    run.send_signal(signal.SIGINT)
    stdout, stderr = run.communicate(timeout=120)
    assert run.returncode == 130 and "Traceback" not in stderr, (run.returncode, stdout + stderr)


class SignalsItselfWhenCollected:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)  # Python runs the handler here, inside the finalizer, where a raised exception is dropped


def test_a_stop_signal_that_lands_in_a_finalizer_still_stops_the_run():
    # at its default, as in a terminal: the run keeps a signal it was started with ignored, and a runner may ignore it
    outer = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        with evidence.stop_on_signals() as check:
            SignalsItselfWhenCollected()  # collected at once
            with pytest.raises(evidence.Interrupted) as stop:
                check()
        assert stop.value.name == "SIGTERM" and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, outer)


def test_a_stop_while_a_step_waits_stops_its_process_group_without_waiting_for_the_cap(tmp_path):
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    outer = signal.signal(signal.SIGTERM, signal.SIG_DFL)  # at its default, as above
    try:
        with evidence.stop_on_signals() as check:
            started = time.monotonic()
            threading.Timer(1.0, os.kill, [os.getpid(), signal.SIGTERM]).start()  # mid-wait
            with pytest.raises(evidence.Interrupted) as stop:
                evidence.run_capped(sleeper, 300, tmp_path / "log.txt", {}, check)
    finally:
        signal.signal(signal.SIGTERM, outer)
    assert time.monotonic() - started < 30 and stop.value.details["rc"] != 0
