"""Run under `torchrun --nproc_per_node 2` by tests/training/test_engines_agree.py: several training commands in one
launch (process start-up is the costly part on CPU), each as a user runs it: `attnres train` (DDP through
accelerate, DeepSpeed ZeRO 1-3), `attnres train-pipeline` (DeepSpeed 1F1B), `attnres train-interleaved`.

argv: a JSON list of [command, argv] pairs; prints `ok <output dir>` after each run.
"""
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # attnres from this checkout

COMMANDS = {"train": "hf_attnres.cli.train", "train-pipeline": "hf_attnres.cli.train_pipeline",
            "train-interleaved": "hf_attnres.cli.train_interleaved"}


def main(runs: list) -> None:
    import importlib

    torch.set_num_threads(1)
    for command, argv in runs:
        importlib.import_module(COMMANDS[command]).main(argv)
        print(f"ok {argv[argv.index('--output-dir') + 1]}", flush=True)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
