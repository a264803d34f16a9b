"""Workers for tests/pipeline/test_interleaved.py, started by `mp.spawn` on gloo (one launch per process count: the
start-up is the costly part on CPU). Every rank runs each case: one interleaved 1F1B step of a tiny fp32 model, then
compares its own chunks' gradients (and, on the last rank, the loss) with the single-process model it also builds,
and writes what it measured to `<out>/<case>-rank<r>.json` for the test to assert on.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import torch
import torch.distributed as dist

MICRO_BATCH, SEQ_LEN, N_MICRO = 2, 8, 2


def case_name(case: dict) -> str:
    family = case.get("family", "kimi_linear")
    prefix = "" if family == "kimi_linear" else f"{family}-"
    return prefix + "{mode}-L{layers}-S{block_size}-{cache}".format(**case,
                                                                    cache="cached" if case["caching"] else "naive")


def case_model(case: dict):
    """The case's tiny model (Kimi Linear unless the case names another `family`), AttnRes tensors perturbed."""
    from tests.helpers.model_factory import perturb_attn_res, tiny_model

    if case.get("family", "kimi_linear") == "kimi_linear":
        return tiny_model(case["mode"], case["block_size"], case["layers"]).train()
    from tests.families.tiny import attn_res_model

    model = attn_res_model(case["family"], case["mode"], case["block_size"], num_hidden_layers=case["layers"])
    return perturb_attn_res(model).train()


def reference(case: dict, ids: torch.Tensor):
    """Loss (mean over micro-batches) and gradients of the single-process model, as the schedule scales them."""
    model = case_model(case)
    losses = []
    for micro in ids.chunk(N_MICRO):
        loss = model(micro, labels=micro).loss
        (loss / N_MICRO).backward()
        losses.append(loss.detach())
    grads = {name: p.grad for name, p in model.named_parameters()}
    return torch.stack(losses).mean(), grads


def run_case(case: dict, rank: int, world: int, out: Path) -> None:
    from hf_attnres.pipeline.interleaved import build_interleaved
    from tests.helpers.model_factory import random_ids

    model = case_model(case)
    ids = random_ids(MICRO_BATCH * N_MICRO, SEQ_LEN, vocab=model.config.vocab_size, seed=3)
    pipe = build_interleaved(model, rank, world, case["virtual"], N_MICRO, MICRO_BATCH, SEQ_LEN, case["caching"])
    loss = pipe.step(ids, ids)
    ref_loss, ref_grads = reference(case, ids)
    grads = {name: p.grad for name, p in pipe.named_parameters().items()}
    worst = max(((g - ref_grads[name]).abs().max().item() if g is not None else float("inf"), name)
                for name, g in grads.items())
    result = {
        "params": len(grads),
        "missing_grads": [name for name, g in grads.items() if g is None],
        "max_grad_diff": worst[0], "worst_param": worst[1],
        "max_grad": max(g.abs().max().item() for g in ref_grads.values() if g is not None),
        "hidden_size": model.config.hidden_size,
        "traffic": pipe.traffic.per_microbatch(),
        "plans": [{"chunk": p.chunk, "received": list(p.received), "cached": list(p.cached)} for p in pipe.plans],
    }
    if loss is not None:
        result.update(loss=loss.item(), ref_loss=ref_loss.item())
    (out / f"{case_name(case)}-rank{rank}.json").write_text(json.dumps(result))
    dist.barrier()


def worker(rank: int, world: int, port: int, out: str, cases: list[dict]) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        for case in cases:
            run_case(case, rank, world, Path(out))
    finally:
        dist.destroy_process_group()


COPY = "copy"  # a `runs` entry [COPY, source, target]: rank 0 copies a folder (a checkpoint a killed run would leave)
TRUNCATE = "truncate"  # a `runs` entry [TRUNCATE, file]: rank 0 cuts the file to half its size (a damaged checkpoint)


def train_worker(rank: int, world: int, port: int, runs: list[list[str]]) -> None:
    """`attnres train-interleaved` with each argv of `runs` in turn, in one process group; writes each run's return
    value to `<its --output-dir>.rank<r>.json`. A [COPY, source, target] entry copies a folder between runs."""
    import shutil

    from hf_attnres.cli.train_interleaved import main

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        for argv in runs:
            if argv[0] in (COPY, TRUNCATE):
                if rank == 0 and argv[0] == COPY:
                    shutil.copytree(argv[1], argv[2])
                elif rank == 0:
                    os.truncate(argv[1], os.path.getsize(argv[1]) // 2)
                dist.barrier()
                continue
            try:
                result = main(argv)
            except SystemExit as refused:  # bad input: the test reads the one-line error
                result = {"error": str(refused)}
            out = Path(argv[argv.index("--output-dir") + 1])
            Path(f"{out}.rank{rank}.json").write_text(json.dumps(result if isinstance(result, int) else
                                                                 {k: v for k, v in result.items() if k != "traffic"}))
    finally:
        dist.destroy_process_group()
