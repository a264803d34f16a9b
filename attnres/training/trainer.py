"""The training loop of scripts/train.py: checks first, then model, engine, resume, steps, evals, checkpoints."""
from __future__ import annotations

import shutil
import time
from pathlib import Path

import torch

from .args import SetupError, check_args, world_size
from .batches import BatchPlan, batch_tensors, check_prepared, load_prepared, loss_normalizer
from .checkpoint import latest_checkpoint, read_state, remove_partial, save_checkpoint
from .embedding_repair import data_token_ids, reinit_zero_embedding_rows
from .init_from import init_config, init_tokenizer, load_model
from .models import build_config
from .nonfinite import NonFiniteError, NonFiniteGuard, is_finite, step_is_finite
from .resume_files import check_checkpoint
from .run_lock import is_rank_zero, output_lock



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
    if args.init_from is not None:  # fine-tuning: model and tokenizer from the folder (attnres/training/init_from.py)
        tokenizer = init_tokenizer(args.init_from, tokenizer, args.data)
        config = init_config(args.init_from, args.attn_res, args.block_size, tokenizer)
    else:
        config = build_config(args.model_size, args.config, args.attn_res, args.block_size, tokenizer)
    if args.output_dir is None:
        name = (f"finetune-{Path(args.init_from).name}" if args.init_from
                else args.model_size if args.config is None else args.config.stem)
        args.output_dir = Path("runs") / f"{name}-{config.attn_res_mode}"
    args.seq_len = args.seq_len or meta["seq_len"]
    return world, config, train_set, val_set, tokenizer, checked_resume_folder(args, config, world)


def run_signature(args, config, world: int) -> dict:
    return dict(attn_res=config.attn_res_mode, block_size=config.attn_res_block_size, model_size=args.model_size,
                config=str(args.config), micro_batch_size=args.micro_batch_size, grad_accum=args.grad_accum,
                world_size=world, seed=args.seed, seq_len=args.seq_len,
                **({"init_from": str(args.init_from)} if args.init_from else {}))


def build_model(config, args):
    from transformers import set_seed

    from ..modeling_attnres import KimiLinearAttnResForCausalLM

    set_seed(args.seed)  # same init on every process (DDP and ZeRO then start from identical weights)
    model = load_model(args.init_from, config) if args.init_from else KimiLinearAttnResForCausalLM(config)
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
    check_checkpoint(folder, deepspeed=args.deepspeed is not None)  # damaged files: one message naming them
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
                ids, labels = batch_tensors(val_set, slice(start, start + args.micro_batch_size), args.seq_len, engine.device)
                losses.append(engine.forward(ids, labels).loss.float())
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


def train_step(step, engine, train_set, plan, diagnostics, args) -> tuple[float, float | None, dict, bool]:
    """One optimizer step (1-based `step`) over grad_accum micro-batches: (mean loss, grad norm or None where not
    measured, learning rates, whether the update was made: not when the loss or gradient norm is non-finite)."""
    diagnose = diagnostics.due(step)
    losses = []
    batches = [batch_tensors(train_set, plan.indices(step - 1, micro, engine.rank), args.seq_len, engine.device)
               for micro in range(args.grad_accum)]
    normalizer = loss_normalizer(batches, engine, args.grad_accum)  # a loss mask: the global token mean
    for micro, (ids, labels) in enumerate(batches):
        is_last = micro == args.grad_accum - 1
        with engine.micro_batch(is_last):
            with diagnostics.capture(diagnose):
                out = engine.forward(ids, labels, output_attn_res_weights=diagnose, **normalizer)
                if diagnose:
                    diagnostics.add_weights(out.attn_res_weights)
            engine.backward(out.loss, is_last_micro_step=is_last)
        losses.append(out.loss.detach().float())
    if diagnose:
        diagnostics.record(step, engine.full_grad, engine.mean_tensor)
    lrs = engine.learning_rates()  # the rates this step used (the scheduler moves on in optimizer_step)
    loss = engine.mean(torch.stack(losses).mean())  # the same on every process: all skip a non-finite step together
    grad_norm, applied = engine.optimizer_step(loss_finite=is_finite(loss))
    return loss, grad_norm, lrs, applied


def check_finite(guard, step, loss, grad_norm, applied, logger, progress) -> bool:
    """Whether the step was finite; logs a skipped one (JSONL record + message). At the guard's limit, closes the logs
    and raises NonFiniteError."""
    finite = step_is_finite(loss, grad_norm, applied)
    if not finite:
        logger.log(step, **{"skipped/nonfinite": 1, "skipped/loss": loss, "skipped/grad_norm": grad_norm})
    try:
        guard.check(step, loss, grad_norm, applied)
    except NonFiniteError:
        progress.close()
        logger.close()
        raise
    if not finite:
        progress.write(guard.message(step, loss, grad_norm))
    return finite


def train(args) -> dict:
    """Run training; returns a summary (start and final step, last losses, output dir)."""
    prepared = prepare(args)
    with output_lock(args.output_dir, enabled=is_rank_zero()):  # one run per output folder
        return run(args, *prepared)


def run(args, world, config, train_set, val_set, tokenizer, folder) -> dict:
    """The training itself, once `prepare` has checked everything and the output folder is locked."""
    from tqdm.auto import tqdm

    from .diagnostics import DepthDiagnostics
    from .engines import make_engine
    from .metrics import MetricsLogger
    from .optim import build_optimizer, build_scheduler

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

    guard = NonFiniteGuard(args.max_nonfinite_steps)
    for step in range(start_step + 1, args.max_steps + 1):
        loss, grad_norm, lrs, applied = train_step(step, engine, train_set, plan, diagnostics, args)
        finite = check_finite(guard, step, loss, grad_norm, applied, logger, progress)
        summary["train_loss"] = loss if finite else summary["train_loss"]
        progress.update(1)
        progress.set_postfix(loss=f"{loss:.4f}")
        if finite and (step % args.log_every == 0 or step == args.max_steps):
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
        if engine.is_main:  # tokens trained and data fingerprint, for attnres.evaluation's matched-pair check
            from .provenance import write_training_info

            write_training_info(output_dir / "final", args, plan.global_batch, args.max_steps, state["signature"])
    if engine.is_main and args.diagnostics_every and (output_dir / "diagnostics.jsonl").is_file():
        from .plots import plot_runs

        plot_runs([output_dir], output_dir / "depth_diagnostics.png")
    summary["step"] = args.max_steps
    return summary
