#!/usr/bin/env python3
"""What hardware a Kimi Linear / AttnRes / Kimi K3 model needs, from its config alone (nothing is instantiated).

Prints parameter counts (by part), weight memory per storage format (fp32, bf16, bf16 with MXFP4 routed experts as
Kimi K3 ships them), the AttnRes depth bank (the block sums and partial sum a forward holds) for a batch and context,
and the bytes crossing each pipeline boundary per micro-batch (every depth source present there crosses it).

CONFIG is a config.json (or a folder holding one) in any layout this project reads (ours, Moonshot's, Kimi K3's
multimodal wrapper), or a preset: k3 (Kimi K3's published text config, the default), tiny, tiny-k3.

Examples:
  python scripts/plan_memory.py                                  # Kimi K3, batch 1, 32k context, 8 stages
  python scripts/plan_memory.py path/to/config.json --batch 4 --context 131072 --stages 16
  python scripts/plan_memory.py tiny-k3 --activation-dtype fp32
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from attnres.cli.plan_memory import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
