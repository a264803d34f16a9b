"""One run of a continued-training grid: the source model as the run's arm (standard, upcycled, or upcycled with a
frozen backbone), trained in this process with the training recipe (hf_attnres.training.recipe: AdamW, warmup, cosine,
clipping) on the prepared corpus in the seed's data order (hf_attnres.training.data.BatchPlan: the same order for every
arm at a seed), then evaluated on the whole held-out split.

A run folder keeps `trainable.safetensors` (the tensors the run trained: all of them, or a frozen arm's queries and
key norms), which with the source and the arm rebuild the trained model (`restore_model`), `diagnostics.jsonl` (the
last step's depth diagnostics, AttnRes arms) and `result.json`, written atomically last.
"""
from __future__ import annotations

import math
import time
from contextlib import nullcontext
from pathlib import Path

import torch

from ...families.upcycle import BLOCK_SIZE_MODES, is_attn_res_tensor, upcycle
from ...folders.atomic_io import atomic_write, write_json_atomic
from ..grid import RunKey
from ..runner import RESULT_FILE, run_spec
from .config import ContinuedGrid

TRAINABLE_FILE = "trainable.safetensors"


def arm_model(cg: ContinuedGrid, mode: str, block_size: int, frozen: bool = False):
    """The source model as an arm: its own (standard), or upcycled to `mode`; `frozen`: only the AttnRes tensors
    train. Float32 weights on the grid's device."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(cg.folder, dtype=torch.float32)
    if mode != "standard":
        model = upcycle(model, mode, block_size=block_size if mode in BLOCK_SIZE_MODES else None)
    if frozen:
        for name, parameter in model.named_parameters():
            parameter.requires_grad_(is_attn_res_tensor(name))
    return model.to(cg.continued["device"])


def key_model(cg: ContinuedGrid, key: RunKey):
    return arm_model(cg, key.mode, key.block_size, frozen=key.arm in cg.continued["frozen_arms"])


def restore_model(cg: ContinuedGrid, key: RunKey, run_dir: Path):
    """The trained model of a finished run: the arm rebuilt from the source, its trained tensors loaded."""
    from safetensors.torch import load_file

    model = key_model(cg, key)
    trained = load_file(str(Path(run_dir) / TRAINABLE_FILE), device=cg.continued["device"])
    missing = set(trained) - {name for name, _ in model.named_parameters()}
    if missing:
        raise ValueError(f"{run_dir / TRAINABLE_FILE}: tensors the arm does not have: {sorted(missing)[:3]}")
    model.load_state_dict(trained, strict=False)
    return model.eval()


def autocast(cg: ContinuedGrid):
    if cg.continued["dtype"] == "bfloat16":
        return torch.autocast(cg.continued["device"], dtype=torch.bfloat16)
    return nullcontext()


def heldout(cg: ContinuedGrid, model, data_dir: Path, name: str) -> dict:
    """Loss and bits per byte on the whole held-out split (hf_attnres.evaluation.heldout: one item per sequence)."""
    from ...evaluation.heldout import heldout_metrics

    was_training = model.training
    model.eval()
    with autocast(cg):
        # model_dir only names the progress bar: the model is given (no tokenizer.json there to compare)
        metrics = heldout_metrics(Path(name), data_dir, model=model, batch_size=cg.continued["eval_batch_size"],
                                  progress=False)
    model.train(was_training)
    return metrics


def train_run(cg: ContinuedGrid, key: RunKey, out: Path, meta: dict, threads: int = 1) -> dict:
    """Train one run and write its record; the study's runner calls it (run_grid's `runner`). A write that fails (a
    full disk) is one message naming the run and the file."""
    try:
        return _train_run(cg, key, out, meta, threads)
    except OSError as error:
        raise RuntimeError(f"{key.id}: {error.strerror or error} writing {error.filename or out / 'runs' / key.id} "
                           "(free space and rerun: finished runs are kept)") from None


def _train_run(cg: ContinuedGrid, key: RunKey, out: Path, meta: dict, threads: int = 1) -> dict:
    from ...training.data import BatchPlan, load_prepared
    from ...training.logs import DepthDiagnostics
    from ...training.recipe import Recipe, clip_by_group

    torch.set_num_threads(threads)
    run_dir = out / "runs" / key.id
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "diagnostics.jsonl").unlink(missing_ok=True)  # an interrupted attempt is redone from scratch
    grid, c, t = cg.grid, cg.continued, cg.grid.train
    data_dir = Path(grid.data["dir"])
    train_set, _, _ = load_prepared(data_dir)
    torch.manual_seed(key.seed)
    model = key_model(cg, key).train()
    arm = grid.arms[key.arm]["train"]
    recipe = Recipe(lr=key.lr, max_steps=t["max_steps"], weight_decay=c["weight_decay"],
                    warmup_steps=arm.get("warmup_steps", t["warmup_steps"]),
                    min_lr_ratio=c["min_lr_ratio"], grad_clip=c["grad_clip"], seed=key.seed,
                    attn_res_lr_multiplier=arm.get("attn_res_lr_multiplier", 1.0),
                    grad_clip_groups=c["grad_clip_groups"])
    optimizer = recipe.build_optimizer(model.named_parameters())
    scheduler = recipe.build_scheduler(optimizer)
    plan = BatchPlan(len(train_set), t["micro_batch_size"], t["grad_accum"], 1, key.seed)
    seq_len = t["seq_len"] or meta["seq_len"]
    diagnostics = (DepthDiagnostics(model, run_dir, t["max_steps"], True, 0) if key.mode != "standard" else None)
    trainable = [p for p in model.parameters() if p.requires_grad]
    curve, group_norms, started = [], [], time.time()
    for step in range(1, t["max_steps"] + 1):
        loss = train_step(cg, model, train_set, plan, step, seq_len, diagnostics)
        norm, norms = clip_by_group(model.named_parameters(), c["grad_clip"] or math.inf,
                                    per_group=recipe.grad_clip_groups == "per-group")
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        curve.append([step, round(loss, 5), round(float(norm), 5)])
        group_norms.append({g: round(n, 5) for g, n in norms.items()})
    wall = time.time() - started
    save_trainable(model, run_dir / TRAINABLE_FILE)
    metrics = heldout(cg, model, data_dir, key.id)
    tokens = t["max_steps"] * plan.global_batch * seq_len
    record = dict(id=key.id, spec=run_spec(grid, key), **key.to_dict(), val_loss=metrics["loss"],
                  heldout_loss=metrics["loss"], heldout_bpb=metrics["bpb"], heldout_sequences=metrics["sequences"],
                  item_loss=metrics["item_loss"], train_curve=curve, train_loss=curve[-1][1], tokens=tokens,
                  train_s=round(wall, 1), tokens_per_s=round(tokens / wall, 1),
                  trainable_params=sum(p.numel() for p in trainable), metric="whole-split",
                  grad_norms_by_group=group_norms, query_norms=query_norms(model),
                  finished=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    write_json_atomic(run_dir / RESULT_FILE, record)
    return record


def train_step(cg, model, train_set, plan, step: int, seq_len: int, diagnostics) -> float:
    """Forward and backward of one optimizer step's micro-batches (1-based `step`); the mean loss. The depth
    diagnostics (the paper's Figure 5 view) are captured on the last step."""
    from ...training.data import batch_tensors

    diagnose = diagnostics is not None and diagnostics.due(step)
    losses = []
    for micro in range(plan.grad_accum):
        ids, labels = batch_tensors(train_set, plan.indices(step - 1, micro, 0), seq_len, cg.continued["device"])
        with diagnostics.capture(diagnose) if diagnostics is not None else nullcontext(), autocast(cg):
            kwargs = dict(output_attn_res_weights=True) if diagnose else {}
            out = model(input_ids=ids, labels=labels, **kwargs)
            if diagnose:
                diagnostics.add_weights(out.attn_res_weights)
        (out.loss / plan.grad_accum).backward()
        losses.append(float(out.loss.detach()))
    if diagnose:
        diagnostics.record(step, lambda p: p.grad, lambda x: x)
    return sum(losses) / len(losses)


def query_norms(model) -> list[float]:
    """The L2 norm of each pseudo-query, in the model's parameter order (one per mix point; all 0 at upcycling):
    how far the depth mixing moved from the uniform mix it starts at. Empty for a standard model."""
    from ...training.recipe import RES_PROJ_SUFFIX

    return [round(float(p.detach().float().norm()), 6) for n, p in model.named_parameters()
            if n.endswith(RES_PROJ_SUFFIX)]


def save_trainable(model, path: Path) -> None:
    """The tensors the run trained, written beside and renamed (a crash leaves no half file)."""
    from safetensors.torch import save_file

    tensors = {n: p.detach().cpu().contiguous() for n, p in model.named_parameters() if p.requires_grad}
    atomic_write(path, lambda tmp: save_file(tensors, str(tmp)))
