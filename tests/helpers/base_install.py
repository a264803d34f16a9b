"""Run code in a fresh interpreter that behaves like a base install (`pip install hf-attnres`, no extras): the optional
dependencies of the `train` and `eval` extras are reported not installed, as `importlib.util.find_spec` and `import`
see it, however much of them this machine has."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ABSENT = ("deepspeed", "datasets", "lm_eval")

# Swaps the path finder for one that does not find ABSENT: `find_spec` answers None and `import` raises
# ModuleNotFoundError, exactly what a machine without them gives (transformers probes with find_spec)
HIDE_EXTRAS = textwrap.dedent(f"""
    import importlib.machinery, sys

    class BaseInstallFinder(importlib.machinery.PathFinder):
        @classmethod
        def find_spec(cls, name, path=None, target=None):
            if name.partition(".")[0] in {ABSENT!r}:
                return None
            return super().find_spec(name, path, target)

    sys.meta_path[sys.meta_path.index(importlib.machinery.PathFinder)] = BaseInstallFinder
""")


def run_on_base_install(code: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """`code` run after HIDE_EXTRAS in a fresh `python -c` (cwd: the repository), its output captured."""
    return subprocess.run([sys.executable, "-c", HIDE_EXTRAS + textwrap.dedent(code)], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)
