"""Run under `torchrun --nproc_per_node 2` by tests/families/kimi_linear/test_tensor_parallel.py: for each saved tiny
model folder in WORK (block/, full/), `from_pretrained(folder, tp_plan="auto")` (transformers' tensor parallelism,
gloo on CPU) and its logits; rank 0 writes them, and which parameters were sharded, to WORK/<mode>-tp.pt."""
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests.helpers

from tests.helpers.model_factory import random_ids  # noqa: E402


def main(work: Path) -> None:
    from torch.distributed.tensor import DTensor

    from hf_attnres import KimiLinearAttnResForCausalLM

    torch.set_num_threads(1)
    for mode in ("block", "full"):
        model = KimiLinearAttnResForCausalLM.from_pretrained(work / mode, tp_plan="auto")
        with torch.no_grad():
            logits = model(random_ids(2, 8, seed=7)).logits
        sharded = sorted(name for name, p in model.named_parameters()
                         if isinstance(p, DTensor) and any(not pl.is_replicate() for pl in p.placements))
        if dist.get_rank() == 0:
            torch.save({"logits": logits.full_tensor() if isinstance(logits, DTensor) else logits,
                        "sharded": sharded, "world": dist.get_world_size()}, work / f"{mode}-tp.pt")
        dist.barrier()
    print("ok tp", flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
