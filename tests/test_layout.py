"""The package's layout as a contract, with its module sets read from the package itself: a model side (the core, the
kernels, the families) that imports no tool, tools in layers that import only downward, no import cycles, and saved
folders whose code is made of model modules only. Read from the sources (every import, including those inside
functions) and from a fresh process."""
import ast
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

import hf_attnres
from hf_attnres.families.registry import SUPPORTED, family_classes
from hf_attnres.folders.remote_code import generate

PACKAGE_DIR = Path(hf_attnres.__file__).parent
# The model side, lowest first: a module imports its own part and the parts before it. The kernels need nothing of the
# package, the core only the kernels, a family the core and the kernels; an integration (transformers' own
# AttnRes models on the kernels) the kernels
MODEL = ["hf_attnres.kernels", "hf_attnres.core", "hf_attnres.families", "hf_attnres.integrations"]
# Tools, lowest layer first: a module may import the model, its own layer and the layers before it, never after
LAYERS = [
    {"hf_attnres.folders"},
    {"hf_attnres.utils"},
    {"hf_attnres.conversion"},
    {"hf_attnres.training"},
    {"hf_attnres.pipeline"},
    {"hf_attnres.evaluation"},
    {"hf_attnres.study", "hf_attnres.bench"},
    {"hf_attnres.cli", "hf_attnres.__main__"},
]


def all_modules() -> dict[str, Path]:
    modules = {}
    for path in PACKAGE_DIR.rglob("*.py"):
        parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path
    return modules


def top_package(module: str) -> str:
    return ".".join(module.split(".")[:2])


def imports_of(name: str, path: Path, lazy: bool = True) -> set[str]:
    """The package modules `name` imports in its source (a `from pkg import x` of a submodule counts x); `lazy`:
    also those inside functions."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, (ast.Import, ast.ImportFrom)) and (lazy or not in_function):
                found.update(targets(child))
            visit(child, inner)

    def targets(node):
        if isinstance(node, ast.Import):
            return {a.name for a in node.names if a.name.split(".")[0] == "hf_attnres"}
        base = ("." * node.level + (node.module or "")) if node.level else node.module
        target = importlib.util.resolve_name(base, package) if node.level else base
        if target.split(".")[0] != "hf_attnres":
            return set()
        return {target} | {f"{target}.{a.name}" for a in node.names}

    visit(ast.parse(path.read_text(encoding="utf-8")), False)
    modules = all_modules()
    return {t for t in found if t in modules and t != name}


def rank_of(module: str) -> tuple[int, int]:
    """(0, part) on the model side, (1, layer) for a tool: a module may import only what ranks at most its own."""
    top = top_package(module)
    if top in MODEL:
        return 0, MODEL.index(top)
    for index, layer in enumerate(LAYERS):
        if top in layer:
            return 1, index
    raise AssertionError(f"{module} is in no part of tests/test_layout.py: place it (MODEL or a tool layer)")


def import_graph(lazy: bool = True) -> dict[str, set[str]]:
    return {name: imports_of(name, path, lazy) for name, path in all_modules().items()}


def test_every_top_level_package_has_a_place():
    tops = {top_package(name) for name in all_modules() if name != "hf_attnres"}
    placed = set(MODEL).union(*LAYERS)
    assert tops == placed, f"unplaced: {sorted(tops - placed)}; listed but absent: {sorted(placed - tops)}"


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every edge to a higher part or layer, but the package root's (`hf_attnres/__init__`: the user's entry points)."""
    found = []
    for name, targets in graph.items():
        for target in targets:
            if name == "hf_attnres" or target == "hf_attnres":
                continue
            if rank_of(target) > rank_of(name):
                found.append(f"{name} -> {target}")
    return sorted(found)


def test_every_module_imports_only_downward():
    upward = upward_imports(import_graph())
    assert not upward, "imports from a lower layer up:\n" + "\n".join(upward)


def test_the_core_imports_only_the_core_and_the_kernels_and_the_kernels_only_themselves():
    graph = import_graph()
    for name, targets in graph.items():
        if top_package(name) == "hf_attnres.kernels":
            assert {top_package(t) for t in targets} <= {"hf_attnres.kernels"}, (name, sorted(targets))
        elif top_package(name) == "hf_attnres.core":
            allowed = {"hf_attnres.core", "hf_attnres.kernels"}
            assert {top_package(t) for t in targets} <= allowed, (name, sorted(targets))


def test_the_root_reaches_the_tools_only_inside_functions():
    eager = imports_of("hf_attnres", PACKAGE_DIR / "__init__.py", lazy=False)
    assert {top_package(t) for t in eager} <= set(MODEL), sorted(eager)


def test_no_import_cycles():
    graph = import_graph()
    # `hf_attnres/__init__` re-exports the model: edges into the package root itself are not dependencies
    graph = {name: {t for t in targets if t != "hf_attnres"} for name, targets in graph.items()}
    state, cycles = {}, []

    def visit(node, stack):
        state[node] = "open"
        for target in sorted(graph.get(node, ())):
            if state.get(target) == "open":
                cycles.append(" -> ".join(stack[stack.index(target):] + [target]))
            elif target not in state:
                visit(target, stack + [target])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def shipped_modules(modeling_module: str) -> set[str]:
    """The package modules a family's generated code files say they were generated from (their headers)."""
    return {line.removeprefix("#   ") for text in generate(modeling_module).values()
            for line in text.split("\n\n")[0].splitlines() if line.startswith("#   ")}


@pytest.mark.slow  # a fresh Python process: over 10 s (docs/TESTING.md)
def test_import_attnres_loads_the_model_side_only_and_folders_ship_model_modules_only():
    code = ("import json, sys, hf_attnres; "
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'hf_attnres')))")
    loaded = set(json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                           check=True, timeout=300).stdout))
    assert {top_package(m) for m in loaded - {"hf_attnres"}} <= set(MODEL), sorted(loaded)
    for family in SUPPORTED:
        shipped = shipped_modules(family_classes(family)[1].__module__)
        assert {top_package(m) for m in shipped} <= set(MODEL), (family, sorted(shipped))


def test_the_checks_see_lazy_relative_and_upward_imports(tmp_path):
    """The reader itself: an import inside a function, a relative one and a `from package import module` all count,
    and a core module importing a tool is an upward import."""
    source = tmp_path / "mod.py"
    source.write_text("from .depth_layout import DepthLayout\n"
                      "def f():\n    from hf_attnres.training import loop\n    import hf_attnres.evaluation.tasks\n")
    found = imports_of("hf_attnres.core.fake_core_module", source)
    assert {"hf_attnres.core.depth_layout", "hf_attnres.training", "hf_attnres.training.loop",
            "hf_attnres.evaluation.tasks"} <= found
    assert imports_of("hf_attnres.core.fake_core_module", source, lazy=False) == {"hf_attnres.core.depth_layout"}
    assert upward_imports({"hf_attnres.core.fake_core_module": found}) == [
        "hf_attnres.core.fake_core_module -> hf_attnres.evaluation.tasks",
        "hf_attnres.core.fake_core_module -> hf_attnres.training",
        "hf_attnres.core.fake_core_module -> hf_attnres.training.loop"]
    assert upward_imports({"hf_attnres.kernels.mix.fake": {"hf_attnres.core.model"}}) == [
        "hf_attnres.kernels.mix.fake -> hf_attnres.core.model"]
    assert (rank_of("hf_attnres.cli.train") > rank_of("hf_attnres.evaluation.report")
            > rank_of("hf_attnres.folders.saved_model"))
    assert rank_of("hf_attnres.folders.atomic_io") > rank_of("hf_attnres.families.llama.modeling_llama_attnres")
