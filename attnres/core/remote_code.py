"""The model's code as a flat set of modules for a saved folder, so it loads with `trust_remote_code=True` where only
torch and transformers are installed (a Hub repository, a machine without this package).

transformers' remote-code loader (`dynamic_module_utils`) copies and downloads only *flat* relative imports
(`from .name import x` -> `name.py` beside the model file); it neither resolves sub-packages nor absolute imports of
our package. So `save_pretrained` writes every module the model needs (config, model, inference schedule, kernels
with their references, the Moonshot weight mapping) as `<dotted path with _>.py` (`attnres.kernels.mix.naive` ->
`kernels_mix_naive.py`), with its imports of this package rewritten to those flat names. Triton modules are included:
they are imported only where triton is installed, exactly as in the package.
"""
import ast
import importlib.util
import re
from pathlib import Path

from .atomic_io import write_text_atomic

PACKAGE = "attnres"
FAMILY = f"{PACKAGE}.families.kimi_linear"
ROOT_MODULE = f"{FAMILY}.modeling_kimi_linear_attnres"
# what `save_pretrained` writes into config.json for our registered classes (attnres/__init__.py)
AUTO_MAP = {
    "AutoConfig": "configuration_kimi_linear_attnres.KimiLinearAttnResConfig",
    "AutoModel": "modeling_kimi_linear_attnres.KimiLinearAttnResModel",
    "AutoModelForCausalLM": "modeling_kimi_linear_attnres.KimiLinearAttnResForCausalLM",
}
_FROM_LINE = re.compile(r"^(\s*from\s+)(\S+)(\s+import\b)")


def flat_name(module: str) -> str:
    """`attnres.kernels.mix.naive` -> `kernels_mix_naive` (a package's `__init__` takes the package's name)."""
    return module.removeprefix(FAMILY + ".").removeprefix(PACKAGE + ".").replace(".", "_")


def _package_of(module: str) -> str:
    """The package a module's relative imports resolve against (a package's `__init__` is its own package)."""
    spec = importlib.util.find_spec(module)
    return module if spec.submodule_search_locations is not None else module.rpartition(".")[0]


def _imports_of_package(module: str):
    """(line number, absolute module) of every `from ... import` of a module of this package in `module`'s source,
    including imports inside functions (the lazily imported Triton paths)."""
    source = Path(importlib.util.find_spec(module).origin).read_text(encoding="utf-8")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == PACKAGE for a in node.names):
            raise ValueError(f"{module}: use `from {PACKAGE}.x import name`, not `import {PACKAGE}.x` (remote code)")
        if not isinstance(node, ast.ImportFrom):
            continue
        target = importlib.util.resolve_name("." * node.level + (node.module or ""), _package_of(module))
        if target != PACKAGE and not target.startswith(PACKAGE + "."):
            continue
        if target == PACKAGE or node.module is None:  # `from attnres import x` / `from . import x`: x may be a module
            raise ValueError(f"{module} line {node.lineno}: import names from their module (remote code needs it)")
        yield node.lineno, target


def code_modules(root: str = ROOT_MODULE) -> list[str]:
    """Every module of this package that `root` needs, `root` first (the closure of its imports)."""
    found, todo = [root], [root]
    while todo:
        for _, target in _imports_of_package(todo.pop()):
            if target not in found:
                found.append(target)
                todo.append(target)
    return found


def flat_source(module: str) -> str:
    """`module`'s source with its imports of this package rewritten to the flat sibling modules."""
    lines = Path(importlib.util.find_spec(module).origin).read_text(encoding="utf-8").splitlines(keepends=True)
    for lineno, target in _imports_of_package(module):
        line = lines[lineno - 1]
        if not _FROM_LINE.match(line):
            raise ValueError(f"{module} line {lineno}: write `from <module> import` on one line (remote code)")
        lines[lineno - 1] = _FROM_LINE.sub(lambda m: f"{m[1]}.{flat_name(target)}{m[3]}", line, count=1)
    return "".join(lines)


def write_code_files(folder, model_module: str = ROOT_MODULE) -> list[Path]:
    """Write the flat modules of the model's code into `folder`; return the written paths. `model_module`: the
    module of the class being saved; a class already loaded as remote code is flat, and transformers copied it all."""
    if not model_module.startswith(PACKAGE + "."):
        return []
    written = []
    for module in code_modules():
        path = Path(folder) / f"{flat_name(module)}.py"
        write_text_atomic(path, flat_source(module))
        written.append(path)
    return written


def mark_remote_code(config) -> None:
    """Point a config written without `save_pretrained` (pipeline export) at the code files, as `save_pretrained`
    does: `auto_map` for the Auto classes, `architectures` for pipelines."""
    config.auto_map = dict(AUTO_MAP)
    config.architectures = ["KimiLinearAttnResForCausalLM"]
