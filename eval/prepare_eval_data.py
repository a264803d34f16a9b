#!/usr/bin/env python3
"""`attnres prepare-eval-data`, run from a checkout without installing. Its documentation:
`python eval/prepare_eval_data.py --help` (hf_attnres/cli/prepare_eval_data.py)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hf_attnres.cli import command_main  # noqa: E402

if __name__ == "__main__":
    sys.exit(command_main("prepare-eval-data"))
