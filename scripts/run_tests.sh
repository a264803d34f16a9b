#!/usr/bin/env bash
# The test command (README, CI): installs everything the tests need on a fresh machine, then runs them.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet "torch==2.13.0"   # first: the CPU build, so nothing below pulls a CUDA one
python3 -m pip install --quiet -e ".[test]"
# llama.cpp for tests/serving: built once without -march=native (~8 CPU-minutes; it prints a line a minute), cached
# under a key of its build flags; a failed build stops here
scripts/setup_llama_cpp.sh --install >/dev/null
python3 -m ruff check .                          # the linter (config: pyproject.toml [tool.ruff])
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
python3 -m pytest --durations=30 "$@"
