"""The training recipe: one definition shared by every engine (`attnres train` in one process, DDP, ZeRO 1-3 and
FSDP2; the DeepSpeed pipeline `train-pipeline`; the interleaved pipeline `train-interleaved`), so switching engines
to scale out never changes what is trained.

What it fixes: AdamW with betas (0.9, 0.95) and eps 1e-8; three parameter groups (matrices decayed; norm gains,
biases and embeddings not; AttnRes pseudo-queries `*_res_proj` not, with an optional own peak LR); linear warmup then
cosine decay to `min_lr_ratio` of each group's peak (transformers' schedule, one step per optimizer update);
global gradient-norm clipping; the data order (`attnres.training.data.BatchPlan`: a seeded permutation per epoch,
global batch = micro-batch x accumulation x data-parallel ranks, so a step reads the same sequences whatever the
engine). A run records `Recipe.record()` next to its settings.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

RES_PROJ_SUFFIX = "_res_proj.weight"
BETAS, EPS = (0.9, 0.95), 1e-8
OPTIMIZERS = ("adamw", "sgd")
DATA_ORDER = ("BatchPlan (attnres.training.data): seeded permutation per epoch, global batch = micro-batch x "
              "accumulation x data-parallel ranks")
# The flags of the recipe and their defaults (`attnres train`'s; the pipeline commands take the same flags)
DEFAULTS = dict(lr=3e-4, weight_decay=0.1, res_proj_lr=None, res_proj_weight_decay=0.0, warmup_steps=100,
                min_lr_ratio=0.1, grad_clip=1.0)


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

    @classmethod
    def from_args(cls, args, max_steps: int | None = None) -> Recipe:
        """From a command's flags (`max_steps`: the run's length where its flag has another name)."""
        return cls(lr=args.lr, max_steps=max_steps if max_steps is not None else args.max_steps,
                   weight_decay=args.weight_decay, res_proj_lr=getattr(args, "res_proj_lr", None),
                   res_proj_weight_decay=getattr(args, "res_proj_weight_decay", 0.0) or 0.0,
                   warmup_steps=getattr(args, "warmup_steps", 0), min_lr_ratio=getattr(args, "min_lr_ratio", 1.0),
                   grad_clip=getattr(args, "grad_clip", 0.0), seed=getattr(args, "seed", 0),
                   optimizer=getattr(args, "optimizer", "adamw"))

    def param_groups(self, named_parameters) -> list[dict]:
        """Three groups: decayed matrices, undecayed vectors (norm gains incl. `*_res_norm`, biases) and embeddings,
        AttnRes pseudo-queries. `named_parameters`: (name, parameter) pairs under the full model's names or an
        engine's local ones (the rules read only the name's end and 'embed').

        Pseudo-queries are [1, hidden] matrices but act like gains of the depth softmax: no weight decay (it would
        pull them to the uniform mix; `res_proj_weight_decay` sets one for a study arm), and their own learning rate
        when `res_proj_lr` is given."""
        decay, no_decay, queries = [], [], []
        for name, param in named_parameters:
            if not param.requires_grad:
                continue
            if name.endswith(RES_PROJ_SUFFIX):
                queries.append(param)
            elif param.dim() >= 2 and "embed" not in name:
                decay.append(param)
            else:
                no_decay.append(param)
        groups = [
            dict(params=decay, lr=self.lr, weight_decay=self.weight_decay, name="decay"),
            dict(params=no_decay, lr=self.lr, weight_decay=0.0, name="no_decay"),
            dict(params=queries, lr=self.res_proj_lr or self.lr, weight_decay=self.res_proj_weight_decay,
                 name="res_proj"),
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
                            "res_proj": "AttnRes pseudo-queries *_res_proj (lr: res_proj_lr or lr)"},
                    grad_clip_rule="global L2 norm over all parameters (0: off)", data_order=DATA_ORDER)


def add_recipe_args(group, lr: float, warmup_steps: int) -> None:
    """The recipe's flags for the pipeline commands, with `attnres train`'s meaning (their own LR and warmup
    defaults: their default runs are a few steps of a tiny model)."""
    group.add_argument("--lr", type=float, default=lr, help=f"peak learning rate (default {lr})")
    group.add_argument("--res-proj-lr", type=float, default=None,
                       help="peak learning rate of the AttnRes pseudo-queries (*_res_proj); default: --lr")
    group.add_argument("--res-proj-weight-decay", type=float, default=DEFAULTS["res_proj_weight_decay"],
                       help="weight decay of the pseudo-queries (default 0)")
    group.add_argument("--weight-decay", type=float, default=DEFAULTS["weight_decay"],
                       help=f"AdamW weight decay on matrices; norms, biases, embeddings and pseudo-queries get none "
                            f"(default {DEFAULTS['weight_decay']})")
    group.add_argument("--warmup-steps", type=int, default=warmup_steps,
                       help=f"linear warmup steps (default {warmup_steps})")
    group.add_argument("--min-lr-ratio", type=float, default=DEFAULTS["min_lr_ratio"],
                       help=f"cosine floor as a fraction of the peak (default {DEFAULTS['min_lr_ratio']})")
    group.add_argument("--grad-clip", type=float, default=DEFAULTS["grad_clip"],
                       help=f"global gradient norm clip, 0 = off (default {DEFAULTS['grad_clip']})")


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


__all__ = ["Recipe", "add_recipe_args", "check_recipe_args", "DEFAULTS", "RES_PROJ_SUFFIX", "BETAS", "EPS"]
