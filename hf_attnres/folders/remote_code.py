"""The model's code for a saved folder, generated flat the way transformers' modular converter generates
`modeling_*.py`, so the folder loads with `trust_remote_code=True` where only torch and transformers are installed.

Per family, in five groups: `configuration_<family>_attnres` (the config and what it needs), `modeling_<family>_attnres`
(the family's own classes), `attnres_core_config` and `attnres_core` (the family-independent AttnRes config code and
model, hf_attnres.core, laid out once as transformers lays out shared modeling code) and `kernels_attnres` (the mix
kernels: the PyTorch references, the lean path, the Triton kernels; the fused C++ CPU kernel and its build cache are
registered by the installed package only, so no compiler, file lock or file IO ships). Each group is its modules' import
closure inlined in dependency order, in files of at most `MAX_FILE_BYTES` (a group's last file keeps its name, the ones
before it are numbered): this package's imports removed (a name another file defines is imported from it, relatively),
outside imports deduplicated and hoisted, a header naming the modules it was generated from. Generation fails, naming
both modules, on a top-level name that two inlined modules define differently, on any import of this package left
over, and on a file over the bound.

Modules that import an optional package in a top-level `try` (Triton) are reached only by imports inside functions, as
in the package; in the file they are defined only where that package is installed, so the folder loads without it.
transformers' loader (`dynamic_module_utils.check_imports`) demands every import outside a `try` block, function-level
ones included, so those stay inside their `try`.
"""
from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import io
import sys
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

from .atomic_io import write_text_atomic

PACKAGE = "hf_attnres"
KERNELS = f"{PACKAGE}.kernels"
KERNELS_FILE = "kernels_attnres"
CORE = f"{PACKAGE}.core"
CORE_FILE = "attnres_core"
CORE_CONFIG_FILE = "attnres_core_config"
LINE_LENGTH = 120  # the package's (pyproject [tool.ruff])
# A shipped file's size bound, as transformers' own modeling files are (modeling_qwen2.py: ~21 KB): a reader opens one
# job's code, not the package in one file. A group is split below the bound by a margin, since the names of the files
# after a split (numbered) are known only once they are split, and each is a few bytes in an import line
MAX_FILE_BYTES = 25_000
SPLIT_MARGIN = 500


class GenerationError(ValueError):
    """The package's code cannot be generated flat (a name collision, an import left over)."""


@dataclass
class Source:
    """One module of the package: its text, syntax tree and imports of the package."""

    name: str
    text: str
    tree: ast.Module
    eager: list = field(default_factory=list)  # (import node, target module) outside functions
    lazy: list = field(default_factory=list)  # (import node, target module) inside functions

    @classmethod
    def read(cls, name: str, text: str | None = None) -> Source:
        """The installed module `name`, or a module (not a package) of that name with `text` as its source."""
        package = name.rpartition(".")[0]
        if text is None:
            spec = importlib.util.find_spec(name)
            text = Path(spec.origin).read_text(encoding="utf-8")
            package = name if spec.submodule_search_locations is not None else package
        source = cls(name, text, ast.parse(text))
        for node, in_function in _imports(source.tree):
            target = _our_target(node, package, name)
            if target is not None:
                (source.lazy if in_function else source.eager).append((node, target))
        return source

    @property
    def optional(self) -> str | None:
        """The optional package this module imports in a top-level `try` and needs (re-raising), e.g. triton."""
        for stmt in self.tree.body:
            if isinstance(stmt, ast.Try) and all(_reraises(h) for h in stmt.handlers):
                for node in stmt.body:
                    if isinstance(node, ast.Import):
                        return node.names[0].name.split(".")[0]
        return None


def _imports(tree: ast.Module):
    """(import node, inside a function?) for every import of the tree."""
    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, in_function
            yield from visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))
    yield from visit(tree, False)


def _reraises(handler: ast.ExceptHandler) -> bool:
    return any(isinstance(node, ast.Raise) for node in handler.body)


def _our_target(node, package: str, name: str) -> str | None:
    """The package module an import of this package reads from, None for an outside import."""
    if isinstance(node, ast.Import):
        if any(alias.name.split(".")[0] == PACKAGE for alias in node.names):
            raise GenerationError(f"{name} line {node.lineno}: use `from {PACKAGE}.x import name`, not "
                                  f"`import {PACKAGE}.x` (the code is generated flat)")
        return None
    target = importlib.util.resolve_name("." * node.level + (node.module or ""), package)
    if target != PACKAGE and not target.startswith(PACKAGE + "."):
        return None
    if target == PACKAGE or node.module is None:
        raise GenerationError(f"{name} line {node.lineno}: import names from their module (the code is generated flat)")
    return target


def closure(root: str, sources: dict) -> list[str]:
    """Every package module `root` needs (imports inside functions included), `root` first."""
    found, todo = [root], [root]
    while todo:
        module = todo.pop()
        source = sources.setdefault(module, Source.read(module))
        for _, target in source.eager + source.lazy:
            if target not in found:
                found.append(target)
                todo.append(target)
    return found


def dependency_order(modules: list[str], sources: dict) -> list[str]:
    """`modules` so that each comes after the modules it imports outside functions (they run at import) and, where
    that allows, after those it imports inside functions too (a function may run at import: a registration)."""
    def needs(module, kind):
        return {t for _, t in getattr(sources[module], kind) if t in modules and t != module}

    ordered, left = [], sorted(modules)
    while left:
        ready = [m for m in left if needs(m, "eager") <= set(ordered)]
        if not ready:
            raise GenerationError(f"import cycle among {left}")
        best = [m for m in ready if needs(m, "lazy") <= set(ordered)]
        ordered.append((best or ready)[0])
        left.remove(ordered[-1])
    return ordered


def _bound_names(stmt) -> dict:
    """Top-level names a statement binds -> its definition (an import's origin, else the statement's syntax)."""
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        origin = getattr(stmt, "module", None)
        return {(a.asname or a.name).split(".")[0]: f"import {origin}:{a.name}" for a in stmt.names}
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {stmt.name: ast.dump(stmt)}
    if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        return {n.id: ast.dump(stmt) for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    names = {}
    for field_name in ("body", "orelse", "finalbody", "handlers"):  # if / try / with / for at the top level
        for child in getattr(stmt, field_name, []):
            names |= _bound_names(child)
    return names


@dataclass
class FlatFile:
    """One generated file: its modules (in order) and what it takes from the other files."""

    name: str
    modules: list
    owner: dict  # module -> file name, for every module of the folder
    sources: dict
    optional: dict  # module -> the optional package it needs (optional_modules)

    def render(self) -> str:
        """The file's text, checked: no top-level name defined differently by two modules, no import of the package
        left over."""
        self._check_collisions()
        generated = self.text()
        check_no_package_import(self.name, generated)
        return generated

    def text(self) -> str:
        """The file's text, unchecked (what `plan_files` measures while it splits a group)."""
        hoisted, body, cross, future = [], [], {}, True
        guarded = {}  # optional package -> the texts of the modules needing it
        for module in self.modules:
            text, imports, uses_future = self._module_text(module, cross)
            future &= uses_future  # only where every module has it: transformers reads some annotations at runtime
            hoisted += imports
            if not text:
                continue
            if module in self.optional:
                guarded.setdefault(self.optional[module], []).append(text)
            else:
                body.append(text)
        for package, texts in guarded.items():
            body.append(_guarded(package, "\n\n".join(texts)))
        lines = [self._header(), *(["from __future__ import annotations", ""] if future else [])]
        lines += _import_lines(hoisted)
        if cross:
            lines.append("")
        text = "\n\n".join(body).rstrip() + "\n"
        used = {node.id for node in ast.walk(ast.parse(text)) if isinstance(node, ast.Name)}
        for file_name, names in sorted(cross.items()):
            lines += _cross_lines(f".{file_name}", names, used)
        return "\n".join(lines) + "\n\n" + text

    def _header(self) -> str:
        listed = "\n".join(f"#   {m}" for m in self.modules)
        text = (f"# Generated by attnres (hf_attnres.folders.remote_code) from the package's modules, do not edit:\n"
                f"{listed}\n# Flat: the modules above inlined in dependency order, their imports hoisted.\n")
        ignored = []
        if any(m in self.optional for m in self.modules):
            ignored.append("E501")  # the block needing an optional package is indented one level
        if any(m == KERNELS or m.startswith(KERNELS + ".") for m in self.modules):
            ignored.append("E741")  # the kernels' m / l, as the package's ruff settings allow them there
        return text + (f"# ruff: noqa: {', '.join(ignored)}\n" if ignored else "")

    def _module_text(self, module: str, cross: dict):
        """The module's text with its imports of the package replaced; its hoisted outside imports; future import?"""
        source = self.sources[module]
        lines = source.text.splitlines()
        edits, imports, future = {}, [], False
        ours = {id(node): target for node, target in source.eager + source.lazy}
        for stmt in source.tree.body:
            if isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__":
                future = True
                edits[stmt.lineno] = (stmt.end_lineno, [])
            elif isinstance(stmt, (ast.Import, ast.ImportFrom)) and id(stmt) not in ours:
                imports.append(stmt)
                edits[stmt.lineno] = (stmt.end_lineno, [])
            elif isinstance(stmt, ast.Assign) and [ast.unparse(t) for t in stmt.targets] == ["__all__"]:
                edits[stmt.lineno] = (stmt.end_lineno, [])
        for node, target in source.eager + source.lazy:
            # a module needing an optional package is defined inside its guard: its imports stay there with it
            top = node in source.tree.body and module not in self.optional
            edits[node.lineno] = (node.end_lineno, self._replace_import(node, target, top, cross))
        out, skip_to = [f"# ---- {module} ----"], 0
        for number, line in enumerate(lines, start=1):
            if number <= skip_to:
                continue
            if number in edits:
                skip_to, replacement = edits[number]
                out += replacement
                continue
            out.append(line)
        text = "\n".join(out).strip("\n") + "\n" if any(line.strip() for line in out[1:]) else ""
        return text, imports, future  # "": a package's `__init__` that only re-exports

    def _replace_import(self, node: ast.ImportFrom, target: str, top: bool, cross: dict) -> list[str]:
        """What replaces an import of the package: nothing (the name is a global of this file), `alias = name`, or
        an import from the file defining it (hoisted at the top level, in place inside a function: it stays lazy)."""
        indent = " " * node.col_offset
        file_name = self.owner[target]
        if file_name == self.name:
            return [f"{indent}{a.asname} = {a.name}" for a in node.names if a.asname and a.asname != a.name]
        names = [a.name if not a.asname or a.asname == a.name else f"{a.name} as {a.asname}" for a in node.names]
        if top:
            cross.setdefault(file_name, set()).update(names)
            return []
        return [f"{indent}from .{file_name} import {', '.join(names)}"]

    def _check_collisions(self) -> None:
        defined = {}
        for module in self.modules:
            source = self.sources[module]
            ours = {id(node) for node, _ in source.eager}
            for stmt in source.tree.body:
                if id(stmt) in ours or (isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__"):
                    continue
                for name, definition in _bound_names(stmt).items():
                    if name in ("__all__", "_"):  # `_`: a discarded value (a registered function)
                        continue
                    first = defined.setdefault(name, (module, definition))
                    if first[0] != module and first[1] != definition:  # a module may redefine its own names
                        raise GenerationError(f"{self.name}.py: top-level name {name!r} is defined differently by "
                                              f"{first[0]} and {module}; rename one (the code is generated flat)")


def check_no_package_import(file_name: str, generated: str) -> None:
    """A generated file must import nothing of this package: a user of the folder does not have it. (It must parse,
    too: a SyntaxError here is a generation bug, raised before anything is written.)"""
    for node, _ in _imports(ast.parse(generated)):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
        if not getattr(node, "level", 0) and any(n.split(".")[0] == PACKAGE for n in names):
            raise GenerationError(f"{file_name}.py line {node.lineno}: an import of {PACKAGE} is left over")


def _import_lines(statements) -> list[str]:
    """The hoisted outside imports, merged per module and ordered as isort does (ruff's "I" rules): the standard
    library, then the others; `import x` before `from x import y`; constants, classes, then the rest."""
    plain, from_ = set(), {}
    for stmt in statements:
        if isinstance(stmt, ast.Import):
            plain.update((a.name, a.asname) for a in stmt.names)
        else:  # an aliased name on a line of its own, as isort writes it
            for a in stmt.names:
                from_.setdefault((stmt.module, a.asname), set()).add((a.name, a.asname))
    sections = []
    for stdlib in (True, False):
        lines = [_as(f"import {n}", a) for n, a in sorted(plain) if _is_stdlib(n) == stdlib]
        lines += [_from_line(m, names) for (m, alias), names in sorted(from_.items(), key=_from_key)
                  if _is_stdlib(m) == stdlib]
        if lines:
            sections.append("\n".join(lines))
    return ["\n\n".join(sections)] if sections else []


def _from_key(item):
    (module, alias), _ = item
    return module, alias is not None, alias or ""


def _is_stdlib(module: str) -> bool:
    return module.split(".")[0] in sys.stdlib_module_names


def _as(text: str, alias: str | None) -> str:
    return text if alias is None else f"{text} as {alias}"


def _cross_lines(module: str, names, used: set) -> list[str]:
    """The import of `names` from another generated file. A name only re-exported (the package module's `__all__`)
    takes the explicit re-export form `x as x`, one statement each, ordered as isort orders them."""
    plain = {n for n in names if n in used or " as " in n}
    statements = []
    if plain:
        statements.append((_name_key(min(plain, key=_name_key)), _from_line(module, {(n, None) for n in plain})))
    statements += [(_name_key(n), _from_line(module, {(n, n)})) for n in names if n not in plain]
    return [line for _, line in sorted(statements)]


def _name_key(name: str):
    """isort's order of imported names (ruff's `order-by-type`): constants, classes, then the rest."""
    kind = 0 if name.isupper() and len(name) > 1 else 1 if name[:1].isupper() else 2
    return kind, name


def _from_line(module: str, names) -> str:
    parts = [_as(n, a) for n, a in sorted(names, key=lambda item: _name_key(item[0]))]
    line = f"from {module} import {', '.join(parts)}"
    if len(line) <= LINE_LENGTH:
        return line
    return f"from {module} import (\n" + "".join(f"    {p},\n" for p in parts) + ")"


def _guarded(package: str, text: str) -> str:
    """`text` run only where `package` imports: in a `try` (so transformers' loader does not demand it) and an `if`."""
    return (f"# The modules below need {package}: defined only where it imports (the others use them only then)\n"
            f"try:\n    import {package}\nexcept ImportError:\n    {package} = None\n\n"
            f"if {package} is not None:\n{_indent(text)}")


def _indent(text: str) -> str:
    """`text` indented one level, except lines inside a multi-line string (their content must not change)."""
    inside = set()
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.STRING and token.end[0] > token.start[0]:
            inside.update(range(token.start[0] + 1, token.end[0] + 1))
    return "".join(line if number in inside or not line.strip() else "    " + line
                   for number, line in enumerate(text.splitlines(keepends=True), start=1))


def family_modules(modeling_module: str) -> tuple[str, str]:
    """(configuration module, modeling module) of the family whose modeling module is `modeling_module`."""
    package, _, leaf = modeling_module.rpartition(".")
    if not leaf.startswith("modeling_"):
        raise GenerationError(f"{modeling_module}: a family's model lives in a `modeling_<family>_attnres` module")
    return f"{package}.configuration_{leaf.removeprefix('modeling_')}", modeling_module


def plan_groups(modeling_module: str, sources: dict | None = None) -> dict[str, list[str]]:
    """Group name -> its modules in order: the kernels (everything the package's kernels need), the family-independent
    AttnRes code (hf_attnres.core, shared by every family as transformers lays out shared modeling code) in two groups:
    what the config needs (so a config loads without the model and the kernels) and the model, then the family's
    configuration and modeling modules (its own classes). A later group may import from an earlier one, never the
    other way."""
    sources = {} if sources is None else sources
    config_module, modeling_module = family_modules(modeling_module)
    everything = closure(modeling_module, sources)
    if config_module not in everything:
        everything += closure(config_module, sources)
    kernels, core = [], []
    for module in everything:
        if module == KERNELS or module.startswith(KERNELS + "."):
            kernels += [m for m in closure(module, sources) if m not in kernels]
    for module in everything:
        if module == CORE or module.startswith(CORE + "."):
            core += [m for m in closure(module, sources) if m not in kernels and m not in core]
    core_config = [m for m in closure(config_module, sources) if m in core]
    core = [m for m in core if m not in core_config]
    config = [m for m in closure(config_module, sources) if m not in kernels and m not in core_config]
    placed = {*kernels, *core_config, *core, *config}
    modeling = [m for m in everything if m not in placed]
    plan = {KERNELS_FILE: kernels, CORE_CONFIG_FILE: core_config, CORE_FILE: core,
            config_module.rpartition(".")[2]: config,
            modeling_module.rpartition(".")[2]: modeling}
    return {name: dependency_order(modules, sources) for name, modules in plan.items() if modules}


def plan_files(groups: dict[str, list[str]], sources: dict, optional: dict) -> dict[str, list[str]]:
    """File name -> its modules in order: each of `plan_groups`' groups in as few files of at most `MAX_FILE_BYTES`
    as filling them in dependency order gives (`optional`: `optional_modules` of them all). A group's last file (its
    root: the family's config or model class, the package module `hf_attnres.kernels`) keeps the group's name, the ones
    before it are numbered (`attnres_core_1.py`, ...), so `auto_map` and the imports of the files after it do not
    depend on the split."""
    owner = {module: name for name, modules in groups.items() for module in modules}
    plan = {}
    for name, modules in groups.items():
        parts, current = [], []
        for module in modules:
            part_name = f"{name}_{len(parts) + 1}"
            if current and _text_bytes(part_name, current + [module], owner, sources, optional) > (
                    MAX_FILE_BYTES - SPLIT_MARGIN):
                parts.append(current)
                owner.update(dict.fromkeys(current, part_name))
                current = [module]
            else:
                current.append(module)
        parts.append(current)
        owner.update({m: name for m in current})
        plan.update({f"{name}_{k}": part for k, part in enumerate(parts[:-1], start=1)})
        plan[name] = current
    return plan


def _text_bytes(name: str, modules: list[str], owner: dict, sources: dict, optional: dict) -> int:
    """The size of the file `name` would be holding `modules`."""
    trial = {**owner, **dict.fromkeys(modules, name)}
    return len(FlatFile(name, modules, trial, sources, optional).text().encode())


def optional_modules(modules, sources: dict) -> dict[str, str]:
    """Module -> the optional package it needs at import: its own top-level `try` import (re-raising), or that of a
    module it imports outside functions."""
    needs = {m: sources[m].optional for m in modules if sources[m].optional is not None}
    changed = True
    while changed:
        changed = False
        for module in modules:
            for _, target in sources[module].eager:
                if target in needs and module not in needs:
                    needs[module], changed = needs[target], True
    return needs


def generate(modeling_module: str, sources: dict | None = None) -> dict[str, str]:
    """File name (with .py) -> generated source, for the family of `modeling_module`."""
    sources = {} if sources is None else sources
    groups = plan_groups(modeling_module, sources)
    optional = optional_modules([module for modules in groups.values() for module in modules], sources)
    plan = plan_files(groups, sources, optional)
    owner = {module: name for name, modules in plan.items() for module in modules}
    for root in family_modules(modeling_module):
        if root in optional:
            raise GenerationError(f"{root} needs {optional[root]} at import (through the modules it imports): "
                                  "import the modules that need it inside the functions that use them")
    order = list(plan)
    for name, modules in plan.items():
        for module in modules:
            for _, target in sources[module].eager:
                if order.index(owner[target]) > order.index(name):
                    raise GenerationError(f"{module} ({name}.py) imports {target} ({owner[target]}.py) at import "
                                          "time: a file may import only from the files generated before it")
    files = {f"{name}.py": FlatFile(name, modules, owner, sources, optional).render() for name, modules in plan.items()}
    for name, text in files.items():
        if len(text.encode()) > MAX_FILE_BYTES:
            raise GenerationError(f"{name} is {len(text.encode()):,} bytes, over {MAX_FILE_BYTES:,}: a single module "
                                  f"of it is too large to ship in one file; split that module")
    return files


@functools.cache
def _generated(model_module: str) -> dict[str, str]:
    """`generate`, once per family and process: the package's sources do not change under a running process, and a
    training run saves a folder at every checkpoint (parsing the modules takes most of a second)."""
    return generate(model_module)


def code_file_names(model_module: str) -> list[str]:
    """The code files (with .py) a folder of the family of `model_module` ships, in generation order."""
    return list(_generated(model_module))


def write_code_files(folder, model_module: str) -> list[Path]:
    """Write the generated code files of the model's family into `folder`; return the written paths.
    `model_module`: the module of the class being saved; a class already loaded as remote code is flat, and
    transformers copied its files."""
    if not model_module.startswith(PACKAGE + "."):
        return []
    written = []
    for file_name, text in _generated(model_module).items():
        write_text_atomic(Path(folder) / file_name, text)
        written.append(Path(folder) / file_name)
    return written


def auto_map(modeling_module: str) -> dict[str, str]:
    """What `save_pretrained` writes into config.json for a family's registered classes (hf_attnres/__init__.py)."""
    config_module, modeling_module = family_modules(modeling_module)
    config_class = _attn_res_config_class(importlib.import_module(config_module))
    prefix = config_class.__name__.removesuffix("Config")
    modeling = importlib.import_module(modeling_module)
    for name in (prefix + "Model", prefix + "ForCausalLM"):
        if not hasattr(modeling, name):
            raise GenerationError(f"{modeling_module} has no {name}")
    leaf, config_leaf = modeling_module.rpartition(".")[2], config_module.rpartition(".")[2]
    return {"AutoConfig": f"{config_leaf}.{config_class.__name__}", "AutoModel": f"{leaf}.{prefix}Model",
            "AutoModelForCausalLM": f"{leaf}.{prefix}ForCausalLM"}


def _attn_res_config_class(module):
    for value in vars(module).values():
        if (isinstance(value, type) and value.__module__ == module.__name__
                and str(getattr(value, "model_type", "")).endswith("_attnres")):
            return value
    raise GenerationError(f"{module.__name__} defines no AttnRes config class")


def mark_remote_code(config, modeling_module: str) -> None:
    """Point a config written without `save_pretrained` (pipeline export) at the code files, as `save_pretrained`
    does: `auto_map` for the Auto classes, `architectures` for pipelines."""
    config.auto_map = auto_map(modeling_module)
    config.architectures = [config.auto_map["AutoModelForCausalLM"].rpartition(".")[2]]

