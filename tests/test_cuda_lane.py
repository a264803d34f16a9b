"""The CUDA lane stays importable and collectable on a machine without a GPU: `pytest -m cuda` collects every case of
its files (tests/helpers/cuda_lane.py) and, without CUDA, reports each skipped with the reason."""
import re
import subprocess
import sys

import pytest
import torch

from tests.helpers.cuda_lane import LANE_FILES
from tests.helpers.train_fixtures import REPO

MIN_CASES = 140  # the lane's cases: kernels at 4 widths x 3 source counts x switches x dtypes, every family's model


def test_every_lane_file_is_marked():
    for name in LANE_FILES:
        assert "pytestmark = CUDA_LANE" in (REPO / name).read_text(), name


@pytest.mark.slow  # a pytest subprocess over the lane: about a minute
def test_the_lane_collects_and_without_cuda_skips_with_the_reason():
    """One pytest run: on a GPU machine it only collects (the lane itself is `pytest -m cuda`); without CUDA it runs
    the lane, which must skip every case, naming why."""
    collect = ["--collect-only"] if torch.cuda.is_available() else ["-rs"]
    done = subprocess.run([sys.executable, "-m", "pytest", "-m", "cuda", "-q", "-p", "no:cacheprovider", *collect,
                           *LANE_FILES], cwd=REPO, capture_output=True, text=True, timeout=600)
    out = done.stdout
    assert done.returncode == 0, out[-3000:] + done.stderr[-3000:]
    if torch.cuda.is_available():
        cases = len([line for line in out.splitlines() if "::" in line])
    else:
        summary = re.search(r"(\d+) skipped", out)
        assert summary and " passed" not in out and " failed" not in out, out[-2000:]
        assert "needs a CUDA GPU" in out, out[-2000:]
        cases = int(summary.group(1))
    assert cases > MIN_CASES, out[-2000:]
