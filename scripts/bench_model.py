#!/usr/bin/env python3
"""Benchmark whole models side by side: standard residuals vs Block AttnRes vs Full AttnRes on one config.

Phases, each timed for every mode in the same run (the overhead ratios compare them):
  train         forward + backward of a language-modelling loss         tokens/s = batch * seq / step
  prefill       no-grad forward over the prompt, cache on                tokens/s = batch * seq / time
  decode        no-grad one-token steps after a short prompt, cached     tokens/s = batch * steps / time
  long_prefill  batch 1, a long prompt, unchunked and chunked (`prefill_chunk_size`): peak memory is the point

Timing: all modes' models live in one process and are run round by round (standard, block, full, standard, ...), so a
busy machine slows them alike; the median over rounds is reported. Peak memory: on CUDA
`torch.cuda.max_memory_allocated` above the loaded model; on CPU each run in a fresh process, its resident-set growth
above the loaded model, sampled every 0.5 ms (Linux /proc; includes allocator slack: compare modes, not bytes).
Defaults: a small CPU config (hidden 256, 6 layers, block size 2); on GPU pass a larger one (--hidden, --layers, ...).

    python3 scripts/bench_model.py                            # CPU defaults, writes bench_model.json
    python3 scripts/bench_model.py --device cuda --dtype bfloat16 --hidden 2048 --layers 24 --block-size 4 --seq 4096
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from attnres.cli.bench_model import main  # noqa: E402

if __name__ == "__main__":
    main()  # returns the results: the exit code stays 0
