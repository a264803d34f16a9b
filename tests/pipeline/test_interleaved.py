"""Interleaved pipeline with cross-stage caching (hf_attnres/pipeline/interleaved.py) on torch.distributed.pipelining.

- The transport plan sends, at every transition, exactly what the caching simulator (hf_attnres/pipeline/caching.py)
  counts: completed blocks the receiver lacks, plus the partial sum.
- Real runs (gloo, P = 2 and P = 4 processes, V = 2, two micro-batches, fp32): loss and every gradient equal the
  single-process model's (Kimi Linear, and a Llama Block AttnRes model at P = 2), caching on and off, block
  boundaries inside chunks and at chunk edges; the tensors and bytes the schedule's P2P sends actually carried,
  forward and backward, equal the plan and the simulator (P = 4, V = 2: the paper's six block sends saved).
"""
import json

import pytest
import torch.multiprocessing as mp

from hf_attnres.core.depth_layout import DepthLayout
from hf_attnres.pipeline.caching import simulate_interleaved
from hf_attnres.pipeline.interleaved import chunk_layers, expected_traffic, plan_chunks
from tests.helpers.interleaved_worker import MICRO_BATCH, SEQ_LEN, case_name, worker
from tests.helpers.ports import free_port

FP32 = 4


@pytest.mark.parametrize("stages,virtual,layers_per_chunk,block_size",
                         [(4, 2, 1, 2), (4, 2, 1, 3), (2, 2, 2, 3), (2, 2, 3, 2), (4, 2, 2, 3), (2, 3, 1, 4)])
def test_plan_sends_what_the_simulator_counts(stages, virtual, layers_per_chunk, block_size):
    layers = stages * virtual * layers_per_chunk
    report = simulate_interleaved(stages, virtual, layers_per_chunk, block_size)
    for caching in (True, False):
        plans = plan_chunks(DepthLayout("block", layers, block_size), stages, virtual, caching)
        for transition, plan in zip(report.transitions, plans[1:], strict=True):
            blocks = transition.sent_cached if caching else transition.sent_naive
            assert len(plan.received) == len(blocks) + (transition.partial is not None), (transition, plan)
            assert plan.rank == transition.rank and plan.virtual_stage == transition.virtual_stage


def test_paper_example_saves_six_block_sends():
    plans = {c: plan_chunks(DepthLayout("block", 8, 2), 4, 2, c) for c in (True, False)}
    sent = {c: sum(len(p.received) for p in plans[c]) for c in plans}
    assert sent[False] - sent[True] == 6 == simulate_interleaved(4, 2, 1, 2).naive_blocks - 13
    # a rank's later chunk reads the embedding (and what it received before) from its own store
    assert plans[True][4].cached == (0,) and plans[True][6].cached == (0, 1)


def test_chunks_split_layers_evenly():
    assert chunk_layers(7, 3) == [range(0, 3), range(3, 5), range(5, 7)]
    with pytest.raises(ValueError, match="chunks"):
        chunk_layers(3, 4)
    with pytest.raises(ValueError, match=">= 2 stages"):
        plan_chunks(DepthLayout("block", 4, 2), 1, 4)


def test_standard_mode_caches_nothing_and_full_mode_caches_every_source():
    # standard mode's single source is a running stream: never complete, so caching changes nothing
    standard = [plan_chunks(DepthLayout("standard", 4, 0), 2, 2, c) for c in (True, False)]
    assert standard[0] == standard[1] and all(len(p.received) == 1 for p in standard[0][1:])
    full = plan_chunks(DepthLayout("full", 4, 0), 2, 2, True)
    # chunk 2 (rank 0) kept the embedding, chunk 3 (rank 1) the 3 sources chunk 1 received
    assert full[2].cached == (0,) and full[3].cached == (0, 1, 2) and full[3].received == (3, 4, 5, 6)


def run_world(world: int, cases: list[dict], tmp_path) -> dict:
    mp.spawn(worker, args=(world, free_port(), str(tmp_path), cases), nprocs=world)
    results = {}
    for case in cases:
        ranks = [json.loads((tmp_path / f"{case_name(case)}-rank{r}.json").read_text()) for r in range(world)]
        results[case_name(case)] = ranks
    return results


def check_parity_and_traffic(case: dict, ranks: list[dict], world: int) -> dict:
    name = case_name(case)
    last = [r for r in ranks if "loss" in r]
    assert len(last) == 1, name
    assert last[0]["loss"] == pytest.approx(last[0]["ref_loss"], rel=1e-6, abs=0), name
    assert sum(r["params"] for r in ranks) > 0
    for rank, result in enumerate(ranks):
        assert not result["missing_grads"], (name, rank, result["missing_grads"])
        # fp32, same ops: only the summation order of a cached block's gradient differs
        assert result["max_grad_diff"] <= 1e-6 * result["max_grad"], (name, rank, result["worst_param"])
    measured = {key: row for r in ranks for key, row in r["traffic"].items()}
    plans = plan_chunks(DepthLayout(case["mode"], case["layers"], case["block_size"]), world, case["virtual"],
                        case["caching"])
    assert measured == expected_traffic(plans, MICRO_BATCH, SEQ_LEN, ranks[0]["hidden_size"], FP32), name
    if case["mode"] == "block" and case["layers"] % (world * case["virtual"]) == 0:
        report = simulate_interleaved(world, case["virtual"], case["layers"] // (world * case["virtual"]),
                                      case["block_size"])
        blocks = report.cached_blocks if case["caching"] else report.naive_blocks
        for direction in ("forward", "backward"):
            sent = sum(row["tensors"] for key, row in measured.items() if key.startswith(direction))
            assert sent == blocks + report.partial_sums, (name, direction)
    return measured


def sent_tensors(measured: dict, direction: str = "forward") -> int:
    return sum(row["tensors"] for key, row in measured.items() if key.startswith(direction))


@pytest.mark.slow
def test_two_stages_match_one_process(tmp_path):
    # block: 8 layers in 4 chunks of 2, blocks of 3 -> block 1 starts inside chunk 1, chunk 2 starts mid-block,
    # chunk 3 starts at a block boundary; full mode caches every sub-layer output
    cases = [dict(mode=mode, layers=layers, block_size=size, virtual=2, caching=caching)
             for mode, layers, size in (("block", 8, 3), ("full", 4, 0)) for caching in (True, False)]
    # another family: Llama's rotary embeddings rebuilt on each rank, the same block layout, cached
    cases.append(dict(family="llama", mode="block", layers=8, block_size=3, virtual=2, caching=True))
    # tied embeddings: rank 0's input embedding and rank 1's lm_head are one matrix, their gradients summed
    cases.append(dict(family="gemma3_text", mode="block", layers=4, block_size=2, virtual=2, caching=True))
    results = run_world(2, cases, tmp_path)
    measured = {name: check_parity_and_traffic(case, results[case_name(case)], 2)
                for case, name in zip(cases, map(case_name, cases))}
    assert sent_tensors(measured["block-L8-S3-naive"]) - sent_tensors(measured["block-L8-S3-cached"]) == 2
    assert sent_tensors(measured["full-L4-S0-naive"]) - sent_tensors(measured["full-L4-S0-cached"]) == 4
    assert sent_tensors(measured["llama-block-L8-S3-cached"]) == sent_tensors(measured["block-L8-S3-cached"])


@pytest.mark.slow
def test_four_stages_match_one_process_and_save_the_papers_six_sends(tmp_path):
    # the paper's Fig. 3: P = 4, V = 2, a layer per chunk, blocks of 2 (every block boundary at a chunk edge);
    # blocks of 3: chunks start mid-block too
    cases = [dict(mode="block", layers=8, block_size=2, virtual=2, caching=c) for c in (True, False)]
    cases.append(dict(mode="block", layers=8, block_size=3, virtual=2, caching=True))
    results = run_world(4, cases, tmp_path)
    measured = {case_name(case): check_parity_and_traffic(case, results[case_name(case)], 4) for case in cases}
    for direction in ("forward", "backward"):
        saved = sent_tensors(measured["block-L8-S2-naive"], direction) - sent_tensors(measured["block-L8-S2-cached"],
                                                                                     direction)
        assert saved == 6
    peak = max(row["tensors"] for row in measured["block-L8-S2-cached"].values())
    assert peak == 3  # 2 blocks + the partial sum (naive: 4 + 1)
    assert max(row["tensors"] for row in measured["block-L8-S2-naive"].values()) == 5
