"""The training loop of scripts/train.py: checks first, then model, engine, resume, steps, evals, checkpoints."""
from __future__ import annotations

import shutil
import time
from pathlib import Path

import torch

from .args import SetupError, check_args, world_size
from .batches import BatchPlan, check_prepared, load_prepared
from .checkpoint import latest_checkpoint, read_state, remove_partial, save_checkpoint
from .embedding_repair import data_token_ids, reinit_zero_embedding_rows
from .models import build_config



def prepare(args):
    """Every check that can fail on user input, before a model is built or a process group started."""
    try:
        return _prepare(args)
    except (ValueError, FileNotFoundError) as error:
        raise SetupError(str(error)) from error


def _prepare(args):
    world = world_size()
    meta = check_prepared(args.data)
    check_args(args, meta, world)
    train_set, val_set, tokenizer = load_prepared(args.data)
    config = build_config(args.model_size, args.config, args.attn_res, args.block_size, tokenizer)
    if args.output_dir is None:
        args.output_dir = Path("runs") / f"{args.model_size if args.config is None else args.config.stem}-{config.attn_res_mode}"
    args.seq_len = args.seq_len or meta["seq_len"]
    return world, config, train_set, val_set, tokenizer, checked_resume_folder(args, config, world)


def run_signature(args, config, world: int) -> dict:
    return dict(attn_res=config.attn_res_mode, block_size=config.attn_res_block_size, model_size=args.model_size,
                config=str(args.config), micro_batch_size=args.micro_batch_size, grad_accum=args.grad_accum,
                world_size=world, seed=args.seed, seq_len=args.seq_len)


def build_model(config, args):
    from transformers import set_seed

    from ..modeling_attnres import KimiLinearAttnResForCausalLM

    set_seed(args.seed)  # same init on every process (DDP and ZeRO then start from identical weights)
    model = KimiLinearAttnResForCausalLM(config)
    if args.gradient_checkpointing:
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    return model


def checked_resume_folder(args, config, world: int) -> Path | None:
    """The checkpoint to resume from (None: start fresh); refused when it was made with other settings."""
    if args.resume == "never":
        return None
    folder = Path(args.resume) if args.resume != "auto" else latest_checkpoint(Path(args.output_dir) / "checkpoints")
    if folder is None:
        return None
    saved, now = read_state(folder)["signature"], run_signature(args, config, world)
    mismatch = {key: (saved.get(key), value) for key, value in now.items() if saved.get(key) != value}
    if mismatch:
        raise ValueError(f"--resume {folder}: checkpoint was made with other settings {mismatch} (saved, now); "
                         f"use another --output-dir or --resume never")
    return folder


def evaluate(engine, val_set, args) -> float:
    """Mean loss over the first eval_batches global batches of validation (a global batch as in training: micro-batch
    x accumulation x processes). The same sequences at every eval, whatever the process count or accumulation:
    rank r reads the slices a training step would give it."""
    global_batch = args.micro_batch_size * args.grad_accum * engine.world_size
    losses = []
    with engine.evaluation():
        for b in range(min(args.eval_batches, len(val_set) // global_batch)):
            for micro in range(args.grad_accum):
                start = b * global_batch + (micro * engine.world_size + engine.rank) * args.micro_batch_size
                ids = val_set[start : start + args.micro_batch_size]["input_ids"][:, : args.seq_len].to(engine.device)
                losses.append(engine.forward(ids).loss.float())
    return engine.mean(torch.stack(losses).mean())


def save_final_model(engine, tokenizer, output_dir: Path) -> None:
    final, tmp = output_dir / "final", output_dir / ".tmp-final"
    if engine.is_main:
        shutil.rmtree(tmp, ignore_errors=True)
    engine.barrier()
    engine.save_model(tmp)
    if engine.is_main:
        tokenizer.save_pretrained(str(tmp))  # "next to the model": the folder loads with Auto classes alone
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
    engine.barrier()


def train_step(step, engine, train_set, plan, diagnostics, args) -> tuple[float, float, dict]:
    """One optimizer step (1-based `step`) over grad_accum micro-batches: (mean loss, grad norm, learning rates)."""
    diagnose = diagnostics.due(step)
    losses = []
    for micro in range(args.grad_accum):
        ids = train_set[plan.indices(step - 1, micro, engine.rank)]["input_ids"][:, : args.seq_len].to(engine.device)
        is_last = micro == args.grad_accum - 1
        with engine.micro_batch(is_last):
            with diagnostics.capture(diagnose):
                out = engine.forward(ids, output_attn_res_weights=diagnose)
                if diagnose:
                    diagnostics.add_weights(out.attn_res_weights)
            engine.backward(out.loss, is_last_micro_step=is_last)
        losses.append(out.loss.detach().float())
    if diagnose:
        diagnostics.record(step, engine.full_grad, engine.mean_tensor)
    lrs = engine.learning_rates()  # the rates this step used (the scheduler moves on in optimizer_step)
    grad_norm = engine.optimizer_step()
    return engine.mean(torch.stack(losses).mean()), grad_norm, lrs


def train(args) -> dict:
    """Run training; returns a summary (start and final step, last losses, output dir)."""
    from tqdm.auto import tqdm

    from .diagnostics import DepthDiagnostics
    from .engines import make_engine
    from .metrics import MetricsLogger
    from .optim import build_optimizer, build_scheduler

    world, config, train_set, val_set, tokenizer, folder = prepare(args)
    model = build_model(config, args)
    reinit_zero_embedding_rows(model, data_token_ids(train_set), seed=args.seed)  # a no-op unless rows are zero
    optimizer = build_optimizer(model, args)
    engine = make_engine(model, optimizer, build_scheduler(optimizer, args), args, world)
    output_dir, root = Path(args.output_dir), Path(args.output_dir) / "checkpoints"
    if engine.is_main:
        output_dir.mkdir(parents=True, exist_ok=True)
        remove_partial(root)
    engine.barrier()
    start_step = 0
    if folder is not None:
        engine.load(folder)
        start_step = read_state(folder)["step"]

    logger = MetricsLogger(output_dir, engine.is_main, start_step, tensorboard=not args.no_tensorboard)
    diagnostics = DepthDiagnostics(engine.module, output_dir, args.diagnostics_every, engine.is_main, start_step)
    plan = BatchPlan(len(train_set), args.micro_batch_size, args.grad_accum, engine.world_size, args.seed)
    progress = tqdm(total=args.max_steps, initial=start_step, disable=not engine.is_main, desc=f"train {config.attn_res_mode}")
    summary = dict(output_dir=str(output_dir), start_step=start_step, train_loss=None, val_loss=None)
    state = dict(signature=run_signature(args, config, world))
    started = time.time()

    for step in range(start_step + 1, args.max_steps + 1):
        loss, grad_norm, lrs = train_step(step, engine, train_set, plan, diagnostics, args)
        summary["train_loss"] = loss
        progress.update(1)
        progress.set_postfix(loss=f"{loss:.4f}")
        if step % args.log_every == 0 or step == args.max_steps:
            tokens_per_s = plan.global_batch * args.seq_len * (step - start_step) / (time.time() - started)
            logger.log(step, **{"train/loss": loss, "train/grad_norm": grad_norm, "train/tokens_per_s": tokens_per_s},
                       **{f"lr/{name}": lr for name, lr in lrs.items()})
        if args.eval_every and (step % args.eval_every == 0 or step == args.max_steps):
            summary["val_loss"] = evaluate(engine, val_set, args)
            logger.log(step, **{"val/loss": summary["val_loss"]})
        if (args.save_every and step % args.save_every == 0) or step == args.max_steps:
            save_checkpoint(root, step, state, engine.save, engine.is_main, engine.barrier, args.keep_checkpoints)
    progress.close()
    logger.close()

    if not args.no_final_model:
        save_final_model(engine, tokenizer, output_dir)
    if engine.is_main and args.diagnostics_every and (output_dir / "diagnostics.jsonl").is_file():
        from .plots import plot_runs

        plot_runs([output_dir], output_dir / "depth_diagnostics.png")
    summary["step"] = args.max_steps
    return summary
