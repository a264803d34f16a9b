"""Run under `accelerate launch --multi_gpu --num_processes 2` by tests/test_toolchain_distributed.py: the README's
fine-tuning examples as users run them (plain accelerate loop, transformers Trainer), several in one launch.

argv: WORK_DIR; expects WORK_DIR/{block,full} model folders; writes WORK_DIR/<check>/ outputs and prints `ok <check>`.
"""
import runpy
import sys
from pathlib import Path

import torch
import torch.distributed as dist

REPO = Path(__file__).resolve().parent.parent


def run_example(name: str, *argv: str) -> None:
    sys.argv = [name, *argv]
    runpy.run_path(str(REPO / "examples" / name), run_name="__main__")


def checksum(folder: Path) -> torch.Tensor:
    from safetensors.torch import load_file

    tensors = load_file(str(folder / "model.safetensors"))
    return torch.stack([tensors[k].double().sum() for k in sorted(tensors)])


def same_on_every_rank(value: torch.Tensor) -> bool:
    gathered = [torch.empty_like(value) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, value)
    return all(torch.equal(g, gathered[0]) for g in gathered)


def main(work: Path) -> None:
    for mode in ("block", "full"):
        out = work / f"accelerate-{mode}"
        run_example("finetune_accelerate.py", str(work / mode), str(out), "--cpu", "--steps", "2")
        assert dist.get_world_size() == 2
        print(f"ok accelerate-{mode}", flush=True)
    if dist.get_rank() == 0:
        print("world", dist.get_world_size(), flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
