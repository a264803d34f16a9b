"""The PyTorch path (kernels/mix/lean.py, kernels/two_phase/lean.py) against the reference (naive.py): torch.compile,
the model in training (block and full mode) and the two-phase schedule's grown bank (phases, prefill, chunked prefill,
decode). The op's own contract (forward, every gradient, fp32 and bf16, what autograd keeps) is
tests/kernels/test_mix_pytorch_paths.py, shared with the C++ kernel.

Tolerances: fp32 1e-5 (forward) / 1e-4 (gradients), as the Triton kernel: the lean path computes a score as
r * (v . w) where the reference sums (v * r) * w, and it accumulates the mix source by source, so results differ by fp32
reassociation only. bf16: the forward within one bf16 ulp (both compute in fp32 and round once at the end, so only a
value straddling a rounding boundary can differ), gradients at most 2x the reference's own error against float64.
"""
import pytest
import torch
import torch._dynamo
from torch._dynamo.utils import counters

import hf_attnres.kernels.mix as mix_ops
from hf_attnres.kernels.mix import attn_res, attn_res_naive, rms_norm_naive
from hf_attnres.kernels.two_phase import phase1, phase1_naive
from hf_attnres.kernels.two_phase.lean import DepthBank
from tests.helpers.cache import cache_of
from tests.helpers.kernel_cases import make_inputs
from tests.helpers.model_factory import random_ids, tiny_model


def test_compiled_training_mix_is_one_graph_with_the_same_gradients():
    torch._dynamo.reset()
    counters.clear()
    sources, query, norm_weight, out_norm = make_inputs(3, 64, torch.float32)
    params = [*sources, query, norm_weight, out_norm]

    def step(*sources):
        out = attn_res(list(sources), query, norm_weight, 1e-6, backend="torch", out_norm_weight=out_norm)
        return (out * out).sum()

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")  # fullgraph: a graph break raises
    for _ in range(2):
        loss = compiled(*sources)
        grads = torch.autograd.grad(loss, params)
    want = torch.autograd.grad(step(*sources), params)
    for got, ref in zip(grads, want):
        torch.testing.assert_close(got, ref)
    assert counters["stats"]["unique_graphs"] == 1 and not counters["recompiles"]


def use_reference_mix(monkeypatch, calls):
    def reference(sources, query, norm_weight, eps, return_weights=False, out_norm_weight=None, out_norm_eps=1e-6):
        calls.append(len(sources))
        result = attn_res_naive(sources, query, norm_weight, eps, return_weights=return_weights)
        mixed, probs = result if return_weights else (result, None)
        if out_norm_weight is not None:
            mixed = rms_norm_naive(mixed, out_norm_weight, out_norm_eps)
        return (mixed, probs) if return_weights else mixed

    monkeypatch.setattr(mix_ops, "attn_res_lean", reference)


@pytest.mark.parametrize("mode,block_size", [("block", 2), ("full", 0)])
def test_model_training_step_equals_reference_mix(mode, block_size, monkeypatch):
    """Loss and every parameter's gradient; full mode: the growing tuple of sources is read in place at every mix."""
    model = tiny_model(mode, block_size, num_layers=4, attn_res_backend="torch").train()  # the eager path
    ids = random_ids(seq=8)

    def loss_and_grads():
        model.zero_grad(set_to_none=True)
        loss = model(ids, labels=ids, use_cache=False).loss
        loss.backward()
        return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}

    loss, grads = loss_and_grads()
    calls = []
    use_reference_mix(monkeypatch, calls)
    ref_loss, ref_grads = loss_and_grads()
    assert len(calls) == 8  # every mix point but the first (one source: no mix) ran the reference
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-5)
    assert grads.keys() == ref_grads.keys() and any("_res_proj" in name for name in grads)
    for name in grads:
        torch.testing.assert_close(grads[name], ref_grads[name], rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_grown_bank_phase1_equals_reference_phase1(dtype):
    g = torch.Generator().manual_seed(0)
    bank = [(torch.randn(2, 3, 48, generator=g) * (1 + j)).to(dtype) for j in range(4)]
    queries, norms = 0.4 * torch.randn(5, 48, generator=g), 1 + 0.2 * torch.randn(5, 48, generator=g)
    depth_bank = DepthBank(capacity=4, eps=1e-6)
    for size in range(1, 5):  # grown one source per block, as the schedule does; Phase 1 at every size
        depth_bank.extend(bank[:size])
        out, lse = phase1(depth_bank, queries, norms, 1e-6, backend="torch")
        ref_out, ref_lse = phase1_naive(bank[:size], queries, norms, 1e-6)
        assert out.shape == (5, 2, 3, 48) and lse.shape == (5, 2, 3)
        torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(lse, ref_lse, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="depth bank holds 4 sources, got 5"):
        depth_bank.extend([*bank, bank[0]])


def test_two_phase_chunked_prefill_and_decode_equal_plain_loop():
    """Two-phase on the PyTorch path (bank grown per forward) vs the plain per-point mix: chunked prefill, decode."""
    ids = random_ids(batch=2, seq=9)
    logits = {}
    for enabled in (True, False):
        model = tiny_model("block", 2, num_layers=5)
        model.config.attn_res_two_phase = enabled
        with torch.no_grad():
            prefill = model(ids[:, :8], use_cache=True, prefill_chunk_size=3)
            step = model(ids[:, 8:], cache=cache_of(prefill), use_cache=True)
        logits[enabled] = (prefill.logits, step.logits)
    torch.testing.assert_close(logits[True], logits[False], rtol=1e-4, atol=1e-4)


