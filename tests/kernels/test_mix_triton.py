"""The fused Triton mix (run by the Triton interpreter on CPU) against the PyTorch reference: forward, backward, fused
RMSNorm, recompute, dtypes, odd hidden sizes, 1 to 10 sources, dispatch and torch.compile."""
import pytest
import torch

import hf_attnres.kernels.mix as mix_ops
from hf_attnres.kernels.mix import attn_res, attn_res_lean, attn_res_naive, cpu_fused, rms_norm_naive
from tests.helpers.kernel_cases import bf16_ulps, make_inputs, run

CASES = [  # (sources, hidden, fused norm, recompute)
    (1, 48, False, False),
    (2, 64, True, False),
    (5, 96, False, True),
    (10, 48, True, True),
]


@pytest.mark.parametrize("n,hidden,fused,recompute", CASES)
def test_fp32_forward_and_backward_match_reference(n, hidden, fused, recompute):
    inputs = make_inputs(n, hidden, torch.float32)
    out, grads = run("triton", *inputs, fused, recompute)
    ref_out, ref_grads = run("reference", *inputs, fused)
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-5)
    for i, (got, want) in enumerate(zip(grads, ref_grads)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4, msg=lambda m: f"input {i}: {m}")


def test_many_row_blocks_with_a_ragged_last_one():
    """More row blocks than backward programs (each program strides over several) and a partial last block."""
    inputs = make_inputs(2, 48, torch.float32, shape=(3, 700))
    out, grads = run("triton", *inputs, True)
    ref_out, ref_grads = run("reference", *inputs, True)
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-5)
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n,hidden,fused,recompute", CASES[1:])
def test_bf16_within_one_ulp_and_gradients_as_accurate_as_reference(n, hidden, fused, recompute):
    inputs = make_inputs(n, hidden, torch.bfloat16)
    out, grads = run("triton", *inputs, fused, recompute)
    ref_out, ref_grads = run("reference", *inputs, fused)
    exact_out, exact_grads = run("reference", *inputs, fused, upcast=True)
    assert out.dtype == ref_out.dtype == torch.bfloat16
    # the interpreter truncates fp32 -> bf16 where torch rounds to nearest: one bf16 ulp per cast
    sources, query, norm_weight, out_norm_weight = inputs
    mixed = attn_res(sources, query, norm_weight, 1e-6, backend="triton")
    assert bf16_ulps(mixed, attn_res_naive(sources, query, norm_weight, 1e-6)) <= 1
    if fused:  # the norm casts twice, as transformers' module does: the normalised mix (1 ulp of it, so 2 ulps of the
        # product when a gain < 1 takes it a binade lower) and the gain product (1 ulp)
        assert bf16_ulps(out, rms_norm_naive(mixed, out_norm_weight, 1e-5)) <= 3
    for i, (got, ref, exact) in enumerate(zip(grads, ref_grads, exact_grads)):
        scale = exact.abs().max().item()
        kernel_error = (got.double() - exact).abs().max().item()
        reference_error = (ref.double() - exact).abs().max().item()
        assert kernel_error <= 2 * reference_error + 2**-7 * scale, (i, kernel_error, reference_error, scale)


def test_fp16_forward_matches_reference():
    sources, query, norm_weight, _ = make_inputs(3, 64, torch.float16)
    got = attn_res(sources, query, norm_weight, 1e-6, backend="triton")
    want = attn_res_naive(sources, query, norm_weight, 1e-6)
    assert got.dtype == torch.float16
    torch.testing.assert_close(got.float(), want.float(), rtol=2**-10, atol=2e-3)


def test_weights_and_stacked_sources_match_reference():
    sources, query, norm_weight, _ = make_inputs(4, 48, torch.float32)
    stacked = torch.stack([s.detach() for s in sources])
    mixed, probs = attn_res(stacked, query, norm_weight, 1e-6, return_weights=True, backend="triton")
    ref_mixed, ref_probs = attn_res_naive(stacked, query, norm_weight, 1e-6, return_weights=True)
    torch.testing.assert_close(mixed, ref_mixed, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(probs, ref_probs, rtol=1e-5, atol=1e-6)
    assert probs.shape == (2, 5, 4)


def test_sources_are_read_in_place_never_stacked(monkeypatch):
    inputs = make_inputs(3, 64, torch.float32)

    def forbidden(*args, **kwargs):
        raise AssertionError("the Triton path must read the sources through a pointer table, not a stack/cat")

    monkeypatch.setattr(torch, "stack", forbidden)
    monkeypatch.setattr(torch, "cat", forbidden)
    out, grads = run("triton", *inputs, True)
    assert out.shape == inputs[0][0].shape and len(grads) == 6


def saved_bytes(fn):
    total = 0

    def pack(tensor):
        nonlocal total
        total += tensor.numel() * tensor.element_size()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return total


def test_recompute_saves_only_the_inputs():
    sources, query, norm_weight, out_norm_weight = make_inputs(3, 64, torch.float32)
    inputs_bytes = sum(t.numel() * t.element_size() for t in (*sources, query, norm_weight, out_norm_weight))

    def forward(recompute):
        return lambda: attn_res(sources, query, norm_weight, 1e-6, backend="triton", out_norm_weight=out_norm_weight,
                                recompute=recompute)

    tokens, hidden = 10, 64
    assert saved_bytes(forward(True)) == inputs_bytes
    # default: plus the mix (model dtype) and one fp32 log-sum-exp per token
    assert saved_bytes(forward(False)) == inputs_bytes + tokens * hidden * 4 + tokens * 4


def test_dispatch(monkeypatch):
    sources, query, norm_weight, _ = make_inputs(3, 48, torch.float32)
    # CPU: the fused C++ kernel where it builds (tests/kernels/test_mix_cpu_fused.py), else the eager PyTorch path
    built = cpu_fused.load_extension() is not None
    torch_path = cpu_fused.attn_res_cpu(sources, query, norm_weight, 1e-6) if built else attn_res_lean(
        sources, query, norm_weight, 1e-6)
    assert torch.equal(attn_res(sources, query, norm_weight, 1e-6, backend="auto"), torch_path)
    assert not mix_ops.use_triton("auto", sources[0]) and mix_ops.use_triton("triton", sources[0])
    with pytest.raises(ValueError, match="backend must be one of"):
        attn_res(sources, query, norm_weight, 1e-6, backend="cuda")
    monkeypatch.setattr(mix_ops, "TRITON_AVAILABLE", False)
    with pytest.raises(ImportError, match="needs the triton package"):
        attn_res(sources, query, norm_weight, 1e-6, backend="triton")
    assert torch.equal(attn_res(sources, query, norm_weight, 1e-6, backend="auto"), torch_path)


def test_mismatched_sources_are_named():
    sources, query, norm_weight, _ = make_inputs(3, 48, torch.float32)
    with pytest.raises(ValueError, match=r"sources\[2\]"):
        attn_res([*sources[:2], sources[2][:, :3]], query, norm_weight, 1e-6, backend="triton")


def test_torch_compile_keeps_one_graph_through_the_custom_op():
    torch._dynamo.reset()
    sources, query, norm_weight, out_norm_weight = make_inputs(3, 64, torch.float32)

    def step(*sources):
        out = attn_res(list(sources), query, norm_weight, 1e-6, backend="triton", out_norm_weight=out_norm_weight)
        return (out * out).sum()

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")  # fullgraph: any graph break raises
    loss = compiled(*sources)
    grads = torch.autograd.grad(loss, [*sources, query, norm_weight, out_norm_weight])
    ref_loss = step(*sources)
    ref_grads = torch.autograd.grad(ref_loss, [*sources, query, norm_weight, out_norm_weight])
    torch.testing.assert_close(loss, ref_loss)
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want)


def test_rms_norm_reference_is_transformers_norm():
    from transformers.models.kimi_linear.modeling_kimi_linear import KimiLinearRMSNorm

    norm = KimiLinearRMSNorm(48, eps=1e-5).to(torch.bfloat16)
    with torch.no_grad():
        norm.weight.normal_()
    x = torch.randn(3, 48).to(torch.bfloat16)
    assert torch.equal(rms_norm_naive(x, norm.weight, 1e-5), norm(x))
