"""The pipeline training run behind `attnres train-pipeline` (scripts/train_pipeline.py): DeepSpeed's 1F1B
`train_batch` over the stages of `hf_attnres.pipeline.stages` (an AttnRes model of any family), ZeRO stage 0 or 1, a
loss log, the boundary traffic report and the trained model saved as one Hugging Face folder (a shard per stage). With
--save-every, atomic checkpoints of DeepSpeed's state and `--resume auto|never|DIR` (`hf_attnres.training.checkpoints`,
refused when the settings differ); data is a pure function of the step, so a resumed run continues bit for bit.

Every process of the launch runs `train_pipeline(args)` with the same arguments (the flags of
`hf_attnres.cli.train_pipeline`); the number of processes is a multiple of the stages (the quotient: data-parallel
replicas).
"""
from __future__ import annotations

# DeepSpeed before anything else: without the `train` extra the import stops here, with one line naming it
from .ds import deepspeed  # isort: skip

import contextlib
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from tqdm import tqdm

from ..folders.atomic_io import write_json_atomic
from ..folders.checkpoint_files import check_model_folder
from ..folders.model_family import attn_res_config_of_folder
from ..training.args import check_finite_flags
from ..training.checkpoints import (
    checkpoint_due,
    checkpoints_root,
    choose_checkpoint,
    remove_partial,
    resume_training,
    save_checkpoint,
    signature_rule,
)
from ..training.engines import DeepSpeedState
from ..training.guard import EXIT_CODE, NonFiniteError, NonFiniteGuard, skip_nonfinite_steps, step_is_finite
from ..training.logs import JsonlLog
from ..training.process_group import start_process_group
from ..training.recipe import Recipe, check_recipe_args
from ..training.state import check_checkpoint, is_rank_zero, output_lock
from ..utils.tiny import tiny_config
from .args import PipelineArgs, PipelineModelArgs
from .comms import P2PTraffic, boundary_report, format_report, report_rows
from .data import micro_batches, synthetic_micro_batch
from .export import save_pipeline_checkpoint
from .layout import causal_lm_class
from .stages import build_pipeline
from .weights import StateDictWeights


def check_args(args: PipelineArgs, world_size: int) -> int:
    """Clear errors before any work; returns the number of stages."""
    stages = args.num_stages or world_size
    if world_size % stages:
        raise SystemExit(f"error: {world_size} processes cannot hold --num-stages {stages} (need a multiple)")
    if stages < 2:
        raise SystemExit("error: pipeline parallelism needs >= 2 stages: launch >= 2 processes (torchrun "
                         "--nproc_per_node 2 ...)")
    if (error := args.count_error()) is not None:
        raise SystemExit(error)
    if args.grad_accum < stages:
        print(f"warning: --grad-accum {args.grad_accum} < {stages} stages leaves the pipeline mostly idle",
              file=sys.stderr)
    check_recipe_args(args, args.steps)
    try:
        check_finite_flags(args)
        if args.model is not None:
            check_model_folder(args.model, "--model")
    except ValueError as error:
        raise SystemExit(f"error: {error}") from None
    return stages


def load_data(args: PipelineArgs):
    """(train split, tokenizer) of a prepared dataset, or (None, None) for synthetic tokens. Sets args.seq_len from
    the data."""
    if args.data is None:
        return None, None
    from ..training.data import check_prepared, load_prepared  # `datasets`: only with --data

    try:
        meta = check_prepared(args.data)
        train, _, tokenizer = load_prepared(args.data)
    except (FileNotFoundError, ValueError) as error:  # missing, or disagreeing with its meta.json
        raise SystemExit(f"error: {error}") from None
    args.seq_len = int(meta["seq_len"])
    return train, tokenizer


def output_tokenizer(args: PipelineArgs, data_tokenizer):
    """The tokenizer saved with the trained model: the dataset's, else the --model folder's, else none (synthetic
    tokens: no text)."""
    if data_tokenizer is not None or args.model is None or not (args.model / "tokenizer_config.json").is_file():
        return data_tokenizer
    from transformers import AutoTokenizer

    from ..utils.trust import load_kwargs

    return AutoTokenizer.from_pretrained(args.model, **load_kwargs(args.model, args.trust_remote_code))


def load_config(args: PipelineModelArgs, data_vocab: int | None):
    """The --model folder's config (read by its family's config class), or a tiny one (vocabulary sized to the
    dataset's tokenizer when there is one); one line naming what the pipelines cannot train."""
    try:
        if args.model is not None:
            config = attn_res_config_of_folder(args.model, "--model")
        else:
            extra = {"vocab_size": data_vocab} if data_vocab else {}
            config = tiny_config(mode=args.mode, block_size=args.block_size, num_layers=args.layers, **extra,
                                 family=args.family)
    except ValueError as error:
        raise SystemExit(f"error: {error}") from None
    if data_vocab and data_vocab > config.vocab_size:
        raise SystemExit(f"error: the dataset's tokenizer has {data_vocab} tokens but the model's vocab_size is "
                         f"{config.vocab_size}")
    return config


def check_model(args: PipelineModelArgs) -> None:
    """A --model folder the pipelines cannot train (a plain checkpoint, a damaged config.json) is refused in one line
    before anything else: the same answer launched or not."""
    if args.model is not None:
        load_config(args, None)


def initial_weights(args: PipelineArgs, config):
    """The checkpoint's tensors, or a seeded random model's (every rank builds the same model, then keeps its stage)."""
    if args.model is not None:
        return StateDictWeights.from_pretrained(args.model, config)
    torch.manual_seed(args.seed)
    return StateDictWeights(causal_lm_class(config)(config).state_dict())


def batch_source(args: PipelineArgs, config, train, dp_world: int):
    """fetch(step, micro_step, dp_rank) -> input_ids [micro_batch, seq_len], identical on every stage of a replica."""
    if train is None:
        return lambda step, micro, rank: synthetic_micro_batch(
            args.seed, step, micro, rank, args.micro_batch_size, args.seq_len, config.vocab_size)
    from ..training.data import BatchPlan

    plan = BatchPlan(len(train), args.micro_batch_size, args.grad_accum, dp_world, args.seed)
    return lambda step, micro, rank: train[plan.indices(step, micro, rank)]["input_ids"]


def agreed(work):
    """`work()` on every rank of the process group, with one verdict for all: when any rank refuses (a ValueError or
    SystemExit, such as a damaged file of its own), every rank exits with the first refusal's one line, so no rank
    goes on into a collective its peers have left (gloo's "Connection closed by peer"). Call it where every rank
    runs the same `work` before the next collective. Without a process group, `work()` as it is."""
    try:
        result, refusal = work(), None
    except ValueError as error:
        result, refusal = None, (f"error: {error}",)
    except SystemExit as error:  # its message or exit code, whatever it is (a 1-tuple: None is a code too)
        result, refusal = None, (error.code,)
    if dist.is_available() and dist.is_initialized():
        verdicts = [None] * dist.get_world_size()
        dist.all_gather_object(verdicts, refusal)
        refusal = next((verdict for verdict in verdicts if verdict is not None), None)
    if refusal is not None:
        raise SystemExit(refusal[0])
    return result


def matching_checkpoint(args: PipelineModelArgs, record: dict,
                        check_files=None) -> tuple[Path | None, dict | None]:
    """(checkpoint, its state) both pipeline trainers continue from ((None, None): start fresh): one of this run
    (`record`'s signature) with a valid step and, checked by `check_files` on each rank (its own files), intact
    files; refused in one line naming what differs or the damaged file, on every rank alike (`agreed`), or when it
    would prune or replace a newer state of the folder's run."""
    return agreed(lambda: choose_checkpoint(args.resume, args.output_dir,
                                            signature_rule(record["signature"], args.steps, check_files)))


def ds_config(args: PipelineArgs) -> dict:
    return {
        "train_micro_batch_size_per_gpu": args.micro_batch_size,
        "gradient_accumulation_steps": args.grad_accum,
        "gradient_clipping": args.grad_clip,
        "zero_optimization": {"stage": args.zero_stage},
        "zero_allow_untested_optimizer": True,  # a plain torch optimizer: no JIT-built fused Adam
        "bf16": {"enabled": args.bf16},
        "steps_per_print": 10**9,
    }


def recipe_of(args: PipelineArgs) -> Recipe:
    """The run's training recipe (`hf_attnres.training.recipe`: the one `attnres train` uses) over `--steps` steps."""
    return Recipe.from_args(args, max_steps=args.steps)


def write_run_record(args: PipelineArgs, recipe: Recipe, world: int) -> None:
    """<output-dir>/run.json (rank 0): the recipe and the flags, the run's provenance."""
    settings = {name: str(value) if isinstance(value, os.PathLike) else value for name, value in vars(args).items()}
    write_json_atomic(args.output_dir / "run.json", dict(recipe=recipe.record(), settings=settings, world_size=world))


def skip_cpu_shm_build() -> None:
    """On CPU DeepSpeed JIT-compiles a shared-memory allreduce op at init (minutes on a small machine, once per
    cache). The pipeline's point-to-point sends never use it, so by default mark it unavailable: DeepSpeed then uses
    plain gloo (its documented fallback on platforms without the op)."""
    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False


def train_steps(args: PipelineArgs, engine, data, traffic: P2PTraffic, is_rank0: bool, start: int, save) -> None:
    """The pipeline steps after `start` up to `args.steps`, each logged to log.jsonl (rank 0), `save(step)` when a
    checkpoint is due; too many non-finite steps in a row end the run with exit code 3, before any model is saved."""
    log = JsonlLog(args.output_dir / "log.jsonl", start) if is_rank0 else None
    guard = NonFiniteGuard(args.max_nonfinite_steps)
    try:
        with traffic.counting():
            steps = range(start + 1, args.steps + 1)
            for step in (progress := tqdm(steps, desc="pipeline steps", disable=not is_rank0)):
                loss = float(engine.train_batch(data_iter=data))  # the mean micro-batch loss, broadcast to every stage
                norm, applied = engine.get_global_grad_norm(), engine.was_step_applied()  # norm: None if not measured
                finite = step_is_finite(loss, norm, applied)  # alike on every rank: the skip is agreed across stages
                if log is not None:
                    record = {"step": step, "loss": loss, **({} if finite else {"skipped/nonfinite": 1})}
                    log.write(record)
                if guard.check(step, loss, norm, applied) and is_rank0:
                    progress.write(guard.message(step, loss, norm))
                if args.save_every and checkpoint_due(step, args.save_every, args.steps):  # 0: no checkpoints
                    save(step)
    except NonFiniteError as error:  # no model is saved from these weights
        if is_rank0:
            print(f"error: {error}", file=sys.stderr)
        raise SystemExit(EXIT_CODE) from None


def report_comms(args: PipelineArgs, config, pipe, traffic: P2PTraffic, dp_rank: int, is_rank0: bool,
                 steps: int) -> None:
    """Bytes sent per stage boundary (replica 0's, gathered, over the `steps` this run made) against the minimum ->
    comms.json, printed."""
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, traffic.sent if dp_rank == 0 else {})
    sent = {key: value for part in gathered for key, value in part.items()}
    rows = boundary_report(config, pipe.parts, sent, steps * args.grad_accum, args.micro_batch_size,
                           args.seq_len, torch.bfloat16 if args.bf16 else torch.float32)
    if is_rank0:
        write_json_atomic(args.output_dir / "comms.json", {"parts": [int(p) for p in pipe.parts],
                                                          "boundaries": report_rows(rows)})
        print(format_report(rows))


def train_pipeline(args: PipelineArgs) -> None:
    """One pipeline training run; call on every process of a torchrun / deepspeed launch."""
    check_model(args)
    if "WORLD_SIZE" not in os.environ:
        raise SystemExit("error: launch with torchrun or deepspeed, e.g. `torchrun --nproc_per_node 2 "
                         "scripts/train_pipeline.py` (see --help)")
    stages = check_args(args, int(os.environ["WORLD_SIZE"]))
    lock = contextlib.ExitStack()  # one run per output folder, held until the run returns (or the process ends)
    try:
        lock.enter_context(output_lock(args.output_dir, enabled=is_rank_zero()))
    except ValueError as error:
        raise SystemExit(f"error: {error}") from None
    train, data_tokenizer = load_data(args)
    config = load_config(args, len(data_tokenizer) if data_tokenizer is not None else None)
    tokenizer = output_tokenizer(args, data_tokenizer)  # read before training: a broken one fails now, not at the end
    if stages > config.num_hidden_layers:
        raise SystemExit(f"error: --num-stages {stages} exceeds the model's {config.num_hidden_layers} decoder layers")
    if not torch.cuda.is_available() and not args.cpu_shm_comm:
        skip_cpu_shm_build()
    start_process_group(lambda backend: deepspeed.init_distributed(dist_backend=backend))  # ended at exit
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // dist.get_world_size()))
    pipe = build_pipeline(config, initial_weights(args, config), stages, args.partition_method,
                          args.activation_checkpoint_interval)
    recipe = recipe_of(args)
    optimizer = recipe.build_optimizer(pipe.named_parameters())
    scheduler = recipe.build_scheduler(optimizer)  # DeepSpeed steps it after each applied update
    # DeepSpeed's ZeRO-1 and bf16 optimizers skip a non-finite gradient norm themselves; a plain fp32 one is guarded
    check_grads = args.zero_stage == 0 and not args.bf16
    optimizer = skip_nonfinite_steps(optimizer, check_grads=check_grads)
    record = {"signature": args.signature(config, dist.get_world_size())}
    # DeepSpeed's files of the checkpoint are checked before any state changes
    folder, state = matching_checkpoint(args, record, lambda folder: check_checkpoint(folder, deepspeed=True))
    engine, _, _, _ = deepspeed.initialize(model=pipe, optimizer=optimizer, lr_scheduler=scheduler,
                                           config=ds_config(args))
    trainer = DeepSpeedState(engine)
    start = resume_training(trainer, folder, state)
    grid = engine.grid
    stage, dp_rank = grid.get_stage_id(), grid.get_data_parallel_id()
    fetch = batch_source(args, config, train, grid.get_data_parallel_world_size())
    data = micro_batches(fetch, start, args.grad_accum, dp_rank)  # data is a pure function of the step

    is_rank0 = dist.get_rank() == 0
    root = checkpoints_root(args.output_dir)
    if is_rank0:
        args.output_dir.mkdir(parents=True, exist_ok=True)
        remove_partial(root)
        write_run_record(args, recipe, dist.get_world_size())
    dist.barrier()
    traffic = P2PTraffic(stage)
    train_steps(args, engine, data, traffic, is_rank0, start,
                lambda step: save_checkpoint(root, step, record, trainer, args.keep_checkpoints))
    if args.report_comms and args.steps > start:  # a finished run resumed makes no step: nothing to report
        report_comms(args, config, pipe, traffic, dp_rank, is_rank0, args.steps - start)
    if not args.no_save:
        save_pipeline_checkpoint(pipe, config, args.output_dir / "model", stage, stages, dp_rank == 0,
                                 tokenizer=tokenizer)
    dist.barrier()
    lock.close()


__all__ = ["agreed", "check_args", "train_pipeline"]
