#!/usr/bin/env python3
"""Train with PyTorch's interleaved pipeline schedule (P processes x --virtual-stages chunks) and cross-stage caching
of completed Block AttnRes blocks; `--help` and attnres/cli/train_interleaved.py describe it. CPU (gloo):
  torchrun --nproc_per_node 2 scripts/train_interleaved.py
  torchrun --nproc_per_node 4 scripts/train_interleaved.py --layers 8 --block-size 2 --grad-accum 4
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from attnres.cli.train_interleaved import main  # noqa: E402

if __name__ == "__main__":
    result = main()
    sys.exit(result if isinstance(result, int) else 0)  # 3: the non-finite guard stopped the run
