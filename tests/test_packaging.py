"""The package builds as a wheel and an sdist whose metadata is ready for PyPI (what `twine check` reads: name,
version, readme as long description; plus license, classifiers, urls), the wheel holds the kernels and the task
templates, and `import hf_attnres` stays light (no tool, no optional dependency, little time beyond transformers)."""
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
import tomllib  # the tests run on Python 3.11+
from packaging.requirements import Requirement
from packaging.version import Version

import hf_attnres

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    """Build from a copy of the sources (nothing written into the checkout), without network (--no-isolation)."""
    root = tmp_path_factory.mktemp("pkg")
    src = root / "src"
    shutil.copytree(REPO / "hf_attnres", src / "hf_attnres", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(REPO / name, src / name)
    result = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(root / "dist"), str(src)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return root / "dist"


def test_wheel_metadata_is_publish_ready(dist):
    wheel = next(dist.glob("hf_attnres-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        meta = Parser().parsestr(archive.read(f"hf_attnres-{hf_attnres.__version__}.dist-info/METADATA").decode())
    assert meta["Name"] == "hf-attnres" and meta["Version"] == hf_attnres.__version__
    assert meta["License-Expression"] == "Apache-2.0" and meta["Description-Content-Type"] == "text/markdown"
    assert meta.get_payload().startswith("# attnres")  # the README is the long description
    assert any(c.startswith("Programming Language :: Python :: 3") for c in meta.get_all("Classifier"))
    assert meta.get_all("Project-URL") and meta["Summary"] and meta["Requires-Python"]
    assert {"hf_attnres/kernels/mix/triton.py", "hf_attnres/kernels/mix/naive.py", "hf_attnres/folders/remote_code.py",
            "hf_attnres/kernels/mix/cpu_fused.cpp",
            "hf_attnres/evaluation/task_templates/_bpb_template_yaml",
            "hf_attnres/evaluation/task_templates/mmlu/attnres_mmlu_SUBJECT.yaml"} <= set(names)
    assert any(n.endswith("licenses/LICENSE") for n in names)


def test_sdist_holds_sources_readme_and_license(dist):
    sdist = next(dist.glob("hf_attnres-*.tar.gz"))
    with tarfile.open(sdist) as archive:
        names = {Path(*Path(n).parts[1:]).as_posix() for n in archive.getnames()}
    assert {"pyproject.toml", "README.md", "LICENSE",
            "hf_attnres/families/kimi_linear/modeling_kimi_linear_attnres.py"} <= names


# In a fresh interpreter, after torch and transformers: transformers' own model stack first (what any Transformers model
# costs: modeling_utils, generation, the Auto classes, Kimi Linear's modeling), then attnres on top of it
IMPORT_TIMES = """
import sys, time
import torch, transformers
start = time.perf_counter()
import transformers.generation, transformers.modeling_utils
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM
from transformers.models.kimi_linear import modeling_kimi_linear
stack = time.perf_counter()
import hf_attnres
end = time.perf_counter()
print(stack - start, end - stack, *[name for name in {heavy!r} if name in sys.modules])
"""
# What `import hf_attnres` must not load: the tools (imported by their commands) and the extras' dependencies
HEAVY = ("hf_attnres.training", "hf_attnres.evaluation", "hf_attnres.study", "hf_attnres.conversion",
         "hf_attnres.pipeline", "hf_attnres.cli", "deepspeed", "lm_eval", "datasets", "matplotlib", "tensorboard",
         "peft", "trl")


def test_import_attnres_is_light():
    result = subprocess.run([sys.executable, "-c", IMPORT_TIMES.format(heavy=HEAVY)], capture_output=True, text=True,
                            timeout=300, cwd=REPO.parent, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert result.returncode == 0, result.stderr[-3000:]
    stack, own, *loaded = result.stdout.split()
    assert not loaded, f"import hf_attnres loads {loaded}"
    # measured 0.1 s on an idle 2-core box, 0.3 s at load 10 (the stack itself: 2-7 s); a loose bound for loaded CI
    assert float(own) < 1.5, f"import hf_attnres took {float(own):.2f} s beyond transformers' model stack ({stack} s)"


def test_the_test_lanes_cover_both_ends_of_the_supported_transformers_range():
    """scripts/run_tests.sh installs the oldest transformers pyproject allows for the full suite and the newest for
    the version lane: a range widened or narrowed in one place and not the other is caught here."""
    requirements = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    spec = next(r.specifier for r in map(Requirement, requirements) if r.name == "transformers")
    script = (REPO / "scripts" / "run_tests.sh").read_text()
    oldest, newest = (Version(re.search(rf"^{end}_TRANSFORMERS=(\S+)$", script, re.M).group(1))
                      for end in ("OLDEST", "NEWEST"))
    assert oldest in spec and newest in spec, (str(spec), oldest, newest)
    assert Version(f"{oldest.major}.{oldest.minor - 1}.99") not in spec  # nothing older is allowed
    assert Version(f"{newest.major}.{newest.minor + 1}.0") not in spec  # nor any newer minor release
