"""Every import the package makes resolves: module level and inside functions, relative and absolute `attnres.*`
(the command table and console scripts: tests/cli/test_commands.py).

A lazy `from .corpora import DEFAULT_CACHE` inside a function kept pointing at a module that had moved;
it ran only on a fresh machine (benchmark data not yet prepared), so the suite and CI stayed green while the README's
first command failed for every new user. This test reads the source (AST) of every module under hf_attnres/ without
importing any of it, so it sees every import statement, whichever branch or function it sits in.
"""
from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "hf_attnres"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def module_file(name: str) -> Path | None:
    """The source file of module `name` under hf_attnres/ (a .py file or a package's __init__.py), None when absent."""
    base = ROOT.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


MODULES = sorted(PACKAGE.rglob("*.py"))
BLOCKS = (ast.If, ast.Try, getattr(ast, "TryStar", ast.Try), ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith)


@cache
def top_level_names(name: str) -> frozenset[str] | None:
    """Names module `name` binds at its top level (definitions, assignments, imports; in any if/try/with/for block
    there, not inside functions or classes). None when the module can define names dynamically (a module-level
    __getattr__ or a star import), so no name check is possible from the source alone."""
    tree = ast.parse(module_file(name).read_text())
    names: set[str] = set()

    def visit(body):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    if alias.name == "*":
                        names.add("*")
                    names.add(alias.asname or alias.name.split(".")[0])
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor, ast.With,
                                   ast.AsyncWith)):
                for target in ast.walk(node):
                    if isinstance(target, ast.Name) and isinstance(target.ctx, ast.Store):
                        names.add(target.id)
            if isinstance(node, BLOCKS):
                for field in ("body", "orelse", "finalbody"):
                    visit(getattr(node, field, []))
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)

    visit(tree.body)
    if "__getattr__" in names or "*" in names:
        return None
    return frozenset(names)


def resolve_relative(importer: str, is_package: bool, level: int, module: str | None) -> str:
    """The absolute name of `from <level dots><module> import ...` in module `importer`; one that climbs above the
    attnres package comes back as "hf_attnres.<beyond the package>" (never a module, so it is reported)."""
    package = importer.split(".") if is_package else importer.split(".")[:-1]
    if level - 1 >= len(package):
        return "hf_attnres.<beyond the package>"
    base = package[: len(package) - (level - 1)]
    return ".".join([*base, *([module] if module else [])])


def imports_of(path: Path):
    """(line, target module, [names]) for every import of attnres code in `path`, wherever it sits."""
    importer, is_package = module_name(path), path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "hf_attnres":
                    yield node.lineno, alias.name, []
        elif isinstance(node, ast.ImportFrom):
            target = (resolve_relative(importer, is_package, node.level, node.module) if node.level
                      else node.module)
            if target.split(".")[0] == "hf_attnres":
                yield node.lineno, target, [alias.name for alias in node.names]


def unresolved(path: Path) -> list[str]:
    problems = []
    where = path.relative_to(ROOT)
    for line, target, names in imports_of(path):
        if module_file(target) is None:
            problems.append(f"{where}:{line}: no module {target}")
            continue
        defined = top_level_names(target)
        for name in names:
            if name == "*" or module_file(f"{target}.{name}") is not None:
                continue
            if defined is not None and name not in defined:
                problems.append(f"{where}:{line}: {target} has no name {name!r}")
    return problems


def test_the_walk_sees_the_whole_package():
    assert len(MODULES) > 50 and PACKAGE / "study" / "main_job.py" in MODULES


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_every_import_resolves(path):
    assert unresolved(path) == []


# The checker itself: each kind of broken import is caught (a test that cannot fail would prove nothing).
@pytest.mark.parametrize("source, problem", [
    ("def f():\n    from .corpora import DEFAULT_CACHE\n", "no module hf_attnres.study.corpora"),
    ("from ..training.corpora import NO_SUCH_NAME\n", "hf_attnres.training.corpora has no name 'NO_SUCH_NAME'"),
    ("import hf_attnres.no_such_module\n", "no module hf_attnres.no_such_module"),
    ("from hf_attnres.training import no_such_submodule\n", "hf_attnres.training has no name 'no_such_submodule'"),
    ("class A:\n    def f(self):\n        from ... import nothing_here\n", "no module"),
])
def test_the_checker_catches_a_broken_import(tmp_path, monkeypatch, source, problem):
    fake = PACKAGE / "study" / "_import_check_probe.py"
    monkeypatch.setattr(Path, "read_text", _read_text_with(fake, source))
    problems = unresolved(fake)
    assert len(problems) == 1 and problem in problems[0], problems


def test_the_checker_accepts_good_imports(monkeypatch):
    source = ("from ..training.corpora import DEFAULT_CACHE\nfrom . import main_job\nimport hf_attnres.utils.tiny\n"
              "def f():\n    from ..training import corpora\n")
    fake = PACKAGE / "study" / "_import_check_probe.py"
    monkeypatch.setattr(Path, "read_text", _read_text_with(fake, source))
    assert unresolved(fake) == []


def _read_text_with(fake: Path, source: str):
    real = Path.read_text

    def read_text(self, *args, **kwargs):
        return source if self == fake else real(self, *args, **kwargs)
    return read_text

