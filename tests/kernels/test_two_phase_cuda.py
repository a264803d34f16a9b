"""The CUDA lane: the two-phase inference schedule's Triton kernels on the GPU (Phase 1 over a block's bank, Phase 2
merging the partial sum, optionally normed) equal the single-pass mix of the PyTorch reference, and the torch
backend's phases, in fp32 and bf16, up to K3's width; the whole model's no-grad forward with the schedule on equals
it off."""
import pytest
import torch

from hf_attnres.kernels.mix import attn_res_naive, rms_norm_naive
from hf_attnres.kernels.two_phase import phase1, phase2
from tests.helpers.cuda_lane import CUDA_LANE
from tests.helpers.model_factory import random_ids, tiny_model

pytestmark = CUDA_LANE


def make_bank(n, hidden, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    bank = [(torch.randn(2, 3, hidden, generator=g) * (1 + j)).to(dtype).cuda() for j in range(n)]
    partial = (3 * torch.randn(2, 3, hidden, generator=g)).to(dtype).cuda()
    queries = (0.4 * torch.randn(3, hidden, generator=g)).cuda()
    norms = (1 + 0.2 * torch.randn(3, hidden, generator=g)).cuda()
    return bank, partial, queries, norms


@pytest.mark.parametrize("n,hidden", [(1, 64), (3, 1000), (9, 2048), (8, 7168)])
def test_phases_equal_single_pass(n, hidden):
    bank, partial, queries, norms = make_bank(n, hidden, torch.float32)
    out, lse = phase1(bank, queries, norms, 1e-6, backend="triton")
    ref_out, ref_lse = phase1(bank, queries, norms, 1e-6, backend="torch")
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(lse, ref_lse, rtol=1e-5, atol=1e-5)
    out_norm = ((1 + 0.1 * torch.randn(hidden)).cuda(), 1e-5)
    for q in range(3):
        want = attn_res_naive([*bank, partial], queries[q], norms[q], 1e-6)
        merged = phase2(out[q], lse[q], partial, queries[q], norms[q], 1e-6, torch.float32, backend="triton")
        torch.testing.assert_close(merged, want, rtol=1e-5, atol=1e-4)
        normed = phase2(out[q], lse[q], partial, queries[q], norms[q], 1e-6, torch.float32, backend="triton",
                        out_norm=out_norm)
        torch.testing.assert_close(normed, rms_norm_naive(want, *out_norm), rtol=1e-5, atol=1e-4)


def test_bf16_phases_within_one_ulp_of_single_pass():
    bank, partial, queries, norms = make_bank(9, 2048, torch.bfloat16)
    out, lse = phase1(bank, queries, norms, 1e-6, backend="triton")
    got = phase2(out[1], lse[1], partial, queries[1], norms[1], 1e-6, torch.bfloat16, backend="triton")
    want = attn_res_naive([*bank, partial], queries[1], norms[1], 1e-6)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), want.float(), rtol=2**-7, atol=2**-7)


@pytest.mark.parametrize("block_size,num_layers", [(2, 5), (3, 7)])
def test_model_forward_with_the_schedule_equals_without(block_size, num_layers):
    ids = random_ids().cuda()
    logits = []
    for enabled in (False, True):
        model = tiny_model("block", block_size, num_layers=num_layers,
                           layer_types=["full_attention"] * num_layers).cuda()
        model.config.attn_res_two_phase = enabled
        with torch.no_grad():
            logits.append(model(ids, use_cache=False).logits)
    torch.testing.assert_close(logits[1], logits[0], rtol=1e-4, atol=1e-4)
