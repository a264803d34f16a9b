"""The path `attnres convert <tiny llama folder> OUT --upcycle block` takes through the package, measured by tracing it
in-process (`sys.setprofile`, call and return events of every Python frame).

The rule, exactly:
- The traced call is `hf_attnres.conversion.commands.convert(args)`, `args` the `ConvertArgs` that
  `hf_attnres.cli.convert.parse_args(argv)` parsed before the trace starts: the path the parsed flags take below
  hf_attnres/cli. (Parsing - the parser, the dataclass, its conflict rules - is every command's shared front.)
- A frame is in a *tool module* when its module `__name__` is `hf_attnres` or `hf_attnres.*`, except:
`hf_attnres.core.*` and
  `hf_attnres.kernels.*` (the model), a family's generated `hf_attnres.families.<f>.modeling_*` / `configuration_*`
  files
  (the model), and the shared libraries below every command, `hf_attnres.utils.*` (paths, signals, finite checks) and
  `hf_attnres.folders.*` (reading, checking and writing model folders), called as one calls safetensors. Module-level
  code (an import running a module body) is not a call on the path. Excluded frames are transparent: a tool frame's
  caller is its nearest tool-module ancestor on the stack, through any other frames (transformers, torch, the model).
  What the model runs is the model's: a frame called, directly or through other frames, from a model frame (the
  code files the model's own `save_pretrained` writes through the package's `code_writer`) is not on the path.
- (i) *modules crossed*: the distinct tool modules in which a frame runs.
- (ii) *returns upward*: a tool frame of module A returns to its caller's module B (B != A), and the next call that
  B's activation (the B frames in one unbroken run of B calls) makes into another module goes to a module C with
  C != A and C != B: control went down into A, came back up through B, and went down again into C (a ping-pong
  through the caller). Each such return counts once.
- (iii) *family resolutions*: calls of the functions that work out a family from a model_type, a config or a folder
  (`folders.model_family.family_of_source` / `family_of_folder`, `families.registry.family_of_model_type` /
  `source_family` / `source_family_of`), counting only the outermost of nested ones.

The goal: at most 8 modules, at most 3 returns upward, the family resolved exactly once (a path that goes down once
per step: check the request, open the source, rebuild the model, write the folder).
docs/BENCHMARKS.md "The convert path" records the numbers before and after.
"""
from __future__ import annotations

import re
import sys
import types

import pytest

from hf_attnres.cli.convert import parse_args
from hf_attnres.conversion import commands
from hf_attnres.families import registry
from hf_attnres.folders import model_family
from tests.families.tiny import source_model

MAX_MODULES, MAX_RETURNS_UP = 8, 3
MODEL = re.compile(r"^hf_attnres\.(core|kernels)(\.|$)|^hf_attnres\.families\.[^.]+\.(modeling|configuration)_")
EXCLUDED = re.compile(MODEL.pattern + r"|^hf_attnres\.(utils|folders)(\.|$)")
RESOLVERS = {function.__code__ for function in (
    model_family.family_of_source, model_family.family_of_folder, registry.family_of_model_type,
    registry.source_family, registry.source_family_of)}


def tool_module(frame) -> str | None:
    name = frame.f_globals.get("__name__") or ""
    if frame.f_code.co_name == "<module>" or not (name == "hf_attnres" or name.startswith("hf_attnres.")):
        return None
    return None if EXCLUDED.match(name) else name


def model_frame(frame) -> bool:
    return bool(MODEL.match(frame.f_globals.get("__name__") or ""))


class PathTrace:
    """A profile hook keeping a stack of (frame's tool module or None, its activation); see the module docstring."""

    def __init__(self):
        self.stack: list[tuple[str | None, int | None, bool, bool]] = []  # (module, activation, resolver, in model)
        self.modules: set[str] = set()
        self.returns_up: list[tuple[str, str, str]] = []
        self.pending: dict[int, str] = {}  # activation -> the module that last returned into it
        self.resolutions = 0
        self.resolving = 0  # resolver frames on the stack

    def caller(self):
        return next((entry for entry in reversed(self.stack) if entry[0] is not None), None)

    def __call__(self, frame, event, arg):
        if event == "call":
            resolver = frame.f_code in RESOLVERS
            if resolver:
                self.resolutions += self.resolving == 0
                self.resolving += 1
            in_model = model_frame(frame) or bool(self.stack and self.stack[-1][3])
            module, parent = (None if in_model else tool_module(frame)), self.caller()
            activation = None
            if module is not None:
                self.modules.add(module)
                if parent is not None and parent[0] == module:
                    activation = parent[1]
                else:
                    activation = id(frame)
                    if parent is not None:
                        back = self.pending.pop(parent[1], None)
                        if back is not None and module not in (back, parent[0]):
                            self.returns_up.append((back, parent[0], module))
            self.stack.append((module, activation, resolver, in_model))
        elif event == "return" and self.stack:
            module, activation, resolver, _ = self.stack.pop()
            self.resolving -= resolver
            parent = self.caller()
            if module is not None and parent is not None and parent[0] != module:
                self.pending[parent[1]] = module

    def run(self, function, *args):
        sys.setprofile(self)
        try:
            return function(*args)
        finally:
            sys.setprofile(None)


@pytest.fixture(scope="module")
def llama_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("path") / "llama"
    source_model("llama").save_pretrained(folder)
    return folder


def convert_traced(folder, output) -> PathTrace:
    args = parse_args([str(folder), str(output), "--upcycle", "block", "--no-progress"])
    trace = PathTrace()
    assert trace.run(commands.convert, args) == 0
    assert (output / "config.json").is_file()
    return trace


def test_convert_upcycle_takes_a_short_path(llama_folder, tmp_path):
    commands.convert(parse_args([str(llama_folder), str(tmp_path / "warm"), "--upcycle", "block", "--no-progress"]))
    trace = convert_traced(llama_folder, tmp_path / "out")  # imports done by the first run: calls only
    print(f"modules {len(trace.modules)}: {sorted(trace.modules)}\nreturns upward {len(trace.returns_up)}: "
          f"{trace.returns_up}\nfamily resolutions {trace.resolutions}")
    assert trace.resolutions == 1
    assert len(trace.modules) <= MAX_MODULES, sorted(trace.modules)
    assert len(trace.returns_up) <= MAX_RETURNS_UP, trace.returns_up


def synthetic_modules(chain: dict[str, str]) -> dict[str, types.ModuleType]:
    """Modules named hf_attnres.conversion.<name>, each defining `run()` from the source given."""
    made = {}
    for name, body in chain.items():
        module = types.ModuleType(f"hf_attnres.conversion.{name}")
        module.__dict__["made"] = made
        exec(compile(f"def run():\n{body}\n", module.__name__, "exec"), module.__dict__)
        made[name] = module
    return made


def test_the_counter_counts_a_ping_pong_through_the_caller():
    """top calls a, b, then c in turn (2 returns upward: a->top->b, b->top->c); c calls d, d returns, c calls d again
    (no return upward: the same module), then c calls a (1: d->c->a); an excluded module in between is transparent."""
    made = synthetic_modules({
        "top": "    made['a'].run(); made['b'].run(); made['utils_like'].run(); made['c'].run()",
        "a": "    return 1",
        "b": "    return 2",
        "c": "    made['d'].run(); made['d'].run(); made['a'].run()",
        "d": "    return 4",
        "utils_like": "    return 5",
    })
    made["utils_like"].run.__globals__["__name__"] = "hf_attnres.utils.made_up"
    trace = PathTrace()
    trace.run(made["top"].run)
    assert trace.modules == {f"hf_attnres.conversion.{name}" for name in ("top", "a", "b", "c", "d")}
    assert [(a.rsplit(".")[-1], b.rsplit(".")[-1], c.rsplit(".")[-1]) for a, b, c in trace.returns_up] == [
        ("a", "top", "b"), ("b", "top", "c"), ("d", "c", "a")]


def test_the_counter_catches_a_longer_convert_path(llama_folder, tmp_path, monkeypatch):
    """The real convert with a detour: the family's source opened from a module that first asks the guards, then the
    Hub module, then the registry, then resolves the family a second time: each counter goes over its goal."""
    from hf_attnres.conversion import family_convert

    detour = types.ModuleType("hf_attnres.conversion.detour")
    exec(compile(
        "def open_source(input, family, *rest):\n"
        "    from hf_attnres.conversion import family_source, guards, hub\n"
        "    from hf_attnres.families import registry\n"
        "    from hf_attnres.folders import model_family\n"
        "    guards.check_max_shard_size('5GB')\n"
        "    hub.check_repo_id('user/model')\n"
        "    registry.family_classes(family)\n"
        "    model_family.family_of_source(input)\n"
        "    return family_source.open_source(input, family, *rest)\n", detour.__name__, "exec"), detour.__dict__)
    monkeypatch.setattr(family_convert, "open_source", detour.open_source)
    commands.convert(parse_args([str(llama_folder), str(tmp_path / "warm"), "--upcycle", "block", "--no-progress"]))
    trace = convert_traced(llama_folder, tmp_path / "out")
    assert "hf_attnres.conversion.detour" in trace.modules and len(trace.modules) > MAX_MODULES
    assert trace.resolutions == 2
    assert len(trace.returns_up) > MAX_RETURNS_UP, trace.returns_up
