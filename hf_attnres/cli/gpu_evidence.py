"""The command line of the GPU evidence run (hf_attnres.bench.evidence), run by scripts/gpu_evidence.sh."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ..bench import evidence
from ..bench.args import EvidenceArgs
from ..utils.flags import parser_for

USAGE = """bash scripts/gpu_evidence.sh OUT [--only STEP,...] [--peers DIR] [--source DIR] [--data DIR]
                                   [--cap STEP=SECONDS ...]"""


def build_parser() -> argparse.ArgumentParser:
    return parser_for(EvidenceArgs, prog="scripts/gpu_evidence.sh", usage=USAGE, description=evidence.__doc__)


def main(argv=None) -> int:
    """0 when every step selected ran and passed (now or before), 1 otherwise, 130 when interrupted; bad input: one
    `error:` line, exit 2, nothing written."""
    values = vars(build_parser().parse_args(argv))
    # the steps run in the repository: a relative path means the caller's working directory, so it is made absolute
    # here, where that is still the working directory
    values.update({k: Path(os.path.abspath(v)) for k in ("out", "peers", "source", "data") if (v := values[k])})
    args = EvidenceArgs(**values)
    try:
        try:
            only, caps = evidence.check_args(args)
        except ValueError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        return evidence.run_evidence(args, only, caps)
    except KeyboardInterrupt:  # outside the steps (checks, --dry-run): nothing to stop, nothing half written
        return evidence.INTERRUPTED_RC


if __name__ == "__main__":
    sys.exit(main())
