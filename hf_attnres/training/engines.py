"""Two ways to run the same training step: accelerate (one process, or DDP across processes) and DeepSpeed ZeRO
(driven directly with `deepspeed.initialize`: accelerate's DeepSpeed path miscounts processes on CPU).

Both expose the same small interface to the loop in `loop.py`: forward, backward, optimizer_step, save/load of
the full training state, cross-process mean, and the full gradient of a parameter (for diagnostics).
"""
from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import torch

from ..folders.model_folder import save as save_model_folder
from .args import SetupError
from .guard import is_finite, skip_nonfinite_steps
from .process_group import end_process_group_at_exit, start_process_group
from .recipe import clip_by_group, group_grad_norms
from .state import (
    SCHEDULER_FILE,
    check_accelerate_checkpoint,
    load_weights_only,
    read_deepspeed_weights_only,
    rng_state,
    set_rng_state,
)


def wants_bf16(mixed_precision: str) -> bool:
    if mixed_precision == "auto":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return mixed_precision == "bf16"


def full_tensor(tensor):
    """A DTensor (FSDP2's shards) gathered whole on every process (a collective); a plain tensor as it is."""
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


class AccelerateEngine:
    """accelerate's Accelerator: single process, DDP under `accelerate launch --multi_gpu` (gloo on CPU), or FSDP2
    under an FSDP2 `accelerate launch` (the model comes sharded by `fsdp2.shard_for_accelerate`)."""

    def __init__(self, model, optimizer, scheduler, args):
        from accelerate import Accelerator

        from .fsdp2 import allow_fsdp_on_cpu, fsdp_launch, prepare_sharded

        self.fsdp2 = fsdp_launch()
        if self.fsdp2:
            allow_fsdp_on_cpu()  # else accelerate would run plain DDP on CPU processes, without a word

        # plain DDP: every parameter takes part in the graph (layer 0's one-source mix gets an exactly-zero gradient)
        self.accelerator = Accelerator(
            cpu=not torch.cuda.is_available(),
            mixed_precision="bf16" if wants_bf16(args.mixed_precision) else "no",
        )
        end_process_group_at_exit()  # accelerate's group (if launched as several processes), as the others'
        # The scheduler is not `prepare`d: accelerate would step it once per process. Nor is it registered for
        # accelerate's checkpointing, which unpickles custom state with weights_only=False: see save/load
        self.model, self.optimizer = prepare_sharded(self.accelerator, model, optimizer)  # FSDP2: see fsdp2.py
        self.scheduler = scheduler
        self.grad_accum, self.grad_clip = args.grad_accum, args.grad_clip
        self.per_group_clip = getattr(args, "grad_clip_groups", "global") == "per-group"
        self.group_norms: dict[str, float] = {}  # the last step's gradient norm per depth group, before clipping

    device = property(lambda self: self.accelerator.device)
    rank = property(lambda self: self.accelerator.process_index)
    world_size = property(lambda self: self.accelerator.num_processes)
    is_main = property(lambda self: self.accelerator.is_main_process)
    module = property(lambda self: self.accelerator.unwrap_model(self.model))

    def forward(self, input_ids, labels=None, **kwargs):
        labels = input_ids if labels is None else labels
        return self.model(input_ids=input_ids, labels=labels, use_cache=False, **kwargs)

    def micro_batch(self, is_last_micro_step: bool):
        """Context for one micro-batch's forward + backward: DDP all-reduces gradients only on the last one (its
        `no_sync` must cover the forward too)."""
        return contextlib.nullcontext() if is_last_micro_step else self.accelerator.no_sync(self.model)

    def backward(self, loss, is_last_micro_step: bool) -> None:
        self.accelerator.backward(loss / self.grad_accum)

    def optimizer_step(self, loss_finite: bool = True) -> tuple[float, bool]:
        """(gradient norm, whether the update was made): none when the loss or the norm is non-finite. The norm of
        each depth group (backbone, pseudo-queries, key norms) before clipping is left in `group_norms`."""
        if self.per_group_clip:  # plain or DDP (its gradients are all-reduced by now): every process clips alike
            norm, self.group_norms = clip_by_group(self.module.named_parameters(), self.grad_clip, per_group=True)
        else:
            self.group_norms = {g: float(n) for g, n in group_grad_norms(self.module.named_parameters(),
                                                                          full=full_tensor).items()}
            norm = self._clip_global()
        applied = loss_finite and is_finite(norm)  # the norm is global (DDP reduced the gradients): ranks agree
        if applied:
            self.optimizer.step()
            self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(norm), applied

    def _clip_global(self):
        """The global gradient norm, the gradients clipped to `grad_clip` by it (0: measured only)."""
        if self.grad_clip > 0:
            return full_tensor(self.accelerator.clip_grad_norm_(self.model.parameters(), self.grad_clip))
        if self.fsdp2:  # sharded gradients: torch's total norm reduces across the shards
            return full_tensor(torch.nn.utils.get_total_norm([p.grad for p in self.model.parameters()
                                                               if p.grad is not None]))
        grad_norms = [p.grad.norm() for p in self.model.parameters() if p.grad is not None]
        return torch.linalg.vector_norm(torch.stack(grad_norms))

    def full_grad(self, param):
        return None if param.grad is None else full_tensor(param.grad)

    @contextlib.contextmanager
    def evaluation(self):
        self.model.eval()
        with torch.no_grad():
            yield
        self.model.train()

    def learning_rates(self) -> dict:
        return {group.get("name", str(i)): group["lr"] for i, group in enumerate(self.optimizer.param_groups)}

    def mean_tensor(self, value: torch.Tensor) -> torch.Tensor:
        return self.accelerator.reduce(value.detach().float().to(self.device).clone(), reduction="mean")

    def mean(self, value: torch.Tensor) -> float:
        return float(self.mean_tensor(value))

    def barrier(self) -> None:
        self.accelerator.wait_for_everyone()

    def save(self, folder: Path) -> None:
        from ..utils.quiet_logs import tied_save_quiet

        with tied_save_quiet(self.module):  # a declared tie is re-created on load: no "Removed shared tensor"
            self.accelerator.save_state(str(folder))
        if self.is_main:
            torch.save(self.scheduler.state_dict(), Path(folder) / SCHEDULER_FILE)

    def load(self, folder: Path) -> None:
        check_accelerate_checkpoint(folder, self.rank)
        try:  # accelerate reads torch files with weights_only=True: a planted object fails here, it never runs
            self.accelerator.load_state(str(folder))
        except Exception as error:  # noqa: BLE001  one message naming the checkpoint, not a traceback
            first = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise SetupError(f"--resume {folder}: the checkpoint cannot be loaded ({first})") from None
        self.scheduler.load_state_dict(load_weights_only(Path(folder) / SCHEDULER_FILE))

    def save_model(self, folder: Path) -> None:
        state = self.accelerator.get_state_dict(self.model)
        if self.is_main:
            save_model_folder(self.module, folder, state_dict=state)


class DeepSpeedState:
    """A DeepSpeed engine's share of a checkpoint (`checkpoints.TrainingState`), for ZeRO and pipeline engines alike:
    DeepSpeed's own files under the `deepspeed/` tag, read back as plain data only, and this process's RNG state."""

    TAG = "deepspeed"

    def __init__(self, engine):
        self.engine = engine

    rank = property(lambda self: torch.distributed.get_rank())
    is_main = property(lambda self: torch.distributed.get_rank() == 0)

    def barrier(self) -> None:
        torch.distributed.barrier()

    def save(self, folder: Path) -> None:
        self.engine.save_checkpoint(str(folder), tag=self.TAG)
        torch.save(rng_state(), Path(folder) / f"rng_state_{self.rank}.pt")

    def load(self, folder: Path) -> None:
        rng = load_weights_only(Path(folder) / f"rng_state_{self.rank}.pt")  # a damaged file fails before any change
        read_deepspeed_weights_only(self.engine.checkpoint_engine)  # never unpickle objects from the checkpoint
        path, _ = self.engine.load_checkpoint(str(folder), tag=self.TAG)
        if path is None:
            raise FileNotFoundError(f"no DeepSpeed checkpoint (tag {self.TAG!r}) in {folder}")
        set_rng_state(rng)


class DeepSpeedEngine(DeepSpeedState):
    """DeepSpeed ZeRO stage 0-3 with our AdamW and schedule (a torch optimizer: no fused-Adam JIT build on CPU)."""

    def __init__(self, model, optimizer, scheduler, args, world: int):
        from ..utils.extras import require

        deepspeed = require("deepspeed", why="--deepspeed")
        if "WORLD_SIZE" not in os.environ:  # plain `python train.py --deepspeed ...`: a one-process group, no MPI probe
            os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1")
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ.setdefault("MASTER_PORT", "29500")
        if not torch.cuda.is_available():
            # As train-pipeline: DeepSpeed would JIT-compile its shared-memory allreduce op here (minutes of C++ on
            # a small machine, silently, once per cache); marked unavailable, it uses plain gloo, its documented
            # fallback
            deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
        start_process_group(lambda backend: deepspeed.init_distributed(dist_backend=backend, auto_mpi_discovery=False))
        self.config = resolve_deepspeed_config(json.loads(Path(args.deepspeed).read_text()), args, world)
        self.zero_stage = self.config.get("zero_optimization", {}).get("stage", 0)
        # ZeRO and DeepSpeed's bf16 optimizer skip a non-finite gradient norm themselves; a plain fp32 one is guarded
        plain = self.zero_stage == 0 and not self.config["bf16"]["enabled"]
        self.client_optimizer = skip_nonfinite_steps(optimizer, check_grads=plain)
        self.engine, self.optimizer, _, self.scheduler = deepspeed.initialize(
            model=model, optimizer=optimizer, lr_scheduler=scheduler, config=self.config
        )

    device = property(lambda self: self.engine.device)
    world_size = property(lambda self: torch.distributed.get_world_size())
    module = property(lambda self: self.engine.module)

    def forward(self, input_ids, labels=None, **kwargs):
        labels = input_ids if labels is None else labels
        return self.engine(input_ids=input_ids, labels=labels, use_cache=False, **kwargs)

    def micro_batch(self, is_last_micro_step: bool):
        return contextlib.nullcontext()  # DeepSpeed reduces at the accumulation boundary by itself

    def backward(self, loss, is_last_micro_step: bool) -> None:
        self.engine.backward(loss)  # DeepSpeed divides by gradient_accumulation_steps itself
        if not is_last_micro_step:
            self.engine.step()  # only counts the micro-step: the update happens at the accumulation boundary

    group_norms: dict = {}  # DeepSpeed holds the gradients (partitioned under ZeRO): no per-group norms

    def optimizer_step(self, loss_finite: bool = True) -> tuple[float, bool]:
        """(gradient norm, whether the update was made). DeepSpeed skips a non-finite norm by itself (ZeRO, bf16) or
        through `skip_nonfinite_steps` (a plain fp32 optimizer); a non-finite loss is skipped through the latter."""
        self.client_optimizer.skip_requested = not loss_finite
        self.engine.step()
        self.client_optimizer.skip_requested = False
        norm = self.engine.get_global_grad_norm()  # None where DeepSpeed does not measure it (a plain optimizer)
        return (float(norm) if norm is not None else None), self.engine.was_step_applied() and loss_finite

    @contextlib.contextmanager
    def evaluation(self):
        self.engine.eval()
        with torch.no_grad():
            yield
        self.engine.train()
        if self.zero_stage == 3:
            # ZeRO-3 replays the parameter fetch order recorded in the first training step. A forward-only pass
            # desynchronizes it ("tracing error at step N" on the next step, seen with DeepSpeed 0.19.8), so make it
            # record again, as DeepSpeed itself does when hooks change (parameter_offload._register_deepspeed_module)
            coordinator = self.engine.optimizer.parameter_offload.get_param_coordinator()
            if not coordinator.is_invalid_trace():
                coordinator._invalidate_trace()

    def full_grad(self, param):
        from deepspeed.utils import safe_get_full_grad

        return safe_get_full_grad(param)

    def learning_rates(self) -> dict:
        return {group.get("name", str(i)): group["lr"] for i, group in enumerate(self.optimizer.param_groups)}

    def mean_tensor(self, value: torch.Tensor) -> torch.Tensor:
        value = value.detach().float().to(self.device).clone()
        torch.distributed.all_reduce(value)
        return value / self.world_size

    def mean(self, value: torch.Tensor) -> float:
        return float(self.mean_tensor(value))

    def save_model(self, folder: Path) -> None:
        import deepspeed

        params = list(self.module.parameters())
        # ZeRO-3 shards every parameter: gather them (on all ranks) for rank 0 to write one HF checkpoint
        gather = deepspeed.zero.GatheredParameters(params) if self.zero_stage == 3 else contextlib.nullcontext()
        with gather:
            if self.is_main:
                save_model_folder(self.module, folder)


def resolve_deepspeed_config(config: dict, args, world: int) -> dict:
    """Fill the command line into the config's "auto" fields, as the HF Trainer integration does."""

    config = json.loads(json.dumps(config))
    config.update(
        train_micro_batch_size_per_gpu=args.micro_batch_size,
        gradient_accumulation_steps=args.grad_accum,
        train_batch_size=args.micro_batch_size * args.grad_accum * world,
        gradient_clipping=args.grad_clip,
        zero_allow_untested_optimizer=True,  # our torch AdamW
    )
    config.setdefault("steps_per_print", 10**9)
    bf16 = config.setdefault("bf16", {})
    if bf16.get("enabled", "auto") == "auto":
        bf16["enabled"] = wants_bf16(args.mixed_precision)
    return config


def make_engine(model, optimizer, scheduler, args, world: int):
    if args.deepspeed is not None:
        return DeepSpeedEngine(model, optimizer, scheduler, args, world)
    return AccelerateEngine(model, optimizer, scheduler, args)
