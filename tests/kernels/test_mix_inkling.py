"""Inkling-2's depth mix: the reference (kernels/mix/inkling.py) against transformers' own
`Inkling2BlockAttentionResidual`, and the fused paths (the C++ kernel, Triton under the CPU interpreter) against the
reference, forward and the gradient of every input (bank, partial, queries), with normed and raw values, transformers'
scale and another, 1 to 4 queries and banks of 0 to 5 rows. Tolerances: fp32 1e-5 forward / 1e-4 of each gradient's
scale, floored at 1e-2 (reassociated fp32 sums only); bf16 inputs run the same fp32 math, so the fp32 output to 1e-5
and the gradients, rounded once to bf16, to 2^-7 of their scale."""
import pytest
import torch

from hf_attnres.kernels.mix import inkling_cpu
from hf_attnres.kernels.mix.inkling import attn_res_inkling_naive
from hf_attnres.kernels.mix.inkling_mix import attn_res_inkling

modeling = pytest.importorskip("transformers.models.inkling2.modeling_inkling2",
                               reason="transformers' Inkling-2 needs transformers >= 5.23")

CASES = [  # (bank rows, queries, normed values, scale: None = hidden**-0.5)
    (0, 1, True, None), (1, 3, True, None), (4, 3, True, None), (5, 1, False, None), (2, 4, False, 0.7),
]


def make_inputs(nb, nq, hidden, bank_dtype=torch.float32, partial_dtype=torch.float32, shape=(2, 5)):
    bank = (torch.randn(*shape, nb, hidden) * 3).to(bank_dtype).requires_grad_()
    partial = (torch.randn(*shape, hidden) * 3).to(partial_dtype).requires_grad_()
    queries = (torch.randn(nq, hidden) * 0.5).requires_grad_()
    return bank, partial, queries


def forward_backward(fn, bank, partial, queries):
    out = fn(bank, partial, queries)
    weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
    grads = torch.autograd.grad((out * weight).sum(), [bank, partial, queries], allow_unused=True)
    return out, grads


def assert_close(got, want, fp32=True):
    out, grads = got
    torch.testing.assert_close(out, want[0], rtol=1e-5, atol=1e-5)
    for i, (g, w) in enumerate(zip(grads, want[1])):
        assert g.dtype == w.dtype and g.shape == w.shape, i
        if w.numel():
            # a single row's softmax is constant: its query gradient is zero, so the scale has a floor
            error = (g.float() - w.float()).abs().max() / w.float().abs().max().clamp(min=1e-2)
            assert error <= (1e-4 if fp32 else 2**-7), (i, error.item())


@pytest.mark.parametrize("nq", [1, 3])
def test_the_reference_is_transformers_module(nq):
    """The reference against `Inkling2BlockAttentionResidual` itself (eager attention, fp32), forward and gradients."""
    config = modeling.Inkling2TextConfig(hidden_size=64)
    module = modeling.Inkling2BlockAttentionResidual(config, num_queries=nq)
    with torch.no_grad():
        module.query.normal_(0, 0.5)
    bank, partial, _ = make_inputs(3, nq, 64)
    want = forward_backward(lambda b, p, q: torch.stack(module(b, p), -2), bank, partial, module.query)
    got = forward_backward(lambda b, p, q: attn_res_inkling_naive(b, p, q), bank, partial, module.query)
    assert_close(got, want)


def test_the_reference_is_transformers_module_with_a_bf16_bank():
    """A bf16 model's bank is bf16 while the MLP's partial sum is fp32: both are upcast before the norm."""
    module = modeling.Inkling2BlockAttentionResidual(modeling.Inkling2TextConfig(hidden_size=64))
    with torch.no_grad():
        module.query.normal_(0, 0.5)
    bank, partial, _ = make_inputs(2, 1, 64, bank_dtype=torch.bfloat16)
    want = forward_backward(lambda b, p, q: module(b, p)[0].unsqueeze(-2), bank, partial, module.query)
    got = forward_backward(lambda b, p, q: attn_res_inkling_naive(b, p, q), bank, partial, module.query)
    assert_close(got, want)


def kernel(backend, normed, scale):
    return lambda b, p, q: attn_res_inkling(b, p, q, scale=scale, normed_values=normed, backend=backend)


def reference(normed, scale):
    return lambda b, p, q: attn_res_inkling_naive(b, p, q, scale=scale, normed_values=normed)


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("nb,nq,normed,scale", CASES)
def test_the_kernels_equal_the_reference_fp32(backend, nb, nq, normed, scale):
    inputs = make_inputs(nb, nq, 48 if backend == "triton" else 200)
    assert_close(forward_backward(kernel(backend, normed, scale), *inputs),
                 forward_backward(reference(normed, scale), *inputs))


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("dtypes", [(torch.bfloat16, torch.bfloat16), (torch.bfloat16, torch.float32)])
def test_the_kernels_equal_the_reference_bf16(backend, dtypes):
    inputs = make_inputs(3, 3, 64, *dtypes)
    assert_close(forward_backward(kernel(backend, True, None), *inputs),
                 forward_backward(reference(True, None), *inputs), fp32=False)


def test_the_cpu_kernel_serves_strided_inputs_through_a_copy(monkeypatch):
    """backend "cpp" runs the kernel on CPU inputs; a strided bank (the looped model's slice of its bank) and a
    channel-major partial (transformers' convolution output) are read through contiguous copies, same result."""
    served = []
    run = inkling_cpu.attn_res_inkling_cpu
    monkeypatch.setattr(inkling_cpu, "attn_res_inkling_cpu", lambda *a, **k: served.append("cpp") or run(*a, **k))
    bank, partial, queries = (t.detach() for t in make_inputs(4, 3, 64))
    strided_bank, channel_major = bank[..., 1:, :], partial.transpose(-1, -2).contiguous().transpose(-1, -2)
    got = attn_res_inkling(strided_bank, channel_major, queries, backend="cpp")
    assert served == ["cpp"] and not channel_major.is_contiguous()
    torch.testing.assert_close(got, attn_res_inkling_naive(strided_bank, partial, queries), rtol=1e-5, atol=1e-5)


def test_a_token_mixes_alike_whatever_the_batch_and_the_threads():
    """Per-token arithmetic: the last token of a prefill gets the bits of a one-token decode step, on any thread
    count."""
    bank, partial, queries = (t.detach() for t in make_inputs(3, 3, 96, shape=(2, 33)))
    full = attn_res_inkling(bank, partial, queries, backend="cpp")
    last = attn_res_inkling(bank[:, -1:].contiguous(), partial[:, -1:].contiguous(), queries, backend="cpp")
    assert torch.equal(full[:, -1:], last)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert torch.equal(attn_res_inkling(bank, partial, queries, backend="cpp"), full)
    finally:
        torch.set_num_threads(threads)


def test_the_cpu_kernel_keeps_no_output_for_the_backward():
    """Autograd keeps the inputs by reference and fp32 statistics of n and Q x n values per token, not the fp32
    [Q, d] output: the saved bytes beyond the inputs are a small fraction of one output."""
    bank, partial, queries = make_inputs(4, 3, 256)
    out = attn_res_inkling(bank, partial, queries, backend="cpp")
    saved = out.grad_fn.saved_tensors
    inputs = {t.data_ptr() for t in (bank, partial, queries)}
    extra = sum(t.numel() * t.element_size() for t in saved if t.data_ptr() not in inputs)
    assert extra < out.numel() * out.element_size() / 10, extra


def test_unknown_backend_is_refused():
    bank, partial, queries = make_inputs(1, 1, 8)
    with pytest.raises(ValueError, match="backend"):
        attn_res_inkling(bank, partial, queries, backend="cuda")
