#!/usr/bin/env bash
# The first job (README): install attnres, build and briefly fit a tiny AttnRes model, generate, show depth weights.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet "torch==2.13.0"   # the CPU build first, so nothing pulls a CUDA one
python3 -m pip install --quiet -e ".[train]"
python3 scripts/demo.py --plot depth_weights.png "$@"
