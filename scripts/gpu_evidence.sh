#!/usr/bin/env bash
# The GPU evidence run (docs/GPU.md): the CUDA lane, the kernels beside the peers at K3's width, decode
# latency and peak memory, the continued study at the GPU budget; each step capped, each leaving OUT/<step>/status.json
# when it ends; a rerun with the same OUT skips the finished steps. Downloads nothing. Usage:
#   bash scripts/gpu_evidence.sh OUT [--only STEP,...] [--peers DIR] [--source DIR] [--data DIR] [--cap STEP=S]
#   bash scripts/gpu_evidence.sh --help
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1
exec python3 -m hf_attnres.cli.gpu_evidence "$@"
