"""The mix's CPU paths against the reference (naive.py), one contract for each: the eager PyTorch path
(kernels/mix/lean.py, both of its schedules: source by source, or stacked for decode-sized inputs) and the fused C++
kernel (kernels/mix/cpu_fused.py). Forward, every gradient, fp32 and bf16, with and without the fused output norm,
the weights, stacked sources, what autograd keeps, a frozen source.

Tolerances: fp32 1e-5 (forward) / 1e-4 (gradients), as the Triton kernel: the paths compute a score as r * (v . w)
where the reference sums (v * r) * w, and accumulate source by source (the C++ kernel in 16 lanes), so results differ
by fp32 reassociation only. bf16: the forward within one bf16 ulp (all compute in fp32 and round once at the end), 3
with the fused norm, gradients at most 2x the reference's own error against float64.
"""
import pytest
import torch

import hf_attnres.kernels.mix as mix_ops
from hf_attnres.kernels.mix import attn_res, attn_res_naive, lean_ops, rms_norm_naive
from tests.helpers.kernel_cases import bf16_ulps, make_inputs, run


@pytest.fixture(params=["lean-loop", "lean-stacked", "cpp"])
def path(request, monkeypatch):
    """(backend name, the implementation that must serve each call, the list of those that did)."""
    monkeypatch.setattr(lean_ops, "SMALL_SOURCE_NUMEL", 0 if request.param == "lean-loop" else 10**9)
    served = []
    fused, eager = mix_ops.CPU_KERNEL["run"], mix_ops.attn_res_lean
    monkeypatch.setitem(mix_ops.CPU_KERNEL, "run", lambda *a, **k: served.append("cpp") or fused(*a, **k))
    monkeypatch.setattr(mix_ops, "attn_res_lean", lambda *a, **k: served.append("lean") or eager(*a, **k))
    backend, expected = ("cpp", "cpp") if request.param == "cpp" else ("torch", "lean")
    return backend, expected, served


@pytest.mark.parametrize("n,fused,hidden", [(1, False, 64), (2, True, 96), (5, False, 96), (7, True, 40),
                                            (3, True, 100)])
def test_fp32_forward_and_every_gradient_match_reference(n, fused, hidden, path):
    backend, expected, served = path
    inputs = make_inputs(n, hidden, torch.float32)  # widths off the 16-lane grid exercise the C++ tail loops
    out, grads = run(backend, *inputs, fused)
    ref_out, ref_grads = run("reference", *inputs, fused)
    assert served == [expected]
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-5)
    assert len(grads) == n + 2 + fused
    for i, (got, want) in enumerate(zip(grads, ref_grads)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4, msg=lambda m: f"input {i}: {m}")


@pytest.mark.parametrize("n,fused", [(2, True), (5, False), (4, True)])
def test_bf16_within_one_ulp_and_gradients_as_accurate_as_reference(n, fused, path):
    backend, expected, served = path
    inputs = make_inputs(n, 64, torch.bfloat16)
    out, grads = run(backend, *inputs, fused)
    ref_out, ref_grads = run("reference", *inputs, fused)
    exact_out, exact_grads = run("reference", *inputs, fused, upcast=True)
    assert out.dtype == torch.bfloat16 and served == [expected]
    sources, query, norm_weight, _ = inputs
    assert bf16_ulps(attn_res(sources, query, norm_weight, 1e-6, backend=backend),
                     attn_res_naive(sources, query, norm_weight, 1e-6)) <= 1
    assert bf16_ulps(out, ref_out) <= 3  # the fused norm: a 1-ulp different mix moves the normalised product
    for i, (got, ref, exact) in enumerate(zip(grads, ref_grads, exact_grads)):
        assert got.dtype == ref.dtype, i
        scale = exact.abs().max().item()
        error, reference_error = (got.double() - exact).abs().max().item(), (ref.double() - exact).abs().max().item()
        assert error <= 2 * reference_error + 2**-7 * scale, (i, error, reference_error, scale)


def test_no_grad_forward_is_bit_identical_to_training_forward(path):
    backend, _, _ = path
    sources, query, norm_weight, out_norm = make_inputs(5, 64, torch.float32)
    train = attn_res(sources, query, norm_weight, 1e-6, backend=backend, out_norm_weight=out_norm)
    with torch.no_grad():
        infer = attn_res(sources, query, norm_weight, 1e-6, backend=backend, out_norm_weight=out_norm)
    assert train.requires_grad and torch.equal(train, infer)


def test_weights_and_stacked_sources_match_reference(path):
    backend, expected, served = path
    sources, query, norm_weight, out_norm = make_inputs(4, 48, torch.float32)
    mixed, probs = attn_res(sources, query, norm_weight, 1e-6, return_weights=True, backend=backend,
                            out_norm_weight=out_norm, out_norm_eps=1e-5)
    ref_mixed, ref_probs = attn_res_naive(sources, query, norm_weight, 1e-6, return_weights=True)
    torch.testing.assert_close(mixed, rms_norm_naive(ref_mixed, out_norm, 1e-5), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(probs, ref_probs, rtol=1e-5, atol=1e-6)
    assert probs.shape == (2, 5, 4) and not probs.requires_grad
    stacked = torch.stack([s.detach() for s in sources])
    with torch.no_grad():
        mixed, probs = attn_res(stacked, query, norm_weight, 1e-6, return_weights=True, backend=backend)
    torch.testing.assert_close(mixed, ref_mixed)
    torch.testing.assert_close(probs, ref_probs, rtol=1e-5, atol=1e-6)
    assert served == [expected, expected]


def test_autograd_keeps_the_sources_by_reference_and_per_token_statistics_only(path):
    backend, _, _ = path
    n, tokens, hidden = 6, 10, 64
    sources, query, norm_weight, out_norm = make_inputs(n, hidden, torch.float32)
    source_ptrs = {s.data_ptr() for s in sources}
    saved = []

    def pack(tensor):
        saved.append(tensor)
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        attn_res(sources, query, norm_weight, 1e-6, backend=backend, out_norm_weight=out_norm, out_norm_eps=1e-5)
    new = [t for t in saved if t.data_ptr() not in source_ptrs]
    assert {t.data_ptr() for t in saved} >= source_ptrs  # the sources themselves, not copies
    # beside them: the three parameters and r, s, p ([n, tokens] each); the reference keeps n * tokens * hidden
    assert sum(t.numel() for t in new) == 3 * hidden + 3 * n * tokens, [tuple(t.shape) for t in new]


def test_a_source_without_gradient_leaves_the_other_gradients_exact(path):
    backend, _, _ = path
    sources, query, norm_weight, _ = make_inputs(3, 64, torch.float32, shape=(4, 40))
    frozen = [sources[0].detach(), *sources[1:]]
    out = attn_res(frozen, query, norm_weight, 1e-6, backend=backend)
    ref = attn_res_naive(frozen, query, norm_weight, 1e-6)
    grads = torch.autograd.grad(out.square().sum(), [*sources[1:], query])
    ref_grads = torch.autograd.grad(ref.square().sum(), [*sources[1:], query])
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
