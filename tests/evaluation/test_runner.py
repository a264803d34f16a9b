"""lm-eval's provenance probe (`git describe`) runs without git's "fatal: not a git repository" outside a repository,
and still records the commit inside one."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from hf_attnres.evaluation.runner import quiet_git_probe


@pytest.fixture
def outside_git(tmp_path, monkeypatch):
    if shutil.which("git") is None:
        pytest.skip("git is not installed: lm-eval's probe prints nothing")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))  # no repository above tmp_path either
    return tmp_path


def test_git_probe_is_quiet_outside_a_repository(outside_git, capfd):
    import lm_eval.evaluator as evaluator

    evaluator.get_git_commit_hash()  # the control: lm-eval's own probe prints git's complaint
    assert "not a git repository" in capfd.readouterr().err
    with quiet_git_probe():
        assert evaluator.get_git_commit_hash() is None
    assert "not a git repository" not in capfd.readouterr().err
    assert evaluator.get_git_commit_hash.__module__ == "lm_eval.loggers.utils"  # restored after the call


def test_git_probe_still_records_the_commit(outside_git):
    import lm_eval.evaluator as evaluator

    subprocess.run(["git", "init", "-q"], check=True)
    subprocess.run(["git", "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "--allow-empty", "-m", "x"],
                   check=True)
    head = subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], text=True).strip()
    with quiet_git_probe():
        assert evaluator.get_git_commit_hash() == head
