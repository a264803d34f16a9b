"""The CUDA lane of Inkling-2's depth mix: the Triton kernels compiled for the GPU against the reference
(`inkling.attn_res_inkling_naive`), forward and the gradient of the bank, the partial and the queries, in fp32 and
bf16, at hidden 64 / 1024 / 4608 (Inkling-2's width), banks of 0 / 4 / 9 rows, 1 / 3 / 4 queries, normed and raw
values; and transformers' own tiny Inkling-2 on the kernels against its own forward, on the GPU.

Low precision is judged as tests/kernels/test_mix_cuda.py judges it: against the exact mix (float64), the kernel may
be at most twice as far off as the reference evaluated in the same dtype (plus 2^-7 of the scale)."""
import pytest
import torch

from hf_attnres.kernels.mix.inkling import attn_res_inkling_naive
from hf_attnres.kernels.mix.inkling_mix import attn_res_inkling
from tests.helpers.cuda_lane import CUDA_LANE

pytestmark = CUDA_LANE

HIDDEN = [64, 1024, 4608]
BANK_ROWS = [0, 4, 9]
QUERIES = [1, 3, 4]


def inputs(nb, nq, hidden, dtype):
    bank = (torch.randn(2, 37, nb, hidden, device="cuda") * 3).to(dtype).requires_grad_()
    partial = (torch.randn(2, 37, hidden, device="cuda") * 3).to(dtype).requires_grad_()
    queries = (torch.randn(nq, hidden, device="cuda") * 0.5).requires_grad_()
    return bank, partial, queries


def run(fn, bank, partial, queries):
    out = fn(bank, partial, queries)
    weight = torch.randn(out.shape, device="cuda", generator=torch.Generator("cuda").manual_seed(1))
    grads = torch.autograd.grad((out * weight).sum(), [bank, partial, queries], allow_unused=True)
    return [out, *grads]


def within_reference_accuracy(got, ref, exact, label):
    if exact.numel() == 0:
        return
    scale = max(exact.abs().max().item(), 1e-2)
    kernel_error = (got.double() - exact).abs().max().item()
    reference_error = (ref.double() - exact).abs().max().item()
    assert kernel_error <= 2 * reference_error + 2**-7 * scale, (label, kernel_error, reference_error, scale)


@pytest.mark.parametrize("normed", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("nq", QUERIES)
@pytest.mark.parametrize("nb", BANK_ROWS)
@pytest.mark.parametrize("hidden", HIDDEN)
def test_triton_on_cuda_matches_the_reference(hidden, nb, nq, dtype, normed):
    bank, partial, queries = inputs(nb, nq, hidden, dtype)
    got = run(lambda b, p, q: attn_res_inkling(b, p, q, normed_values=normed, backend="triton"), bank, partial, queries)
    ref = run(lambda b, p, q: attn_res_inkling_naive(b, p, q, normed_values=normed), bank, partial, queries)
    exact_inputs = [t.detach().double().requires_grad_() for t in (bank, partial, queries)]
    exact = run(lambda b, p, q: attn_res_inkling_naive(b, p, q, normed_values=normed).double(), *exact_inputs)
    for label, g, r, e in zip(("out", "bank", "partial", "queries"), got, ref, exact):
        within_reference_accuracy(g, r, e, label)


def test_transformers_inkling2_on_the_gpu_kernels():
    pytest.importorskip("transformers.models.inkling2", reason="transformers' Inkling-2 needs transformers >= 5.23")
    from tests.integrations.test_inkling2 import pair

    model, fused = pair("inkling2")
    model, fused = model.cuda(), fused.cuda()
    ids = torch.randint(0, 120, (2, 12), device="cuda")
    with torch.no_grad():
        torch.testing.assert_close(fused(ids).logits, model(ids).logits, rtol=1e-4, atol=1e-4)
