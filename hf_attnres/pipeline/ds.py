"""DeepSpeed for the pipeline modules, imported in one place: on a machine without a GPU it is told to use its CPU
accelerator (gloo), since DeepSpeed picks an accelerator once, when imported; when it is not installed, the error is
one line naming the extra that brings it."""
from __future__ import annotations

import os

import torch

from ..utils.extras import require

if not torch.cuda.is_available():
    os.environ.setdefault("DS_ACCELERATOR", "cpu")

deepspeed = require("deepspeed", why="pipeline parallelism")

__all__ = ["deepspeed"]
