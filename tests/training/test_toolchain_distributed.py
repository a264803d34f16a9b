"""2 gloo processes: `accelerate launch --multi_gpu` running the README's fine-tuning examples (plain accelerate loop
in block and full mode, transformers Trainer) with plain DDP (no find_unused_parameters), and `train.py --init-from` on
instruction data under DDP (one launch: tests/helpers/ddp_toolchain_worker.py) and DeepSpeed ZeRO-2 (torchrun); both
must give the single-process losses."""
from __future__ import annotations

import sys

import pytest

from tests.helpers.toolchain_fixtures import (
    ACCELERATE_2,
    REPO,
    finetune_args,
    launch,
    prepare_chat,
    tiny_folder,
    write_chat_jsonl,
)
from tests.helpers.train_fixtures import train_losses

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def work(train, tmp_path_factory):
    work = tmp_path_factory.mktemp("ddp_toolchain")
    for mode in ("block", "full"):
        tiny_folder(work / mode, mode)
    prepare_chat(write_chat_jsonl(work / "sft.jsonl"), work / "block", work / "chat_data")
    # the reference: one process, micro-batch 2 (the 2-process runs: 1 each). With a loss mask the micro-batches hold
    # different numbers of assistant tokens: the loss is the global token mean, whatever the layout
    train(finetune_args(work / "chat_data", work / "block", work / "single"))
    return work


@pytest.fixture(scope="module")
def launched(work):
    return launch([*ACCELERATE_2, str(REPO / "tests" / "helpers" / "ddp_toolchain_worker.py"), str(work)]).stdout


@pytest.mark.parametrize("check", ["accelerate-block", "accelerate-full", "trainer"])
def test_examples_train_under_plain_ddp(work, launched, check):
    assert "world 2" in launched and f"ok {check}" in launched
    assert (work / check / "model.safetensors").is_file()


def test_init_from_under_ddp_matches_single_process(work, launched):
    assert "ok init-from" in launched
    assert train_losses(work / "init-from") == pytest.approx(train_losses(work / "single"), rel=1e-4)
    assert (work / "init-from" / "final" / "model.safetensors").is_file()


def test_init_from_under_zero2_matches_single_process(work):
    out = work / "zero2"
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
               str(REPO / "scripts" / "train.py"),
               *finetune_args(work / "chat_data", work / "block", out, micro_batch_size=1,
                              deepspeed=REPO / "configs" / "deepspeed" / "zero2.json")]
    launch(command)
    assert train_losses(out) == pytest.approx(train_losses(work / "single"), rel=1e-4)
    assert (out / "final" / "model.safetensors").is_file()
