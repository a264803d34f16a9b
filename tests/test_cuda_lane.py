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


@pytest.mark.slow  # a pytest subprocess over the lane: about a minute
def test_the_lane_collects_and_without_cuda_skips_with_the_reason():
    """One pytest run: on a GPU machine it only collects (the lane itself is `pytest -m cuda`); without CUDA it runs
    the lane, which must skip every case, naming why. A second collects what `-m "not cuda"` keeps of the lane's files:
    nothing, so every case is marked and no lane case runs in a CPU lane."""
    unmarked = subprocess.run([sys.executable, "-m", "pytest", "-m", "not cuda", "-q", "-p", "no:cacheprovider",
                               "--collect-only", *LANE_FILES], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert unmarked.returncode == pytest.ExitCode.NO_TESTS_COLLECTED, unmarked.stdout[-3000:] + unmarked.stderr[-3000:]
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
