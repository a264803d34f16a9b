"""Run model-written HumanEval programs: only on explicit opt-in, in a separate process with a wall-clock timeout, a
memory cap and no access to this process's environment. Offline: no Hub download of `evaluate`'s `code_eval`.

This is a guard against accidents (runaway loops, memory blow-ups), not a security sandbox: run untrusted models'
code in a container or VM.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

ALLOW_ENV = "ATTNRES_ALLOW_CODE_EXECUTION"
TIMEOUT_S = float(os.environ.get("ATTNRES_CODE_TIMEOUT_S", "10"))
MEMORY_MB = int(os.environ.get("ATTNRES_CODE_MEMORY_MB", "1024"))


class CodeExecutionRefused(RuntimeError):
    pass


def _limits(memory_mb: int, timeout_s: float):
    def apply():
        import resource

        cap = memory_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        resource.setrlimit(resource.RLIMIT_CPU, (int(timeout_s) + 1, int(timeout_s) + 1))
        resource.setrlimit(resource.RLIMIT_FSIZE, (16 * 2**20, 16 * 2**20))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return apply


def run_program(program: str, timeout_s: float = TIMEOUT_S, memory_mb: int = MEMORY_MB) -> str:
    """'passed', 'failed' or 'timeout'. Refused unless ATTNRES_ALLOW_CODE_EXECUTION=1 (set by --allow-code-execution)."""
    if os.environ.get(ALLOW_ENV) != "1":
        raise CodeExecutionRefused(
            "HumanEval runs code the model wrote: pass --allow-code-execution (or set ATTNRES_ALLOW_CODE_EXECUTION=1) "
            "to allow it, ideally inside a container")
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "program.py").write_text(program)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": tmp, "PYTHONDONTWRITEBYTECODE": "1",
               "HF_HUB_OFFLINE": "1", "NO_PROXY": "*"}
        proc = subprocess.Popen([sys.executable, "-I", "program.py"], cwd=tmp, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                                preexec_fn=_limits(memory_mb, timeout_s))
        try:
            return "passed" if proc.wait(timeout=timeout_s) == 0 else "failed"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the whole session: children the program forked die too
            proc.wait()
            return "timeout"


def humaneval_program(doc: dict, completion: str) -> str:
    """The official check: prompt + completion, then the task's tests and `check(entry_point)`."""
    return f"{doc['prompt']}{completion}\n\n{doc['test']}\n\ncheck({doc['entry_point']})\n"


def process_results(doc: dict, results) -> dict:
    return {"pass_at_1": float(run_program(humaneval_program(doc, results[0])) == "passed")}
