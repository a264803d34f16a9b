"""The lm-eval task templates are package data inside attnres.evaluation (so an installed wheel has them), every task
of TASKS has its template, and render_tasks refuses a missing or empty template folder instead of writing nothing."""
from __future__ import annotations

from pathlib import Path

import pytest

import attnres.evaluation
from attnres.evaluation.tasks import TASKS, TEMPLATES, render_tasks


def test_templates_ship_inside_the_package():
    assert TEMPLATES.is_relative_to(Path(attnres.evaluation.__file__).resolve().parent)
    names = {p.relative_to(TEMPLATES).as_posix() for p in TEMPLATES.rglob("*") if p.is_file()}
    assert "_bpb_template_yaml" in names  # what every *_bpb task includes
    for task, (benchmark, _) in TASKS.items():
        assert f"{benchmark}/{task}.yaml" in names, task


def test_render_refuses_a_missing_or_empty_template_folder(tmp_path):
    (tmp_path / "empty" / "gpqa").mkdir(parents=True)  # folders, but no template in them
    for templates in (tmp_path / "missing", tmp_path / "empty"):
        with pytest.raises(FileNotFoundError, match="no lm-eval task templates in .*reinstall attnres"):
            render_tasks(tmp_path / "eval", ["gpqa"], templates=templates)
    assert not (tmp_path / "eval").exists()  # nothing written, not even an empty task folder


def test_compare_renders_its_own_task_folder_outside_the_data(tmp_path):
    """`private_tasks`: the same YAMLs as render_tasks writes into the data folder, in a folder of this process's own
    (user-only), reused for the same rendering (lm-eval's index of it is built once)."""
    from attnres.evaluation.tasks import private_tasks

    (tmp_path / "eval" / "mmlu" / "anatomy").mkdir(parents=True)
    in_data = render_tasks(tmp_path / "eval", ["mmlu", "gpqa"])
    private = private_tasks(tmp_path / "eval", ["mmlu", "gpqa"])
    assert not private.resolve().is_relative_to((tmp_path / "eval").resolve())
    files = {p.relative_to(private): p.read_text() for p in private.rglob("*") if p.is_file()}
    assert files == {p.relative_to(in_data): p.read_text() for p in in_data.rglob("*") if p.is_file()}
    assert private_tasks(tmp_path / "eval", ["mmlu", "gpqa"]) == private
    assert (private.parent.stat().st_mode & 0o077) == 0
