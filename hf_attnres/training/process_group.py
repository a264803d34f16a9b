"""A training run's process group is ended while Python is still alive.

A gloo group left for interpreter shutdown can abort a process whose run succeeded: its worker threads may still
hold finished work objects whose tensors are freed while Python is finalizing, and the process dies with SIGABRT
("terminate called without an active exception"), so the launcher reports a failure. Ending the group at the end of
each run is no cure: a second run in the same process (a script or a test running several trainings) would start a
new group over the same rendezvous store, where the old group's keys make gloo's connection setup hang. So a run
reuses the group it finds, and the group is ended once, by an exit hook.

Invariant: after `start_process_group` or `end_process_group_at_exit`, the default group, if it still exists when
the process exits normally (a return or SystemExit), is destroyed by an `atexit` hook. On an uncaught exception it
is left alone: destroying it while another rank may be inside a collective could hang instead of failing.
"""
from __future__ import annotations

import atexit
import sys
from collections.abc import Callable

import torch
import torch.distributed as dist

_hook = []  # the registered exit hook, at most one


def start_process_group(start: Callable[[str], object]) -> bool:
    """Call `start(backend)` unless a default process group exists (nccl with CUDA, else gloo); return whether it
    did. Either way the group is ended at exit (`end_process_group_at_exit`)."""
    started = not dist.is_initialized()
    if started:
        start("nccl" if torch.cuda.is_available() else "gloo")
    end_process_group_at_exit()
    return started


def end_process_group_at_exit() -> None:
    """Register (once) the exit hook that destroys the default process group, for a group a library started."""
    if not _hook:
        _hook.append(_end)
        atexit.register(_end)


def _end() -> None:
    if getattr(sys, "last_exc", None) is not None or getattr(sys, "last_value", None) is not None:
        return  # the interpreter printed an uncaught exception: this rank is failing, leave the group
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


__all__ = ["end_process_group_at_exit", "start_process_group"]
