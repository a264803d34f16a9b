"""Optional dependencies: a command that needs one says which extra brings it, in one line."""
from __future__ import annotations

import importlib

# module -> the extra of pyproject.toml that installs it
EXTRA_OF = {
    "deepspeed": "train", "datasets": "train", "tokenizers": "train", "matplotlib": "train", "tensorboard": "train",
    "lm_eval": "eval", "scipy": "eval", "sympy": "eval", "math_verify": "eval",
    "peft": "finetune", "trl": "finetune", "triton": "triton",
}


class MissingExtraError(ImportError):
    """An optional dependency is not installed; the message names the extra (`pip install "hf-attnres[train]"`)."""


def require(module: str, extra: str | None = None, why: str = ""):
    """Import `module`, or raise MissingExtraError naming the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        if error.name is not None and error.name.split(".")[0] != module.split(".")[0]:
            raise  # a module inside the dependency failed: not a missing extra
        extra = extra or EXTRA_OF.get(module.split(".")[0], "all")
        needed = f" ({why})" if why else ""
        raise MissingExtraError(f"needs {module.split('.')[0]}{needed}: pip install \"hf-attnres[{extra}]\"") from None


__all__ = ["EXTRA_OF", "MissingExtraError", "require"]
