#!/usr/bin/env python3
"""Train a KimiLinearAttnRes model with DeepSpeed pipeline parallelism (1F1B schedule, ZeRO stage 0 or 1).

The model is cut into pipeline stages along its decoder layers; between stages travel the depth sources (standard: the
hidden state; block: embedding + completed blocks + partial sum; full: every sub-layer output), and their gradients
travel back. Each step runs DeepSpeed's `train_batch` over --grad-accum micro-batches per data-parallel replica.

Launch with torchrun or the deepspeed launcher; the number of processes must be a multiple of --num-stages (the
quotient is the data-parallel degree). With no arguments (under a 2-process launcher) it trains a tiny random block
AttnRes model on synthetic tokens.

CPU (gloo; DS_ACCELERATOR=cpu is set for you when no GPU is visible):
  torchrun --nproc_per_node 2 scripts/train_pipeline.py
  torchrun --nproc_per_node 2 scripts/train_pipeline.py --mode full --steps 20 --output-dir runs/pipe-full
GPU (NCCL), 4 stages x 2 data-parallel replicas on 8 GPUs, bf16, a prepared dataset and a checkpoint:
  deepspeed --num_gpus 8 scripts/train_pipeline.py --num-stages 4 --model path/to/checkpoint \\
      --data data/packed --seq-len 512 --micro-batch-size 4 --grad-accum 16 --bf16 --steps 1000 --output-dir runs/pp4

Outputs (--output-dir): log.jsonl (loss per step), comms.json (bytes per stage boundary against the minimum, with
--report-comms), and the trained model as a Hugging Face folder `model/` (one safetensors shard per stage, the code
files and the tokenizer of --data or --model: loads with AutoModelForCausalLM.from_pretrained(..., trust_remote_code=True)
and AutoTokenizer, like a save_pretrained folder). Pipeline parallelism combines with ZeRO-1 at most (DeepSpeed refuses
ZeRO-2/3 with pipelines). Batches must be packed, unpadded sequences (the stages rebuild causal masks themselves).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

import torch  # noqa: E402

if not torch.cuda.is_available():
    os.environ.setdefault("DS_ACCELERATOR", "cpu")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    model = parser.add_argument_group("model")
    model.add_argument("--model", type=Path, help="a save_pretrained folder; default: a tiny random model")
    model.add_argument("--mode", choices=["standard", "block", "full"], default="block",
                       help="tiny model's AttnRes mode")
    model.add_argument("--block-size", type=int, default=2, help="tiny model's layers per block (block mode)")
    model.add_argument("--layers", type=int, default=5, help="tiny model's decoder layers")
    data = parser.add_argument_group("data")
    data.add_argument("--data", type=Path, help="folder written by scripts/prepare_data.py; default: synthetic tokens")
    data.add_argument("--seq-len", type=int, default=32, help="tokens per synthetic sequence (--data: its own length)")
    train = parser.add_argument_group("training")
    train.add_argument("--num-stages", type=int, default=None, help="pipeline stages (default: all processes)")
    train.add_argument("--partition-method", default="type:DecoderLayerPipe",
                       help="DeepSpeed partitioning: 'type:DecoderLayerPipe' (balance decoder layers), 'uniform', "
                            "'parameters'")
    train.add_argument("--micro-batch-size", type=int, default=2)
    train.add_argument("--grad-accum", type=int, default=2, help="micro-batches per step per replica (fill the pipe)")
    train.add_argument("--steps", type=int, default=4)
    train.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw")
    train.add_argument("--lr", type=float, default=1e-3)
    train.add_argument("--weight-decay", type=float, default=0.0)
    train.add_argument("--grad-clip", type=float, default=0.0, help="max gradient norm (0: off)")
    train.add_argument("--zero-stage", type=int, choices=[0, 1], default=1)
    train.add_argument("--bf16", action="store_true", help="bf16 weights/activations (DeepSpeed bf16 optimizer)")
    train.add_argument("--activation-checkpoint-interval", type=int, default=0, help="decoder layers per checkpoint")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--max-nonfinite-steps", type=int, default=3,
                       help="a step with a NaN/inf loss or gradient makes no update and is logged; this many in a row "
                            "stop the run with exit code 3 and no saved model (default 3)")
    train.add_argument("--cpu-shm-comm", action="store_true",
                       help="CPU only: let DeepSpeed build its shared-memory allreduce op (faster data-parallel "
                            "allreduce; a one-off C++ build of minutes)")
    out = parser.add_argument_group("output")
    out.add_argument("--output-dir", type=Path, default=Path("runs/pipeline"))
    out.add_argument("--report-comms", action="store_true", help="count bytes per stage boundary -> comms.json")
    out.add_argument("--no-save", action="store_true", help="skip writing the trained model")
    return parser


def check_args(args, world_size: int) -> int:
    """Clear errors before any work; returns the number of stages."""
    stages = args.num_stages or world_size
    if world_size % stages:
        raise SystemExit(f"error: {world_size} processes cannot hold --num-stages {stages} (need a multiple)")
    if stages < 2:
        raise SystemExit("error: pipeline parallelism needs >= 2 stages: launch >= 2 processes (torchrun "
                         "--nproc_per_node 2 ...)")
    for name in ("micro_batch_size", "grad_accum", "steps", "seq_len", "max_nonfinite_steps"):
        if getattr(args, name) < 1:
            raise SystemExit(f"error: --{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.grad_accum < stages:
        print(f"warning: --grad-accum {args.grad_accum} < {stages} stages leaves the pipeline mostly idle",
              file=sys.stderr)
    from attnres.checkpoint_files import check_model_folder
    from attnres.training.args import check_finite_flags

    try:
        check_finite_flags(args)
        if args.model is not None:
            check_model_folder(args.model, "--model")
    except ValueError as error:
        raise SystemExit(f"error: {error}") from None
    return stages


def load_data(args):
    """(train split, tokenizer) of a prepared dataset, or (None, None) for synthetic tokens. Sets args.seq_len from
    the data."""
    if args.data is None:
        return None, None
    from attnres.training.batches import check_prepared, load_prepared

    try:
        meta = check_prepared(args.data)
    except FileNotFoundError as error:
        raise SystemExit(f"error: {error}") from None
    train, _, tokenizer = load_prepared(args.data)
    args.seq_len = int(meta["seq_len"])
    return train, tokenizer


def output_tokenizer(args, data_tokenizer):
    """The tokenizer saved with the trained model: the dataset's, else the --model folder's, else none (synthetic
    tokens: no text)."""
    if data_tokenizer is not None or args.model is None or not (args.model / "tokenizer_config.json").is_file():
        return data_tokenizer
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(args.model)


def load_config(args, data_vocab: int | None):
    """The checkpoint's config, or a tiny one (vocabulary sized to the dataset's tokenizer when there is one)."""
    from attnres import KimiLinearAttnResConfig
    from attnres.tiny import tiny_config

    if args.model is not None:
        config = KimiLinearAttnResConfig.from_pretrained(args.model)
    else:
        extra = {"vocab_size": data_vocab} if data_vocab else {}
        config = tiny_config(mode=args.mode, block_size=args.block_size, num_layers=args.layers, **extra)
    if data_vocab and data_vocab > config.vocab_size:
        raise SystemExit(f"error: the dataset's tokenizer has {data_vocab} tokens but the model's vocab_size is "
                         f"{config.vocab_size}")
    return config


def initial_weights(args, config):
    """The checkpoint's tensors, or a seeded random model's (every rank builds the same model, then keeps its stage)."""
    from attnres import KimiLinearAttnResForCausalLM
    from attnres.pipeline import StateDictWeights

    if args.model is not None:
        return StateDictWeights.from_pretrained(args.model)
    torch.manual_seed(args.seed)
    return StateDictWeights(KimiLinearAttnResForCausalLM(config).state_dict())


def batch_source(args, config, train, dp_world: int):
    """fetch(step, micro_step, dp_rank) -> input_ids [micro_batch, seq_len], identical on every stage of a replica."""
    from attnres.pipeline.data import synthetic_micro_batch

    if train is None:
        return lambda step, micro, rank: synthetic_micro_batch(
            args.seed, step, micro, rank, args.micro_batch_size, args.seq_len, config.vocab_size)
    from attnres.training.batches import BatchPlan

    plan = BatchPlan(len(train), args.micro_batch_size, args.grad_accum, dp_world, args.seed)
    return lambda step, micro, rank: train[plan.indices(step, micro, rank)]["input_ids"]


def ds_config(args) -> dict:
    return {
        "train_micro_batch_size_per_gpu": args.micro_batch_size,
        "gradient_accumulation_steps": args.grad_accum,
        "gradient_clipping": args.grad_clip,
        "zero_optimization": {"stage": args.zero_stage},
        "zero_allow_untested_optimizer": True,  # a plain torch optimizer: no JIT-built fused Adam
        "bf16": {"enabled": args.bf16},
        "steps_per_print": 10**9,
    }


def make_optimizer(args, params):
    if args.optimizer == "sgd":
        return torch.optim.SGD(params, lr=args.lr, weight_decay=args.weight_decay)
    return torch.optim.AdamW(params, lr=args.lr, weight_decay=args.weight_decay)


def skip_cpu_shm_build() -> None:
    """On CPU DeepSpeed JIT-compiles a shared-memory allreduce op at init (minutes on a small machine, once per
    cache). The pipeline's point-to-point sends never use it, so by default mark it unavailable: DeepSpeed then uses
    plain gloo (its documented fallback on platforms without the op)."""
    import deepspeed.ops

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False


def main(argv=None) -> None:
    args = build_parser().parse_args(argv)
    import deepspeed
    import torch.distributed as dist
    from tqdm import tqdm

    from attnres.pipeline import (P2PTraffic, boundary_report, build_pipeline, format_report, report_rows,
                                  save_pipeline_checkpoint)
    from attnres.atomic_io import write_json_atomic
    from attnres.pipeline.data import micro_batches
    from attnres.training.nonfinite import (EXIT_CODE, NonFiniteError, NonFiniteGuard, skip_nonfinite_steps,
                                            step_is_finite)

    if "WORLD_SIZE" not in os.environ:
        raise SystemExit("error: launch with torchrun or deepspeed, e.g. `torchrun --nproc_per_node 2 "
                         "scripts/train_pipeline.py` (see --help)")
    stages = check_args(args, int(os.environ["WORLD_SIZE"]))
    from attnres.training.run_lock import is_rank_zero, output_lock

    lock = contextlib.ExitStack()  # one run per output folder, held until main returns (or the process ends)
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
    deepspeed.init_distributed(dist_backend="nccl" if torch.cuda.is_available() else "gloo")
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // dist.get_world_size()))
    pipe = build_pipeline(config, initial_weights(args, config), stages, args.partition_method,
                          args.activation_checkpoint_interval)
    trainable = [p for p in pipe.parameters() if p.requires_grad]
    # DeepSpeed's ZeRO-1 and bf16 optimizers skip a non-finite gradient norm themselves; a plain fp32 one is guarded
    optimizer = skip_nonfinite_steps(make_optimizer(args, trainable), check_grads=args.zero_stage == 0 and not args.bf16)
    engine, _, _, _ = deepspeed.initialize(model=pipe, optimizer=optimizer, config=ds_config(args))
    grid = engine.grid
    stage, dp_rank = grid.get_stage_id(), grid.get_data_parallel_id()
    fetch = batch_source(args, config, train, grid.get_data_parallel_world_size())
    data = micro_batches(fetch, 0, args.grad_accum, dp_rank)

    is_rank0 = dist.get_rank() == 0
    if is_rank0:
        args.output_dir.mkdir(parents=True, exist_ok=True)
    traffic = P2PTraffic(stage)
    log = open(args.output_dir / "log.jsonl", "w") if is_rank0 else None
    guard = NonFiniteGuard(args.max_nonfinite_steps)
    try:
        with traffic.counting():
            for step in (progress := tqdm(range(1, args.steps + 1), desc="pipeline steps", disable=not is_rank0)):
                loss = float(engine.train_batch(data_iter=data))  # the mean micro-batch loss, broadcast to every stage
                norm, applied = engine.get_global_grad_norm(), engine.was_step_applied()  # norm: None if not measured
                finite = step_is_finite(loss, norm, applied)  # alike on every rank: the skip is agreed across stages
                if log is not None:
                    log.write(json.dumps({"step": step, "loss": loss, **({} if finite else {"skipped/nonfinite": 1})}) + "\n")
                    log.flush()
                if guard.check(step, loss, norm, applied) and is_rank0:
                    progress.write(guard.message(step, loss, norm))
    except NonFiniteError as error:  # no model is saved from these weights
        if is_rank0:
            print(f"error: {error}", file=sys.stderr)
        raise SystemExit(EXIT_CODE) from None
    finally:
        if log is not None:
            log.close()

    if args.report_comms:
        gathered = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, traffic.sent if dp_rank == 0 else {})
        sent = {key: value for part in gathered for key, value in part.items()}
        rows = boundary_report(config, pipe.parts, sent, args.steps * args.grad_accum, args.micro_batch_size,
                               args.seq_len, torch.bfloat16 if args.bf16 else torch.float32)
        if is_rank0:
            write_json_atomic(args.output_dir / "comms.json", {"parts": [int(p) for p in pipe.parts],
                                                              "boundaries": report_rows(rows)})
            print(format_report(rows))
    if not args.no_save:
        save_pipeline_checkpoint(pipe, config, args.output_dir / "model", stage, stages, dp_rank == 0,
                                 tokenizer=tokenizer)
    dist.barrier()
    lock.close()


if __name__ == "__main__":
    main()
