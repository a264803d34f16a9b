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


@pytest.mark.parametrize("hashed_bytes", [1 << 20, 0], ids=["content", "metadata"])
def test_file_stamp_sees_a_rewrite_that_keeps_size_and_mtime(tmp_path, monkeypatch, hashed_bytes):
    """A small file counts by content, a large one (weights) by size, mtime and ctime: rewriting either with the same
    size and its old mtime set back (`cp -p`, `touch -r`) changes the stamp; leaving it alone does not."""
    import os
    import time

    from hf_attnres.evaluation import runner

    monkeypatch.setattr(runner, "HASHED_BYTES", hashed_bytes)
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"0" * 64)
    stat = path.stat()
    before = runner.file_stamp(path)
    assert runner.file_stamp(path) == before
    time.sleep(0.01)
    path.write_bytes(b"1" * 64)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size and path.stat().st_mtime_ns == stat.st_mtime_ns
    assert runner.file_stamp(path) != before


def test_model_stamp_covers_every_file_the_model_loads(tmp_path):
    from hf_attnres.evaluation.runner import model_stamp

    for name in ("config.json", "model.safetensors", "tokenizer.model", "README.md"):
        (tmp_path / name).write_text(name)
    before = model_stamp(tmp_path)
    (tmp_path / "README.md").write_text("a card")
    assert model_stamp(tmp_path) == before  # prose: no model file
    (tmp_path / "tokenizer.model").write_text("another vocabulary")
    assert model_stamp(tmp_path) != before
