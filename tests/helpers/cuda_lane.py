"""The CUDA lane's marks (tests marked `cuda` run on a GPU: `pytest -m cuda`, or `bash scripts/run_tests.sh -m cuda`;
on a machine without one they are collected and reported skipped, with the reason). The lane's files are listed
here: the normal suite checks that they collect (tests/test_cuda_lane.py)."""
from __future__ import annotations

import pytest
import torch

from hf_attnres.kernels.mix import TRITON_AVAILABLE

REASON = ("needs a CUDA GPU and triton (the CUDA lane: pytest -m cuda on a GPU machine, docs/GPU.md)"
          if not torch.cuda.is_available() else "needs triton: pip install 'hf-attnres[triton]'")
CUDA_LANE = [pytest.mark.cuda, pytest.mark.skipif(not (torch.cuda.is_available() and TRITON_AVAILABLE), reason=REASON)]
LANE_FILES = ("tests/kernels/test_mix_cuda.py", "tests/kernels/test_two_phase_cuda.py", "tests/families/test_cuda.py",
              "tests/kernels/test_mix_inkling_cuda.py")
