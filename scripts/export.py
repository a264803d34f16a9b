#!/usr/bin/env python3
"""Export a model folder to the layout serving runtimes read (Kimi K3 or Kimi Linear): see `attnres export --help`.

Examples:
  python scripts/export.py runs/k3-small/final exports/k3-small --to k3 --verify
  python scripts/export.py runs/k3-small/final exports/k3-small-kl --to kimi-linear --dtype bfloat16
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from attnres.cli import command_main  # noqa: E402

if __name__ == "__main__":
    sys.exit(command_main("export"))
