"""Two-phase inference schedule: Phase 1 (bank) + Phase 2 (online-softmax merge) equals the one-shot mix, for both
backends, and the whole model's no-grad forward and decode equal the plain loop."""
import pytest
import torch

from hf_attnres.core import inference
from hf_attnres.kernels.mix import attn_res_naive, rms_norm_naive
from hf_attnres.kernels.two_phase import phase1, phase2
from tests.helpers.cache import cache_of
from tests.helpers.model_factory import random_ids, tiny_model


def make_bank(n, hidden, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    bank = [(torch.randn(2, 3, hidden, generator=g) * (1 + j)).to(dtype) for j in range(n)]
    partial = (3 * torch.randn(2, 3, hidden, generator=g)).to(dtype)
    queries = 0.4 * torch.randn(3, hidden, generator=g)
    norms = 1 + 0.2 * torch.randn(3, hidden, generator=g)
    return bank, partial, queries, norms


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("n,hidden", [(1, 48), (3, 96), (9, 64)])
def test_phases_equal_one_shot_mix(backend, n, hidden):
    bank, partial, queries, norms = make_bank(n, hidden, torch.float32)
    out, lse = phase1(bank, queries, norms, 1e-6, backend=backend)
    assert out.shape == (3, 2, 3, hidden) and lse.shape == (3, 2, 3) and out.dtype == torch.float32
    out_norm = (1 + 0.1 * torch.randn(hidden), 1e-5)
    for q in range(3):
        merged = phase2(out[q], lse[q], partial, queries[q], norms[q], 1e-6, torch.float32, backend=backend)
        want = attn_res_naive([*bank, partial], queries[q], norms[q], 1e-6)
        torch.testing.assert_close(merged, want, rtol=1e-5, atol=1e-5)
        bank_only = phase2(out[q], lse[q], None, queries[q], norms[q], 1e-6, torch.float32, backend=backend)
        torch.testing.assert_close(bank_only, attn_res_naive(bank, queries[q], norms[q], 1e-6), rtol=1e-5, atol=1e-5)
        normed = phase2(out[q], lse[q], partial, queries[q], norms[q], 1e-6, torch.float32, backend=backend,
                        out_norm=out_norm)
        torch.testing.assert_close(normed, rms_norm_naive(want, *out_norm), rtol=1e-5, atol=1e-5)


def test_triton_phases_bf16_match_reference_phases():
    bank, partial, queries, norms = make_bank(4, 96, torch.bfloat16)
    out, lse = phase1(bank, queries, norms, 1e-6, backend="triton")
    ref_out, ref_lse = phase1(bank, queries, norms, 1e-6, backend="torch")
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-5)  # fp32 state: no bf16 rounding yet
    torch.testing.assert_close(lse, ref_lse, rtol=1e-5, atol=1e-5)
    got = phase2(out[1], lse[1], partial, queries[1], norms[1], 1e-6, torch.bfloat16, backend="triton")
    want = attn_res_naive([*bank, partial], queries[1], norms[1], 1e-6)
    # one bf16 ulp: the interpreter truncates the final cast
    torch.testing.assert_close(got.float(), want.float(), rtol=2**-7, atol=2**-7)


def model_with_schedule(enabled, block_size, num_layers):
    model = tiny_model("block", block_size, num_layers=num_layers)
    model.config.attn_res_two_phase = enabled
    return model


# partial last block (5 = 2+2+1), one layer per block, one block for all layers, blocks of 3 over 7 layers
LAYOUTS = [(2, 5), (1, 3), (8, 5), (3, 7)]


@pytest.mark.parametrize("block_size,num_layers", LAYOUTS)
def test_model_two_phase_prefill_and_decode_equal_plain_loop(block_size, num_layers, monkeypatch):
    calls = []
    original = inference.TwoPhaseSchedule.run_phase1
    monkeypatch.setattr(inference.TwoPhaseSchedule, "run_phase1",
                        lambda self, block, bank: calls.append((block, len(bank))) or original(self, block, bank))
    ids = random_ids(batch=2, seq=6)
    results = {}
    for enabled in (True, False):
        model = model_with_schedule(enabled, block_size, num_layers)
        with torch.no_grad():
            prefill = model(ids[:, :4], use_cache=True)
            step = model(ids[:, 4:5], cache=cache_of(prefill), use_cache=True)
        results[enabled] = (prefill.logits, step.logits)
    torch.testing.assert_close(results[True], results[False], rtol=1e-4, atol=1e-4)  # fp32 rounding only
    blocks = -(-num_layers // block_size)
    # Phase 1 once per block and forward (prefill, decode), the bank = embedding + the completed blocks
    assert calls == [(b, b + 1) for b in range(blocks)] * 2


def test_schedule_follows_backend_unless_forced():
    model = tiny_model("block", 2)
    embeds = torch.zeros(1, 2, 64)
    with torch.no_grad():
        assert inference.two_phase_schedule(model, embeds, False) is None  # torch backend on CPU: plain loop
        model.config.attn_res_two_phase = True
        assert isinstance(inference.two_phase_schedule(model, embeds, False), inference.TwoPhaseSchedule)
        assert inference.two_phase_schedule(model, embeds, True) is None  # per-source weights need the plain loop
    assert inference.two_phase_schedule(model, embeds, False) is None  # a gradient is needed: plain loop
