#!/usr/bin/env python3
"""transformers' own Inkling-2 against the same model on the Inkling kernels, run from a checkout without installing.
Its documentation: `python scripts/bench_inkling2.py --help` (hf_attnres/cli/bench_inkling2.py)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hf_attnres.cli.bench_inkling2 import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
