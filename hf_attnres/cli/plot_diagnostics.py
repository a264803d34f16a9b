"""The depth-diagnostics plot of training runs (hf_attnres.training.logs.plot_runs): output RMS and gradient norm per
layer, and the depth-attention heatmap of each AttnRes run, from their diagnostics.jsonl.

    python -m hf_attnres.cli.plot_diagnostics runs/small-standard runs/small-block --out figure5.png
"""
from __future__ import annotations

import argparse
import sys

from ..training import logs
from ..training.tool_args import DiagnosticsPlotArgs
from ..utils.flags import parser_for


def build_parser() -> argparse.ArgumentParser:
    return parser_for(DiagnosticsPlotArgs, description=logs.__doc__)


def main(argv=None) -> None:
    """A run without diagnostics (no or an empty diagnostics.jsonl): one `error:` line naming it (exit 1), no PNG."""
    args = DiagnosticsPlotArgs(**vars(build_parser().parse_args(argv)))
    try:
        print(f"wrote {logs.plot_runs(args.run_dirs, args.out)}")
    except (FileNotFoundError, ValueError) as error:
        sys.exit(f"error: {error}")


if __name__ == "__main__":
    main()
