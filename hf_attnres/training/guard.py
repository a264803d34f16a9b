"""The non-finite guard: a step whose loss or gradient norm is NaN/inf makes no update, is logged,
and a few such steps in a row stop the run with a clear error and exit code 3. A skipped step leaves weights and
optimizer state as they were and does not advance the learning-rate schedule (as DeepSpeed's and the HF Trainer's
overflow skips); its batch is consumed, so the data order stays a function of the step. Used by the train loop, its
engines and both pipeline trainers.
"""
from __future__ import annotations

import functools
import math

import torch

EXIT_CODE = 3  # scripts exit with it when the guard stops a run (1 is argparse / setup errors)


class NonFiniteError(RuntimeError):
    """Too many non-finite steps in a row: training stopped, no final model written."""


def is_finite(value) -> bool:
    return value is not None and math.isfinite(float(value))


def step_is_finite(loss, grad_norm, applied: bool = True) -> bool:
    """A step counts as finite when its loss and gradient norm (None: not measured) are, and the update was made."""
    return is_finite(loss) and (grad_norm is None or is_finite(grad_norm)) and applied


class NonFiniteGuard:
    """Counts non-finite steps in a row; `check` raises NonFiniteError at `limit` of them."""

    def __init__(self, limit: int):
        self.limit, self.in_row = limit, 0

    def check(self, step: int, loss, grad_norm, applied: bool = True) -> bool:
        """True when this step was non-finite (its update skipped). `grad_norm` None: not measured. `applied`: whether
        the engine made the update (DeepSpeed skips it by itself on a non-finite gradient norm)."""
        if step_is_finite(loss, grad_norm, applied):
            self.in_row = 0
            return False
        self.in_row += 1
        if self.in_row >= self.limit:
            raise NonFiniteError(
                f"step {step}: loss {loss:.4g}, gradient norm {_number(grad_norm)}: {self.in_row} non-finite steps in "
                f"a row (limit --max-nonfinite-steps {self.limit}); training stopped, no final model written (the "
                f"skipped steps made no update). Lower --lr, raise --warmup-steps or check the data")
        return True

    def message(self, step: int, loss, grad_norm) -> str:
        return (f"step {step}: non-finite loss {loss:.4g} / gradient norm {_number(grad_norm)}: update skipped "
                f"({self.in_row} in a row, stop at {self.limit})")


def _number(value) -> str:
    return "n/a" if value is None else f"{float(value):.4g}"


def grads_finite(params, group=None) -> bool:
    """Whether every gradient of `params` is finite, agreed across the process group `group` when distributed
    (pipeline stages hold different parameters: all must skip together)."""
    grads = [p.grad for p in params if p.grad is not None]
    bad = torch.stack([(~torch.isfinite(g)).any() for g in grads]).any().float() if grads else torch.zeros(())
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        bad = bad.reshape(1).to("cuda" if torch.cuda.is_available() else "cpu")
        torch.distributed.all_reduce(bad, op=torch.distributed.ReduceOp.MAX, group=group)
    return not bool(bad.item())


def skip_nonfinite_steps(optimizer, check_grads: bool, group=None):
    """Wrap a torch optimizer's `step` (before handing it to DeepSpeed): skip it when `optimizer.skip_requested` is set
    (a non-finite loss) or, with `check_grads`, when a gradient is non-finite. DeepSpeed ZeRO and its bf16 optimizer
    already skip on a non-finite norm; a plain fp32 optimizer (ZeRO stage 0) does not, hence `check_grads` there.
    `optimizer.overflow` tells DeepSpeed's engine that the step was skipped (no scheduler step, was_step_applied())."""
    step = optimizer.step
    optimizer.skip_requested, optimizer.overflow = False, False

    @functools.wraps(step)  # keeps torch's LR-scheduler marker on the method
    def guarded_step(*args, **kwargs):
        params = [p for group_ in optimizer.param_groups for p in group_["params"]]
        optimizer.overflow = optimizer.skip_requested or (check_grads and not grads_finite(params, group))
        return None if optimizer.overflow else step(*args, **kwargs)

    optimizer.step = guarded_step
    return optimizer
