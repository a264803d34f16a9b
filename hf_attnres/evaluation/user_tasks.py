"""The task YAMLs compare hands to lm-eval, read by compare first: what lm-eval would skip without a word (it drops a
YAML it cannot parse from its index, so the task reads as unknown), what would fail mid-run (a `!function` module
that is missing or raises on import), and every file a task reads (`task_files`), for the cache key of its results.

A task YAML is parsed as lm-eval parses it, with only lm-eval's own `!function` tag: any other tag (such as
`!!python/object/apply`) is refused by name and never constructed. An `include:` of a user's task must stay inside
--include-path or lm-eval's installed task folder.
"""
from __future__ import annotations

import re
import traceback
from pathlib import Path

import yaml

FUNCTION_TAG = "!function"
MAX_DIR_FILES = 10_000  # a local dataset folder: stamped file by file up to this many


class TaskFileError(ValueError):
    """A task YAML lm-eval could not use: its message names the file and the reason."""


class _Function(str):
    """A `!function` reference, kept unresolved (module.function, relative to the YAML's folder first)."""


def _loader(base: type = yaml.SafeLoader) -> type:
    class Loader(base):  # a class per call: the constructor below stays off yaml.SafeLoader itself
        pass

    Loader.add_constructor(FUNCTION_TAG, lambda loader, node: _Function(loader.construct_scalar(node)))
    return Loader


def _yaml_reason(error: yaml.YAMLError) -> str:
    mark = getattr(error, "problem_mark", None)
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    if isinstance(error, yaml.constructor.ConstructorError) and "could not determine a constructor" in problem:
        tag = problem.split("tag", 1)[-1].strip(" '").replace("tag:yaml.org,2002:", "!!")
        return f"tag {tag} not allowed (only {FUNCTION_TAG}){where}"
    return f"not valid YAML: {problem}{where}"


def _roots() -> tuple[Path, ...]:
    from .tasks import lm_eval_tasks_dir

    return (lm_eval_tasks_dir(),)


def read_task_yaml(path: Path, root: Path | None = None, _seen: tuple = ()) -> tuple[dict, list[Path]]:
    """(the task's config with its includes merged, every YAML file read): TaskFileError naming the file and the
    reason for a YAML error, a tag other than !function, a config that is no mapping, or an include that is missing
    or, with `root`, lies outside `root` and lm-eval's own task folder."""
    path = Path(path).resolve()
    if path in _seen:
        raise TaskFileError(f"{path}: include cycle")
    try:
        config = yaml.load(path.read_text(encoding="utf-8"), Loader=_loader())  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as error:
        raise TaskFileError(f"{path}: {_yaml_reason(error)}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise TaskFileError(f"{path}: cannot be read ({error})") from None
    if not isinstance(config, dict):
        got = "an empty file" if config is None else f"a YAML {type(config).__name__}"
        raise TaskFileError(f"{path}: not a task config (a YAML mapping): {got}")
    files = [path]
    includes = config.pop("include", None)
    merged: dict = {}
    for include in includes if isinstance(includes, list) else [] if includes is None else [includes]:
        target = (path.parent / str(include)).resolve()
        if root is not None and not any(target.is_relative_to(r.resolve()) for r in (Path(root), *_roots())):
            raise TaskFileError(f"{path}: include {include} lies outside --include-path {root}")
        if not target.is_file():
            raise TaskFileError(f"{path}: include {include}: no such file ({target})")
        included, read = read_task_yaml(target, root, (*_seen, path))
        included.pop("task_list", None)
        merged.update(included)
        files += read
    return merged | config, files


def claimed_names(path: Path) -> set[str]:
    """The task and group names a YAML file's text declares, read line by line (so also from a file no parser
    accepts)."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return set()
    return set(re.findall(r"^(?:task|group)\s*:\s*['\"]?([^'\"\s#\[\]{}]+)", text, flags=re.MULTILINE))


def broken_task_files(include_path: Path) -> dict[Path, str]:
    """{file: reason} for every *.yaml of --include-path that lm-eval would leave out of its index."""
    broken = {}
    for path in sorted(Path(include_path).rglob("*.yaml")):
        if "__pycache__" in path.parts:
            continue
        try:
            config, _ = read_task_yaml(path, include_path)
        except TaskFileError as error:
            broken[path] = str(error).removeprefix(f"{path.resolve()}: ")
            continue
        if not {"task", "group", "class"} & set(config):  # lm-eval's index: "Unknown config shape"
            broken[path] = "declares no task, group or class (an include-only template reads so too)"
    return broken


def check_loadable(tasks: list[str], include_path: Path | None, manager) -> str | None:
    """TaskFileError naming the task, its file and the reason when the YAML of a requested task (or of a subtask its
    group names) in --include-path cannot be used; else, for requested tasks still unknown, a clause naming the
    --include-path files lm-eval skipped (None: none)."""
    if include_path is None:
        return None
    broken = broken_task_files(include_path)
    for task in tasks:
        for name in [task, *_members(manager, task)]:
            for path, reason in broken.items():
                if name in claimed_names(path):
                    part = "" if name == task else f" (its subtask {name})"
                    raise TaskFileError(f"task {task}{part}: {path}: {reason}")
    if not broken or all(t in manager.task_index for t in tasks):
        return None
    return "; files of --include-path lm-eval skipped: " + "; ".join(f"{p} ({r})" for p, r in broken.items())


def _members(manager, name: str, depth: int = 0) -> list[str]:
    """The names a group (its `task:` list) or a tag of lm-eval's index stands for, nested groups' too."""
    entry = manager.task_index.get(name)
    if entry is None or depth > 8:
        return []
    members = list(entry.tags) if entry.yaml_path is None else []
    subtasks = (entry.cfg or {}).get("task") if "group" in (entry.cfg or {}) else None
    for item in subtasks if isinstance(subtasks, list) else []:
        members.append(item.get("task") if isinstance(item, dict) else item)
    members = [m for m in members if isinstance(m, str)]
    return members + [sub for m in members for sub in _members(manager, m, depth + 1)]


def _entry_files(manager, name: str) -> list[Path]:
    """The YAML files of a task, group or tag of lm-eval's index, its subtasks' included."""
    entries = (manager.task_index.get(n) for n in [name, *_members(manager, name)])
    return [Path(e.yaml_path) for e in entries if e is not None and e.yaml_path]


def resolve_functions(tasks: list[str], manager, include_path: Path | None) -> None:
    """Import the `!function` code of each requested task defined in --include-path, as lm-eval will: a missing
    module, one that raises or one that exits is a TaskFileError naming the task, its file and the module, before
    any model is loaded."""
    if include_path is None:
        return
    from lm_eval.tasks._yaml_loader import load_yaml

    root = Path(include_path).resolve()
    for task in tasks:
        for path in _entry_files(manager, task):
            if not Path(path).resolve().is_relative_to(root):
                continue
            try:
                load_yaml(path, resolve_func=True)
            except (Exception, SystemExit) as error:  # the user's module ran: anything it raised, exit included
                raise TaskFileError(f"task {task}: {path}: its !function code cannot be loaded: "
                                    f"{describe_failure(error, [root])}") from None


def describe_failure(error: BaseException, user_dirs: list[Path]) -> str:
    """`error` in a few words, with the user's frame it came from (file:line), for one line."""
    frame = user_frame(error, user_dirs)
    what = (f"sys.exit({error.code!r})" if isinstance(error, SystemExit)
            else f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}".rstrip(": "))
    return f"{what}" + (f" in {frame}" if frame else "")


def _library_dirs() -> list[Path]:
    import sysconfig

    import lm_eval

    import hf_attnres

    paths = sysconfig.get_paths()
    return [Path(lm_eval.__file__).parent, Path(hf_attnres.__file__).parent,
            *(Path(paths[k]) for k in ("stdlib", "purelib", "platlib") if k in paths)]


def user_frame(error: BaseException, user_dirs: list[Path]) -> str | None:
    """The innermost frame of `error`'s traceback in the user's code: a file under `user_dirs`, else the innermost
    one outside lm-eval, attnres, the standard library and installed packages (a module beside the working folder)."""
    frames = traceback.extract_tb(error.__traceback__)
    libraries = _library_dirs()

    def under(filename, dirs):
        path = Path(filename).resolve()
        return any(path.is_relative_to(Path(d).resolve()) for d in dirs)

    def library(filename):  # any environment's installed packages count, a layered one's too
        return filename.startswith("<") or under(filename, libraries) or bool(
            {"site-packages", "dist-packages"} & set(Path(filename).parts))

    for test in (lambda f: under(f.filename, user_dirs), lambda f: not library(f.filename)):
        for frame in reversed(frames):
            if test(frame):
                return f"{frame.filename}:{frame.lineno}"
    return None


def _data_paths(value, key: str, base: Path, found: list[Path]) -> None:
    """Local paths in a task config: any absolute path that exists; under dataset_path / dataset_kwargs also a
    relative one (to the YAML's folder or the working folder)."""
    if isinstance(value, dict):
        for k, v in value.items():
            _data_paths(v, key or (k if k in ("dataset_path", "dataset_kwargs") else ""), base, found)
    elif isinstance(value, list):
        for v in value:
            _data_paths(v, key, base, found)
    elif isinstance(value, _Function):
        module = value.rpartition(".")[0].replace(".", "/") + ".py"
        found += [p for p in (base / module,) if p.is_file()]
    elif isinstance(value, str) and 0 < len(value) < 4096 and "\n" not in value:
        candidates = [Path(value)] if Path(value).is_absolute() else [base / value, Path.cwd() / value] if key else []
        found += [p for p in candidates if p.exists()]


def task_files(manager, task: str) -> list[Path]:
    """Every local file a task reads: its YAMLs and includes, its !function modules beside them, and its data files
    and folders wherever they lie."""
    found: list[Path] = []
    for path in _entry_files(manager, task):
        try:
            config, files = read_task_yaml(path)
        except TaskFileError:
            files, config = [Path(path)], {}
        found += files
        _data_paths(config, "", Path(path).parent, found)
    out: list[Path] = []
    for path in found:
        path = path.resolve()
        if path.is_dir():
            out += sorted(p for p in path.rglob("*") if p.is_file())[:MAX_DIR_FILES]
        elif path.is_file():
            out.append(path)
    return sorted(set(out))


__all__ = ["TaskFileError", "read_task_yaml", "broken_task_files", "check_loadable", "resolve_functions",
           "describe_failure", "user_frame", "task_files"]
