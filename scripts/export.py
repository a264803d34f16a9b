#!/usr/bin/env python3
"""`attnres export`, run from a checkout without installing. Its documentation: `python scripts/export.py --help`
(hf_attnres/cli/export.py)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hf_attnres.cli import command_main  # noqa: E402

if __name__ == "__main__":
    sys.exit(command_main("export"))
