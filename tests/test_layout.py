"""The package's layout as a contract: a model core that imports no tool, tools in layers that import only downward,
no import cycles. Read from the sources (every import, including those inside functions) and from a fresh process."""
import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import attnres
from attnres.core.remote_code import generate
from attnres.families.registry import SUPPORTED, family_classes

PACKAGE_DIR = Path(attnres.__file__).parent

KIMI = "attnres.families.kimi_linear"
# The model core: what `import attnres` loads. Kimi Linear's part of it is what its saved folder's generated code is
# made of (the family-independent core it needs and the family's own modules, `attnres/families/kimi_linear/`), and
# the generator itself (`attnres.core.remote_code`, which ships in no folder)
KIMI_CORE = {
    "attnres", "attnres.core.mix_point", "attnres.core.depth_layout", "attnres.core.inference",
    "attnres.core.input_checks", "attnres.core.saved_model", "attnres.core.checkpoint_files", "attnres.core.atomic_io",
    "attnres.core.offload", "attnres.core.remote_code", "attnres.core.config_checks", "attnres.core.model_size",
    "attnres.core.json_limits", "attnres.core.config", "attnres.core.decoder_layer", "attnres.core.model",
    "attnres.kernels", "attnres.kernels.mix", "attnres.kernels.mix.naive", "attnres.kernels.mix.lean",
    "attnres.kernels.mix.cpu_fused", "attnres.kernels.mix.variants", "attnres.kernels.mix.triton",
    "attnres.kernels.mix.kernels", "attnres.kernels.mix.extension_cache",
    "attnres.kernels.two_phase", "attnres.kernels.two_phase.naive", "attnres.kernels.two_phase.lean",
    "attnres.kernels.two_phase.triton",
} | {f"{KIMI}.{m}" for m in ("configuration_kimi_linear_attnres", "modeling_kimi_linear_attnres", "conversion_mapping",
                             "kda_device_guard", "k3", "k3.activation", "k3.attention", "k3.config", "k3.layout",
                             "k3.moe", "k3.mxfp4")}


def _modules_under(folder: Path) -> set[str]:
    return {".".join(p.relative_to(PACKAGE_DIR.parent).with_suffix("").parts).removesuffix(".__init__")
            for p in folder.rglob("*.py")}


# Also core, loaded by `import attnres`, but not in a Kimi Linear folder's code: the packages themselves, the other
# families (issue 34), their registry and upcycling, and the rotary decoder body they share
OTHER_CORE = {"attnres.core", "attnres.core.decoder_model"} | (
    _modules_under(PACKAGE_DIR / "families") - _modules_under(PACKAGE_DIR / "families" / "kimi_linear")) | {KIMI}
CORE = KIMI_CORE | OTHER_CORE
# Tools, lowest layer first: a module may import the core, its own layer and the layers before it, never after.
LAYERS = [
    {"attnres.utils"},
    {"attnres.conversion"},
    {"attnres.training"},
    {"attnres.pipeline"},
    {"attnres.evaluation"},
    {"attnres.study", "attnres.bench"},
    {"attnres.cli", "attnres.__main__"},
]


def all_modules() -> dict[str, Path]:
    modules = {}
    for path in PACKAGE_DIR.rglob("*.py"):
        parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path
    return modules


def imports_of(name: str, path: Path) -> set[str]:
    """The package modules `name` imports anywhere in its source (a `from pkg import x` of a submodule counts x)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "attnres"}
        elif isinstance(node, ast.ImportFrom):
            base = ("." * node.level + (node.module or "")) if node.level else node.module
            target = __import__("importlib.util").util.resolve_name(base, package) if node.level else base
            if target.split(".")[0] != "attnres":
                continue
            found.add(target)
            found |= {f"{target}.{a.name}" for a in node.names}
    modules = all_modules()
    return {t for t in found if t in modules and t != name}


def layer_of(module: str) -> int:
    if module in CORE:
        return -1
    for index, layer in enumerate(LAYERS):
        if any(module == top or module.startswith(top + ".") for top in layer):
            return index
    raise AssertionError(f"{module} is in no layer of tests/test_layout.py: place it (core or a tool layer)")


def import_graph() -> dict[str, set[str]]:
    return {name: imports_of(name, path) for name, path in all_modules().items()}


def test_every_module_has_a_place_and_imports_only_downward():
    upward = [f"{name} -> {target}" for name, targets in import_graph().items() for target in targets
              if layer_of(target) > layer_of(name) and not (name == "attnres" and target in CORE)]
    assert not upward, "imports from a lower layer up:\n" + "\n".join(sorted(upward))


def test_no_import_cycles():
    graph = import_graph()
    # `attnres/__init__` re-exports the core: edges into the package root itself are not dependencies
    graph = {name: {t for t in targets if t != "attnres"} for name, targets in graph.items()}
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


@pytest.mark.slow  # fresh Python processes: over 10 s (docs/TESTING.md)
def test_the_core_imports_no_tool_and_is_exactly_what_a_saved_folder_ships():
    # a fresh process: the modules loaded by `import attnres` (and the model module) are core modules only
    code = ("import json, sys, attnres, attnres.families.kimi_linear.modeling_kimi_linear_attnres; "
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'attnres')))")
    loaded = set(json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                           check=True, timeout=300).stdout))
    assert loaded <= CORE, f"import attnres loads tool modules: {sorted(loaded - CORE)}"
    shipped = shipped_modules(family_classes("kimi_linear")[1].__module__)
    assert shipped | {"attnres", "attnres.core.remote_code"} == KIMI_CORE, (
        f"remote code ships {sorted(shipped - KIMI_CORE)} beyond the core and misses "
        f"{sorted(KIMI_CORE - shipped - {'attnres', 'attnres.core.remote_code'})}")
    for family in SUPPORTED:  # every family's folder: core modules only, never the generator
        shipped = shipped_modules(family_classes(family)[1].__module__)
        assert shipped <= CORE - {"attnres.core.remote_code"}, (family, sorted(shipped - CORE))


def shipped_modules(modeling_module: str) -> set[str]:
    """The package modules a family's generated code files say they were generated from (their headers)."""
    return {line.removeprefix("#   ") for text in generate(modeling_module).values()
            for line in text.split("\n\n")[0].splitlines() if line.startswith("#   ")}


def test_the_checks_see_lazy_relative_and_upward_imports(tmp_path):
    """The reader itself: an import inside a function, a relative one and a `from package import module` all count,
    and a core module importing a tool is an upward import."""
    source = tmp_path / "mod.py"
    source.write_text("from .depth_layout import DepthLayout\n"
                      "def f():\n    from attnres.training import loop\n    import attnres.evaluation.tasks\n")
    found = imports_of("attnres.core.fake_core_module", source)
    assert {"attnres.core.depth_layout", "attnres.training", "attnres.training.loop",
            "attnres.evaluation.tasks"} <= found
    assert layer_of("attnres.training.loop") > layer_of(f"{KIMI}.modeling_kimi_linear_attnres")
    assert layer_of("attnres.cli.train") > layer_of("attnres.evaluation.comparison") > layer_of("attnres.conversion")
