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
