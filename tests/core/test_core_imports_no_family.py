"""The core is family-independent: no module of attnres/core imports attnres.families (absolute or relative, at the
top or inside a function), so a family is something the core serves, never something it knows."""
import ast
from pathlib import Path

import attnres.core

CORE_DIR = Path(attnres.core.__file__).parent


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = ("attnres." if node.level >= 2 else "attnres.core." if node.level else "")
            names.add(base + (node.module or ""))
    return names


def test_no_core_module_imports_a_family():
    offenders = {path.name: sorted(m for m in imported_modules(path) if m.startswith("attnres.families"))
                 for path in CORE_DIR.glob("*.py")}
    assert {name: found for name, found in offenders.items() if found} == {}


def test_the_check_sees_relative_and_function_level_imports(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from ..families.registry import SUPPORTED\n")
    assert "attnres.families.registry" in imported_modules(probe)
