"""transformers' own model test battery (ModelTesterMixin), imported from transformers' source distribution on PyPI.

The wheel has no tests; the sdist ships `tests/test_modeling_common.py` and the other top-level mixins, but not
`tests/generation/` or `tests/exporters/`, which `test_modeling_common.py` imports. We download the sdist of the
installed version once (pip, into a cache folder), import its `tests/` as a package, and stand in for the two missing
modules with empty mixins of our own (no transformers test code is copied into this project).

Cache: $ATTNRES_TRANSFORMERS_TESTS_CACHE, default ~/.cache/attnres/transformers-tests/<version>/.
"""
import importlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import types
from pathlib import Path

import transformers

PACKAGE = "transformers_sdist_tests"  # the name the sdist's `tests/` folder is imported under
NEEDED = ("test_modeling_common.py", "test_configuration_common.py", "test_training_mixin.py")


def cache_dir() -> Path:
    default = Path.home() / ".cache" / "attnres" / "transformers-tests" / transformers.__version__
    return Path(os.environ.get("ATTNRES_TRANSFORMERS_TESTS_CACHE", default))


def fetch_tests() -> Path:
    """The sdist's `tests/` folder (top-level files only), downloaded with pip on first use; atomic (temp + rename)."""
    target = cache_dir() / "tests"
    if all((target / name).is_file() for name in NEEDED):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        spec = f"transformers=={transformers.__version__}"
        cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:", spec, "-d", tmp]
        result = subprocess.run(cmd, capture_output=True, text=True)
        archives = list(Path(tmp).glob("transformers-*.tar.gz"))
        if result.returncode != 0 or not archives:
            raise RuntimeError(f"could not download the {spec} sdist from PyPI (needed for transformers' common "
                               f"model tests): {result.stderr.strip()[-2000:]}")
        staged = Path(tmp) / "tests"
        staged.mkdir()
        with tarfile.open(archives[0]) as archive:
            for member in archive.getmembers():
                parts = Path(member.name).parts  # transformers-X/tests/<file>.py: top level only
                if member.isfile() and len(parts) == 3 and parts[1] == "tests" and parts[2].endswith(".py"):
                    (staged / parts[2]).write_bytes(archive.extractfile(member).read())
        missing = [name for name in NEEDED if not (staged / name).is_file()]
        if missing:
            raise RuntimeError(f"the {spec} sdist has no tests/{missing[0]}")
        if target.exists():
            shutil.rmtree(target)
        staged.rename(target)
    return target


class GenerationTesterMixin:
    """Stands in for `tests/generation/test_utils.py`, which the sdist lacks: no generation tests run from here
    (ours: tests/test_generation.py)."""


class ExportTesterMixin:
    """Stands in for `tests/exporters/test_export.py`, which the sdist lacks: no export tests run from here."""


def _shim(name: str, **attrs) -> None:
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    sys.modules[name] = module


def load_common():
    """transformers' `tests/test_modeling_common.py` as a module (the missing modules stood in for)."""
    if f"{PACKAGE}.test_modeling_common" not in sys.modules:
        package = types.ModuleType(PACKAGE)
        package.__path__ = [str(fetch_tests())]
        sys.modules[PACKAGE] = package
        for sub in ("generation", "exporters"):
            _shim(f"{PACKAGE}.{sub}", __path__=[])
        _shim(f"{PACKAGE}.generation.test_utils", GenerationTesterMixin=GenerationTesterMixin)
        _shim(f"{PACKAGE}.exporters.test_export", ExportTesterMixin=ExportTesterMixin)
    return importlib.import_module(f"{PACKAGE}.test_modeling_common")


def declare_model(module, model_type: str, base_model: str, causal_lm: str) -> None:
    """Enter our classes in the task tables the mixins read (base model vs causal-LM head: which tests need labels),
    as transformers' own models are. Only the mixins' copies change: transformers' Auto classes are untouched."""
    module.MODEL_MAPPING_NAMES = {**module.MODEL_MAPPING_NAMES, model_type: base_model}
    module.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES = {**module.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, model_type: causal_lm}
