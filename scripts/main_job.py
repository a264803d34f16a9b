#!/usr/bin/env python3
"""`attnres main-job`, run from a checkout without installing. Its documentation: `python scripts/main_job.py --help`
(hf_attnres/cli/main_job.py)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hf_attnres.cli import command_main  # noqa: E402

if __name__ == "__main__":
    sys.exit(command_main("main-job"))
