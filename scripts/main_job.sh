#!/usr/bin/env bash
# The main job (README's first command): install attnres, then train standard and Block AttnRes on a real corpus,
# evaluate and compare them, and plot (scripts/main_job.py --help). 2 CPU cores, measured: 4 min 47 s idle with warm
# caches; 16.6-29.7 min on loaded machines (RESULTS.md, README). Output: runs/main-job/
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet "torch==2.13.0"   # the CPU build first, so nothing pulls a CUDA one
python3 -m pip install --quiet -e ".[train,eval]"
python3 scripts/main_job.py "$@"
