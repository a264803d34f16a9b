"""The model's code for a saved folder, generated flat the way transformers' modular converter generates
`modeling_*.py`, so the folder loads with `trust_remote_code=True` where only torch and transformers are installed.

Four files, by topic: `configuration_<family>_attnres` (the family's config class with the AttnRes fields, and the
check of the installed transformers), `kernels_attnres` (the depth mix's arithmetic in PyTorch: the kernelizable
`AttnResDepthMix` module and the paper's ablations), `attnres_core` (the AttnRes model code every family shares,
hf_attnres.core, laid out once as transformers lays out shared modeling code) and `modeling_<family>_attnres` (the
family's own classes). Each is its modules' import closure inlined in dependency order: this package's imports
removed (a name another file defines is imported from it, relatively), outside imports deduplicated and hoisted, one
generated-mark line then a docstring saying what the file holds and which modules it was generated from. Generation
fails, naming both modules, on a top-level name that two inlined modules define differently, and on any import of
this package left over.

The folder carries the model's arithmetic only: the model modules import none of the installed package's own
features (its fused kernels, environment switches, memory check, input and config field checks, the tools' depth
queries and two-phase schedule are handed to the classes at its import, hf_attnres.core.installed), so none of them
is inlined. The features a config
switches on (`FEATURES`: the paper's ablations, the gated read) are inlined only where the folder's config.json uses
them, and its configuration refuses a config.json edited to use one it lacks.

Every file's docstring records the transformers range the code supports (hf_attnres.core.version_guard, inlined into the
configuration file) and the transformers it was generated with; the configuration checks them at import, so a folder
refuses, in one line, a transformers outside its range before any weight is read: frozen code under a transformers
that renamed an argument it passes would otherwise run and give wrong tokens. `attnres repair-folder` regenerates an
existing folder's code (hf_attnres/folders/repair.py).

Modules that import an optional package in a top-level `try` are defined only where that package is installed, so
the folder loads without it. transformers' loader (`dynamic_module_utils.check_imports`) demands every import outside
a `try` block, function-level ones included, so those stay inside their `try`.
"""
from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

from ..core.versions import TRANSFORMERS_RANGE
from .checkpoint_files import CONFIG_NAME, read_json_file
from .codegen import (
    GENERATED_MARK,  # noqa: F401  (the first line of every generated file: repair-folder reads it here)
    collapse_blank_lines,
    file_header,
    generated_note,
    guarded_block,
    import_from_file_lines,
    import_lines,
    literal,
    wrap,
    write_generated,
)

PACKAGE = "hf_attnres"
KERNELS = f"{PACKAGE}.kernels"
KERNELS_FILE = "kernels_attnres"
CORE = f"{PACKAGE}.core"
CORE_FILE = "attnres_core"
# the supported transformers range and its check: shipped in the configuration file, which `AutoConfig` imports
# first, so the check runs before `AutoConfig` has a class, let alone weights
VERSIONS = f"{CORE}.version_guard"
RANGE_CHECKED = "GENERATED_WITH_TRANSFORMERS"  # defined where the check has run: importing it runs the check
CONFIG = f"{CORE}.config"
# The features a folder ships only where its config uses them: the config property saying it does -> the modules
# holding the feature (each registers itself on the classes at its import; no model module imports it): its model
# code, then its config checks (`FEATURE_CHECKS`, in the configuration file). A folder generated without one has the
# property's name in the config module's `ATTN_RES_GENERATED_WITHOUT`, so its config refuses a config.json edited
# to use it
FEATURES = {"attn_res_ablation": (f"{CORE}.ablations", f"{CORE}.ablation_checks"),
            "attn_res_gated_read": (f"{CORE}.gated_point", f"{CORE}.gated_read_checks")}
FEATURE_CHECKS = frozenset(roots[1] for roots in FEATURES.values())
ALL_FEATURES = frozenset(FEATURES)
WITHOUT = "ATTN_RES_GENERATED_WITHOUT"
# What each file holds, the first line of its docstring (the family's files: filled in with its name)
TOPICS = {
    "configuration": "The configuration of {family} with Attention Residuals: the family's config class with the "
                     "AttnRes fields and\ntheir checks. Importing this file refuses, in one line, a transformers "
                     "outside the range this folder's\ncode supports, before any weight is read.",
    KERNELS_FILE: "The depth mix's arithmetic in PyTorch: the kernelizable `AttnResDepthMix` module (a kernel mapped "
                  "to its layer\nname with the `kernels` library replaces its forward; the installed hf-attnres "
                  "package maps its fused C++\nand Triton kernels), and the paper's ablations of the mix where the "
                  "folder's config uses them.",
    CORE_FILE: "The Attention Residuals model code every family shares. The residual stream becomes depth sources "
               "(`DepthLayout`\nsays which exist at each mix point); before each sub-layer and the final norm a mix "
               "point (`AttnResMixing.mix`)\nreads them through a learned softmax over depth. The decoder layer and "
               "model mixins carry the sources\n(`run_depth`), and the family's classes put these mixins first in "
               "their bases.",
    "modeling": "The model classes of {family} with Attention Residuals: the family's own transformers modules, the "
                "residual read\nfrom the depth sources.",
}


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
        # stored names only: `Class.attribute = value` binds no top-level name (it sets one on the class)
        return {n.id: ast.dump(stmt) for t in targets for n in ast.walk(t)
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
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
    entry: bool = False  # an `auto_map` file: it imports the range check (`RANGE_CHECKED`), so importing it checks
    without: tuple = ()  # the features (`FEATURES`) left out of the folder: recorded in the config module
    topic: str = "Generated code."  # the first line of its docstring (`TOPICS`)

    def render(self) -> str:
        """The file's text, checked: no top-level name defined differently by two modules, no import of the package
        left over."""
        self._check_collisions()
        generated = self.text()
        check_no_package_import(self.name, generated)
        return generated

    def text(self) -> str:
        """The file's text, unchecked."""
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
            body.append(guarded_block(package, "\n\n".join(texts)))
        if self.entry and self.owner[VERSIONS] != self.name:
            cross.setdefault(self.owner[VERSIONS], set()).add(RANGE_CHECKED)
        lines = [self._header(), *(["from __future__ import annotations", ""] if future else [])]
        lines += import_lines(hoisted)
        if cross:
            lines.append("")
        text = "\n\n".join(body).rstrip() + "\n"
        used = {node.id for node in ast.walk(ast.parse(text)) if isinstance(node, ast.Name)}
        for file_name, names in sorted(cross.items()):
            lines += import_from_file_lines(f".{file_name}", names, used)
        # after the imports, two blank lines before a function or class, else one, as isort writes them
        first = ast.parse(text).body[:1]
        gap = "\n\n\n" if first and isinstance(first[0], (ast.FunctionDef, ast.ClassDef)) else "\n\n"
        return "\n".join(lines) + gap + text

    def _header(self) -> str:
        """The generated-mark line, then the file's docstring: its topic, the package and transformers versions."""
        note = generated_note("attnres repair-folder", generator="hf_attnres.folders.remote_code")
        doc = f"{self.topic}\n\n" + wrap(f"Generated by hf-attnres {_package_version()}. Supports transformers "
                                         f"{TRANSFORMERS_RANGE}; generated with transformers {generated_with()}.")
        # the block needing an optional package is indented one level
        return file_header(note, doc, ("E501",) if any(m in self.optional for m in self.modules) else ())

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
        if module == CONFIG and self.without:  # the features this folder's config does not use: their code is not here
            stmt = next(s for s in source.tree.body if isinstance(s, ast.Assign)
                        and [ast.unparse(t) for t in s.targets] == [WITHOUT])
            edits[stmt.lineno] = (stmt.end_lineno, [f"{WITHOUT} = {literal(self.without)}"])
        if ast.get_docstring(source.tree, clean=False) is not None:
            # the module's docstring is about the package's module (its place among the package's files and tools);
            # the folder's file has its own, and the code's arithmetic is explained on its classes and functions
            edits[source.tree.body[0].lineno] = (source.tree.body[0].end_lineno, [])
        for node, target in source.eager + source.lazy:
            # a module needing an optional package is defined inside its guard: its imports stay there with it
            top = node in source.tree.body and module not in self.optional
            edits[node.lineno] = (node.end_lineno, self._replace_import(node, target, top, cross))
        for stmt in source.tree.body:  # a comment on a top-level import goes with it (the import is hoisted)
            if isinstance(stmt, (ast.Import, ast.ImportFrom)) and edits.get(stmt.lineno, (0, [None]))[1] == []:
                start = stmt.lineno
                while start > 1 and lines[start - 2].startswith("#"):
                    start -= 1
                edits[start] = edits.pop(stmt.lineno)
        # the comment lines above a module's first statement are about the package's file (where it is generated
        # from), not the code: the folder's file says where it comes from in its own docstring
        first = source.tree.body[0].lineno if source.tree.body else len(lines) + 1
        out = []
        skip_to = max((n for n in range(1, first) if lines[n - 1].startswith("#")), default=0)
        if any(lines[n - 1].strip() and not lines[n - 1].startswith("#") for n in range(1, skip_to + 1)):
            skip_to = 0
        for number, line in enumerate(lines, start=1):
            if number <= skip_to:
                continue
            if number in edits:
                skip_to, replacement = edits[number]
                out += replacement
                continue
            out.append(line)
        if module == VERSIONS:  # the check runs as soon as the range and its check are defined
            out += ["", "", "# the transformers this file was generated with (the range above is the one it supports)",
                    f"{RANGE_CHECKED} = {generated_with()!r}",
                    f"require_supported_transformers(TRANSFORMERS_RANGE, {RANGE_CHECKED})"]
        text = collapse_blank_lines("\n".join(out).strip("\n") + "\n") if any(line.strip() for line in out) else ""
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


def family_modules(modeling_module: str) -> tuple[str, str]:
    """(configuration module, modeling module) of the family whose modeling module is `modeling_module`."""
    package, _, leaf = modeling_module.rpartition(".")
    if not leaf.startswith("modeling_"):
        raise GenerationError(f"{modeling_module}: a family's model lives in a `modeling_<family>_attnres` module")
    return f"{package}.configuration_{leaf.removeprefix('modeling_')}", modeling_module


def eager_closure(root: str, sources: dict) -> list[str]:
    """The package modules importing `root` runs (imports outside functions, followed), `root` first."""
    found, todo = [root], [root]
    while todo:
        module = todo.pop()
        source = sources.setdefault(module, Source.read(module))
        for _, target in source.eager:
            if target not in found:
                found.append(target)
                todo.append(target)
    return found


def plan_groups(modeling_module: str, sources: dict | None = None,
                features: frozenset = ALL_FEATURES) -> dict[str, list[str]]:
    """File name -> its modules in order, one file per topic, in the order a file may import from the ones before it:
    the family's configuration (its config module and what importing it runs, and the transformers range check),
    the kernels (the depth mix's PyTorch arithmetic), the family-independent AttnRes code (hf_attnres.core, shared by
    every family as transformers lays out shared modeling code) and the family's modeling (its own classes). The
    configuration imports the core only inside functions, so a config loads without the model and the kernels.
    `features`: those of `FEATURES` the folder ships, with their modules."""
    sources = {} if sources is None else sources
    config_module, modeling_module = family_modules(modeling_module)
    everything = closure(modeling_module, sources)
    for root in sorted(root for feature in features for root in FEATURES[feature]):
        everything += [m for m in closure(root, sources) if m not in everything]
    everything += [m for m in closure(config_module, sources) if m not in everything]
    config = [m for m in closure(VERSIONS, sources)]
    config += [m for m in eager_closure(config_module, sources) if m not in config]
    for checks in sorted(FEATURE_CHECKS & set(everything)):  # the config checks them before any model code loads
        config += [m for m in eager_closure(checks, sources) if m not in config]
    kernels = [m for m in everything if (m == KERNELS or m.startswith(KERNELS + ".")) and m not in config]
    core = [m for m in everything if (m == CORE or m.startswith(CORE + ".")) and m not in config]
    placed = {*config, *kernels, *core}
    modeling = [m for m in everything if m not in placed]
    plan = {config_module.rpartition(".")[2]: config, KERNELS_FILE: kernels, CORE_FILE: core,
            modeling_module.rpartition(".")[2]: modeling}
    plan = {name: dependency_order(modules, sources) for name, modules in plan.items() if modules}
    # the range check first: it imports nothing of the rest, and refuses before any other code of the folder runs
    checks = closure(VERSIONS, sources)
    first = plan[config_module.rpartition(".")[2]]
    first[:] = [m for m in first if m in checks] + [m for m in first if m not in checks]
    return plan


def topic(file_name: str) -> str:
    """The first line of a generated file's docstring: what it holds (`TOPICS`), the family named as in prose."""
    kind = file_name.partition("_")[0]
    if kind not in ("configuration", "modeling"):
        return TOPICS[file_name]
    from ..families.registry import DECLARATIONS

    leaf = file_name.removeprefix(kind + "_").removesuffix("_attnres")
    labels = {package.rpartition(".")[2]: family.title for package, family in DECLARATIONS.values()}
    return TOPICS[kind].format(family=labels.get(leaf, leaf))


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


def features_of(config: dict | None) -> frozenset:
    """The features (`FEATURES`) a folder whose config.json holds `config` uses; all of them for None (no config)."""
    if config is None:
        return ALL_FEATURES
    from types import SimpleNamespace

    from ..core.config import ATTN_RES_FIELDS, AttnResConfigChecks

    fields = SimpleNamespace(**{name: default for name, (_, default) in ATTN_RES_FIELDS.items()})
    vars(fields).update({name: value for name, value in config.items() if name in ATTN_RES_FIELDS})

    def uses(feature: str) -> bool:  # a config field, or a property the config class derives from its fields
        derived = getattr(AttnResConfigChecks, feature, None)
        return bool(derived.fget(fields) if isinstance(derived, property) else getattr(fields, feature))

    return frozenset(feature for feature in FEATURES if uses(feature))


def generate(modeling_module: str, sources: dict | None = None, features: frozenset = ALL_FEATURES) -> dict[str, str]:
    """File name (with .py) -> generated source, for the family of `modeling_module`, shipping `features`."""
    sources = {} if sources is None else sources
    plan = plan_groups(modeling_module, sources, features)
    optional = optional_modules([module for modules in plan.values() for module in modules], sources)
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
    entries = [module.rpartition(".")[2] for module in family_modules(modeling_module)]
    without = tuple(sorted(ALL_FEATURES - features))
    files = {f"{name}.py": FlatFile(name, modules, owner, sources, optional, entry=name in entries,
                                    without=without, topic=topic(name)).render()
             for name, modules in plan.items()}
    for entry in entries:
        check_range_runs_first(files, owner[VERSIONS], entry)
    return files


def generated_with() -> str:
    """The transformers version generated code records (the installed one)."""
    import transformers

    return transformers.__version__


def _package_version() -> str:
    from .. import __version__

    return __version__


def check_range_runs_first(files: dict[str, str], versions_file: str, entry: str) -> None:
    """An `auto_map` file (the configuration `AutoConfig` imports first, the model) imports the file holding the range
    check at its top level: a folder under an unsupported transformers is refused before a config exists."""
    if versions_file == entry:
        return
    for node in ast.parse(files[f"{entry}.py"]).body:
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module == versions_file:
            return
    raise GenerationError(f"{entry}.py does not import {versions_file}.py at import: the transformers range check "
                          f"({VERSIONS}) would not run before the config loads")


@functools.cache
def _generated(model_module: str, features: frozenset = ALL_FEATURES) -> dict[str, str]:
    """`generate`, once per family, features and process: the package's sources do not change under a running
    process, and a training run saves a folder at every checkpoint (parsing the modules takes most of a second)."""
    return generate(model_module, features=features)


def generated_files(model_module: str, config: dict | None = None) -> dict[str, str]:
    """File name (with .py) -> text of the code a folder of the family of `model_module` ships now, for a folder
    whose config.json holds `config` (None: every feature's code)."""
    return dict(_generated(model_module, features_of(config)))


def code_file_names(model_module: str) -> list[str]:
    """The code files (with .py) a folder of the family of `model_module` ships, in generation order (the same for
    every config: a feature adds modules to the files, not files)."""
    return list(_generated(model_module))


def write_code_files(folder, model_module: str) -> list[Path]:
    """Write the generated code files of the model's family into `folder`, for the config.json written there first
    (every feature's code without one); return the written paths. `model_module`: the module of the class being
    saved; a class already loaded as remote code is flat, and transformers copied its files."""
    if not model_module.startswith(PACKAGE + "."):
        return []
    config_path = Path(folder) / CONFIG_NAME
    config = read_json_file(config_path, "model config") if config_path.is_file() else None
    written = []
    for file_name, text in generated_files(model_module, config).items():
        write_generated(Path(folder) / file_name, text)
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

