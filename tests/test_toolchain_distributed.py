"""2 gloo processes through `accelerate launch --multi_gpu` running the README's fine-tuning examples: plain DDP
(no find_unused_parameters) in block and full mode. One launch for all checks (tests/ddp_toolchain_worker.py)."""
from __future__ import annotations

import pytest
from toolchain_fixtures import ACCELERATE_2, REPO, launch, tiny_folder

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    work = tmp_path_factory.mktemp("ddp_toolchain")
    for mode in ("block", "full"):
        tiny_folder(work / mode, mode)
    result = launch([*ACCELERATE_2, str(REPO / "tests" / "ddp_toolchain_worker.py"), str(work)])
    return work, result.stdout


@pytest.mark.parametrize("mode", ["block", "full"])
def test_plain_accelerate_ddp_trains_without_find_unused_parameters(launched, mode):
    work, stdout = launched
    assert "world 2" in stdout
    assert f"ok accelerate-{mode}" in stdout
    assert (work / f"accelerate-{mode}" / "model.safetensors").is_file()
