#!/usr/bin/env bash
# The GPU evidence run (docs/GPU.md): the CUDA lane, the kernels beside the peers at K3's width, decode
# latency and peak memory, the continued study at the GPU budget; each step capped, each leaving OUT/<step>/status.json
# when it ends; a rerun with the same OUT skips the finished steps. Downloads nothing. Usage:
#   bash scripts/gpu_evidence.sh OUT [--only STEP,...] [--peers DIR] [--source DIR] [--data DIR] [--cap STEP=S]
#   bash scripts/gpu_evidence.sh --help
# It stays in the caller's directory, so a relative OUT (or --peers, --source, --data) means the caller's; the
# repository is found through PYTHONPATH, and PYTHONSAFEPATH keeps a package in that directory from shadowing it.
# Ctrl-C before the run has started (while torch imports) ends it quietly with 130, as during the run: at once,
# through os._exit, because nothing is written before the run's own handler takes over, and an exception raised
# from a handler can be lost where it lands (a finalizer, a library's catch-all around a lazy import).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}" PYTHONSAFEPATH=1 HF_HUB_OFFLINE=1
exec python3 -c 'import os, signal, sys
if signal.getsignal(signal.SIGINT) != signal.SIG_IGN:
    signal.signal(signal.SIGINT, lambda signum, frame: os._exit(130))
from hf_attnres.cli.gpu_evidence import main
sys.exit(main())' "$@"
