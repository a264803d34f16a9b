"""The reference op `hf_attnres.attn_res_naive` against K3's pseudo-code, written out independently here."""
import pytest
import torch

from hf_attnres import attn_res, attn_res_naive


def pseudo_code(sources, query, gain, eps):
    v = torch.stack(sources).float()
    k = v * torch.rsqrt(torch.mean(v * v, -1, keepdim=True) + eps)
    p = torch.softmax(torch.sum(k * (gain * query), -1), dim=0)
    return torch.sum(p[..., None] * v, 0).to(sources[0].dtype), p


@pytest.mark.parametrize("n", [1, 2, 5, 10])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reference_matches_pseudo_code(n, dtype):
    d = 96  # not a power of two
    sources = [torch.randn(3, 7, d).to(dtype) * (i + 1) for i in range(n)]
    query, gain = torch.randn(d).to(dtype), (1 + 0.1 * torch.randn(d)).to(dtype)
    out, weights = attn_res_naive(sources, query, gain, 1e-6, return_weights=True)
    expected, probs = pseudo_code(sources, query, gain, 1e-6)
    assert out.dtype == dtype and out.shape == (3, 7, d)
    assert torch.equal(out, expected)
    assert torch.equal(weights, probs.movedim(0, -1))
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 7))


def test_stacked_input_equals_list_input():
    sources = [torch.randn(4, 32) for _ in range(3)]
    query, gain = torch.randn(32), torch.ones(32)
    assert torch.equal(attn_res_naive(sources, query, gain, 1e-5),
                       attn_res_naive(torch.stack(sources), query, gain, 1e-5))


def test_keys_are_scale_free_but_values_are_not():
    """RMS-normalised keys: scaling one source does not change the weights, but its contribution scales."""
    sources = [torch.randn(5, 16) for _ in range(3)]
    query, gain = torch.randn(16), torch.ones(16)
    _, w = attn_res_naive(sources, query, gain, 0.0, return_weights=True)
    scaled = [sources[0] * 10, *sources[1:]]
    out, w_scaled = attn_res_naive(scaled, query, gain, 0.0, return_weights=True)
    torch.testing.assert_close(w, w_scaled)
    torch.testing.assert_close(out, sum(wi[..., None] * s for wi, s in zip(w.unbind(-1), scaled)))


def test_unknown_backend():
    with pytest.raises(ValueError, match="backend"):
        attn_res([torch.randn(2, 8)], torch.randn(8), torch.ones(8), 1e-6, backend="cuda")
