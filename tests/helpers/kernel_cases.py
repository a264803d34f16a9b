"""Inputs and runners shared by the mix-kernel tests (tests/kernels/)."""
import torch

from hf_attnres.kernels.mix import attn_res, attn_res_naive, rms_norm_naive


def make_inputs(n, hidden, dtype, seed=0, shape=(2, 5)):
    g = torch.Generator().manual_seed(seed)
    sources = [(torch.randn(*shape, hidden, generator=g) * (1 + j)).to(dtype).requires_grad_() for j in range(n)]
    query = (0.3 * torch.randn(hidden, generator=g)).requires_grad_()
    norm_weight = (1 + 0.2 * torch.randn(hidden, generator=g)).requires_grad_()
    out_norm_weight = (1 + 0.2 * torch.randn(hidden, generator=g)).to(dtype).requires_grad_()
    return sources, query, norm_weight, out_norm_weight


def reference(sources, query, norm_weight, eps, out_norm_weight=None, out_norm_eps=1e-6):
    mixed = attn_res_naive(sources, query, norm_weight, eps)
    return mixed if out_norm_weight is None else rms_norm_naive(mixed, out_norm_weight, out_norm_eps)


def run(backend, sources, query, norm_weight, out_norm_weight, fused, recompute=False, upcast=False):
    """Output and gradients of every input for a fixed upstream gradient. `backend` "reference": `naive.py`;
    `upcast`: in float64."""
    params = [*sources, query, norm_weight] + ([out_norm_weight] if fused else [])
    inputs = [p.detach().double().requires_grad_() if upcast else p for p in params]
    n = len(sources)
    kwargs = dict(out_norm_weight=inputs[-1], out_norm_eps=1e-5) if fused else {}
    if backend == "triton":
        kwargs["recompute"] = recompute
    mix = reference if backend == "reference" else lambda *args, **kw: attn_res(*args, backend=backend, **kw)
    out = mix(inputs[:n], inputs[n], inputs[n + 1], 1e-6, **kwargs)
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(7)).to(out.dtype)
    return out, torch.autograd.grad(out, inputs, grad)


def bf16_ulps(got, want):
    """Largest difference in units of the last place of `want` (bf16: 8 significant bits)."""
    exponent = torch.floor(torch.log2(want.float().abs().clamp_min(2.0**-100)))
    return ((got.float() - want.float()).abs() / torch.exp2(exponent - 7)).max().item()
