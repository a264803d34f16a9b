"""The training run behind `attnres train-interleaved` (scripts/train_interleaved.py): PyTorch's interleaved 1F1B
schedule over P ranks x V virtual stages (`hf_attnres.pipeline.interleaved`), cross-stage caching on by default, for an
AttnRes model of any family.

As `train.py` does: one run per output folder (the lock), a NaN/inf loss or gradient norm skips the update and a few
in a row stop the run with exit code 3 and no model, atomic checkpoints (`checkpoints/step-N/`: each rank's chunk
weights and AdamW state, then `trainer_state.json`) and `--resume auto|never|DIR` (refused when the settings differ).
Data is a pure function of the step (synthetic tokens or a prepared dataset's seeded order), so a resumed run
continues bit for bit. Outputs: log.jsonl, comms.json (tensors and bytes per transition, measured against the
plan and the caching simulator), the trained model `model/` (a `from_pretrained` folder, one shard per rank).
"""
from __future__ import annotations

import contextlib
import math
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from ..core.depth_layout import DepthLayout
from ..folders.atomic_io import write_json_atomic
from ..training.process_group import start_process_group
from ..training.recipe import Recipe, check_recipe_args
from .args import InterleavedArgs
from .caching import simulate_interleaved
from .interleaved import build_interleaved, expected_traffic

CHECKPOINT_FILE = "pipeline_rank{rank}.pt"


def check_args(args: InterleavedArgs, world: int) -> None:
    if world < 2:
        raise SystemExit("error: an interleaved pipeline needs >= 2 processes (torchrun --nproc_per_node 2 ...)")
    if (error := args.count_error("virtual_stages")) is not None:
        raise SystemExit(error)
    check_recipe_args(args, args.steps)
    rounds = max(1, args.grad_accum // world)  # PyTorch's interleaved 1F1B runs whole rounds of micro-batches
    if args.grad_accum % rounds:
        raise SystemExit(f"error: --grad-accum {args.grad_accum} must be a multiple of {rounds} (micro-batches per "
                         f"round of {world} stages)")


class PipelineState:
    """This rank's share of a checkpoint (`checkpoints.TrainingState`): its chunks' weights, the AdamW and schedule
    state, in one plain-data file per rank."""

    def __init__(self, pipe, optimizer, scheduler):
        self.pipe, self.optimizer, self.scheduler = pipe, optimizer, scheduler
        self.is_main = pipe.rank == 0

    def barrier(self) -> None:
        dist.barrier()

    def save(self, folder: Path) -> None:
        torch.save({"model": self.pipe.state_dict(), "optimizer": self.optimizer.state_dict(),
                    "scheduler": self.scheduler.state_dict()}, folder / CHECKPOINT_FILE.format(rank=self.pipe.rank))

    def load(self, folder: Path) -> None:
        """This rank's file, read whole first; ValueError naming it when it is damaged, not this run's or does not fit
        the model. No collective, so the ranks agree on the verdict afterwards (`train.agreed`) and stop alike."""
        from ..training.state import load_weights_only

        path = folder / CHECKPOINT_FILE.format(rank=self.pipe.rank)
        saved = load_weights_only(path)
        try:
            models = {chunk: {name: saved["model"][chunk.model_name(name)] for name in chunk.state_dict()}
                      for chunk in self.pipe.chunks}
            optimizer, scheduler = saved["optimizer"], saved["scheduler"]
        except (KeyError, TypeError) as error:
            raise ValueError(f"{path}: not this run's pipeline state (lacks {error})") from None
        try:
            for chunk, tensors in models.items():
                chunk.load_state_dict(tensors)
            self.optimizer.load_state_dict(optimizer)
            self.scheduler.load_state_dict(scheduler)
        except (RuntimeError, ValueError, KeyError) as error:  # shapes or optimizer groups of another model
            first = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise ValueError(f"{path}: does not fit this run's model ({first})") from None


def global_grad_norm(params) -> float:
    squares = torch.zeros(1, dtype=torch.float64)
    for p in params:
        if p.grad is not None:
            squares += p.grad.detach().double().pow(2).sum().cpu()
    dist.all_reduce(squares)
    return math.sqrt(squares.item())


def train_step(pipe, optimizer, scheduler, ids: torch.Tensor, grad_clip: float) -> tuple[float, float, bool]:
    """One pipeline step: (mean micro-batch loss, gradient norm, whether the update was made). Loss and norm are the
    same on every rank, so a non-finite step is skipped by all of them."""
    optimizer.zero_grad(set_to_none=True)
    loss = pipe.step(ids, ids)
    loss = torch.zeros(1) if loss is None else loss.reshape(1).float()
    dist.broadcast(loss, src=pipe.plans[-1].rank)
    loss, norm = loss.item(), global_grad_norm(pipe.norm_parameters())
    finite = math.isfinite(loss) and math.isfinite(norm)
    if finite:
        if grad_clip > 0:
            torch.nn.utils.clip_grads_with_norm_(pipe.parameters(), grad_clip, torch.tensor(norm))
        optimizer.step()
        scheduler.step()  # as `attnres train`: the schedule moves with applied updates only
    return loss, norm, finite


def traffic_report(args: InterleavedArgs, config, pipe, micro_batches: int) -> dict:
    """Measured sends per transition (all ranks' counters) next to the plan and, in block mode with equal chunks,
    the caching simulator's block counts."""
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, pipe.traffic.per_microbatch())
    measured = {key: row for part in gathered for key, row in part.items()}
    dtype_bytes = pipe.chunks[0].parameters().__next__().element_size()
    report = {"stages": pipe.num_stages, "virtual_stages": args.virtual_stages, "caching": not args.no_caching,
              "micro_batches": micro_batches, "measured_per_micro_batch": measured,
              "plan_per_micro_batch": expected_traffic(pipe.plans, args.micro_batch_size, args.seq_len,
                                                       config.hidden_size, dtype_bytes)}
    layout, chunks = DepthLayout.of(config), len(pipe.plans)
    if layout.mode == "block" and layout.num_layers % chunks == 0:
        sim = simulate_interleaved(pipe.num_stages, args.virtual_stages, layout.num_layers // chunks,
                                   layout.block_size)
        report["simulator"] = {"naive_blocks": sim.naive_blocks, "cached_blocks": sim.cached_blocks,
                               "partial_sums": sim.partial_sums, "table": sim.table()}
    return report


def model_and_data(args: InterleavedArgs):
    """(model, fetch(step, micro) -> input_ids, tokenizer to save): the DeepSpeed pipeline trainer's data and model
    choices (`hf_attnres.pipeline.train`), the same on every rank."""
    from .layout import causal_lm_class
    from .train import batch_source, load_config, load_data, output_tokenizer
    from .weights import load_pipeline_model

    train, data_tokenizer = load_data(args)
    config = load_config(args, len(data_tokenizer) if data_tokenizer is not None else None)
    tokenizer = output_tokenizer(args, data_tokenizer)
    if args.model is not None:
        model = load_pipeline_model(args.model, config)
    else:
        torch.manual_seed(args.seed)
        model = causal_lm_class(config)(config)
    fetch = batch_source(args, model.config, train, 1)
    return model.train(), (lambda step, micro: fetch(step, micro, 0)), tokenizer


def train_interleaved(args: InterleavedArgs) -> dict:
    """One run; call on every process of a torchrun launch (each process is one physical stage)."""
    from ..training.checkpoints import (
        checkpoint_due,
        checkpoints_root,
        remove_partial,
        resume_training,
        save_checkpoint,
    )
    from ..training.guard import EXIT_CODE, NonFiniteError, NonFiniteGuard
    from ..training.logs import JsonlLog
    from ..training.state import is_rank_zero, output_lock
    from .train import agreed, check_model, matching_checkpoint

    check_model(args)
    if "WORLD_SIZE" not in os.environ:
        raise SystemExit("error: launch with torchrun, e.g. `torchrun --nproc_per_node 2 "
                         "scripts/train_interleaved.py` (see --help)")
    world = int(os.environ["WORLD_SIZE"])
    check_args(args, world)
    lock = contextlib.ExitStack()  # one run per output folder, held until the run returns (or the process ends)
    lock.enter_context(output_lock(args.output_dir, enabled=is_rank_zero()))
    start_process_group(dist.init_process_group)  # ended at exit (process_group.py)
    try:
        model, fetch, tokenizer = model_and_data(args)
        config, rank = model.config, dist.get_rank()
        pipe = build_interleaved(model, rank, world, args.virtual_stages, args.grad_accum, args.micro_batch_size,
                                 args.seq_len, caching=not args.no_caching)
        del model  # the chunks hold this rank's modules
        recipe = Recipe.from_args(args, max_steps=args.steps)  # the one every engine uses
        optimizer = recipe.build_optimizer(pipe.named_parameters().items())
        scheduler = recipe.build_scheduler(optimizer)
        record = {"signature": args.signature(config, world)}
        trainer = PipelineState(pipe, optimizer, scheduler)
        checkpoint = matching_checkpoint(args, record)
        start = agreed(lambda: resume_training(trainer, *checkpoint))  # a damaged file of any rank stops every rank
        root = checkpoints_root(args.output_dir)
        if rank == 0:
            remove_partial(root)
            write_json_atomic(args.output_dir / "run.json", dict(record["signature"], world_size=world))
        log = JsonlLog(args.output_dir / "log.jsonl", start) if rank == 0 else None
        guard, loss = NonFiniteGuard(args.max_nonfinite_steps), None
        try:
            for step in range(start + 1, args.steps + 1):
                ids = torch.cat([fetch(step - 1, micro) for micro in range(args.grad_accum)])
                loss, norm, finite = train_step(pipe, optimizer, scheduler, ids, args.grad_clip)
                if log is not None:
                    log.write({"step": step, "loss": loss, "grad_norm": norm,
                               **({} if finite else {"skipped/nonfinite": 1})})
                if guard.check(step, loss, norm) and rank == 0:
                    print(guard.message(step, loss, norm), file=sys.stderr)
                if checkpoint_due(step, args.save_every, args.steps):
                    save_checkpoint(root, step, record, trainer, args.keep_checkpoints)
        except NonFiniteError as error:  # no model is saved from these weights
            if rank == 0:
                print(f"error: {error}", file=sys.stderr)
            return {"exit_code": EXIT_CODE}
        report = traffic_report(args, config, pipe, (args.steps - start) * args.grad_accum)
        if rank == 0:
            write_json_atomic(args.output_dir / "comms.json", report)
        if not args.no_save:
            from .export import save_pipeline_checkpoint

            save_pipeline_checkpoint(_ChunkList(pipe.chunks), config, args.output_dir / "model", rank, world, True,
                                     tokenizer=tokenizer)
        dist.barrier()
        return {"start_step": start, "step": args.steps, "loss": loss, "output_dir": str(args.output_dir),
                "traffic": report["measured_per_micro_batch"]}
    finally:
        lock.close()


class _ChunkList:
    """The pipe layers `save_pipeline_checkpoint` reads (`forward_funcs`: modules with `model_name`)."""

    def __init__(self, chunks):
        self.forward_funcs = chunks


__all__ = ["train_interleaved", "train_step", "CHECKPOINT_FILE"]
