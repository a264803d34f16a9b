"""Fixtures shared by the training tests: the commands as in-process calls, and a tiny prepared dataset."""
from __future__ import annotations

import pytest

from tests.helpers.train_fixtures import prepare_tiny_dataset


@pytest.fixture(scope="module")
def train():
    """The train command in-process: main(argv) returns the run's summary; bad input raises."""
    from hf_attnres.cli.train import main

    return main


@pytest.fixture(scope="module")
def prepare():
    """The prepare-data command in-process: main(argv); bad input raises SystemExit("error: ...")."""
    from hf_attnres.cli.prepare_data import main

    return main


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A tiny prepared dataset (BPE 300, 32-token sequences), one per test module."""
    return prepare_tiny_dataset(tmp_path_factory.mktemp("data"))
