"""The lm-eval task templates are package data inside hf_attnres.evaluation (so an installed wheel has them), every task
of TASKS has its template, and render_tasks refuses a missing or empty template folder instead of writing nothing."""
from __future__ import annotations

from pathlib import Path

import pytest

import hf_attnres.evaluation
from hf_attnres.evaluation.tasks import TASKS, TEMPLATES, render_tasks


def test_templates_ship_inside_the_package():
    assert TEMPLATES.is_relative_to(Path(hf_attnres.evaluation.__file__).resolve().parent)
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
    from hf_attnres.evaluation.tasks import private_tasks

    (tmp_path / "eval" / "mmlu" / "anatomy").mkdir(parents=True)
    in_data = render_tasks(tmp_path / "eval", ["mmlu", "gpqa"])
    private = private_tasks(tmp_path / "eval", ["mmlu", "gpqa"])
    assert not private.resolve().is_relative_to((tmp_path / "eval").resolve())
    files = {p.relative_to(private): p.read_text() for p in private.rglob("*") if p.is_file()}
    assert files == {p.relative_to(in_data): p.read_text() for p in in_data.rglob("*") if p.is_file()}
    assert private_tasks(tmp_path / "eval", ["mmlu", "gpqa"]) == private
    assert (private.parent.stat().st_mode & 0o077) == 0
@pytest.mark.slow
def test_the_documented_task_listing_lists_the_rendered_tasks(tmp_path):
    """`attnres compare --help` and the README tell how to list the rendered tasks: lm-eval's own listing
    over data/eval/tasks, the folder prepare-eval-data renders into by default."""
    import os
    import re
    import subprocess
    import sys

    from hf_attnres.cli.compare import build_parser
    from hf_attnres.evaluation.data import DEFAULT_EVAL_DATA
    from hf_attnres.evaluation.tasks import TASKS_DIR

    documented = re.search(r"lm-eval ls tasks --include_path (\S+) \| grep attnres_", build_parser().format_help())
    assert documented and Path(documented.group(1)) == DEFAULT_EVAL_DATA / TASKS_DIR
    (tmp_path / "eval" / "mmlu" / "anatomy").mkdir(parents=True)
    tasks = render_tasks(tmp_path / "eval", ["mmlu", "triviaqa"])
    result = subprocess.run([sys.executable, "-m", "lm_eval", "ls", "tasks", "--include_path", str(tasks)],
                            capture_output=True, text=True, timeout=600, cwd=tmp_path,
                            env=dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "attnres_mmlu_bpb" in result.stdout and "attnres_triviaqa_bpb" in result.stdout
