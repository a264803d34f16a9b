import os

# Triton reads this when kernels are defined: set before anything imports attnres' Triton ops
os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# Session-wide model folders and data shared by every test folder (built once, copied by the tests that damage them)
from tests.helpers.bad_input_fixtures import (  # noqa: E402, F401
    moonshot_checkpoint,
    prepared_data,
    saved_model,
    sharded_model,
)
