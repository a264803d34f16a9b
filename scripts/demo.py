#!/usr/bin/env python3
"""First run of attnres: build a tiny Kimi Linear AttnRes model, fit it briefly to a toy sequence, generate, and show
where each sub-layer looks over depth.

    python scripts/demo.py                      # block AttnRes, 6 layers, 2 per block
    python scripts/demo.py --mode full          # every sub-layer output is its own source
    python scripts/demo.py --plot weights.png   # also draw the depth-attention map

Runs on CPU in seconds; no download.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from attnres.cli.demo import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
