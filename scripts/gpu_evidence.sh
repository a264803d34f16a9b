#!/usr/bin/env bash
# The GPU evidence run (docs/GPU.md): the CUDA lane, the kernels beside the peers at K3's width, decode
# latency and peak memory, the continued study at the GPU budget; each step capped, each leaving OUT/<step>/status.json
# when it ends; a rerun with the same OUT skips the finished steps. Downloads nothing. Usage:
#   bash scripts/gpu_evidence.sh OUT [--only STEP,...] [--peers DIR] [--source DIR] [--data DIR] [--cap STEP=S]
#   bash scripts/gpu_evidence.sh --help
# It stays in the caller's directory, so a relative OUT (or --peers, --source, --data) means the caller's; the
# repository is found through PYTHONPATH, and PYTHONSAFEPATH keeps a package in that directory from shadowing it.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}" PYTHONSAFEPATH=1 HF_HUB_OFFLINE=1
exec python3 -m hf_attnres.cli.gpu_evidence "$@"
