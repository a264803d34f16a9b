"""Run on 2 gloo processes by tests/training/test_fsdp2.py, one launch per entry point (start-up is the costly part):

  accelerate launch --multi_gpu --num_processes 2 --use_fsdp --fsdp_version 2 ... fsdp2_worker.py accelerate WORK
  torchrun --nproc_per_node 2 fsdp2_worker.py trainer WORK

For block and full AttnRes: FSDP2 training (`accelerate` with `Accelerator(cpu=True)`, or `Trainer(fsdp=...)`) of a tiny
fp32 model for STEPS SGD steps, each process on its half of a fixed batch; rank 0 trains the same model in one
process on the whole batch (the loss the mean of the halves', as data parallelism averages) and writes what it
compares to WORK/<entry>-<mode>.json. The sharded model is saved as a from_pretrained folder WORK/<entry>-<mode>/.
The accelerate entry also checks bf16 mixed precision (MixedPrecisionPolicy): the depth-softmax weights stay fp32.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests.helpers

from hf_attnres.training.fsdp2 import allow_fsdp_on_cpu, fully_shard_attnres  # noqa: E402
from tests.helpers.model_factory import random_ids, tiny_model  # noqa: E402

# SGD: AdamW's g / sqrt(v) turns summation-order noise in near-zero gradients (an expert that got no tokens) into
# full-size updates, which would hide the comparison
STEPS, BATCH, SEQ, LR = 2, 4, 8, 0.1
MODES = ("block", "full")
# dense MLPs for the training comparison: with MoE, fp32 summation noise after step 1 flips a near-tied top-k choice
# at step 2 and moves upstream gradients by ~1e-3 (the bf16 forward check keeps the MoE)
DENSE = dict(first_k_dense_replace=5)


def batch() -> torch.Tensor:
    return random_ids(BATCH, SEQ, seed=5)


def half(ids: torch.Tensor, rank: int) -> torch.Tensor:
    return ids.chunk(2)[rank]


def reference(mode: str) -> tuple[list[float], dict]:
    """One process, the whole batch: losses per step and the trained weights."""
    model = tiny_model(mode, **DENSE).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    losses, ids = [], batch()
    for _ in range(STEPS):
        loss = torch.stack([model(h, labels=h).loss for h in ids.chunk(2)]).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses, {k: v.detach().clone() for k, v in model.state_dict().items()}


def compare(entry: str, mode: str, losses: list[float], folder: Path, work: Path, extra: dict | None = None) -> None:
    """Rank 0: the distributed run's losses and saved folder against the one-process run."""
    from hf_attnres import KimiLinearAttnResForCausalLM

    ref_losses, ref_state = reference(mode)
    loaded = KimiLinearAttnResForCausalLM.from_pretrained(folder).state_dict()
    initial = tiny_model(mode, **DENSE).state_dict()
    diffs = {k: (loaded[k] - v).abs().max().item() for k, v in ref_state.items() if k in loaded}
    moved = {k for k in diffs if not torch.equal(ref_state[k], initial[k])}
    result = dict(losses=losses, ref_losses=ref_losses, missing=sorted(set(ref_state) - set(loaded)),
                  unexpected=sorted(set(loaded) - set(ref_state)), max_weight_diff=max(diffs.values()),
                  max_update=max((ref_state[k] - initial[k]).abs().max().item() for k in moved),
                  unmoved_equal=all(diffs[k] == 0 for k in diffs if k not in moved),
                  worst=max(diffs, key=diffs.get),
                  moved=len(moved), tensors=len(ref_state),
                  **(extra or {}))
    (work / f"{entry}-{mode}.json").write_text(json.dumps(result))


def mixed_precision_check(mode: str) -> dict:
    """FSDP2 with bf16 parameters for compute (fp32 gradient reduction) against the same model cast to bf16 in one
    process: the mixes' softmax weights are fp32 (as K3 computes them) and equal."""
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy

    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    model = fully_shard_attnres(tiny_model(mode), mp_policy=policy)
    ids = batch()
    out = model(ids, output_attn_res_weights=True)
    ref = tiny_model(mode, dtype=torch.bfloat16)(ids, output_attn_res_weights=True)
    weights = out.attn_res_weights
    return dict(mp_weight_dtypes=sorted({str(w.dtype) for w in weights}),
                mp_param_dtype=str(next(model.parameters()).dtype),
                mp_weights_max_diff=max((w - r).abs().max().item() for w, r in zip(weights, ref.attn_res_weights)),
                mp_logits_max_diff=(out.logits.float() - ref.logits.float()).abs().max().item(),
                mp_layers_sharded=all(isinstance(layer, FSDPModule) for layer in model.model.layers))


def run_accelerate(work: Path) -> None:
    from accelerate import Accelerator
    from torch.distributed.fsdp import FSDPModule

    accelerator = Accelerator(cpu=True)
    assert accelerator.num_processes == 2 and accelerator.is_fsdp2, (accelerator.num_processes, accelerator.state)
    rank = accelerator.process_index
    for mode in MODES:
        # sharded here, not by accelerate's own wrapping (see hf_attnres/training/fsdp2.py)
        model = fully_shard_attnres(tiny_model(mode, **DENSE).train())
        optimizer = torch.optim.SGD(model.parameters(), lr=LR)
        model, optimizer = accelerator.prepare(model, optimizer)
        layers_sharded = all(isinstance(layer, FSDPModule) for layer in model.model.layers)
        losses, ids = [], half(batch(), rank)
        for _ in range(STEPS):
            loss = model(ids, labels=ids).loss
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            losses.append(accelerator.reduce(loss.detach(), "mean").item())
        folder = work / f"accelerate-{mode}"
        state = accelerator.get_state_dict(model)  # the full state dict, gathered on the main process
        if accelerator.is_main_process:
            accelerator.unwrap_model(model).save_pretrained(folder, state_dict=state)
        accelerator.wait_for_everyone()
        extra = dict(layers_sharded=layers_sharded, **mixed_precision_check(mode))
        if accelerator.is_main_process:
            compare("accelerate", mode, losses, folder, work, extra)
        accelerator.wait_for_everyone()
        accelerator.free_memory()


def run_trainer(work: Path) -> None:
    from datasets import Dataset
    from transformers import Trainer, TrainerCallback, TrainingArguments

    class Losses(TrainerCallback):
        def __init__(self):
            self.losses = []

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:
                self.losses.append(logs["loss"])

    for mode in MODES:
        # every step is one epoch of the 4 rows (2 per process); rows are unpadded, so whichever rows a process
        # draws, the mean of the two processes' losses is the one-process loss over the whole batch
        rows = batch().tolist()
        data = Dataset.from_dict({"input_ids": rows, "labels": rows})
        folder = work / f"trainer-{mode}"
        args = TrainingArguments(
            output_dir=str(folder), max_steps=STEPS, per_device_train_batch_size=2, learning_rate=LR,
            lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, optim="sgd", max_grad_norm=0,
            logging_steps=1, save_strategy="no", report_to=[], use_cpu=True, seed=0,
            fsdp="full_shard",  # the model comes sharded by fully_shard_attnres: accelerate wraps nothing more
            fsdp_config={"version": 2, "auto_wrap_policy": "NO_WRAP", "reshard_after_forward": True},
        )
        callback = Losses()
        trainer = Trainer(model=fully_shard_attnres(tiny_model(mode, **DENSE).train()), args=args, train_dataset=data,
                          callbacks=[callback])
        trainer.train()
        trainer.save_model(str(folder))
        if dist.get_rank() == 0:
            compare("trainer", mode, callback.losses, folder, work,
                    dict(fsdp2=bool(trainer.accelerator.is_fsdp2)))
        dist.barrier()


if __name__ == "__main__":
    entry, work = sys.argv[1], Path(sys.argv[2])
    torch.set_num_threads(1)
    allow_fsdp_on_cpu()
    {"accelerate": run_accelerate, "trainer": run_trainer}[entry](work)
    print(f"ok {entry}", flush=True)
