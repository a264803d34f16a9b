"""Run under `accelerate launch --multi_gpu --num_processes 2` by tests/training/test_toolchain_distributed.py: several
fine-tuning paths in one launch (process start-up is the costly part on CPU), each as users run it:
the README's plain accelerate loop (block and full), the transformers Trainer example, and
`train.py --init-from` on instruction data.

argv: WORK_DIR (holding block/, full/ model folders and chat_data/); writes WORK_DIR/<check>/, prints `ok <check>`.
"""
import runpy
import sys
from pathlib import Path

import torch.distributed as dist

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # tests.helpers


def run_example(name: str, *argv: str) -> None:
    sys.argv = [name, *argv]
    runpy.run_path(str(REPO / "examples" / name), run_name="__main__")


def main(work: Path) -> None:
    from hf_attnres.cli.train import main as train
    from tests.helpers.toolchain_fixtures import finetune_args

    for mode in ("block", "full"):
        run_example("finetune_accelerate.py", str(work / mode), str(work / f"accelerate-{mode}"), "--cpu",
                    "--steps", "2")
        print(f"ok accelerate-{mode}", flush=True)
    run_example("finetune_trainer.py", str(work / "full"), str(work / "trainer"), "--cpu", "--steps", "2")
    print("ok trainer", flush=True)
    train(finetune_args(work / "chat_data", work / "block", work / "init-from", micro_batch_size=1))
    print("ok init-from", flush=True)
    if dist.get_rank() == 0:
        print("world", dist.get_world_size(), flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
