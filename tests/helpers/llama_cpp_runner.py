"""llama.cpp for the serving tests: where setup_llama_cpp.sh cached it, and a child process that runs it.

Every call into llama.cpp goes through `run_llama_cpp`, in a child process: an abort inside llama.cpp (a GGML_ASSERT,
SIGILL from a wheel built for another CPU) then fails one test with llama.cpp's own message, and the suite goes on.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
SETUP = ROOT / "scripts" / "setup_llama_cpp.sh"
# The worker runs as a script, so its folder is first on its sys.path: no module there may be named llama_cpp
WORKER = Path(__file__).with_name("llama_cpp_worker.py")


class LlamaCppCrash(RuntimeError):
    """llama.cpp ended its process (abort, signal or a Python error in the worker)."""


def cache_dir() -> Path:
    """The cache folder for this machine's build flags, as setup_llama_cpp.sh names it (it builds nothing here)."""
    out = subprocess.run(["bash", str(SETUP), "--where"], capture_output=True, text=True, check=True, timeout=60)
    return Path(out.stdout.strip())


def crash_message(returncode: int, stderr: str) -> str:
    """One readable reason: llama.cpp's assert line (or the last line it wrote) and how the process ended."""
    if returncode < 0:
        how = f"killed by {signal.Signals(-returncode).name}"
    else:
        how = f"exit {returncode}"
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    asserts = [line for line in lines if "GGML_ASSERT" in line or "GGML_ABORT" in line]
    said = asserts[0] if asserts else (lines[-1] if lines else "no message")
    return f"llama.cpp ended its process ({how}): {said}"


def run_llama_cpp(model: Path, prompts: list[str], ids: list[list[int]], greedy_tokens: int, work: Path,
                  worker: Path = WORKER, timeout: float = 600) -> dict[str, np.ndarray]:
    """Load `model` in a child and return its tokenization, logits and greedy tokens per prompt (see the worker)."""
    work.mkdir(parents=True, exist_ok=True)
    request, result = work / "request.json", work / "result.npz"
    request.write_text(json.dumps(dict(model=str(model), prompts=prompts, ids=ids, greedy_tokens=greedy_tokens)))
    result.unlink(missing_ok=True)
    run = subprocess.run([sys.executable, str(worker), str(request), str(result)], capture_output=True, text=True,
                         timeout=timeout, env=dict(os.environ, PYTHONFAULTHANDLER=""))
    if run.returncode != 0 or not result.is_file():
        raise LlamaCppCrash(crash_message(run.returncode, run.stderr))
    with np.load(result) as data:
        return {name: data[name] for name in data.files}
