#!/usr/bin/env python3
"""Train a Kimi Linear model with standard residuals or Attention Residuals (block / full) on a prepared dataset.

One process (CPU or GPU):
  python scripts/train.py --attn-res block
Several processes, DDP (accelerate):
  accelerate launch --multi_gpu --num_processes 8 scripts/train.py --attn-res block
DeepSpeed ZeRO (stage 1, 2 or 3; torchrun or the deepspeed launcher):
  torchrun --nproc_per_node 8 scripts/train.py --deepspeed configs/deepspeed/zero2.json
Fine-tune an existing model (final/, Moonshot's layout, an upcycled Kimi Linear), e.g. on chat data:
  python scripts/train.py --init-from runs/small-block/final --data data/sft --lr 1e-4
The matched baseline is the same command with --attn-res standard. Data: scripts/prepare_data.py. Details and CPU
commands: docs/TRAINING.md. Writes <output-dir>/{metrics.jsonl, tensorboard/, diagnostics.jsonl,
depth_diagnostics.png, checkpoints/step-00000500/ (8-digit step), final/}.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from attnres.cli.train import main  # noqa: E402

if __name__ == "__main__":
    main()
