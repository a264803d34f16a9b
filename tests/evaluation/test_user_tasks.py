"""A user's own lm-eval tasks (--include-path) through compare (hf_attnres.evaluation.user_tasks): a task YAML lm-eval
would skip or a !function module that is missing, raises or exits is one line naming the task, the file and the
reason; a !!python tag never runs; an include stays inside the folder; the task's data file, wherever it lies, is
part of the cache key of its results."""
from __future__ import annotations

import json

import pytest

from hf_attnres.cli.compare import main as compare_main
from hf_attnres.evaluation.comparison import CompareError
from hf_attnres.evaluation.user_tasks import TaskFileError, read_task_yaml
from tests.helpers.bad_input_fixtures import expect_refused
from tests.helpers.toolchain_fixtures import tiny_folder

# lm-eval's task index and two tiny models: about 3 min on 2 CPU cores
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("offline")]

TASK_YAML = """task: {name}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {rows}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{q}}}}"
doc_to_choice: choices
doc_to_target: gold
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
"""


def write_rows(path, gold: int):
    rows = [{"q": f"The number {i} is", "choices": [" one", " two"], "gold": gold} for i in range(2)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("user_tasks")
    (root / "outside").mkdir()
    (root / "outside" / "base.yaml").write_text("output_type: multiple_choice\n")
    return dict(root=root, a=tiny_folder(root / "a", num_layers=2), b=tiny_folder(root / "b", num_layers=2, seed=1),
                rows=write_rows(root / "outside" / "rows.jsonl", 0))


def task_folder(env, name: str, files: dict) -> object:
    """A fresh --include-path folder holding a good task `mine` (its data outside the folder) and `files`."""
    folder = env["root"] / name
    folder.mkdir()
    (folder / "mine.yaml").write_text(TASK_YAML.format(name="mine", rows=env["rows"]))
    for file, text in files.items():
        (folder / file).write_text(text.format(rows=env["rows"], root=env["root"]))
    return folder


def run(env, folder, task, out):
    return compare_main([str(env["a"]), str(env["b"]), "--tasks", task, "--include-path", str(folder),
                         "--output-dir", str(out), "--device", "cpu"])


BROKEN = TASK_YAML.format(name="broken", rows="{rows}")
# name -> (files of the include folder, words the one-line error must hold besides the task and the file)
LOADING_CASES = {
    "yaml_syntax": ({"broken.yaml": "task: broken\ndoc_to_text: [unclosed\n"}, ["broken.yaml", "not valid YAML",
                                                                               "line 3"]),
    "python_tag": ({"broken.yaml": BROKEN + "process_docs: !!python/object/apply:os.system ['touch {root}/ran']\n"},
                   ["broken.yaml", "tag", "python/object/apply", "not allowed"]),
    "include_outside": ({"broken.yaml": "include: ../outside/base.yaml\ntask: broken\n"},
                        ["broken.yaml", "include ../outside/base.yaml", "outside --include-path"]),
    "include_absolute_outside": ({"broken.yaml": "include: {root}/outside/base.yaml\ntask: broken\n"},
                                 ["broken.yaml", "outside --include-path"]),
    "include_missing": ({"broken.yaml": "include: base.yaml\ntask: broken\n"}, ["include base.yaml", "no such file"]),
    "function_module_missing": ({"broken.yaml": BROKEN + "process_docs: !function nosuchmodule.process\n"},
                                ["broken.yaml", "nosuchmodule"]),
    "function_module_raises": ({"broken.yaml": BROKEN + "process_docs: !function failing.process\n",
                                "failing.py": "raise RuntimeError('no config here')\n"},
                               ["broken.yaml", "RuntimeError", "no config here", "failing.py:1"]),
    "function_module_exits_on_import": ({"broken.yaml": BROKEN + "process_docs: !function exiting.process\n",
                                         "exiting.py": "import sys\nsys.exit(0)\n"},
                                        ["broken.yaml", "sys.exit(0)", "exiting.py:2"]),
    "group_subtask_broken": ({"broken.yaml": "group: broken\ntask:\n  - sub\n",
                              "sub.yaml": "task: sub\ndoc_to_text: [unclosed\n"},
                             ["its subtask sub", "sub.yaml", "not valid YAML"]),
    "function_missing_in_module": ({"broken.yaml": BROKEN + "process_docs: !function helpers.nothing\n",
                                    "helpers.py": "def process(docs):\n    return docs\n"},
                                   ["broken.yaml", "nothing"]),
}


@pytest.mark.parametrize("files, named", LOADING_CASES.values(), ids=LOADING_CASES.keys())
def test_a_task_that_cannot_load_is_one_line_naming_task_file_and_reason(env, tmp_path, files, named):
    folder = task_folder(env, f"tasks_{tmp_path.name}", files)
    out = tmp_path / "out"
    message = expect_refused(lambda: run(env, folder, "broken", out), ["task broken", *named],
                             untouched=[folder, env["a"], env["b"]], absent=[out], errors=CompareError)
    assert "unknown task" not in message and "\n" not in message
    assert not (env["root"] / "ran").exists()  # the python tag was never constructed


def test_an_unknown_task_names_the_files_lm_eval_skipped(env, tmp_path):
    """A task name no file declares, beside a file no parser reads: the unknown-task line names that file."""
    folder = task_folder(env, "tasks_unknown", {"odd.yaml": "{{not: [yaml\n"})
    message = expect_refused(lambda: run(env, folder, "elsewhere", tmp_path / "out"),
                             ["unknown task", "elsewhere", "odd.yaml", "not valid YAML"], errors=CompareError)
    assert "\n" not in message


MID_RUN_CASES = {"exit_0": ("sys.exit(0)", "sys.exit(0)"), "exit_3": ("sys.exit(3)", "sys.exit(3)"),
                 "raises": ("raise ValueError('no such doc')", "ValueError: no such doc")}


@pytest.mark.parametrize("body, named", MID_RUN_CASES.values(), ids=MID_RUN_CASES.keys())
def test_task_code_that_ends_mid_run_is_an_error_naming_task_and_module(env, tmp_path, body, named):
    """A !function the evaluation calls (not at import) exits, even with 0, or raises: a non-zero exit with one
    line naming the task and the module's line, no report."""
    folder = task_folder(env, f"tasks_{tmp_path.name}", {
        "quits.yaml": TASK_YAML.format(name="quits", rows=env["rows"]) + "process_docs: !function quitter.process\n",
        "quitter.py": f"import sys\n\n\ndef process(docs):\n    {body}\n"})
    out = tmp_path / "out"
    import sys

    saved, sys.argv = sys.argv, ["compare", str(env["a"]), str(env["b"]), "--tasks", "quits", "--include-path",
                                 str(folder), "--output-dir", str(out), "--device", "cpu"]
    try:
        with pytest.raises(SystemExit) as info:
            compare_main()
    finally:
        sys.argv = saved
    message = str(info.value.code)
    assert message.startswith("error: task quits") and named in message and "quitter.py:5" in message
    assert "\n" not in message and not (out / "report.md").exists()


def test_changed_data_outside_the_include_path_is_evaluated_anew(env, tmp_path):
    """The task's data file lies outside --include-path: flipping its gold answers flips every item's result,
    never a cached reuse of the old ones."""
    rows = write_rows(tmp_path / "rows.jsonl", 0)
    folder = tmp_path / "tasks"
    folder.mkdir()
    (folder / "flip.yaml").write_text(TASK_YAML.format(name="flip", rows=rows))
    out = tmp_path / "out"
    first = run(env, folder, "flip", out)["tasks"]["flip"]["acc,none"]
    items = json.loads((out / "results" / "b" / "flip.json").read_text())["items"]["acc,none"]
    write_rows(rows, 1)
    second = run(env, folder, "flip", out)["tasks"]["flip"]["acc,none"]
    flipped = json.loads((out / "results" / "b" / "flip.json").read_text())["items"]["acc,none"]
    assert flipped == {key: 1.0 - value for key, value in items.items()}
    assert second["models"]["a"]["mean"] == pytest.approx(1.0 - first["models"]["a"]["mean"])


def test_read_task_yaml_merges_includes_inside_the_folder(tmp_path):
    (tmp_path / "base.yaml").write_text("output_type: multiple_choice\nprocess_docs: !function utils.process\n")
    (tmp_path / "task.yaml").write_text("include: base.yaml\ntask: mine\n")
    config, files = read_task_yaml(tmp_path / "task.yaml", tmp_path)
    assert config == {"output_type": "multiple_choice", "process_docs": "utils.process", "task": "mine"}
    assert files == [(tmp_path / "task.yaml").resolve(), (tmp_path / "base.yaml").resolve()]
    (tmp_path / "loop.yaml").write_text("include: loop.yaml\ntask: loop\n")
    with pytest.raises(TaskFileError, match="include cycle"):
        read_task_yaml(tmp_path / "loop.yaml", tmp_path)
    for text, got in (("", "an empty file"), ("- task: mine\n", "a YAML list")):
        (tmp_path / "odd.yaml").write_text(text)
        with pytest.raises(TaskFileError, match=f"odd.yaml: not a task config \\(a YAML mapping\\): {got}"):
            read_task_yaml(tmp_path / "odd.yaml", tmp_path)


def test_an_include_of_lm_evals_own_templates_is_allowed(tmp_path):
    """Official task templates are the usual base of a user's task: lm-eval's installed task folder is no outside."""
    from hf_attnres.evaluation.tasks import lm_eval_tasks_dir

    template = lm_eval_tasks_dir() / "mmlu" / "default" / "_default_template_yaml"
    (tmp_path / "mine.yaml").write_text(f"include: {template}\ntask: mine\n")
    config, files = read_task_yaml(tmp_path / "mine.yaml", tmp_path)
    assert config["task"] == "mine" and files[1] == template.resolve() and len(config) > 2
