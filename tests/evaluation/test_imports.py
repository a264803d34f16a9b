"""Import directions of the tools (read from the sources, so a lazy import inside a function counts too): evaluation
imports neither the study nor the commands, conversion does not import evaluation, and within evaluation the data
layout imports the task definitions, never the reverse."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "attnres"


def imported_modules(path: Path, root: Path = PACKAGE.parent) -> set[str]:
    """Absolute names of every module `path` (under `root`) imports, relative imports resolved against its package."""
    package = ".".join(path.relative_to(root).with_suffix("").parts[:-1])
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package if node.level else ""
            module = ".".join(p for p in (base, node.module) if p)
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)  # `from . import data`
    return found


def imports_from(folder: str) -> dict[str, set[str]]:
    return {str(p.relative_to(PACKAGE)): imported_modules(p) for p in sorted((PACKAGE / folder).rglob("*.py"))}


@pytest.mark.parametrize("folder, forbidden", [
    ("evaluation", ("attnres.study", "attnres.cli")),
    ("conversion", ("attnres.evaluation",)),
])
def test_tools_import_in_one_direction(folder, forbidden):
    wrong = {name: sorted(m for m in modules if m.startswith(forbidden)) for name, modules in imports_from(folder).items()}
    assert not {name: mods for name, mods in wrong.items() if mods}


def test_task_definitions_do_not_import_the_data_layout():
    modules = imports_from("evaluation")
    assert "attnres.evaluation.tasks" in modules["evaluation/data.py"]  # the one direction
    assert not [m for m in modules["evaluation/tasks.py"] if m.startswith("attnres.evaluation.data")]


def test_imported_modules_resolves_relative_imports(tmp_path):
    """The parser itself (a checker that never finds anything proves nothing)."""
    source = tmp_path / "attnres" / "evaluation" / "tasks.py"
    source.parent.mkdir(parents=True)
    source.write_text("from .data import MATH_SUBJECTS\nfrom ..atomic_io import write_json_atomic\n"
                      "def later():\n    from ..study import grid\n    import attnres.cli.study\n")
    assert imported_modules(source, root=tmp_path) == {
        "attnres.evaluation.data", "attnres.evaluation.data.MATH_SUBJECTS", "attnres.atomic_io",
        "attnres.atomic_io.write_json_atomic", "attnres.study", "attnres.study.grid", "attnres.cli.study"}
