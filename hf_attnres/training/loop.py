"""The training loop of the train command: checks first, then model, engine, resume, steps, evals, checkpoints; the
optimizer and schedule it steps (the non-finite guard is `guard.py`).

Optimizer, parameter groups, schedule and clipping: the recipe every engine shares (`recipe.py`), recorded with the
run's settings.
"""
from __future__ import annotations

import contextlib
import shutil
import sys
import time
from pathlib import Path

import torch

from ..folders.atomic_io import move_into_place, recover_interrupted
from ..utils import finite_weights
from .args import SetupError, TrainArgs, fill_settings, given_settings, world_size
from .checkpoints import (
    check_written_weights,
    checkpoint_due,
    checkpoints_root,
    choose_checkpoint,
    remove_partial,
    resume_training,
    save_checkpoint,
    write_error,
    written_or_removed,
)
from .data import BatchPlan, batch_tensors, check_prepared, load_prepared, loss_normalizer
from .fsdp2 import fsdp_launch, shard_for_accelerate
from .guard import NonFiniteError, NonFiniteGuard, is_finite, step_is_finite
from .logs import data_fingerprint
from .models import (
    build_config,
    check_init_from,
    data_token_ids,
    init_config,
    init_tokenizer,
    load_model,
    model_class_of,
    reinit_zero_embedding_rows,
    saves_as_plain_family,
    write_plain_family_folder,
)
from .outputs import folder_bytes, plan_lines, say, show_bytes
from .recipe import RES_PROJ_SUFFIX, Recipe  # noqa: F401  (RES_PROJ_SUFFIX: importers take it from here too)
from .resume import check_resolved, check_restored_rates, continue_recorded, new_segment, run_record
from .state import check_checkpoint, check_not_foreign, is_rank_zero, output_lock

# --- optimizer and schedule: the recipe every engine shares (recipe.py) -----------------------------------------


def param_groups(model: torch.nn.Module, lr: float, weight_decay: float, res_proj_lr: float | None,
                 res_proj_weight_decay: float = 0.0) -> list[dict]:
    """The recipe's three groups (`Recipe.param_groups`): decayed matrices, undecayed vectors, pseudo-queries."""
    recipe = Recipe(lr=lr, max_steps=1, weight_decay=weight_decay, res_proj_lr=res_proj_lr,
                    res_proj_weight_decay=res_proj_weight_decay)
    return recipe.param_groups(model.named_parameters())


def build_optimizer(model, args) -> torch.optim.Optimizer:
    return Recipe.from_args(args, max_steps=getattr(args, "max_steps", 1)).build_optimizer(model.named_parameters())


def build_scheduler(optimizer, args):
    """Linear warmup to each group's peak LR, cosine decay to `min_lr_ratio` of it at `max_steps`."""
    return Recipe.from_args(args).build_scheduler(optimizer)


# --- the loop ---------------------------------------------------------------------------------------------------


def prepare(args: TrainArgs):
    """Every check that can fail on user input, before a model is built or a process group started."""
    try:
        return _prepare(args)
    except (ValueError, FileNotFoundError) as error:
        raise SetupError(str(error)) from error


def _prepare(args: TrainArgs):
    """(world size, config, splits, tokenizer, the checkpoint to resume or None, its trainer state or None, the run
    record). The flags a resume leaves out are filled from the recorded run first (`resume.py`), then checked."""
    world, given = world_size(), set(given_settings(args))  # the run flags on the command line (before a resume)
    if args.output_dir is None:  # named after the model: found with the flags as given (or defaulted), before a resume
        args.output_dir = _default_output_dir(args.copy())
    check_not_foreign(args.output_dir)  # a run writes only into a new or empty folder, or a run's own
    # never over a newer state (another run's, or a later checkpoint); a resume continues the recorded run
    folder, state = choose_checkpoint(args.resume, args.output_dir,
                                      lambda folder, state: continue_recorded(args, folder, state))
    if state is None:
        fill_settings(args)  # a fresh start: the defaults
    args.resolve_checkpoints(resuming=state is not None)
    meta = _checked_flags_and_data(args, world)
    if args.init_from is not None:
        say(f"checking the weights of --init-from {args.init_from}", is_rank_zero())
        finite_weights.check_folder(args.init_from)  # a NaN weight is named, never trained from
    say(f"loading --data {args.data}", is_rank_zero())
    train_set, val_set, tokenizer = load_prepared(args.data)
    config, tokenizer = _model_config(args, tokenizer)
    check_mode_flags(config, given, args)
    args.seq_len = args.seq_len or meta["seq_len"]
    record = run_record(args, config, world, data_fingerprint(args.data))
    if folder is not None:
        check_checkpoint(folder, deepspeed=args.deepspeed is not None)  # damaged files: one message naming them
        check_resolved(folder, state, record)
    return world, config, train_set, val_set, tokenizer, folder, state, record


def _checked_flags_and_data(args: TrainArgs, world: int) -> dict:
    """The prepared data's meta.json, once every flag and the data are checked: every problem found is reported
    together, one line each (a fix-and-rerun loop per problem is what this spares), before anything is loaded."""
    problems = []
    try:
        meta = check_prepared(args.data)
    except (ValueError, FileNotFoundError) as error:
        meta = None
        problems.append(str(error))
    problems += args.problems(meta, world)
    if problems:
        raise ValueError(problems[0] if len(problems) == 1 else
                         f"{len(problems)} problems:\n  " + "\n  ".join(problems))
    return meta


def check_mode_flags(config, given: set[str], args: TrainArgs) -> None:
    """Flags the model's residual mode makes meaningless (the mode from --attn-res, --config or --init-from)."""
    mode = config.attn_res_mode
    origin = "--attn-res" if args.attn_res is not None else "--config" if args.config else \
        "--init-from" if args.init_from else "--model-size"
    if "block_size" in given and mode != "block":
        raise ValueError(f"--block-size {args.block_size} cannot be combined with a {mode} model ({origin} "
                         f"{getattr(args, origin[2:].replace('-', '_'))}): blocks exist in block mode only")
    layers = getattr(config, "num_hidden_layers", None)
    if "block_size" in given and isinstance(layers, int) and args.block_size > layers:
        raise ValueError(f"--block-size {args.block_size} exceeds the model's {layers} decoder layers ({origin} "
                         f"{getattr(args, origin[2:].replace('-', '_'))}): one block already holds every layer")
    for name in ("res_proj_lr", "res_proj_weight_decay", "attn_res_lr_multiplier"):
        if name in given and mode == "standard":
            raise ValueError(f"--{name.replace('_', '-')} cannot be combined with a standard model ({origin} "
                             f"{getattr(args, origin[2:].replace('-', '_'))}): it has no pseudo-queries")


def _model_config(args: TrainArgs, tokenizer):
    """(config, tokenizer) of the run: fine-tuning takes both from --init-from (hf_attnres/training/models.py)."""
    if args.init_from is not None:
        tokenizer = init_tokenizer(args.init_from, tokenizer, args.data, args.trust_remote_code)
        return init_config(args.init_from, args.attn_res, args.block_size, tokenizer), tokenizer
    return build_config(args.model_size, args.config, args.attn_res, args.block_size, tokenizer,
                        args.family), tokenizer


def _default_output_dir(args: TrainArgs) -> Path:
    """runs/<model name>-<residual>, from a copy of the flags (a resume then fills the real ones)."""
    fill_settings(args)
    check_init_from(args)
    check_prepared(args.data)
    config, _ = _model_config(args, load_prepared(args.data)[2])
    name = (f"finetune-{Path(args.init_from).name}" if args.init_from
            else args.model_size if args.config is None else args.config.stem)
    if args.family is not None and args.config is None and args.init_from is None:
        name = f"{args.family}-{name}"
    return Path("runs") / f"{name}-{config.attn_res_mode}"


def build_model(config, args):
    from transformers import set_seed

    set_seed(args.seed)  # same init on every process (DDP and ZeRO then start from identical weights)
    model = load_model(args.init_from, config) if args.init_from else model_class_of(config)(config)
    if args.gradient_checkpointing:
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    return model


def eval_bar(total: int, desc: str, engine):
    """A progress bar over an evaluation's batches (main process only; it goes when done: the line that matters is
    the logged loss)."""
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="batch", leave=False, disable=engine.rank != 0)


def evaluate(engine, val_set, args) -> float:
    """Mean loss over the first eval_batches global batches of validation (a global batch as in training: micro-batch
    x accumulation x processes). The same sequences at every eval, whatever the process count or accumulation:
    rank r reads the slices a training step would give it."""
    global_batch = args.micro_batch_size * args.grad_accum * engine.world_size
    losses = []
    batches = min(args.eval_batches, len(val_set) // global_batch)
    with engine.evaluation(), eval_bar(batches * args.grad_accum, "validation", engine) as bar:
        for b in range(batches):
            for micro in range(args.grad_accum):
                start = b * global_batch + (micro * engine.world_size + engine.rank) * args.micro_batch_size
                ids, labels = batch_tensors(val_set, slice(start, start + args.micro_batch_size), args.seq_len,
                                            engine.device)
                losses.append(engine.forward(ids, labels).loss.float())
                bar.update(1)
    return engine.mean(torch.stack(losses).mean())


def eval_sequences(val_set, args, world_size: int) -> int:
    """How many validation sequences `evaluate` reads: the first eval_batches global batches (a subsample when the
    split is longer; logged beside each val/loss as val/sequences)."""
    global_batch = args.micro_batch_size * args.grad_accum * world_size
    return min(args.eval_batches, len(val_set) // global_batch) * global_batch


def evaluate_whole(engine, val_set, args) -> float:
    """Mean loss per target token over the whole validation split, the last partial batch included: the held-out
    metric every report uses (evaluate's first eval_batches global batches are a subsample of it). Process r reads
    micro-batches r, r + world_size, ...; every process makes the same number of forward passes (ZeRO-3 gathers
    weights collectively), one without a batch of its own re-reading the first with weight 0."""
    mbs, world = args.micro_batch_size, engine.world_size
    batches = -(-len(val_set) // mbs)
    total = torch.zeros((), dtype=torch.float64)
    tokens = torch.zeros((), dtype=torch.float64)
    rounds = -(-batches // world)
    with engine.evaluation(), eval_bar(rounds, f"held-out loss, {len(val_set)} sequences", engine) as bar:
        for i in range(rounds):
            index = i * world + engine.rank
            rows = slice(index * mbs, (index + 1) * mbs) if index < batches else slice(0, mbs)
            ids, labels = batch_tensors(val_set, rows, args.seq_len, engine.device)
            count = (labels[:, 1:] != -100).sum().cpu() * (index < batches)  # the targets of the shifted loss
            total += engine.forward(ids, labels).loss.double().cpu() * count
            tokens += count
            bar.update(1)
    # the mean over processes of (sum, count) is (total / world, tokens / world): their ratio is the global mean
    reduced = engine.mean_tensor(torch.stack([total, tokens]))
    return float(reduced[0] / reduced[1])


FINAL_BUILD = ".tmp-final"  # one name every process agrees on (the model is saved collectively)


def save_final_model(engine, tokenizer, output_dir: Path, write_info, plain_family: bool = False) -> None:
    """Build final/ beside it (model, tokenizer, `write_info(folder)`: training_info.json), then swap it in with
    `move_into_place`: the old final/ steps aside before the new one takes the name, so a kill at any moment leaves
    one complete model at final/ or beside it (`clean_run_folder` puts it back). `plain_family`: written as the
    family's own folder (`models.saves_as_plain_family`)."""
    final, tmp = output_dir / "final", output_dir / FINAL_BUILD
    say(f"writing the final weights to {final}", engine.is_main)
    if engine.is_main:
        shutil.rmtree(tmp, ignore_errors=True)
    engine.barrier()
    with written_or_removed(tmp, final) if engine.is_main else contextlib.nullcontext():
        engine.save_model(tmp)
        if engine.is_main:
            check_written_weights(sorted(tmp.glob("*.safetensors")), final)  # never NaN weights over a finite final/
            if plain_family:
                write_plain_family_folder(tmp, engine.module.config)
            tokenizer.save_pretrained(str(tmp))  # "next to the model": the folder loads with Auto classes alone
            write_info(tmp)
            move_into_place(tmp, final, replace=True)  # this run's own (`run_folder.py`)
    say(f"wrote {final} ({show_bytes(folder_bytes(final))})", engine.is_main)
    engine.barrier()


def clean_run_folder(output_dir: Path) -> None:
    """What a killed run left in its folder: half-written checkpoints and final model builds go, a final/ caught
    mid-swap is settled (the old one back if the new one never arrived). Main process, under the output lock."""
    remove_partial(checkpoints_root(output_dir))
    recover_interrupted(output_dir / FINAL_BUILD)  # save_pretrained's own build folder inside a killed final save
    shutil.rmtree(output_dir / FINAL_BUILD, ignore_errors=True)
    recover_interrupted(output_dir / "final")


def train_step(step, engine, train_set, plan, diagnostics, args: TrainArgs) -> tuple[float, float | None, dict, bool]:
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


def train(args: TrainArgs, argv: list[str] | None = None) -> dict:
    """Run training; returns a summary (start and final step, last losses, output dir). `argv`: the command line,
    for the provenance (None: sys.argv)."""
    prepared = prepare(args)
    with output_lock(args.output_dir, enabled=is_rank_zero()):  # one run per output folder
        try:
            return run(args, *prepared, argv=sys.argv[1:] if argv is None else argv)
        except OSError as error:  # a log or plot write failed (checkpoints and final/ name their own folder)
            failure = write_error(Path(args.output_dir), error)
            if failure is None:
                raise
            raise failure from None


def run(args: TrainArgs, world, config, train_set, val_set, tokenizer, folder, state, record, argv) -> dict:
    """The training itself, once `prepare` has checked everything and the output folder is locked."""
    from tqdm.auto import tqdm

    from .engines import make_engine
    from .logs import DepthDiagnostics, MetricsLogger

    say(f"building the model{f' from --init-from {args.init_from}' if args.init_from else ''}", is_rank_zero())
    model = build_model(config, args)
    reinit_zero_embedding_rows(model, data_token_ids(train_set), seed=args.seed)  # a no-op unless rows are zero
    if fsdp_launch():  # accelerate launch with FSDP2: one unit per decoder layer, before the optimizer (fsdp2.py)
        model = shard_for_accelerate(model, cpu=not torch.cuda.is_available())
    optimizer = build_optimizer(model, args)
    engine = make_engine(model, optimizer, build_scheduler(optimizer, args), args, world)
    output_dir, root = Path(args.output_dir), checkpoints_root(args.output_dir)
    if engine.is_main:
        output_dir.mkdir(parents=True, exist_ok=True)
        clean_run_folder(output_dir)
    engine.barrier()
    if folder is not None:
        say(f"resuming from {folder} (step {state['step']}): loading the weights and optimizer state", engine.is_main)
    start_step = resume_training(engine, folder, state)
    if folder is not None:  # the rates the restored optimizer state trains with are the ones recorded
        check_restored_rates(engine, folder, args)
    for line in plan_lines(args, engine.module, output_dir):
        say(line, engine.is_main)
    segments = [*(state or {}).get("segments", []), new_segment(start_step, argv, record["data_fingerprint"])]

    def checkpoint_state(step: int) -> dict:  # the run record and its segments, this one ending at `step`
        return dict(record, segments=[*segments[:-1], dict(segments[-1], end_step=step)])

    logger = MetricsLogger(output_dir, engine.is_main, start_step, tensorboard=not args.no_tensorboard)
    diagnostics = DepthDiagnostics(engine.module, output_dir, args.diagnostics_every, engine.is_main, start_step)
    plan = BatchPlan(len(train_set), args.micro_batch_size, args.grad_accum, engine.world_size, args.seed)
    progress = tqdm(total=args.max_steps, initial=start_step, disable=not engine.is_main,
                    desc=f"train {config.attn_res_mode}")
    summary = dict(output_dir=str(output_dir), start_step=start_step, train_loss=None, val_loss=None)
    started = time.time()

    guard = NonFiniteGuard(args.max_nonfinite_steps)
    for step in range(start_step + 1, args.max_steps + 1):
        loss, grad_norm, lrs, applied = train_step(step, engine, train_set, plan, diagnostics, args)
        finite = check_finite(guard, step, loss, grad_norm, applied, logger, progress)
        summary["train_loss"] = loss if finite else summary["train_loss"]
        progress.update(1)
        progress.set_postfix(loss=f"{loss:.4f}")
        if step == args.max_steps:
            progress.close()  # its clock stops at the last step: the final evaluation and writes have their own lines
        if finite and (step % args.log_every == 0 or step == args.max_steps):
            tokens_per_s = plan.global_batch * args.seq_len * (step - start_step) / (time.time() - started)
            logger.log(step, **{"train/loss": loss, "train/grad_norm": grad_norm, "train/tokens_per_s": tokens_per_s},
                       **{f"lr/{name}": lr for name, lr in lrs.items()},
                       **{f"grad_norm/{group}": norm for group, norm in engine.group_norms.items()})
        if args.eval_every and (step % args.eval_every == 0 or step == args.max_steps):
            summary["val_loss"] = evaluate(engine, val_set, args)
            scalars = {"val/loss": summary["val_loss"],
                      "val/sequences": eval_sequences(val_set, args, engine.world_size)}
            if step == args.max_steps:  # the final model on the whole split: what every report compares
                summary["heldout_loss"] = evaluate_whole(engine, val_set, args)
                scalars.update({"val/heldout_loss": summary["heldout_loss"], "val/heldout_sequences": len(val_set)})
            logger.log(step, **scalars)
        if args.checkpoints == "resumable" and checkpoint_due(step, args.save_every, args.max_steps):
            say(f"writing checkpoint step {step} to {root}", engine.is_main)
            saved = save_checkpoint(root, step, checkpoint_state(step), engine, args.keep_checkpoints)
            say(f"checkpoint {saved} ({show_bytes(folder_bytes(saved))}; {root} holds "
                f"{show_bytes(folder_bytes(root))})", engine.is_main)
    progress.close()
    logger.close()

    if not args.no_final_model:
        from .logs import write_training_info  # tokens trained, data fingerprint, settings, segments (provenance)

        final_state = checkpoint_state(args.max_steps)
        save_final_model(engine, tokenizer, output_dir, lambda folder: write_training_info(
            folder, args, plan.global_batch, args.max_steps, final_state),
            plain_family=saves_as_plain_family(args.init_from, engine.module.config))
    if engine.is_main and args.diagnostics_every and (output_dir / "diagnostics.jsonl").is_file():
        from .logs import plot_runs

        plot_runs([output_dir], output_dir / "depth_diagnostics.png")
    summary["step"] = args.max_steps
    return summary
