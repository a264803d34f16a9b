"""The training recipe: one definition shared by every engine (`attnres train` in one process, DDP, ZeRO 1-3 and
FSDP2; the DeepSpeed pipeline `train-pipeline`; the interleaved pipeline `train-interleaved`), so switching engines
to scale out never changes what is trained.

What it fixes: AdamW with betas (0.9, 0.95) and eps 1e-8; three parameter groups (matrices decayed; norm gains,
biases and embeddings not; AttnRes pseudo-queries `*_res_proj` not, with an optional own peak LR); linear warmup then
cosine decay to `min_lr_ratio` of each group's peak (transformers' schedule, one step per optimizer update);
global gradient-norm clipping; the data order (`hf_attnres.training.data.BatchPlan`: a seeded permutation per epoch,
global batch = micro-batch x accumulation x data-parallel ranks, so a step reads the same sequences whatever the
engine). A run records `Recipe.record()` next to its settings.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch

RES_PROJ_SUFFIX = "_res_proj.weight"
RES_NORM_SUFFIX = "_res_norm.weight"
# the gated read's gates (hf_attnres.core.gated_read): trained and clipped with the pseudo-queries (both scale the read)
RES_GATE_SUFFIX = "_res_gate.weight"
BETAS, EPS = (0.9, 0.95), 1e-8
OPTIMIZERS = ("adamw", "sgd")
DATA_ORDER = ("BatchPlan (hf_attnres.training.data): seeded permutation per epoch, global batch = micro-batch x "
              "accumulation x data-parallel ranks")
# The flags of the recipe and their defaults (`attnres train`'s; the pipeline commands take the same flags)
DEFAULTS = dict(lr=3e-4, weight_decay=0.1, res_proj_lr=None, res_proj_weight_decay=0.0, warmup_steps=100,
                min_lr_ratio=0.1, grad_clip=1.0, attn_res_lr_multiplier=1.0, grad_clip_groups="global")
# How the gradient is clipped: one global L2 norm over every parameter, or each depth group by its own norm
CLIP_GROUPS = ("global", "per-group")
# The depth groups of a model, by parameter name: what per-group clipping and the per-group norms split
DEPTH_GROUPS = ("backbone", "queries", "key_norms")


def depth_group(name: str) -> str:
    """"queries" (`*_res_proj`, AttnRes pseudo-queries, and `*_res_gate`, the gated read's gates), "key_norms"
    (`*_res_norm`, the keys' RMSNorm gains) or "backbone" (everything else: what a standard model has)."""
    if name.endswith((RES_PROJ_SUFFIX, RES_GATE_SUFFIX)):
        return "queries"
    return "key_norms" if name.endswith(RES_NORM_SUFFIX) else "backbone"


def group_grad_norms(named_parameters, full=lambda tensor: tensor) -> dict[str, torch.Tensor]:
    """{depth group: L2 norm of its gradients} for the groups with a gradient (no entry for a group without one).
    `full`: a sharded square sum made whole (FSDP2's DTensors: a collective every process makes)."""
    squares: dict[str, list] = {}
    for name, param in named_parameters:
        if param.grad is not None:
            squares.setdefault(depth_group(name), []).append(full(param.grad.detach().float().pow(2).sum()))
    return {group: torch.stack(values).sum().sqrt() for group, values in squares.items()}


def clip_by_group(named_parameters, max_norm: float, per_group: bool) -> tuple[torch.Tensor, dict[str, float]]:
    """Clip the gradients in place; (the global norm before clipping, {depth group: its norm before clipping}).

    Global: one factor min(1, max_norm / global norm) for every gradient (torch's clip_grad_norm_). Per group: each
    depth group scaled by min(1, max_norm / its own norm), so the pseudo-queries' gradient (which dominates the global
    norm of a freshly upcycled model) never shrinks the backbone's update. `max_norm` 0 or inf: measure only."""
    named = [(n, p) for n, p in named_parameters if p.grad is not None]
    norms = group_grad_norms(named)
    total = torch.stack(list(norms.values())).pow(2).sum().sqrt() if norms else torch.zeros(())
    if max_norm and math.isfinite(max_norm):
        scales = ({g: torch.clamp(max_norm / (n + 1e-6), max=1.0) for g, n in norms.items()} if per_group
                  else dict.fromkeys(norms, torch.clamp(max_norm / (total + 1e-6), max=1.0)))
        for name, param in named:
            param.grad.detach().mul_(scales[depth_group(name)].to(param.grad.device, param.grad.dtype))
    return total, {g: float(n) for g, n in norms.items()}



@dataclass(frozen=True)
class Recipe:
    """Optimizer, parameter groups, schedule and clipping of a run of `max_steps` optimizer steps."""

    lr: float
    max_steps: int
    weight_decay: float = DEFAULTS["weight_decay"]
    res_proj_lr: float | None = None
    res_proj_weight_decay: float = 0.0
    warmup_steps: int = 0
    min_lr_ratio: float = DEFAULTS["min_lr_ratio"]
    grad_clip: float = DEFAULTS["grad_clip"]
    seed: int = 0
    optimizer: str = "adamw"  # "sgd" (plain, no momentum): only where a test compares gradients through updates
    attn_res_lr_multiplier: float = 1.0  # pseudo-queries' and key norms' peak LR over `lr` (res_proj_lr wins)
    grad_clip_groups: str = "global"  # CLIP_GROUPS

    @classmethod
    def from_args(cls, args, max_steps: int | None = None) -> Recipe:
        """From a command's flags (`max_steps`: the run's length where its flag has another name)."""
        return cls(lr=args.lr, max_steps=max_steps if max_steps is not None else args.max_steps,
                   weight_decay=args.weight_decay, res_proj_lr=getattr(args, "res_proj_lr", None),
                   res_proj_weight_decay=getattr(args, "res_proj_weight_decay", 0.0) or 0.0,
                   warmup_steps=getattr(args, "warmup_steps", 0), min_lr_ratio=getattr(args, "min_lr_ratio", 1.0),
                   grad_clip=getattr(args, "grad_clip", 0.0), seed=getattr(args, "seed", 0),
                   optimizer=getattr(args, "optimizer", "adamw"),
                   attn_res_lr_multiplier=getattr(args, "attn_res_lr_multiplier", None) or 1.0,
                   grad_clip_groups=getattr(args, "grad_clip_groups", None) or "global")

    def param_groups(self, named_parameters) -> list[dict]:
        """Three groups: decayed matrices, undecayed vectors (norm gains incl. `*_res_norm`, biases) and embeddings,
        AttnRes pseudo-queries; a fourth, the keys' norm gains `*_res_norm`, where `attn_res_lr_multiplier` gives the
        depth parameters a peak LR of their own (at 1 they stay among the vectors: the groups, and so the optimizer
        state a checkpoint holds, of a run without a multiplier are unchanged). `named_parameters`: (name, parameter)
        pairs under the full model's names or an engine's local ones (the rules read only the name's end and
        'embed').

        Pseudo-queries are [1, hidden] matrices but act like gains of the depth softmax: no weight decay (it would
        pull them to the uniform mix; `res_proj_weight_decay` sets one for a study arm), and their own learning rate
        when `res_proj_lr` is given."""
        decay, no_decay, queries, key_norms = [], [], [], []
        depth_lr = self.lr * self.attn_res_lr_multiplier
        for name, param in named_parameters:
            if not param.requires_grad:
                continue
            if name.endswith((RES_PROJ_SUFFIX, RES_GATE_SUFFIX)):
                queries.append(param)
            elif name.endswith(RES_NORM_SUFFIX) and self.attn_res_lr_multiplier != 1:
                key_norms.append(param)
            elif param.dim() >= 2 and "embed" not in name:
                decay.append(param)
            else:
                no_decay.append(param)
        groups = [
            dict(params=decay, lr=self.lr, weight_decay=self.weight_decay, name="decay"),
            dict(params=no_decay, lr=self.lr, weight_decay=0.0, name="no_decay"),
            dict(params=queries, lr=self.res_proj_lr or depth_lr, weight_decay=self.res_proj_weight_decay,
                 name="res_proj"),
            dict(params=key_norms, lr=depth_lr, weight_decay=0.0, name="res_norm"),
        ]
        return [g for g in groups if g["params"]]

    def build_optimizer(self, named_parameters) -> torch.optim.Optimizer:
        groups = self.param_groups(named_parameters)
        if self.optimizer == "sgd":
            return torch.optim.SGD(groups, lr=self.lr, foreach=False)
        # foreach=False: the same arithmetic on every backend, so every engine's runs stay comparable
        return torch.optim.AdamW(groups, betas=BETAS, eps=EPS, foreach=False)

    def build_scheduler(self, optimizer):
        """Linear warmup to each group's peak LR, cosine decay to `min_lr_ratio` of it at `max_steps`."""
        from transformers import get_cosine_with_min_lr_schedule_with_warmup

        return get_cosine_with_min_lr_schedule_with_warmup(
            optimizer, num_warmup_steps=self.warmup_steps, num_training_steps=self.max_steps,
            min_lr_rate=self.min_lr_ratio)

    def record(self) -> dict:
        """What a run records of its recipe (provenance): every setting, the fixed ones included."""
        fixed = dict(betas=list(BETAS), eps=EPS) if self.optimizer == "adamw" else dict(momentum=0.0)
        return dict(asdict(self), **fixed, schedule="linear warmup, cosine to min_lr_ratio (per optimizer update)",
                    groups={"decay": "matrices (dim >= 2) except embeddings and pseudo-queries",
                            "no_decay": "norm gains (incl. *_res_norm), biases, other vectors, embeddings",
                            "res_proj": "AttnRes pseudo-queries *_res_proj and gated-read gates *_res_gate (lr: "
                                        "res_proj_lr or lr x attn_res_lr_multiplier)",
                            "res_norm": "the keys' norm gains *_res_norm when attn_res_lr_multiplier != 1 (lr x "
                                        "attn_res_lr_multiplier)"},
                    grad_clip_rule=("global L2 norm over all parameters (0: off)" if self.grad_clip_groups == "global"
                                    else "each of backbone, pseudo-queries, key norms by its own L2 norm (0: off)"),
                    data_order=DATA_ORDER)


# The largest peak learning rate any parameter group may get: above it AdamW's first updates (about lr per element,
# whatever the gradient's scale) move every weight by more than the weights' own size
MAX_LR = 1.0
# The smallest: an AdamW update is about lr per element, lost in the rounding of any fp32 weight of a usual size
# (|w| > 1e-4, half an ulp 6e-12) below it, so a group at such a rate does not train
MIN_LR = 1e-12


def rate_problems(args) -> list[str]:
    """One line per recipe flag that gives a parameter group an absurd rate, named by the flag that makes it so: a
    group's peak LR outside [MIN_LR, MAX_LR] (the multiplier's product with --lr may overflow, or underflow to 0, from
    sane-looking factors), or weight decay taking lr x decay >= 1 of every weight per step (at 1 it zeroes the
    weights, above it flips their sign). Non-finite, negative or zero values are other checks' (left out here)."""
    lr, res_proj_lr = args.lr, getattr(args, "res_proj_lr", None)
    multiplier = getattr(args, "attn_res_lr_multiplier", None)
    decays = (("weight_decay", getattr(args, "weight_decay", None)),
              ("res_proj_weight_decay", getattr(args, "res_proj_weight_decay", None)))
    numbers = (lr, res_proj_lr, multiplier, *(decay for _, decay in decays))
    if lr is None or any(value is not None and not (math.isfinite(value) and value >= 0) for value in numbers) or \
            0 in (lr, res_proj_lr, multiplier):
        return []
    multiplier = 1.0 if multiplier is None else multiplier
    problems = [f"--{name.replace('_', '-')} must be in [{MIN_LR:g}, {MAX_LR:g}] (a peak learning rate), got "
                f"{value:g}" for name, value in (("lr", lr), ("res_proj_lr", res_proj_lr))
                if value is not None and not MIN_LR <= value <= MAX_LR]
    depth_lr = lr * multiplier
    if multiplier != 1 and MIN_LR <= lr <= MAX_LR and not MIN_LR <= depth_lr <= MAX_LR:
        problems.append(f"--attn-res-lr-multiplier {multiplier:g} gives the depth parameters a peak learning rate of "
                        f"{depth_lr:g} (--lr {lr:g} x it): it must be in [{MIN_LR:g}, {MAX_LR:g}]")
    group_lrs = dict(weight_decay=lr, res_proj_weight_decay=res_proj_lr or depth_lr)
    for name, decay in decays:
        if decay and group_lrs[name] <= MAX_LR and group_lrs[name] * decay >= 1:
            problems.append(f"--{name.replace('_', '-')} {decay:g} takes lr x decay = {group_lrs[name] * decay:g} of "
                            "every weight per step: it must stay below 1 (at 1 the weights are zeroed)")
    return problems


def check_recipe_args(args, steps: int) -> None:
    """SystemExit("error: ...") naming the flag, for recipe flags that cannot work (pipeline commands)."""
    for name in ("weight_decay", "res_proj_weight_decay", "grad_clip", "warmup_steps"):
        if getattr(args, name) < 0:
            raise SystemExit(f"error: --{name.replace('_', '-')} must be >= 0, got {getattr(args, name)}")
    for name in ("lr", "res_proj_lr"):
        if getattr(args, name) is not None and getattr(args, name) <= 0:
            raise SystemExit(f"error: --{name.replace('_', '-')} must be > 0, got {getattr(args, name)}")
    if not 0 <= args.min_lr_ratio <= 1:
        raise SystemExit(f"error: --min-lr-ratio must be in [0, 1], got {args.min_lr_ratio}")
    if args.warmup_steps > steps:
        raise SystemExit(f"error: --warmup-steps {args.warmup_steps} exceeds --steps {steps}")
    for problem in rate_problems(args):
        raise SystemExit(f"error: {problem}")


__all__ = ["Recipe", "check_recipe_args", "clip_by_group", "depth_group", "group_grad_norms",
           "rate_problems", "MAX_LR", "MIN_LR",
           "CLIP_GROUPS", "DEFAULTS", "DEPTH_GROUPS", "RES_NORM_SUFFIX", "RES_PROJ_SUFFIX", "BETAS", "EPS"]
