"""What the two generators of this project's code share, so the files they write read alike: the line length and the
import lines (merged, ordered and wrapped as isort and ruff's "I" rules write them); both write with
`atomic_io.write_text_atomic`. `hf_attnres/utils/modular.py` writes a family's configuration and modeling files from
its declaration; `hf_attnres/folders/remote_code.py` writes a saved folder's code files from the package's modules.

It imports nothing of this package (nor does `atomic_io`): the family generator, run as a script, loads both by their
paths, as it runs before a new family's files exist and so before `import hf_attnres` can.
"""
from __future__ import annotations

import ast
import sys

LINE_LENGTH = 120  # the package's (pyproject [tool.ruff])


def import_lines(statements) -> list[str]:
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
        lines += [from_line(m, names) for (m, alias), names in sorted(from_.items(), key=_from_key)
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


def name_key(name: str):
    """isort's order of imported names (ruff's `order-by-type`): constants, classes, then the rest."""
    kind = 0 if name.isupper() and len(name) > 1 else 1 if name[:1].isupper() else 2
    return kind, name


def from_line(module: str, names) -> str:
    parts = [_as(n, a) for n, a in sorted(names, key=lambda item: name_key(item[0]))]
    line = f"from {module} import {', '.join(parts)}"
    if len(line) <= LINE_LENGTH:
        return line
    return f"from {module} import (\n" + "".join(f"    {p},\n" for p in parts) + ")"


__all__ = ["LINE_LENGTH", "import_lines", "from_line", "name_key"]
