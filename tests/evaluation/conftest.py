"""Fixtures shared by the evaluation tests."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def offline():
    """No Hub or datasets download for the whole module (GPQA's Hub fallback must fail fast, as offline)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_OFFLINE", "1")
        patch.setenv("HF_DATASETS_OFFLINE", "1")
        yield patch
