#!/usr/bin/env bash
# The main job (README's first command): install attnres, then train standard and Block AttnRes on a real corpus,
# evaluate and compare them, and plot (attnres main-job --help). 2 CPU cores, measured: 14.9 min from a fresh clone
# (mostly idle cores), 51 min on cores shared with ~5 other jobs (load 11-15); the earlier, 1.45x smaller model took
# 4 min 47 s idle with warm caches (docs/RESULTS.md, README). Output: runs/main-job/
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet "torch==2.13.0"   # the CPU build first, so nothing pulls a CUDA one
python3 -m pip install --quiet -e ".[train,eval]"
python3 scripts/main_job.py "$@"
