"""FSDP2 (`torch.distributed.fsdp.fully_shard`) units for Kimi Linear AttnRes models.

One unit per decoder layer (the model's `_no_split_modules`): a layer's mix points live inside it and are gathered
with it. Everything else (embedding, the output mix, final norm, `lm_head`) stays in the root unit, and must: the
output mix reads its pseudo-query and key-norm gain, and the fused final norm's gain, directly (one fused op, not a
module forward), so those tensors are gathered only when the unit whose forward runs the mix gathers them.

`attnres train` runs FSDP2 under an FSDP2 `accelerate launch` (configs/accelerate/fsdp2_cpu.yaml, fsdp2_gpu.yaml):
`shard_for_accelerate` shards before the optimizer is built, `prepare_sharded` hands both to accelerate, and on CPU
processes `allow_fsdp_on_cpu` keeps accelerate from falling back to DDP. Your own loop does the same three steps.

accelerate's own FSDP2 wrapping (`fsdp2_prepare_model`) carves the embedding and a tail [final norm, lm_head] into
units of their own; its final norm is the *last* norm-typed child of the base model, here `output_attn_res_norm`,
so the output mix would read a still-sharded tensor (`aten.mul.Tensor got mixed torch.Tensor and DTensor`). Shard
with `fully_shard_attnres` first: accelerate (and `Trainer(fsdp=...)`, which uses it) take an FSDP model as it is.
"""
from __future__ import annotations

import os

from torch import nn

# What `accelerate launch` sets from an FSDP config (configs/accelerate/fsdp2_*.yaml, or --use_fsdp --fsdp_version 2)
USE_FSDP_ENV, FSDP_VERSION_ENV = "ACCELERATE_USE_FSDP", "FSDP_VERSION"


def fully_shard_attnres(model: nn.Module, **fsdp_kwargs) -> nn.Module:
    """Shard `model` in place (call before building the optimizer); `fsdp_kwargs` go to every `fully_shard` call
    (mesh, reshard_after_forward, mp_policy: e.g. `MixedPrecisionPolicy(param_dtype=torch.bfloat16,
    reduce_dtype=torch.float32)`; the mixes compute their scores and softmax in fp32 whatever the parameter dtype)."""
    from torch.distributed.fsdp import fully_shard

    split = set(getattr(model, "_no_split_modules", None) or ())
    for module in list(model.modules()):
        if type(module).__name__ in split:
            fully_shard(module, **fsdp_kwargs)
    fully_shard(model, **fsdp_kwargs)
    return model


def prepare_sharded(accelerator, model: nn.Module, optimizer, *others):
    """`accelerator.prepare(model, optimizer, *others)` for a model sharded by `fully_shard_attnres` and an optimizer
    built on it afterwards (any other model: plain `prepare`).

    accelerate (1.16) re-maps an FSDP2 optimizer's parameters by data pointer, and every empty shard (a tensor
    smaller than the process count: pseudo-queries are [1, hidden], on 2 processes one of them holds nothing) has
    the same one, so the optimizer comes back holding duplicates and missing parameters (a KeyError in
    `save_state`, and wrong updates). The model was sharded before the optimizer was built, so its own are right."""
    own = [list(group["params"]) for group in optimizer.param_groups]
    prepared = accelerator.prepare(model, optimizer, *others)
    if getattr(accelerator, "is_fsdp2", False):
        for group, params in zip(optimizer.param_groups, own, strict=True):
            group["params"] = params
    return prepared


def fsdp_launch() -> bool:
    """Whether this process was started by `accelerate launch` with FSDP asked for."""
    return os.environ.get(USE_FSDP_ENV, "false").lower() == "true"


def check_fsdp_launch(deepspeed) -> None:
    """ValueError for FSDP launches `attnres train` cannot run: FSDP1 (accelerate's own wrapping, see above) and a
    DeepSpeed config besides (two engines for one run)."""
    if not fsdp_launch():
        return
    version = os.environ.get(FSDP_VERSION_ENV, "1")
    if version != "2":
        raise ValueError(f"accelerate launch asks for FSDP version {version}: attnres train runs FSDP2 only "
                         "(--fsdp_version 2, or configs/accelerate/fsdp2_cpu.yaml / fsdp2_gpu.yaml)")
    if deepspeed is not None:
        raise ValueError(f"--deepspeed {deepspeed} cannot be combined with an FSDP launch (accelerate launch "
                         "--use_fsdp / an FSDP config): choose one engine")


def allow_fsdp_on_cpu() -> None:
    """accelerate (1.15, 1.16) drops FSDP on CPU without a word: `AcceleratorState.__init__` (accelerate/state.py)
    sets `DistributedType.FSDP` only inside its branch for MULTI_GPU / NPU / XPU / ... processes, and a gloo CPU
    launch is MULTI_CPU, so `accelerate launch --use_fsdp` and `Trainer(fsdp=...)` train with plain DDP instead. This
    is the one step accelerate skips there: after its own init, a MULTI_CPU state with FSDP asked for (the
    launcher's ACCELERATE_USE_FSDP, or a plugin) becomes FSDP with that plugin. Everything after it (`prepare`, the
    full-state-dict gathering, saving) is accelerate's own code. Idempotent; changes nothing on GPUs."""
    from accelerate.state import AcceleratorState
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin

    init = AcceleratorState.__init__
    if getattr(init, "_attnres_fsdp_on_cpu", False):
        return

    def patched(self, *args, fsdp_plugin=None, **kwargs):
        init(self, *args, fsdp_plugin=fsdp_plugin, **kwargs)
        wanted = fsdp_plugin is not None or fsdp_launch()
        if wanted and self.distributed_type in (DistributedType.MULTI_CPU, DistributedType.FSDP):
            self.distributed_type = DistributedType.FSDP
            # the state is a singleton: Trainer's plugin arrives at a second init (TrainingArguments made the first)
            self.fsdp_plugin = fsdp_plugin or getattr(self, "fsdp_plugin", None) or FullyShardedDataParallelPlugin()

    patched._attnres_fsdp_on_cpu = True
    AcceleratorState.__init__ = patched


def shard_for_accelerate(model: nn.Module, cpu: bool) -> nn.Module:
    """Under an FSDP2 `accelerate launch`: start accelerate's process state (the process group `fully_shard`
    needs), then shard `model` with `fully_shard_attnres`; build the optimizer afterwards and hand both to
    `Accelerator.prepare`, which takes an FSDP model as it is."""
    from accelerate import PartialState

    allow_fsdp_on_cpu()
    state = PartialState(cpu=cpu)
    if not cpu:
        model = model.to(state.device)
    return fully_shard_attnres(model)


__all__ = ["fully_shard_attnres", "allow_fsdp_on_cpu", "prepare_sharded", "check_fsdp_launch", "fsdp_launch",
           "shard_for_accelerate"]
