"""The CUDA lane: the Triton mix compiled for the GPU against the PyTorch reference (`naive.py`), forward and the
gradient of every input (sources, pseudo-query, key-norm gain, fused output-norm gain), in fp32, bf16 and fp16, at
hidden 64 / 1000 / 2048 / 7168 (K3's width) and 2 / 9 / 49 sources, with and without the fused RMSNorm and recompute.

Low precision is judged as the CPU tests judge it: against the exact mix (float64), the kernel may be at most twice
as far off as the reference evaluated in the same dtype (plus 2^-7 of the gradient's scale)."""
import pytest
import torch

from hf_attnres.kernels.mix import attn_res, attn_res_naive
from tests.helpers.cuda_lane import CUDA_LANE
from tests.helpers.kernel_cases import make_inputs, run

pytestmark = CUDA_LANE

HIDDEN = [64, 1000, 2048, 7168]
SOURCES = [2, 9, 49]
SWITCHES = [(False, False), (True, False), (False, True), (True, True)]  # (fused norm, recompute)


def on_cuda(inputs):
    sources, query, norm_weight, out_norm_weight = inputs
    move = lambda t: t.detach().cuda().requires_grad_()  # noqa: E731
    return [move(s) for s in sources], move(query), move(norm_weight), move(out_norm_weight)


def cuda_inputs(n, hidden, dtype):
    return on_cuda(make_inputs(n, hidden, dtype, shape=(2, 3)))


def within_reference_accuracy(got, ref, exact, label):
    scale = exact.abs().max().item()
    kernel_error = (got.double() - exact).abs().max().item()
    reference_error = (ref.double() - exact).abs().max().item()
    assert kernel_error <= 2 * reference_error + 2**-7 * scale, (label, kernel_error, reference_error, scale)


@pytest.mark.parametrize("fused,recompute", SWITCHES)
@pytest.mark.parametrize("n", SOURCES)
@pytest.mark.parametrize("hidden", HIDDEN)
def test_fp32_forward_and_every_gradient(hidden, n, fused, recompute):
    inputs = cuda_inputs(n, hidden, torch.float32)
    out, grads = run("triton", *inputs, fused, recompute)
    ref_out, ref_grads = run("reference", *inputs, fused)
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-5)
    for i, (got, want) in enumerate(zip(grads, ref_grads)):
        scale = want.abs().max().item()
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4 * max(1.0, scale), msg=lambda m: f"input {i}: {m}")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("fused,recompute", [(False, False), (True, True)])
@pytest.mark.parametrize("n", SOURCES)
@pytest.mark.parametrize("hidden", HIDDEN)
def test_low_precision_as_accurate_as_reference(hidden, n, fused, recompute, dtype):
    inputs = cuda_inputs(n, hidden, dtype)
    out, grads = run("triton", *inputs, fused, recompute)
    ref_out, ref_grads = run("reference", *inputs, fused)
    exact_out, exact_grads = run("reference", *inputs, fused, upcast=True)
    assert out.dtype == dtype
    within_reference_accuracy(out, ref_out, exact_out, "output")
    for i, (got, ref, exact) in enumerate(zip(grads, ref_grads, exact_grads)):
        within_reference_accuracy(got, ref, exact, f"gradient of input {i}")


def test_weights_match_reference_at_k3_width():
    sources, query, norm_weight, _ = cuda_inputs(9, 7168, torch.bfloat16)
    mixed, probs = attn_res(sources, query, norm_weight, 1e-6, return_weights=True, backend="triton")
    ref_mixed, ref_probs = attn_res_naive(sources, query, norm_weight, 1e-6, return_weights=True)
    torch.testing.assert_close(probs, ref_probs, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(mixed.float(), ref_mixed.float(), rtol=2**-7, atol=2**-7)


def test_auto_backend_takes_triton_on_cuda(monkeypatch):
    import hf_attnres.kernels.mix as mix_ops

    calls = []
    original = mix_ops.use_triton
    monkeypatch.setattr(mix_ops, "use_triton", lambda backend, tensor: calls.append(original(backend, tensor))
                        or calls[-1])
    sources, query, norm_weight, _ = cuda_inputs(2, 64, torch.float32)
    attn_res(sources, query, norm_weight, 1e-6)
    assert calls and all(calls)
