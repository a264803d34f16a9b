"""AdamW parameter groups (no decay on norms/biases/pseudo-queries; an optional own LR for pseudo-queries) and the
warmup + cosine schedule, from transformers' scheduler library."""
from __future__ import annotations

import torch
from transformers import get_cosine_with_min_lr_schedule_with_warmup

RES_PROJ_SUFFIX = "_res_proj.weight"


def param_groups(model: torch.nn.Module, lr: float, weight_decay: float, res_proj_lr: float | None) -> list[dict]:
    """Three groups: decayed matrices, undecayed vectors (norm gains, biases), AttnRes pseudo-queries.

    Pseudo-queries are [1, hidden] matrices but act like gains of the depth softmax: no weight decay (it would pull
    them to the uniform mix), and their own learning rate when `res_proj_lr` is given.
    """
    decay, no_decay, queries = [], [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        if name.endswith(RES_PROJ_SUFFIX):
            queries.append(param)
        elif param.dim() >= 2 and "embed" not in name:
            decay.append(param)
        else:
            no_decay.append(param)
    groups = [
        dict(params=decay, lr=lr, weight_decay=weight_decay, name="decay"),
        dict(params=no_decay, lr=lr, weight_decay=0.0, name="no_decay"),
        dict(params=queries, lr=res_proj_lr or lr, weight_decay=0.0, name="res_proj"),
    ]
    return [g for g in groups if g["params"]]


def build_optimizer(model, args) -> torch.optim.Optimizer:
    groups = param_groups(model, args.lr, args.weight_decay, args.res_proj_lr)
    # foreach=False: the same arithmetic on every backend, so single-process, DDP and ZeRO runs stay comparable
    return torch.optim.AdamW(groups, betas=(0.9, 0.95), eps=1e-8, foreach=False)


def build_scheduler(optimizer, args):
    """Linear warmup to each group's peak LR, cosine decay to `min_lr_ratio` of it at `max_steps`."""
    return get_cosine_with_min_lr_schedule_with_warmup(
        optimizer, num_warmup_steps=args.warmup_steps, num_training_steps=args.max_steps, min_lr_rate=args.min_lr_ratio
    )
