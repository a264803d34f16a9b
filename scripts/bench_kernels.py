#!/usr/bin/env python3
"""Benchmark the AttnRes depth mix: forward and forward+backward, time, effective GB/s and % of the device's measured
copy bandwidth, for every available implementation side by side:

  torch_eager     the PyTorch reference (attnres.kernels.mix.naive.attn_res_naive)
  torch_compile   torch.compile of that reference
  torch_lean      the PyTorch path of backend "torch" (attnres.kernels.mix.lean: no stacked copy, recompute)
  attnres_triton  the fused Triton kernel (attnres.kernels.mix.triton); on CPU it runs in the Triton *interpreter*,
                  whose timings say nothing about GPU speed (recorded only to show the path runs)
  fla             flash-linear-attention's `fused_attnres`, when `fla` is importable

Defaults: on a CUDA GPU the Kimi K3 shapes (hidden 7168, 2/5/9 sources, 4k-32k tokens, bf16); on CPU small shapes.
Effective bytes: forward reads n sources and writes the mix, (n + 1) * T * d * itemsize; the backward reads the n
sources, the upstream gradient and the saved mix and writes n gradients, (2n + 2) * T * d * itemsize more.

    python3 scripts/bench_kernels.py                        # CPU or GPU defaults, writes bench_kernels.json
    python3 scripts/bench_kernels.py --tokens 4096 --sources 9 --output k3.json
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from attnres.cli.bench_kernels import main  # noqa: E402

if __name__ == "__main__":
    main()  # returns the results: the exit code stays 0
