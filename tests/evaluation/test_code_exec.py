"""Model-written code (HumanEval) runs only when allowed, and isolated: no inherited environment, a memory cap, a
timeout."""
from __future__ import annotations

import pytest

from attnres.evaluation.code_exec import ALLOW_ENV, CodeExecutionRefused, run_program


def test_code_execution_refused_without_opt_in(monkeypatch):
    monkeypatch.delenv(ALLOW_ENV, raising=False)
    with pytest.raises(CodeExecutionRefused, match="--allow-code-execution"):
        run_program("print('hello')")


def test_generated_code_runs_isolated_and_infinite_loop_is_killed(monkeypatch):
    monkeypatch.setenv(ALLOW_ENV, "1")
    assert run_program("assert 1 + 1 == 2") == "passed"
    assert run_program("assert 1 + 1 == 3") == "failed"
    assert run_program("import os\nassert 'ALLOW' not in str(os.environ)") == "passed"  # no inherited environment
    assert run_program("x = bytearray(2**31)", memory_mb=256) == "failed"  # the memory cap
    assert run_program("while True:\n    pass", timeout_s=1.0) == "timeout"
